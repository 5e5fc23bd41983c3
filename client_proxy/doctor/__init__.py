"""`memory-proxy doctor`: checks of the laptop's set-up, each with its fix."""
