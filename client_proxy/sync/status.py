"""`memory-proxy status`: how the file sync of one folder stands, from the state file and the files alone.

It never contacts the server and changes nothing (a corrupt state file is reported, not moved), so it answers
offline and while `memory-proxy run` is syncing the same folder.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict
from typing import Any, Final

from client_proxy.config import ProxyConfig
from client_proxy.settings import RunSettings
from client_proxy.sync.local_files import LocalFiles
from client_proxy.sync.plan import pending_pushes
from client_proxy.sync.scope import DEFAULT_MAX_FILE_BYTES
from client_proxy.sync.state import StateCorruptError, StateStore
from client_proxy.transcripts.upload import TranscriptState

MAX_LISTED: Final = 20
CONFLICT_COPY: Final = "*.conflict-*.md"


def gather(settings: RunSettings, config: ProxyConfig) -> dict[str, Any]:
    """The status as plain data (what `--json` prints)."""
    index = settings.index_for(config)
    root = settings.sync_root
    choice = settings.sync_choice(config)
    store = StateStore(settings.state_home, config.server_url, index, root)
    problem = None
    try:
        state = store.read()
    except StateCorruptError as exc:
        state, problem = None, f"{exc}; the next `memory-proxy run` moves it aside and starts over"
    current = state or store.fresh()
    files = LocalFiles(root, exclude=config.sync_exclude, max_bytes=DEFAULT_MAX_FILE_BYTES, warn=False)
    for path, entry in current.files.items():
        if entry.size is not None and entry.mtime_ns is not None:
            files.remember(path, entry.size, entry.mtime_ns, entry.base)
    scan = files.scan(list(current.files)) if root.is_dir() else None
    pending = pending_pushes(current, scan) if scan else []
    return {
        "server_url": config.server_url,
        "index": index,
        "project": str(root),
        "project_exists": root.is_dir(),
        "sync": {"enabled": choice.enabled, "reason": choice.reason, "exclude": list(config.sync_exclude)},
        "state_file": str(store.path),
        "state_exists": state is not None,
        "syncing_now": store.claimed(),
        "state_problem": problem,
        "files": len(scan.files) if scan else 0,
        "last_pull": {"at": current.last_pull_at, "revision": current.revision},
        "last_push": {"at": current.last_push_at, "revision": current.last_push_revision},
        "read_only": current.read_only,
        "pending": {
            "count": len(pending),
            "changes": [{"path": item.path, "kind": item.kind} for item in pending[:MAX_LISTED]],
        },
        "conflicts": {
            "recent": current.conflicts[-MAX_LISTED:],
            "files": sorted(path for path in (scan.files if scan else {}) if fnmatch.fnmatchcase(path, CONFLICT_COPY)),
        },
        "rejected": [{"path": path, **details} for path, details in sorted(current.rejected.items())],
        "unapplied": [{"path": path, **asdict(item)} for path, item in sorted(current.unapplied.items())],
        "not_synced": [
            {"path": path, "reason": reason} for path, reason in sorted((scan.skipped if scan else {}).items())
        ],
        "last_error": current.last_error,
        "transcripts": _transcripts(settings, config, index),
    }


def _transcripts(settings: RunSettings, config: ProxyConfig, index: str) -> dict[str, Any]:
    """The session upload's side: whether it is on, and what its state file says was sent."""
    choice = settings.transcripts_choice(config)
    state = TranscriptState(settings.state_home, config.server_url, index, settings.sync_root)
    state.load(quiet=True)
    sent = [entry for entry in state.sessions.values() if entry.skipped is None]
    return {
        "enabled": choice.enabled,
        "reason": choice.reason,
        "sessions_sent": len(sent),
        "sessions_skipped": sum(entry.skipped is not None for entry in state.sessions.values()),
        "last_upload": max((entry.uploaded_at or "" for entry in sent), default="") or None,
        "redacted": sum(entry.redacted for entry in sent),
    }


def render(report: dict[str, Any]) -> str:
    """The status as the lines a person reads."""
    pull, push = report["last_pull"], report["last_push"]
    lines = [
        f"server:     {report['server_url']}",
        f"index:      {report['index']}",
        f"project:    {report['project']}" + ("" if report["project_exists"] else " (no such folder)"),
        f"sync:       {report['sync']['reason']}"
        + ("; a memory-proxy is syncing this folder now" if report["syncing_now"] else ""),
        f"state:      {report['state_file']}"
        + ("" if report["state_exists"] or report["state_problem"] else " (none yet: this folder never synced)")
        + (f"\n            {report['state_problem']}" if report["state_problem"] else ""),
        f"last pull:  {_when(pull['at'])}" + (f" (revision {pull['revision']})" if pull["at"] else ""),
        f"last push:  {_when(push['at'])}"
        + (f" (revision {push['revision']})" if push["revision"] is not None else ""),
    ]
    if report["sync"]["exclude"]:
        lines.append(f"excluded:   {', '.join(report['sync']['exclude'])}")
    if report["read_only"]:
        lines.append("access:     read-only (the server refused a push): local changes are not pushed")
    lines.append(f"files:      {report['files']} synced")
    pending = report["pending"]
    lines.append(f"pending:    {pending['count']} change{'' if pending['count'] == 1 else 's'} to push")
    lines += [f"  {item['kind']:<7} {item['path']}" for item in pending["changes"]]
    if pending["count"] > len(pending["changes"]):
        lines.append(f"  ... and {pending['count'] - len(pending['changes'])} more")
    conflicts = report["conflicts"]
    if conflicts["recent"] or conflicts["files"]:
        lines.append(
            f"conflicts:  {len(conflicts['files'])} conflict cop{'y' if len(conflicts['files']) == 1 else 'ies'} here"
        )
        lines += [f"  {item['path']}: yours saved as {item['copy']} ({item['at']})" for item in conflicts["recent"]]
        lines += [f"  {path}" for path in conflicts["files"] if path not in {c["copy"] for c in conflicts["recent"]}]
        lines.append("  (merge what you need from a copy into the file, then delete the copy)")
    if report["rejected"]:
        lines.append(f"rejected:   {len(report['rejected'])} (fix the file; it is pushed again once it changes)")
        lines += [f"  {item['path']}: {item['message']}" for item in report["rejected"]]
    if report["unapplied"]:
        count = len(report["unapplied"])
        lines.append(f"unapplied:  {count} change{'' if count == 1 else 's'} from the server not written here yet")
        lines += [f"  {item['path']}: {item['message']} ({item['at']})" for item in report["unapplied"]]
        lines.append("  (sync pulls them again now and then, and at its next start; fix what stands in the way)")
    if report["not_synced"]:
        lines.append(f"not synced: {len(report['not_synced'])}")
        lines += [f"  {item['path']}: {item['reason']}" for item in report["not_synced"]]
    transcripts = report["transcripts"]
    lines.append(f"sessions:   transcripts {transcripts['reason']}")
    if transcripts["sessions_sent"] or transcripts["sessions_skipped"]:
        lines.append(
            f"  {transcripts['sessions_sent']} sent (last {_when(transcripts['last_upload'])}, "
            f"{transcripts['redacted']} secrets redacted), {transcripts['sessions_skipped']} skipped (empty or "
            "another project's)"
        )
    error = report["last_error"]
    if error:
        recovered = max(pull["at"] or "", push["at"] or "") > error.get("at", "")
        lines.append(
            f"last error: {error.get('message')} ({error.get('at')}" + ("; sync worked since)" if recovered else ")")
        )
    return "\n".join(lines) + "\n"


def _when(moment: str | None) -> str:
    return moment or "never"
