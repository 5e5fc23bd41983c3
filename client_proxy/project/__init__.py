"""A project's own files: init templates, stack detection, the session-start context."""
