"""The stdio forwarder: MCP messages from Claude Code to the server's /mcp and back."""
