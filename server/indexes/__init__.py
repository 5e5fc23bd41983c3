"""The open indexes: the storage seam the memory operations reach files and search through, and the registry that
opens each index once, keeps it fresh and closes it."""
