"""What one `memory-proxy run` works with: read once from the command line and the environment, then passed down.

The index is `--index`, else `MEMORY_INDEX`, else `index` in proxy.toml (see `client_proxy.config`); the log
level is `MEMORY_PROXY_LOG_LEVEL` (default INFO); the time zone is the laptop's (`client_proxy.local_zone`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from client_proxy.config import ProxyConfig, check_index_name, proxy_home
from client_proxy.errors import ConfigError
from client_proxy.local_zone import local_timezone

LOG_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}


@dataclass(frozen=True)
class RunSettings:
    """The forwarder's settings before the configuration directory is read (that may fail; these do not)."""

    home: Path
    index: str | None
    timezone: str
    project: Path
    log_file: Path | None
    log_level: int

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, index: str | None, project: str | None, log_file: str | None
    ) -> RunSettings:
        level = env.get("MEMORY_PROXY_LOG_LEVEL", "INFO").strip().upper()
        return cls(
            home=proxy_home(env),
            index=index or env.get("MEMORY_INDEX") or None,
            timezone=local_timezone(env),
            project=Path(project or ".").absolute(),
            log_file=Path(log_file) if log_file else None,
            log_level=LOG_LEVELS.get(level, logging.INFO),
        )

    def index_for(self, config: ProxyConfig) -> str:
        """The index to work on, checked; `ConfigError` naming the three ways to set it when none is set."""
        index = self.index or config.index
        if index is None:
            raise ConfigError(
                "no memory index chosen: pass `memory-proxy run --index NAME`, set MEMORY_INDEX, or add "
                f'`index = "NAME"` to {config.home / "proxy.toml"} (NAME is an index the operator granted this device)'
            )
        return check_index_name(index)
