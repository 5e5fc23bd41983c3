"""Tags and a category on memory text, pure: how they are normalised, and their inline form on a heading line.

A tag is lower case, 1 to MAX_TAG_CHARS of `a-z 0-9 _ . -` starting with a letter or digit (a leading `#` is
dropped, so `#Postgres` is `postgres`); a text carries at most MAX_TAGS. A category is one such word too (at most
MAX_CATEGORY_CHARS), from an open set: SUGGESTED_CATEGORIES are the ones agents are asked to use.

Inline form, at the end of a heading (a daily log's entry `## 14:05 — chose Postgres [tags: database, postgres]
[category: decision]`): bracketed groups `[tags: a, b]` (commas or spaces between tags) and `[category: x]`,
each after a space. They label that heading's section, subsections included. A group that does not parse
(a bad tag, two categories) leaves the whole heading as it is, text like any other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from server.index.errors import InvalidArgumentError

MAX_TAGS = 16
MAX_TAG_CHARS = 40
MAX_CATEGORY_CHARS = 32
SUGGESTED_CATEGORIES = ("decision", "pattern", "preference", "fact", "convention", "lesson", "todo", "reference")
_WORD = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")
_INLINE = re.compile(r"(?:^|[ \t]+)\[(tags|category):[ \t]*([^\[\]]*?)[ \t]*\][ \t]*$", re.IGNORECASE)
_SEPARATORS = re.compile(r"[,\s]+")


@dataclass(frozen=True)
class Labels:
    """Normalised tags (in order, no repeats) and a category of a file, an entry or a chunk."""

    tags: tuple[str, ...] = ()
    category: str | None = None

    def __bool__(self) -> bool:
        return bool(self.tags or self.category)

    def merged(self, inner: Labels) -> Labels:
        """These labels with `inner`'s added: tags of both (at most MAX_TAGS), `inner`'s category when it has one."""
        tags = tuple(dict.fromkeys((*self.tags, *inner.tags)))[:MAX_TAGS]
        return Labels(tags, inner.category or self.category)


def normalise_tag(raw: str) -> str | None:
    """The tag `raw` names (trimmed, lower case, without a leading '#'), or None when it is not a valid tag."""
    tag = raw.strip().strip("\"'").removeprefix("#").lower()
    return tag if 0 < len(tag) <= MAX_TAG_CHARS and _WORD.match(tag) else None


def normalise_tags(raw: Iterable[str]) -> tuple[str, ...] | None:
    """Every tag of `raw` normalised, repeats dropped; None when one is invalid or there are too many."""
    tags: list[str] = []
    for item in raw:
        tag = normalise_tag(item)
        if tag is None:
            return None
        if tag not in tags:
            tags.append(tag)
    return tuple(tags) if len(tags) <= MAX_TAGS else None


def normalise_category(raw: str) -> str | None:
    """The category `raw` names (trimmed, lower case), or None when it is not one word of the tag alphabet."""
    category = raw.strip().strip("\"'").lower()
    return category if 0 < len(category) <= MAX_CATEGORY_CHARS and _WORD.match(category) else None


def split_tag_list(value: str) -> list[str]:
    """The items of `a, b`, `a b` or `[a, b]`."""
    inner = value.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    return [item for item in _SEPARATORS.split(inner) if item]


def split_inline(title: str) -> tuple[str, Labels]:
    """A heading's title without its trailing label groups, and the labels; (title, no labels) when it has none
    or one of them does not parse."""
    rest, category = title, None
    tags: list[str] = []
    while match := _INLINE.search(rest):
        key, value = match.group(1).lower(), match.group(2)
        if key == "tags":
            found = normalise_tags(split_tag_list(value))
            if not found:
                return title, Labels()
            tags[:0] = found
        else:
            if category is not None or (category := normalise_category(value)) is None:
                return title, Labels()
        rest = rest[: match.start()]
    clean = normalise_tags(tags)
    if clean is None:
        return title, Labels()
    return rest.rstrip(), Labels(clean, category)


def render_inline(labels: Labels) -> str:
    """The inline form to put after a heading's title: ` [tags: a, b] [category: x]`, or "" for no labels."""
    parts = []
    if labels.tags:
        parts.append(f" [tags: {', '.join(labels.tags)}]")
    if labels.category:
        parts.append(f" [category: {labels.category}]")
    return "".join(parts)


def labels_argument(tags: object, category: object) -> Labels:
    """The `tags` and `category` arguments of a tool call, normalised; InvalidArgumentError names the bad one."""
    rule = f"1 to {MAX_TAG_CHARS} characters of a-z, 0-9, '_', '.', '-'"
    word_rule = f"1 to {MAX_CATEGORY_CHARS} characters of a-z, 0-9, '_', '.', '-'"
    clean: tuple[str, ...] = ()
    if tags is not None:
        if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
            raise InvalidArgumentError("tags must be a list of strings, e.g. ['database', 'postgres']")
        bad = next((t for t in tags if normalise_tag(t) is None), None)
        if bad is not None:
            raise InvalidArgumentError(f"tags: {bad[:60]!r} is not a tag ({rule}; a leading '#' is dropped)")
        found = normalise_tags(tags)
        if found is None:
            raise InvalidArgumentError(f"tags: at most {MAX_TAGS} tags")
        clean = found
    word: str | None = None
    if category is not None:
        word = normalise_category(category) if isinstance(category, str) else None
        if word is None:
            raise InvalidArgumentError(
                f"category must be one word ({word_rule}), e.g. {', '.join(SUGGESTED_CATEGORIES[:4])}"
            )
    return Labels(clean, word)
