"""Observing the server: logs and Prometheus metrics."""
