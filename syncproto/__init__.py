"""The file-sync protocol between a laptop's proxy and the server, written once.

Endpoints, limits, hash and session-id formats, path rules and message shapes: pure and stdlib only. `server` and
`client_proxy` import it; it imports neither (the layout test checks). `docs/sync-protocol.md` is the specification.
"""
