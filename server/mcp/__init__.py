"""The MCP surface: tools, resources and prompts over the memory service."""
