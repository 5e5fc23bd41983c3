"""Backups of a data folder taken while the server serves, checked, and restored into an empty one."""
