from __future__ import annotations

import itertools
import random
import time
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.index.chunker import ChunkerConfig, chunk_markdown
from server.index.markdown import heading_title, split_lines
from server.index.places import body_of

WORDS = st.sampled_from(
    "memory index sqlite vector keyword deploy rollback café naïve 東京 données C++ x=1 `code` **bold** "
    "[link](http://e.x) | table | > quote supercalifragilisticexpialidocious 0x7f3a9c".split()
)


def _sentence(words: list[str]) -> str:
    return " ".join(words) + "."


@st.composite
def markdown_docs(draw: st.DrawFn) -> str:
    blocks: list[str] = []
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["heading", "para", "long", "list", "fence", "blank", "junk"]))
        if kind == "heading":
            blocks.append("#" * draw(st.integers(1, 7)) + " " + " ".join(draw(st.lists(WORDS, max_size=6))))
        elif kind == "para":
            blocks.append("\n".join(_sentence(draw(st.lists(WORDS, min_size=1, max_size=30))) for _ in range(2)))
        elif kind == "long":  # one line far over the token budget, to force sentence and window splits
            blocks.append(" ".join(_sentence(draw(st.lists(WORDS, min_size=1, max_size=60))) for _ in range(12)))
        elif kind == "list":
            items = draw(st.lists(st.lists(WORDS, min_size=1, max_size=20), min_size=1, max_size=8))
            blocks.append("\n".join(("  " * (i % 3)) + "- " + " ".join(item) for i, item in enumerate(items)))
        elif kind == "fence":
            body = "\n".join(" ".join(draw(st.lists(WORDS, max_size=12))) for _ in range(draw(st.integers(0, 40))))
            closed = draw(st.booleans())
            blocks.append(f"```python\n{body}" + ("\n```" if closed else ""))
        elif kind == "blank":
            blocks.append(draw(st.sampled_from(["", "   ", "\t", "\r"])))
        else:
            blocks.append(draw(st.text(min_size=1, max_size=400)))
    separator = draw(st.sampled_from(["\n\n", "\n", "\r\n\r\n"]))
    return separator.join(blocks)


def _check_chunks(text: str, tokenizer: object, config: ChunkerConfig) -> None:
    chunks = chunk_markdown(text, tokenizer, config)  # type: ignore[arg-type]
    lines = split_lines(text)
    covered = [False] * len(lines)
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        span = "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        position = span.find(chunk.text)
        assert chunk.text and position >= 0, "the chunk text is not the text of its line range"
        assert position <= len(lines[chunk.start_line - 1]), "the chunk does not begin on its start line"
        assert position + len(chunk.text) >= len(span) - len(lines[chunk.end_line - 1]), "it ends before end line"
        assert tokenizer.count(chunk.embed_text) == chunk.tokens <= config.max_tokens  # type: ignore[attr-defined]
        # A hit's range is the chunk's body: never empty, only heading and blank lines left out, and still exact.
        skipped, body = body_of(chunk.text, chunk.heading_text)
        assert body.strip() and chunk.start_line + skipped <= chunk.end_line
        assert all(not line.strip() or heading_title(line) for line in chunk.text.split("\n")[:skipped])
        assert body in "\n".join(lines[chunk.start_line + skipped - 1 : chunk.end_line])
        for line in range(chunk.start_line - 1, chunk.end_line):
            covered[line] = True
    missed = [i + 1 for i, line in enumerate(lines) if line.strip() and not covered[i]]
    assert not missed, f"lines {missed[:5]} are in no chunk"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_docs())
def test_every_line_is_covered_ranges_match_and_no_chunk_exceeds_the_token_limit(tokenizer, text):
    _check_chunks(text, tokenizer, ChunkerConfig())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_docs(), st.integers(40, 300), st.integers(0, 19))
def test_the_invariants_hold_for_any_budget(tokenizer, text, max_tokens, overlap):
    config = ChunkerConfig(max_tokens=max_tokens, overlap_tokens=min(overlap, max_tokens // 2 - 1), heading_budget=12)
    _check_chunks(text, tokenizer, config)


def test_chunks_carry_heading_paths_and_empty_parent_headings_join_the_next_section(tokenizer):
    text = "# Project\n\n## Decisions\n\n### Database\nWe use SQLite.\n\n## People\nDana owns billing.\n"
    chunks = chunk_markdown(text, tokenizer)
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        (("Project", "Decisions", "Database"), 1, 6),
        (("Project", "People"), 8, 9),
    ]
    # Headings the chunk text already shows are not repeated in the embedded context.
    assert chunks[0].context == "" and chunks[1].context == "Project"
    assert chunks[1].embed_text == "Project\n## People\nDana owns billing."


def test_dates_and_times_in_headings_stay_out_of_the_embedded_context_but_not_out_of_the_heading(tokenizer):
    text = "# 2026-11-25 - standup with Ann\n\nAnn ran it.\n\n## 14:05 — deploy\nWe shipped the billing fix.\n"
    chunks = chunk_markdown(text, tokenizer)
    assert chunks[1].heading == ("2026-11-25 - standup with Ann", "14:05 — deploy")
    assert chunks[1].context == "standup with Ann"
    assert chunks[1].embed_text == "standup with Ann\n## 14:05 — deploy\nWe shipped the billing fix."
    # A title that is only a date adds nothing to embed; the old cut (dated_context) kept the date.
    only_date = chunk_markdown("# 2026-11-25\n\nIntro.\n\n## Deploy\nShipped.\n", tokenizer)
    assert only_date[1].context == ""
    old = chunk_markdown(text, tokenizer, ChunkerConfig(dated_context=True))
    assert old[1].context == "2026-11-25 - standup with Ann"


def test_a_fenced_code_block_that_fits_is_never_split(tokenizer):
    code = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(18))
    prose = "\n\n".join(f"Paragraph {i} about the deploy pipeline and its many steps." * 3 for i in range(8))
    text = f"## Build\n{prose}\n\n```python\n{code}\n```\n\n{prose}\n"
    chunks = chunk_markdown(text, tokenizer)
    holding = [c for c in chunks if "value_0" in c.text or "value_17" in c.text]
    assert len(holding) == 1 and "value_0" in holding[0].text and "value_17" in holding[0].text
    assert len(chunks) > 2


def test_a_paragraph_longer_than_the_model_reads_is_split_with_overlap(tokenizer):
    sentences = [f"Sentence number {i} explains one more detail of the retry policy." for i in range(80)]
    chunks = chunk_markdown(" ".join(sentences), tokenizer)
    assert len(chunks) > 2
    assert all(c.tokens <= 254 and c.start_line == c.end_line == 1 for c in chunks)
    for left, right in itertools.pairwise(chunks):
        first_sentence = right.text.split(". ", 1)[0]
        assert first_sentence + "." in left.text, "consecutive windows share at least a sentence"


def test_empty_whitespace_and_heading_only_documents(tokenizer):
    assert chunk_markdown("", tokenizer) == []
    assert chunk_markdown("  \n\t\n\r\n", tokenizer) == []
    only = chunk_markdown("# Title\n\n## Sub\n", tokenizer)
    assert [(c.start_line, c.end_line, c.text) for c in only] == [(1, 3, "# Title\n\n## Sub")]


def test_pathological_markdown_is_chunked_quickly(tokenizer):
    nested = "\n".join(">" * 5000 + " deep quote" for _ in range(20))
    lists = "\n".join("  " * i + "- item" for i in range(1000))
    fences = "```\n" * 2001
    headings = "\n".join("#" * (1 + i % 6) + " h" for i in range(5000))
    started = time.perf_counter()
    for text in (nested, lists, fences, headings, "[" * 100_000, "x" * 200_000):
        _check_chunks(text, tokenizer, ChunkerConfig())
    assert time.perf_counter() - started < 60


def _long_file(seed: int) -> list[str]:
    rnd = random.Random(seed)
    words = "the index keeps memory files in sync with search and embeddings while laptops edit notes".split()
    lines = ["# Notes"]
    for section in range(5):
        lines += ["", f"## Topic {section}"]
        for _ in range(12):
            lines.append("")
            if rnd.random() < 0.3:
                lines += [f"- {' '.join(rnd.choices(words, k=rnd.randint(5, 25)))}." for _ in range(3)]
            else:
                lines += [" ".join(rnd.choices(words, k=rnd.randint(10, 40))).capitalize() + "." for _ in range(2)]
    return lines


def _edits(line: str) -> dict[str, str]:
    words = line.split(" ")
    middle = " ".join([*words[: len(words) // 2], "changed", *words[len(words) // 2 + 1 :]])
    return {
        "append": line + " One more remark.",
        "middle word": middle,
        "truncate": line[: len(line) // 2],
        "opening words": line.replace(" ", " really ", 1),  # changes the text that anchors a cut
    }


def test_editing_one_line_changes_at_most_two_chunks(tokenizer):
    changed: dict[str, Counter[int]] = {}
    for seed in (7,):
        lines = _long_file(seed)
        before = Counter(c.hash for c in chunk_markdown("\n".join(lines), tokenizer))
        assert sum(before.values()) >= 25  # a long file, as in the incremental benchmark
        for number, line in enumerate(lines):
            if not line.strip() or line.startswith("#"):
                continue
            for kind, edited in _edits(line).items():
                after = chunk_markdown("\n".join([*lines[:number], edited, *lines[number + 1 :]]), tokenizer)
                changed.setdefault(kind, Counter())[sum(1 for c in after if before[c.hash] == 0)] += 1
    for kind in ("append", "middle word", "truncate"):
        assert max(changed[kind]) <= 2, (kind, changed[kind])
    # Rewriting the first words of a paragraph can move one content-defined cut; the damage stays local.
    assert max(changed["opening words"]) <= 3, changed["opening words"]
    for kind, counts in changed.items():
        assert counts[1] > 0.75 * sum(counts.values()), (kind, counts)
