"""Reading an index's files for the tools: a page of lines of one file (or of a past version), a page of the file
listing."""

from __future__ import annotations

from collections.abc import Callable

from server.errors import InvalidArgumentError
from server.index.labelled_files import FileLabels
from server.index.labels import Labels
from server.indexes.registry import OpenIndex
from server.indexes.storage import FileStore
from server.memory import sections
from server.memory.arguments import check_version, encode_cursor
from server.memory.results import FileEntry, GetOutput, ListOutput
from server.memory.text import count_lines, page
from server.mirror.history import Version
from server.mirror.state import FileState, MirrorFile
from syncproto.paths import is_session_file


def read_lines(
    handle: OpenIndex,
    path: str,
    start_line: int | None,
    end_line: int | None,
    max_chars: int,
    heading: tuple[str, ...] | None = None,
    version: int | None = None,
    start_char: int = 1,
) -> GetOutput:
    """Lines `start_line` to `end_line` of the file at the canonical `path` (of its past `version` when given), the
    first from its character `start_char`, at most `max_chars` characters; a missing file is `exists=False` (with
    who deleted it when, if anyone did). With `heading`, of that section only (of the sections of that name, the
    one holding `start_line`): the lines are clamped to it, and the answer names it and its hash (a missing
    heading is an error)."""
    gone: FileState | Version | None
    if version is None:
        current = handle.mirror.read(path)
        gone = handle.mirror.state(path) if current is None else None
    else:
        current, gone = version_file(handle.mirror, path, version)
    if current is None:
        return GetOutput(
            path=path,
            exists=False,
            content="",
            start_line=0,
            end_line=0,
            total_lines=0,
            hash=None,
            truncated=False,
            next_start_line=None,
            updated_by=gone.updated_by if gone else None,
            updated_at=gone.updated_at if gone else None,
            version=version,
        )
    name = hashed = None
    if heading is not None:
        lines = sections.plain(sections.raw_lines(current.text))
        span = sections.locate(lines, heading, path, start_line - 1 if start_line else None)
        if span is None:
            raise sections.not_found(lines, heading, path)
        name, hashed = span.name, sections.section_hash(lines, span)
        if start_char > 1 and start_line is not None and start_line <= span.start:
            raise InvalidArgumentError(
                f"start_char counts in start_line {start_line}, which is before section {span.name!r}"
                f" (lines {span.start + 1}-{span.end})"
            )
        start_line = max(start_line or 0, span.start + 1)
        end_line = min(end_line or span.end, span.end)
    part = page(current.text, start_line, end_line, max_chars, start_char)
    return GetOutput(
        path=path,
        exists=True,
        content=part.content,
        start_line=part.start_line,
        end_line=part.end_line,
        total_lines=part.total_lines,
        hash=current.hash,
        truncated=part.truncated,
        next_start_line=part.next_start_line,
        updated_by=current.updated_by,
        updated_at=current.updated_at,
        heading=name,
        section_hash=hashed,
        version=version,
        next_start_char=part.next_start_char,
    )


def version_file(mirror: FileStore, path: str, version: int) -> tuple[MirrorFile | None, Version]:
    """Version `version` of `path` as a file (None: the version is a deletion) and its entry in the history."""
    found = mirror.history.get(path, check_version(version))
    if found is None:
        raise InvalidArgumentError(_no_text(mirror, path, version))
    v, text = found.version, found.text
    if text is None or v.hash is None:
        return None, v
    return MirrorFile(path, text, v.hash, count_lines(text), v.size, v.revision, v.updated_by, v.updated_at), v


def _no_text(mirror: FileStore, path: str, version: int) -> str:
    """Why version `version` of `path` cannot be read: there is no such version, or the history lists it but its
    text is not kept (the file was over the size cap or not UTF-8 text then); then which older one can be read."""
    listed = mirror.history.versions(path, before=version + 1, limit=1)
    if not listed or listed[0].revision != version:
        return f"{path} has no version {version}: memory_history lists the versions kept"
    older = mirror.history.last_text(path, version)
    readable = f"version {older.revision} is the newest before it that can be" if older else "no older one can be"
    return (
        f"the text of version {version} of {path} is not kept (the file was over the size cap or not UTF-8 text "
        f"then), so it cannot be read or restored; {readable}"
    )


def list_files(handle: OpenIndex, files: list[FileState], after: str | None, limit: int, wanted: Labels) -> ListOutput:
    """`list_page` of the `files` with a chunk that has any `wanted` tag and its category (all without), each with
    its tags and categories as the index knows them."""
    if wanted:
        matching = handle.index.file_labels(wanted)
        return list_page([f for f in files if f.path in matching], after, limit, lambda _paths: matching)
    return list_page(files, after, limit, lambda paths: handle.index.file_labels(wanted, paths))


def list_page(
    files: list[FileState], after: str | None, limit: int, labels_of: Callable[[list[str]], dict[str, FileLabels]]
) -> ListOutput:
    """The page of `files` (sorted by path) after the cursor's path `after`, at most `limit` long, with the labels
    `labels_of` gives for its paths."""
    total = len(files)
    if after is not None:
        files = [f for f in files if f.path > after]
    shown = files[:limit]
    labels = labels_of([f.path for f in shown])
    return ListOutput(
        files=[
            FileEntry(
                path=f.path,
                source="sessions" if is_session_file(f.path) else "memory",
                size=f.size,
                lines=f.lines,
                hash=f.hash or "",
                updated_at=f.updated_at,
                updated_by=f.updated_by,
                tags=list(labels[f.path].tags) if f.path in labels else [],
                categories=list(labels[f.path].categories) if f.path in labels else [],
            )
            for f in shown
        ],
        next_cursor=encode_cursor(shown[-1].path) if len(files) > limit else None,
        total=total,
    )
