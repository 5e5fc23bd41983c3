"""Markdown-aware chunking sized in the embedding model's own tokens.

Chunks never cross a heading. A section that fits the budget is one chunk; a longer one is cut at
content-defined anchors (a cut after a piece depends on that piece's own text once the chunk is big enough),
so an edit moves only the boundaries next to it instead of shifting every later chunk. Units that fit
(paragraphs, list items, fenced code) are never split; longer ones are split by line, then by sentence,
then by token windows, with a small overlap where a cut falls inside a unit.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from server.index.embeddings.base import Tokenizer
from server.index.markdown import HEADING_SEPARATOR, Section, parse_sections, split_lines

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
# A date or a clock time in a heading (`# 2026-11-25`, `## 14:05 — deploy`): digits the model cannot relate to a
# question's words, which make every chunk under one daily log's heading look alike. Kept in the chunk's stored
# heading (keyword search and date filters still see it), left out of the context the model embeds.
_DATE_OR_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}:\d{2}(?::\d{2})?\b")
_LOOSE_ENDS = " \t-–—:,|·"
CONTEXT_SEPARATOR = " > "
ANCHOR_CHARS = 24


@dataclass(frozen=True)
class ChunkerConfig:
    max_tokens: int = 254  # the most tokens of one embedded text (heading context included)
    overlap_tokens: int = 40  # carried over when a cut falls inside a paragraph or list
    heading_budget: int = 40  # the heading context is cut to this many tokens
    min_fill: float = 0.2  # an anchor cuts only after this share of the budget since the previous anchor
    dated_context: bool = False  # True: dates and times stay in the embedded heading context (the old cut)

    def __post_init__(self) -> None:
        if self.max_tokens < 32 or not 0 <= self.overlap_tokens < self.max_tokens // 2:
            raise ValueError("chunker limits are inconsistent")
        if self.heading_budget >= self.max_tokens // 2 or not 0 < self.min_fill < 1:
            raise ValueError("chunker limits are inconsistent")


@dataclass(frozen=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int
    heading: tuple[str, ...]  # heading path of the section the chunk is in
    text: str  # the exact source text the chunk covers
    context: str  # heading titles above the chunk that its text does not contain
    tokens: int  # tokens of `embed_text`

    @property
    def embed_text(self) -> str:
        """What the model embeds: the heading context, then the text."""
        return f"{self.context}\n{self.text}" if self.context else self.text

    @property
    def heading_text(self) -> str:
        """The heading path as stored and shown: titles from the top level down, joined."""
        return HEADING_SEPARATOR.join(self.heading)

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.embed_text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _Piece:
    start: int  # character offsets into the normalised text
    end: int
    tokens: int
    unit_end: bool  # the piece closes its unit, so a cut after it falls between blocks
    anchor: int  # hash of the piece's first characters: the content-defined part of the cut rule


class _Text:
    """The normalised text with a line index, so pieces are plain offsets and ranges are exact."""

    def __init__(self, text: str) -> None:
        self.lines = split_lines(text)
        self.value = "\n".join(self.lines)
        self.line_starts: list[int] = []
        offset = 0
        for line in self.lines:
            self.line_starts.append(offset)
            offset += len(line) + 1

    def span(self, first_line: int, last_line: int) -> tuple[int, int]:
        return self.line_starts[first_line], self.line_starts[last_line] + len(self.lines[last_line])

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset) - 1


def chunk_markdown(text: str, tokenizer: Tokenizer, config: ChunkerConfig | None = None) -> list[Chunk]:
    """Cut `text` into chunks whose embedded text never exceeds `config.max_tokens` tokens."""
    config = config or ChunkerConfig()
    doc = _Text(text)
    chunks: list[Chunk] = []
    carried: list[int] = []  # lines of headings whose sections had no content of their own
    for section in parse_sections(doc.lines):
        if len(section.units) == 1 and section.units[0].kind == "heading":
            carried.append(section.units[0].start)
            continue
        chunks.extend(_chunk_section(doc, section, carried, tokenizer, config))
        carried = []
    if carried:  # trailing empty headings still get indexed, as one chunk
        section = Section(path=(), units=[])
        chunks.extend(_chunk_section(doc, section, carried, tokenizer, config))
    return chunks


def _chunk_section(
    doc: _Text, section: Section, carried: list[int], tokenizer: Tokenizer, config: ChunkerConfig
) -> Iterator[Chunk]:
    full_context = _context(section.path, tokenizer, config)
    budget = config.max_tokens - (tokenizer.count(full_context) + 1 if full_context else 0)
    pieces = [_whole(doc, line, line, tokenizer, True) for line in carried]
    for unit in section.units:
        pieces.extend(_unit_pieces(doc, unit.start, unit.end, tokenizer, budget))
    for group in _group(pieces, budget, config):
        yield from _make_chunks(doc, section, group, tokenizer, config)


def _group(pieces: list[_Piece], budget: int, config: ChunkerConfig) -> Iterator[list[_Piece]]:
    if sum(p.tokens for p in pieces) <= budget:
        yield pieces
        return
    # A cut after an anchor depends only on the text since the previous anchor, never on where the chunk
    # began, so an edit can move at most the cuts around it. Budget overflows still force a cut.
    min_run = int(budget * config.min_fill)
    current: list[_Piece] = []
    size = run = 0
    for index, piece in enumerate(pieces):
        if current and size + piece.tokens > budget:
            yield current
            current = _overlap(current, budget - piece.tokens, config.overlap_tokens)
            size = sum(p.tokens for p in current)
        current.append(piece)
        size += piece.tokens
        run += piece.tokens
        if _is_anchor(piece):
            if run >= min_run and index < len(pieces) - 1:
                yield current
                current = _overlap(current, budget - pieces[index + 1].tokens, config.overlap_tokens)
                size = sum(p.tokens for p in current)
            run = 0
    if current:
        yield current


def _is_anchor(piece: _Piece) -> bool:
    # Between blocks, half the pieces are anchors; inside a long paragraph, a third.
    return piece.anchor % 2 == 0 if piece.unit_end else piece.anchor % 3 == 0


def _overlap(emitted: list[_Piece], room: int, overlap_tokens: int) -> list[_Piece]:
    """The tail of the emitted chunk to repeat, when the cut falls inside a unit."""
    if not emitted or emitted[-1].unit_end:
        return []
    limit = min(room, overlap_tokens)
    tail: list[_Piece] = []
    size = 0
    for piece in reversed(emitted):
        if piece.unit_end or size + piece.tokens > limit:
            break
        tail.insert(0, piece)
        size += piece.tokens
    return tail


def _make_chunks(
    doc: _Text, section: Section, group: list[_Piece], tokenizer: Tokenizer, config: ChunkerConfig
) -> Iterator[Chunk]:
    start, end = group[0].start, group[-1].end
    first_line = doc.line_of(start)
    titles = [t for t, line in zip(section.path, section.path_lines, strict=True) if line < first_line]
    context = _context(titles, tokenizer, config)
    chunk = _chunk(doc, section, start, end, context, tokenizer)
    if chunk.tokens <= config.max_tokens:
        yield chunk
        return
    # Token counts of pieces do not always add up exactly; fall back to plain token windows.
    room = config.max_tokens - (tokenizer.count(context) + 1 if context else 0)
    for a, b in tokenizer.split(doc.value[start:end], room):
        yield _chunk(doc, section, start + a, start + b, context, tokenizer)


def _chunk(doc: _Text, section: Section, start: int, end: int, context: str, tokenizer: Tokenizer) -> Chunk:
    text = doc.value[start:end]
    # Leading or trailing whitespace of a window is trimmed so ranges stay tight.
    stripped = text.strip()
    start += len(text) - len(text.lstrip())
    end = start + len(stripped)
    embed = f"{context}\n{stripped}" if context else stripped
    return Chunk(
        start_line=doc.line_of(start) + 1,
        end_line=doc.line_of(max(start, end - 1)) + 1,
        heading=section.path,
        text=stripped,
        context=context,
        tokens=tokenizer.count(embed),
    )


def _whole(doc: _Text, first: int, last: int, tokenizer: Tokenizer, unit_end: bool) -> _Piece:
    start, end = doc.span(first, last)
    text = doc.value[start:end]
    return _Piece(start, end, tokenizer.count(text), unit_end, _anchor_hash(text))


def _unit_pieces(doc: _Text, first: int, last: int, tokenizer: Tokenizer, budget: int) -> list[_Piece]:
    whole = _whole(doc, first, last, tokenizer, True)
    if whole.tokens <= budget:
        return [whole]
    pieces: list[_Piece] = []
    for line in range(first, last + 1):
        if not doc.lines[line].strip():
            continue
        piece = _whole(doc, line, line, tokenizer, False)
        if piece.tokens <= budget:
            pieces.append(piece)
        else:
            pieces.extend(_split_line(doc, line, tokenizer, budget))
    if pieces:
        last_piece = pieces[-1]
        pieces[-1] = _Piece(last_piece.start, last_piece.end, last_piece.tokens, True, last_piece.anchor)
    return pieces


def _split_line(doc: _Text, line: int, tokenizer: Tokenizer, budget: int) -> Iterator[_Piece]:
    base, end = doc.span(line, line)
    text = doc.value[base:end]
    cuts = [0, *(m.end() for m in _SENTENCE_END.finditer(text)), len(text)]
    for a, b in itertools.pairwise(cuts):
        sentence = text[a:b].rstrip()
        if not sentence.strip():
            continue
        count = tokenizer.count(sentence)
        spans = [(0, len(sentence))] if count <= budget else tokenizer.split(sentence, budget)
        for x, y in spans:
            piece_text = sentence[x:y]
            if piece_text.strip():
                tokens = count if len(spans) == 1 else tokenizer.count(piece_text)
                yield _Piece(base + a + x, base + a + y, tokens, False, _anchor_hash(piece_text))


def _anchor_hash(text: str) -> int:
    # Only the opening characters count, so editing the rest of a paragraph does not move a cut.
    return zlib.crc32(text.strip()[:ANCHOR_CHARS].encode("utf-8"))


def _context(titles: Iterable[str], tokenizer: Tokenizer, config: ChunkerConfig) -> str:
    """The heading titles the model embeds before a chunk's text, within the heading budget."""
    if not config.dated_context:
        titles = (dateless_title(title) for title in titles)
    return _truncate(CONTEXT_SEPARATOR.join(t for t in titles if t), tokenizer, config.heading_budget)


def dateless_title(title: str) -> str:
    """`2023-05-08 - talk with Ann` -> `talk with Ann`; a title that is only a date or a time becomes empty."""
    return " ".join(_DATE_OR_TIME.sub(" ", title).split()).strip(_LOOSE_ENDS)


def _truncate(text: str, tokenizer: Tokenizer, max_tokens: int) -> str:
    if not text or tokenizer.count(text) <= max_tokens:
        return text
    return text[: tokenizer.split(text, max_tokens)[0][1]].rstrip()
