from __future__ import annotations

import pytest

from server.index.scan import ScanConfig, ScanRule, UnreadableFile, day_of, decode_memory, glob_to_regex
from server.index.snippets import make_snippet


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("MEMORY.md", "memory"),
        ("memory.md", "memory"),
        ("memory/2026-11-20.md", "memory"),
        ("memory/deep/er/topic.md", "memory"),
        ("memory/notes.txt", None),
        ("docs/MEMORY.md", None),
        ("README.md", None),
        ("memory.md.bak", None),
    ],
)
def test_the_default_rules_take_memory_files_only(path, source):
    assert ScanConfig().source_of(path) == source


def test_rules_tag_sources_in_order():
    config = ScanConfig(rules=(ScanRule("sessions/**/*.md", "sessions"), ScanRule("**/*.md")))
    assert config.source_of("sessions/laptop/2026-11-20.md") == "sessions"
    assert config.source_of("a/b.md") == "memory"


def test_glob_translation_keeps_stars_within_one_folder():
    import re

    assert re.fullmatch(glob_to_regex("memory/*.md"), "memory/a.md")
    assert not re.fullmatch(glob_to_regex("memory/*.md"), "memory/a/b.md")
    assert re.fullmatch(glob_to_regex("a.?d"), "a.md") and not re.fullmatch(glob_to_regex("a.md"), "axmd")


@pytest.mark.parametrize(
    ("path", "day"),
    [("memory/2026-11-20.md", "2026-11-20"), ("2026-02-30.md", None), ("memory/2026-11-20-notes.md", None)],
)
def test_daily_logs_are_recognised_by_a_real_date_in_the_name(path, day):
    assert day_of(path) == day


def test_decoding_refuses_binary_non_utf8_and_oversized_content():
    assert decode_memory("\ufeffhello".encode(), 100) == "hello"
    for data, reason in ((b"a\x00b", "binary"), (b"\xff\xfe", "UTF-8"), (b"x" * 101, "larger")):
        with pytest.raises(UnreadableFile, match=reason):
            decode_memory(data, 100)


def test_snippets_are_short_and_centred_on_a_query_word():
    text = "intro " * 200 + "the webhook handler is idempotent " + "outro " * 200
    snippet = make_snippet(text, ["webhook"])
    assert "webhook handler" in snippet and len(snippet) <= 282 and snippet.startswith("…")
    assert make_snippet("short\n\n text", ["x"]) == "short text"
