"""The server's copy of each index's markdown files and the record of who changed what."""
