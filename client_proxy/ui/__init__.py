"""`memory-proxy ui`: the memory browser, a web page on 127.0.0.1 that calls the server through the channel."""
