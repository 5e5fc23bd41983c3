"""Claude Code session transcripts: read, rendered to markdown, uploaded."""
