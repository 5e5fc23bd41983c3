"""The memory operations the tools call, their argument checks, text rules and results."""
