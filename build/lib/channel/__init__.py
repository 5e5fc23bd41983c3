"""The secure channel (ARCHITECTURE section 3): Noise IK over HTTP, end to end between a device and the server.

Server side: `channel.middleware.ChannelMiddleware` wraps any ASGI app; the app sees `request.user`
(`channel.authz.ChannelUser`). Client side: `channel.transport.ChannelTransport` is an httpx2 transport.
Keys: `channel.keys`. Errors: `channel.errors`, rooted at `ChannelError`.
"""
