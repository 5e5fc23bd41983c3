"""Who may connect: callers.toml, its parsing, its safe edits and its live reload."""
