"""The proxy's errors: one root, `ProxyError`. Messages are for the laptop's user and say how to fix things."""

from __future__ import annotations


class ProxyError(Exception):
    """Root of every error the proxy raises on purpose."""


class ConfigError(ProxyError):
    """The proxy's configuration (directory, `proxy.toml`, an `init` argument) is missing, invalid or unsafe."""
