"""Names the whole memory shares weigh half as much in a query's vector.

A conversation log names its two speakers in nearly every chunk, and a project's notes its name. Such a word tells
no chunk from another, yet in a short question it weighs on the vector as much as the words that do: "When did
Caroline run a charity race?" is pulled towards every chunk where someone says "Caroline", and the turn about the
race loses ground. So a word written with a capital letter (a name, an acronym) that is found in at least
NAME_SHARE of an index's chunks is taken out of a second text, with its possessive ('s), and the query's vector is
the mean of the two texts' (`query_texts`). The keyword side keeps every word (a name's IDF there is near zero
anyway), and so do the hits' highlighted words.

Measured on locomo-dev through the CLI (`bench/bench_locomo.py`, against the rule's absence in the same run):
r@10 0.917 -> 0.926, r@50lines 0.904 -> 0.910, r@100lines 0.937 -> 0.945; the replay of the product's ranking
(`bench/explore_rewrite.py names`) puts the held-out conversations' r@100lines gain at +0.001 … +0.010 (95%
paired bootstrap). On SciFact no query has such a word, and nothing changes. The second text costs 1.2 ms p50 of
embedding, in a batch with the first, and only for a query that names what the memory shares.

Measured and not kept: the name-blind text alone (r@100lines 0.949 in the replay, but its vector lost the
likeness to the answers that the default `min_score` gate reads: 9 of 997 answerable questions came back empty),
every word that common, capitalised or not ("share", "2023" left questions), and "they" in a name's place.

Below MIN_CHUNKS chunks a share says little, and nothing is taken out; nor when no word but stopwords would be
left ("Who is Caroline?" keeps its name). Identifiers (snake_case) are not names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

from server.index.fts import STOPWORDS

NAME_SHARE = 0.5
MIN_CHUNKS = 20
MAX_NAMES = 8  # capitalised words counted per query (each is a count of its chunks): a bound on a hostile query
_WORD = re.compile(r"\w+", re.UNICODE)  # as `fts.query_terms` cuts words: an identifier (snake_case) is one


def capitalised_terms(query: str) -> list[str]:
    """The first MAX_NAMES distinct words of `query` written with a capital letter, lowercased; stopwords ("I") and
    identifiers ("Acme_Corp") are never names."""
    words = (w for w in _WORD.findall(query) if w[0].isupper() and "_" not in w and w.lower() not in STOPWORDS)
    return list(dict.fromkeys(w.lower() for w in words))[:MAX_NAMES]


def query_texts(query: str, chunks: Callable[[], int], holding: Callable[[str], int]) -> list[str]:
    """The texts whose vectors, averaged, are `query`'s: `query` itself, and without the names its index's chunks
    share when it has any; given the index's count of chunks and `holding(term)`, the count of those holding a term
    (each asked only when needed: counting costs)."""
    names = capitalised_terms(query)
    if not names:
        return [query]
    total = chunks()
    if total < MIN_CHUNKS:
        return [query]
    rest = without_names(query, [name for name in names if holding(name) >= NAME_SHARE * total])
    return [query] if rest == query else [query, rest]


def without_names(query: str, names: Collection[str]) -> str:
    """`query` with every word of `names` (in any case, and with its possessive 's) taken out; `query` itself
    when only stopwords would be left."""
    if not names:
        return query
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    pattern = re.compile(rf"\b(?:{alternatives})(?:['’]s)?\b", re.IGNORECASE | re.UNICODE)
    rest = " ".join(pattern.sub(" ", query).split())
    if not any(word.lower() not in STOPWORDS for word in _WORD.findall(rest)):
        return query
    return rest
