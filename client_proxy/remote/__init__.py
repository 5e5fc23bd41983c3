"""The server's memory operations called from this laptop: the terminal commands and the memory browser."""
