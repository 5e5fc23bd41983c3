"""Tags and categories in the markdown, pure: normalising, the inline heading form, front matter, and which chunk
lines carry which labels."""

from __future__ import annotations

import pytest

from server.index.errors import InvalidArgumentError
from server.index.frontmatter import parse_front_matter, with_front_matter
from server.index.labels import (
    MAX_TAG_CHARS,
    MAX_TAGS,
    Labels,
    labels_argument,
    normalise_category,
    normalise_tag,
    render_inline,
    split_inline,
)
from server.index.markdown import heading_title, split_lines
from server.index.tagging import labelled_text


@pytest.mark.parametrize(
    ("raw", "tag"),
    [("database", "database"), ("  PostgreSQL ", "postgresql"), ("#db", "db"), ("ci-cd", "ci-cd"), ("v1.2", "v1.2")],
)
def test_a_tag_is_trimmed_lower_cased_and_loses_a_leading_hash(raw: str, tag: str) -> None:
    assert normalise_tag(raw) == tag


@pytest.mark.parametrize("raw", ["", "   ", "data base", "-db", "db!", "é", "x" * (MAX_TAG_CHARS + 1)])
def test_a_tag_outside_the_alphabet_or_too_long_is_not_a_tag(raw: str) -> None:
    assert normalise_tag(raw) is None


def test_a_category_is_one_word() -> None:
    assert normalise_category(" Decision ") == "decision"
    assert normalise_category("a decision") is None


def test_inline_labels_at_the_end_of_a_heading_are_split_off() -> None:
    title, labels = split_inline("14:05 — chose Postgres [tags: Database, #postgres] [category: Decision]")
    assert title == "14:05 — chose Postgres"
    assert labels == Labels(("database", "postgres"), "decision")
    assert split_inline("notes [tags: a b]") == ("notes", Labels(("a", "b")))


@pytest.mark.parametrize(
    "title",
    [
        "ordinary [text] in brackets",
        "see [tags] later",
        "bad [tags: data base!]",
        "two [category: a] [category: b]",
        "not at the end [tags: a] then more",
        "glued[tags: a]",
    ],
)
def test_text_that_is_not_the_inline_form_stays_in_the_title(title: str) -> None:
    assert split_inline(title) == (title, Labels())


def test_rendered_inline_labels_parse_back() -> None:
    labels = Labels(("database", "postgres"), "decision")
    assert split_inline("entry" + render_inline(labels)) == ("entry", labels)
    assert render_inline(Labels()) == ""


def test_a_heading_title_leaves_its_labels_out() -> None:
    assert heading_title("## 14:05 — deploy [tags: ci] [category: fact]") == (2, "14:05 — deploy")
    assert heading_title("## plain [link]") == (2, "plain [link]")
    assert heading_title("### spaced [tags: ci]  \t") == (3, "spaced")


FRONT = "---\ntags: [Database, postgres]\ncategory: decision\ntitle: Billing\n---\n# Billing\n\nWe use Postgres.\n"


def test_front_matter_gives_labels_and_keeps_other_keys() -> None:
    front = parse_front_matter(split_lines(FRONT))
    assert front is not None
    assert (front.end, front.labels) == (4, Labels(("database", "postgres"), "decision"))
    assert front.other == ("title: Billing",)


def test_front_matter_tags_may_be_a_list_of_items() -> None:
    text = "---\n# labels\ntags:\n  - database\n  - '#Postgres'\nauthor:\n  name: x\n---\nbody"
    front = parse_front_matter(split_lines(text))
    assert front is not None and front.labels == Labels(("database", "postgres"))


@pytest.mark.parametrize(
    "text",
    [
        "---\ntags: [a]\nbody without a closing line",
        "---\ntags: [a]\ntags: [b]\n---\n",
        "---\ntags: [not valid!]\n---\n",
        "---\ncategory: two words\n---\n",
        "---\nthis is prose, not a key\n---\n",
        "\n---\ntags: [a]\n---\n",
        "---\n- an item under no key\n---\n",
        "---\n" + "x: y\n" * 80 + "---\n",
    ],
)
def test_a_malformed_block_is_not_front_matter(text: str) -> None:
    assert parse_front_matter(split_lines(text)) is None
    assert labelled_text(text).text == text  # body text, indexed as written


def test_front_matter_is_blanked_for_the_index_and_lines_keep_their_numbers() -> None:
    labelled = labelled_text(FRONT)
    lines = labelled.text.split("\n")
    assert lines[:5] == [""] * 5 and lines[5] == "# Billing"
    assert len(lines) == len(split_lines(FRONT))
    assert labelled.at(7) == Labels(("database", "postgres"), "decision")


def test_an_entrys_labels_cover_its_section_and_add_to_the_files() -> None:
    text = (
        "---\ntags: [billing]\ncategory: fact\n---\n"  # 1-4
        "# 2024-05-01\n\n"  # 5-6
        "## 09:00 — chose Postgres [tags: database] [category: decision]\n\nWe chose it.\n\n"  # 7-10
        "### detail\n\nIndexes.\n\n"  # 11-14
        "```\n## 09:30 — in a fence [tags: ignored]\n```\n\n"  # 15-18
        "## 10:00 — lunch\n\nSoup.\n"  # 19-21
    )
    labelled = labelled_text(text)
    assert labelled.at(9) == Labels(("billing", "database"), "decision")
    assert labelled.at(13) == Labels(("billing", "database"), "decision")  # a subsection inherits
    assert labelled.at(21) == Labels(("billing",), "fact")
    lines = labelled.text.split("\n")
    assert lines[6] == "## 09:00 — chose Postgres"  # the labels are not indexed as text
    assert lines[15] == "## 09:30 — in a fence [tags: ignored]"


def test_a_file_without_labels_is_chunked_as_it_is() -> None:
    text = "# Notes\r\n\r\nplain\r\n"
    assert labelled_text(text) == labelled_text(text).__class__(text, Labels(), ())


def test_front_matter_is_created_when_missing() -> None:
    assert with_front_matter("# Notes\n", Labels(("db",), "fact")) == "---\ntags: [db]\ncategory: fact\n---\n# Notes\n"
    assert with_front_matter("# Notes\n", Labels()) == "# Notes\n"


def test_front_matter_is_merged_tags_added_category_replaced_other_keys_kept() -> None:
    merged = with_front_matter(FRONT, Labels(("postgres", "billing"), "pattern"))
    assert merged == (
        "---\ntags: [database, postgres, billing]\ncategory: pattern\ntitle: Billing\n---\n"
        "# Billing\n\nWe use Postgres.\n"
    )


def test_front_matter_keeps_crlf_line_ends_and_a_file_that_is_only_front_matter() -> None:
    assert with_front_matter("a\r\nb\r\n", Labels(("x",))) == "---\r\ntags: [x]\r\n---\r\na\r\nb\r\n"
    assert with_front_matter("---\ntags: [a]\n---", Labels(("b",))) == "---\ntags: [a, b]\n---\n"


def test_a_malformed_block_is_left_as_text_under_a_new_block() -> None:
    text = "---\nnot: closed\n"
    assert with_front_matter(text, Labels(("x",))) == "---\ntags: [x]\n---\n" + text


def test_tool_arguments_are_normalised_and_bad_ones_name_the_argument() -> None:
    assert labels_argument(["DB", "#db", "ci"], " Decision") == Labels(("db", "ci"), "decision")
    assert labels_argument(None, None) == Labels()
    with pytest.raises(InvalidArgumentError, match=r"^tags: 'data base' is not a tag"):
        labels_argument(["data base"], None)
    with pytest.raises(InvalidArgumentError, match=r"^tags must be a list"):
        labels_argument("db", None)
    with pytest.raises(InvalidArgumentError, match=rf"^tags: at most {MAX_TAGS}"):
        labels_argument([f"t{n}" for n in range(MAX_TAGS + 1)], None)
    with pytest.raises(InvalidArgumentError, match=r"^category must be one word \(1 to 32 characters of a-z"):
        labels_argument(None, "two words")
