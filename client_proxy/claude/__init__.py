"""Claude Code integration: its settings and `.mcp.json` edited safely, and the hooks memory-proxy answers."""
