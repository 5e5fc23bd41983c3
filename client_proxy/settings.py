"""What one `memory-proxy run` works with: read once from the command line and the environment, then passed down.

The index is `--index`, else `MEMORY_INDEX`, else `index` in proxy.toml (see `client_proxy.config`); the log
level is `MEMORY_PROXY_LOG_LEVEL` (default INFO); the time zone is the laptop's (`client_proxy.forward.local_zone`).
File sync is off with `--no-sync`, else as `MEMORY_PROXY_SYNC` (0 or 1) says, else as `sync` in proxy.toml says,
else on when `--project` was given or the folder already holds memory files (`sync_choice`). Session transcripts
are uploaded only when asked: `--transcripts`, else `MEMORY_PROXY_TRANSCRIPTS`, else `transcripts` in proxy.toml
(`transcripts_choice`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from client_proxy.config import ProxyConfig, check_index_name, proxy_home
from client_proxy.errors import ConfigError
from client_proxy.forward.local_zone import local_timezone
from client_proxy.sync.scope import MEMORY_DIR, ROOT_FILES
from client_proxy.sync.state import state_home

LOG_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class SyncChoice:
    """Whether this run syncs files, and why (for the log and `memory-proxy status`)."""

    enabled: bool
    reason: str


@dataclass(frozen=True)
class RunSettings:
    """The forwarder's settings before the configuration directory is read (that may fail; these do not)."""

    home: Path
    index: str | None
    timezone: str
    project: Path
    log_file: Path | None
    log_level: int
    state_home: Path
    project_given: bool
    no_sync: bool
    sync_env: str | None
    transcripts: bool | None = None  # --transcripts / --no-transcripts
    transcripts_env: str | None = None

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        *,
        index: str | None,
        project: str | None,
        log_file: str | None,
        no_sync: bool = False,
        transcripts: bool | None = None,
    ) -> RunSettings:
        level = env.get("MEMORY_PROXY_LOG_LEVEL", "INFO").strip().upper()
        return cls(
            home=proxy_home(env),
            index=index or env.get("MEMORY_INDEX") or None,
            timezone=local_timezone(env),
            project=Path(project or ".").absolute(),
            log_file=Path(log_file) if log_file else None,
            log_level=LOG_LEVELS.get(level, logging.INFO),
            state_home=state_home(env),
            project_given=project is not None,
            no_sync=no_sync,
            sync_env=env.get("MEMORY_PROXY_SYNC", "").strip() or None,
            transcripts=transcripts,
            transcripts_env=env.get("MEMORY_PROXY_TRANSCRIPTS", "").strip() or None,
        )

    @property
    def sync_root(self) -> Path:
        """The project folder as synced and as named in the state: symlinks resolved, so one folder has one state."""
        return Path(os.path.realpath(self.project))

    def sync_choice(self, config: ProxyConfig) -> SyncChoice:
        """Whether to sync. Left to itself the proxy syncs only a folder that is clearly a project's: one named with
        `--project`, or already holding memory files; never silently fills whatever folder it was started in."""
        if self.no_sync:
            return SyncChoice(False, "off (--no-sync)")
        if self.sync_env is not None:
            return _switch(self.sync_env, "MEMORY_PROXY_SYNC")
        if config.sync is not None:
            return SyncChoice(
                config.sync,
                f"{'on' if config.sync else 'off'} (sync = {str(config.sync).lower()} in {config.home / 'proxy.toml'})",
            )
        if self.project_given:
            return SyncChoice(True, "on (--project)")
        if any(os.path.lexists(self.project / name) for name in (*ROOT_FILES, MEMORY_DIR)):
            return SyncChoice(True, "on (the folder holds memory files)")
        return SyncChoice(
            False,
            f"off: {self.project} holds no MEMORY.md, memory.md or memory/ (create one, or pass --project DIR)",
        )

    def transcripts_choice(self, config: ProxyConfig) -> SyncChoice:
        """Whether to upload session transcripts: opt-in, since they hold whole conversations."""
        if self.transcripts is not None:
            flag = "--transcripts" if self.transcripts else "--no-transcripts"
            return SyncChoice(self.transcripts, f"{'on' if self.transcripts else 'off'} ({flag})")
        if self.transcripts_env is not None:
            return _switch(self.transcripts_env, "MEMORY_PROXY_TRANSCRIPTS")
        if config.transcripts is not None:
            state = "on" if config.transcripts else "off"
            return SyncChoice(
                config.transcripts, f"{state} (transcripts = {str(config.transcripts).lower()} in proxy.toml)"
            )
        return SyncChoice(False, "off (opt in with --transcripts)")

    def index_for(self, config: ProxyConfig) -> str:
        """The index to work on, checked; `ConfigError` naming the three ways to set it when none is set."""
        index = self.index or config.index
        if index is None:
            raise ConfigError(
                "no memory index chosen: pass `memory-proxy run --index NAME`, set MEMORY_INDEX, or add "
                f'`index = "NAME"` to {config.home / "proxy.toml"} (NAME is an index the operator granted this device)'
            )
        return check_index_name(index)


def _switch(raw: str, variable: str) -> SyncChoice:
    """An on/off environment variable's choice; anything but 0/1 (or yes/no, true/false, on/off) is off."""
    value = raw.lower()
    if value in _OFF | _ON:
        return SyncChoice(value in _ON, f"{'on' if value in _ON else 'off'} ({variable}={value})")
    return SyncChoice(False, f"off ({variable}={raw!r} is neither 0 nor 1)")
