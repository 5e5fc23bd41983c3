"""The labels of whole files, for `memory_list`: every tag and category found in each file's chunks, and which
files have a chunk that passes tag and category filters."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import apsw

from server.index.labels import Labels
from server.index.queries import Filters, file_labels_sql


@dataclass(frozen=True)
class FileLabels:
    tags: tuple[str, ...]  # sorted
    categories: tuple[str, ...]  # sorted


def file_labels(db: apsw.Connection, wanted: Labels, paths: Collection[str] | None = None) -> dict[str, FileLabels]:
    """Per indexed file (among `paths` when given) with a chunk having any of the `wanted` tags and its category
    (every file when `wanted` is empty), every tag and category of the file."""
    sql, params = file_labels_sql(Filters(tags=wanted.tags, category=wanted.category), paths)
    return {
        str(path): FileLabels(words_of(found_tags), words_of(found_categories))
        for path, found_tags, found_categories in db.execute(sql, params)
    }


def words_of(joined: object) -> tuple[str, ...]:
    return tuple(sorted(str(joined).split(","))) if joined else ()
