"""What the memory service returns: pydantic models that are also the MCP tools' structured outputs.

Times are ISO 8601 in UTC (`2024-05-01T09:30:00Z`); paths are relative POSIX paths inside the index's mirror.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from server.mirror.history import ChangeKind

Access = Literal["r", "rw"]
SearchMode = Literal["hybrid", "vector", "keyword"]
WriteMode = Literal["append", "replace"]


class SearchHit(BaseModel):
    path: str = Field(description="file path inside the index, e.g. memory/2024-05-01.md")
    start_line: int = Field(description="first line of the passage, 1-based (heading lines `heading` names left out)")
    end_line: int = Field(description="last line of the passage, inclusive")
    heading: str = Field(description="heading path of the passage, ' > ' separated")
    score: float = Field(description="relevance from 0 to 1")
    snippet: str
    source: Literal["memory", "sessions"]
    citation: str = Field(description="path#L10-L20")
    index: str = Field(description="the index the hit comes from")
    updated_by: str | None = Field(description="caller that last changed the file ('(disk)' for edits on the server)")
    updated_at: str | None = Field(description="when the file last changed, ISO 8601 UTC")
    matched_by: Literal["vector", "keyword", "both"] = Field(
        description="which search found it: 'keyword' is an exact term match, 'vector' a match in meaning"
    )
    vector_rank: int | None = Field(description="its place among the meaning matches (1 = best), if there")
    keyword_rank: int | None = Field(description="its place among the keyword matches (1 = best), if there")
    tags: list[str] = Field(default_factory=list, description="the passage's tags: its file's and its entry's")
    category: str | None = Field(default=None, description="the passage's category (its entry's, else its file's)")


class SearchOutput(BaseModel):
    hits: list[SearchHit]
    search_mode: SearchMode = Field(description="what actually ran")
    notice: str | None = Field(description="why the search was less than hybrid, when it was")
    indexes: list[str] = Field(description="the indexes searched")
    index_updated_at: str | None = Field(description="when the searched index last changed, ISO 8601 UTC")
    pending_files: int = Field(description="files changed on disk and not yet indexed")


class GetOutput(BaseModel):
    path: str
    exists: bool
    content: str = Field(description="the requested lines, joined with newlines")
    start_line: int = Field(description="first line returned, 1-based (0 when nothing is returned)")
    end_line: int = Field(description="last line returned, inclusive (0 when nothing is returned)")
    total_lines: int
    hash: str | None = Field(description="sha256 of the whole file; pass it as expected_hash to replace it")
    truncated: bool = Field(description="true when the answer stops before end_line was reached")
    next_start_line: int | None = Field(
        description="the next line to read when truncated (after the rest of end_line, when next_start_char is set)"
    )
    updated_by: str | None
    updated_at: str | None
    heading: str | None = Field(default=None, description="the section read, as a ' > ' path (with heading)")
    section_hash: str | None = Field(
        default=None, description="sha256 of the whole section: expected_hash to replace it with this heading"
    )
    version: int | None = Field(default=None, description="the past version read (from memory_history), if one was")
    next_start_char: int | None = Field(
        default=None,
        description="set when the answer stops inside line end_line (one line longer than an answer): the first"
        " character of it not returned; read on with start_line=end_line and start_char=next_start_char",
    )


class WriteOutput(BaseModel):
    path: str
    mode: WriteMode
    hash: str = Field(description="sha256 of the whole file after the write")
    lines: int = Field(description="lines in the file after the write")
    start_line: int = Field(description="first line of the written text")
    end_line: int = Field(description="last line of the written text")
    indexed: bool = Field(description="the index already holds the new text (search finds it)")
    replayed: bool = Field(description="an earlier call with the same idempotency key already did this")
    redacted: dict[str, int] = Field(
        default_factory=dict, description="secrets replaced by [redacted:<kind>] markers before storing, per kind"
    )
    heading: str | None = Field(default=None, description="the section written to, as a ' > ' path (with heading)")
    section_hash: str | None = Field(
        default=None, description="sha256 of that section after the write: expected_hash for its next replace"
    )


class FileEntry(BaseModel):
    path: str
    source: Literal["memory", "sessions"] = Field(description="sessions: a laptop's Claude Code transcript (read-only)")
    size: int
    lines: int
    hash: str
    updated_at: str | None
    updated_by: str | None
    tags: list[str] = Field(default_factory=list, description="every tag in the file (front matter and entries)")
    categories: list[str] = Field(default_factory=list, description="every category in the file")


class ListOutput(BaseModel):
    files: list[FileEntry]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last page")
    total: int = Field(description="files matching the filters, over all pages")


class DeleteOutput(BaseModel):
    path: str
    deleted: bool = Field(description="false when there was no such file")
    previous_hash: str | None


class CallerSyncEntry(BaseModel):
    """One laptop's file sync with this index, as the server saw it."""

    caller: str
    last_pull_at: str | None = Field(description="when it last asked for changes (its proxy long-polls)")
    pulled_revision: int | None
    last_push_at: str | None = Field(description="when it last sent local changes")
    pushed_revision: int | None


class ProviderHealth(BaseModel):
    provider: str
    model: str
    state: Literal["ok", "failing"]
    detail: str | None = Field(description="the last failure and when the provider is tried again")


class RebuildOutput(BaseModel):
    done: int = Field(description="chunks embedded for the new model so far")
    total: int = Field(description="chunks to embed")
    per_second: float | None = Field(description="chunks a second (null in the first second)")
    seconds_left: float | None = Field(description="the time left at that rate (null in the first second)")
    line: str = Field(description="the same, in words")


class StatusOutput(BaseModel):
    caller: str
    index: str
    access: Access
    server_version: str
    provider: str | None
    model: str | None
    dimensions: int | None
    files: dict[str, int] = Field(description="indexed files per source")
    chunks: dict[str, int] = Field(description="indexed chunks per source")
    pending_vectors: int
    pending_files: int
    last_change_at: str | None
    database_bytes: int
    search_modes: list[str]
    notice: str | None
    revision: int = Field(description="the index's change counter (file sync)")
    sync: list[CallerSyncEntry] = Field(description="each caller's last file sync with this index")
    unreadable: dict[str, str] = Field(
        default_factory=dict,
        description="files the server holds but cannot read or send, and why: kept as they are on every laptop",
    )
    embedding_providers: list[ProviderHealth] = Field(
        default_factory=list, description="the configured providers in fallback order, and how each one answers"
    )
    history_versions: int = Field(default=0, description="versions of memory files the history keeps")
    history_bytes: int = Field(default=0, description="compressed bytes of the contents the history keeps")
    rebuild: RebuildOutput | None = Field(
        default=None,
        description="while the vectors are rebuilt for another model in the background: how far it has got",
    )


class SyncOutput(BaseModel):
    files_seen: int
    files_indexed: int
    files_removed: int
    chunks_embedded: int
    seconds: float
    cancelled: bool


class VersionEntry(BaseModel):
    """One version of one memory file: its content after a change, and how, by whom and when it changed."""

    path: str
    version: int = Field(
        description="names this version (its change's revision); memory_get and memory_restore take it"
    )
    hash: str | None = Field(description="sha256 of the content after the change; null when the change deleted it")
    size: int = Field(description="bytes after the change")
    change: ChangeKind = Field(
        description="write (memory_write), push (a laptop's edit), merge (two edits merged), conflict (a conflict "
        "copy), delete, restore (memory_restore), disk (edited on the server's disk), before-history (as it was "
        "when the history began)"
    )
    updated_by: str = Field(description="the caller that made the change ('(disk)' for edits on the server)")
    updated_at: str = Field(description="when, ISO 8601 UTC")
    restore_version: int | None = Field(
        default=None, description="for a deletion: the last version with content, to pass to memory_restore"
    )


class HistoryOutput(BaseModel):
    path: str | None = Field(description="the file whose versions these are; null: recent changes of every file")
    deleted: bool = Field(description="true: the listing holds the deletions of files that are deleted now")
    versions: list[VersionEntry] = Field(description="newest first")
    next_before: int | None = Field(description="pass as before for older versions; null when there are none")


class RestoreOutput(BaseModel):
    path: str
    restored_version: int = Field(description="the version brought back")
    changed: bool = Field(description="false when the file already was that version")
    version: int = Field(description="the new version the restore made (itself undoable with memory_restore)")
    hash: str | None = Field(description="sha256 of the file now; null when the restored version is a deletion")
    indexed: bool = Field(description="the index holds the restored text (search finds it)")
    redacted: dict[str, int] = Field(
        default_factory=dict,
        description="secrets in the version replaced by [redacted:<kind>] markers in what was restored, per kind",
    )
