"""A file's front matter, pure: the small YAML-like block of labels at the very top of a memory file.

    ---
    tags: [database, postgres]      # or `tags:` then one `- database` line per tag
    category: decision
    ---

The block starts at line 1 with `---` and ends at the next `---` line (within MAX_FRONT_MATTER_LINES). Inside,
only `key: value` lines, `- item` lines under a key with no value, indented lines under another key, blank lines
and `# comments` are allowed; only `tags` and `category` are read, other keys are kept as written. No YAML library
reads it: anything else (an unclosed block, a bad tag, a second `tags:`, a stray line) makes the block plain body
text, indexed like the rest of the file, so a malformed block never loses the file. A valid block is not indexed
as text (its lines are blanked, so line numbers still count it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from server.index.labels import Labels, normalise_category, normalise_tags, split_tag_list
from server.index.markdown import split_lines

FENCE = "---"
MAX_FRONT_MATTER_LINES = 64
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*):(?:[ \t]+(.*?))?[ \t]*$")
_ITEM = re.compile(r"^[ \t]*-[ \t]+(.*?)[ \t]*$")
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class FrontMatter:
    end: int  # 0-based index of the closing `---` line
    labels: Labels
    other: tuple[str, ...]  # the block's other lines (keys other than tags and category), verbatim


def parse_front_matter(lines: list[str]) -> FrontMatter | None:
    """The front matter at the top of `lines`, or None when there is none or it is malformed."""
    if not lines or lines[0].rstrip() != FENCE:
        return None
    end = next((i for i in range(1, min(len(lines), MAX_FRONT_MATTER_LINES)) if lines[i].rstrip() == FENCE), None)
    if end is None:
        return None
    tag_items: list[str] = []
    tags_seen = False
    category: str | None = None
    other: list[str] = []
    listing: str | None = None  # the key whose `- item` lines follow
    for line in lines[1:end]:
        if not line.strip() or line.lstrip().startswith("#"):
            other.append(line)
            continue
        item = _ITEM.match(line)
        if item and listing is not None:
            if listing == "tags":
                tag_items.append(item.group(1))
            else:
                other.append(line)
            continue
        if line[0] in " \t" and listing not in (None, "tags"):
            other.append(line)  # a nested value of a key we do not read
            continue
        key = _KEY.match(line)
        if key is None:
            return None
        name, value = key.group(1).lower(), key.group(2) or ""
        listing = name if not value else None
        if name == "tags":
            if tags_seen:
                return None
            tags_seen, tag_items = True, split_tag_list(value)
        elif name == "category":
            if category is not None or (category := normalise_category(value)) is None:
                return None
        else:
            other.append(line)
    tags = normalise_tags(tag_items)
    if tags is None:
        return None
    return FrontMatter(end, Labels(tags, category), tuple(other))


def blank_front_matter(lines: list[str]) -> tuple[list[str], Labels]:
    """`lines` with a valid front matter block blanked (same number of lines), and the block's labels."""
    front = parse_front_matter(lines)
    if front is None:
        return lines, Labels()
    return [""] * (front.end + 1) + lines[front.end + 1 :], front.labels


def with_front_matter(text: str, labels: Labels) -> str:
    """`text` with `labels` merged into its front matter (tags added, the category replaced), created when there
    is none. Other keys and the rest of the file stay as they were."""
    if not labels:
        return text
    eol = "\r\n" if "\r\n" in text else "\n"
    front = parse_front_matter(split_lines(text))
    if front is not None:
        ends = list(_LINE_END.finditer(text))
        rest = text[ends[front.end].end() :] if front.end < len(ends) else ""
        labels = front.labels.merged(labels)
    else:
        rest = text
    block = [FENCE]
    if labels.tags:
        block.append(f"tags: [{', '.join(labels.tags)}]")
    if labels.category:
        block.append(f"category: {labels.category}")
    block.extend(front.other if front else ())
    block.append(FENCE)
    return eol.join(block) + eol + rest
