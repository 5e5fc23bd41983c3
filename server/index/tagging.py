"""Which labels each chunk of a file carries, pure: its front matter's for every chunk, a heading's inline labels
for the chunks of that heading's section (subsections included; an inner category wins). Also the text the
chunker sees: front matter blanked and inline labels cut from their headings, so neither is indexed as text and
every line keeps its number."""

from __future__ import annotations

from dataclasses import dataclass

from server.index.frontmatter import blank_front_matter
from server.index.labels import Labels, split_inline
from server.index.markdown import heading_title, parse_sections, split_lines


@dataclass(frozen=True)
class LabelledText:
    text: str  # what the chunker sees
    file: Labels  # the front matter's
    sections: tuple[tuple[int, int, Labels], ...]  # 1-based first and last line of each labelled section, in order

    def at(self, line: int) -> Labels:
        """The labels of 1-based `line`: the file's, then each labelled section around it, outer to inner."""
        labels = self.file
        for first, last, own in self.sections:
            if first <= line <= last:
                labels = labels.merged(own)
        return labels


def labelled_text(text: str) -> LabelledText:
    """The labels of `text` (a memory file) and the text to chunk."""
    lines, file_labels = blank_front_matter(split_lines(text))
    headings: list[tuple[int, int]] = []  # (0-based line, level) of every heading outside code fences
    for section in parse_sections(lines):
        for unit in section.units:
            parsed = heading_title(lines[unit.start]) if unit.kind == "heading" else None
            if parsed is not None:
                headings.append((unit.start, parsed[0]))
    sections: list[tuple[int, int, Labels]] = []
    for n, (line, level) in enumerate(headings):
        rest, own = split_inline(lines[line].rstrip())
        if not own:
            continue
        lines[line] = rest
        end = next((other - 1 for other, deeper in headings[n + 1 :] if deeper <= level), len(lines) - 1)
        sections.append((line + 1, end + 1, own))
    if not file_labels and not sections:
        return LabelledText(text, file_labels, ())
    return LabelledText("\n".join(lines), file_labels, tuple(sections))
