"""File sync on the laptop: scope, local files, state, the push/pull loop."""
