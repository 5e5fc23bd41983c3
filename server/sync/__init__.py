"""File sync on the server: the /sync endpoints, what a push and a pull do, the merge."""
