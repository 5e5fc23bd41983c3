"""Exploring pseudo-relevance feedback and chunk aggregation on SciFact and LoCoMo-dev without re-embedding.

Every chunk's vector, every query's vector and BM25 list are kept (bench/.cache/explore/prf-*.pickle); the
product's hybrid ranking is replayed from them (as explore_scifact.py and explore_locomo.py do) and then varied:
- vector PRF (Rocchio): q' = normalise(q + a * mean of the top-k fused chunks' vectors), then a second vector
  search, or (`within`, what the engine does: server.index.feedback) the first pass's candidates scored again;
- keyword PRF (RM3-like): the original words plus the n best words of the top-k fused chunks (weight: share of
  the chunk's words, times the chunk's fused score, times idf), one FTS5 query (a word repeated counts again);
- aggregation (SciFact documents): max of the chunk scores plus a small bonus for the other matching chunks.
Tuned on one half and reported on the other: SciFact's test queries split by id parity (the data has no train
qrels), LoCoMo's conv-26/30/41 against conv-42/43.

    .venv/bin/python bench/explore_prf.py [scifact|subset|locomo|engine]
"""

from __future__ import annotations

import json
import math
import pickle
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from common import CACHE

from server.index.fts import STOPWORDS, match_expression, query_terms, terms_expression

WORK = CACHE / "explore"
_WORD = re.compile(r"\w+", re.UNICODE)
BOOTSTRAP = 2000  # resamples of a paired bootstrap
FIGURES = {"locomo": ("r@10", "r@50lines", "r@100lines"), "scifact": ("ndcg",), "subset": ("ndcg",)}  # per set


@dataclass
class Data:
    name: str
    matrix: np.ndarray  # per row: the chunk's normalised vector
    queries: np.ndarray  # per query: its vector
    texts: list[str]  # per query: its text
    bm25: list[dict[int, float]]  # per query: row -> bm25 (negative, lower is better), matching rows only
    chunk_text: list[str]  # per row
    group: list[str]  # per query: its split ("tune" or "held")
    db: list[str]  # per query: the database holding its rows (for expansion queries)
    row_ids: dict[str, dict[int, int]]  # database -> chunk id -> row
    extra: object  # what the evaluation needs


# ---------------------------------------------------------------------------------------------------------------
# Preparation


def _fts(db_path: str, row_of: dict[int, int], match: str | None, cache: dict) -> dict[int, float]:
    if not match:
        return {}
    key = (db_path, match)
    if key not in cache:
        import apsw

        conns = cache.setdefault("_conns", {})
        if db_path not in conns:
            conns[db_path] = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
        rows = conns[db_path].execute(
            "SELECT rowid, bm25(chunks_fts, 1.0, 0.5) FROM chunks_fts WHERE chunks_fts MATCH ?", (match,)
        )
        cache[key] = {row_of[c]: r for c, r in rows if c in row_of}
    return cache[key]  # type: ignore[no-any-return]


class _Unpickler(pickle.Unpickler):
    """Finds `Data` here whichever script pickled it (as `__main__.Data` when it was explore_prf.py itself)."""

    def find_class(self, module: str, name: str) -> object:
        return Data if name == "Data" else super().find_class(module, name)


def _load(pickled: Path) -> Data:
    with pickled.open("rb") as file:
        return _Unpickler(file).load()  # type: ignore[no-any-return]


def prepare_scifact(subset: bool = False) -> Data:
    """The full corpus's lists, or (`subset`) those of bench_retrieval_scifact.py's 983-document index."""
    pickled = WORK / ("prf-subset.pickle" if subset else "prf-scifact.pickle")
    if pickled.exists():
        return _load(pickled)
    from bench_retrieval_scifact import data_folder, doc_of, load

    from server.index.embeddings.local import LocalEmbedder
    from server.index.store import Store
    from server.index.vectors import live_space

    _corpus, queries, qrels = load()
    path = str(data_folder(subset) / "indexes" / ("subset" if subset else "scifact") / "index.sqlite3")
    store = Store(Path(path))  # this worktree's own copy of the bench's index (never the shared one)
    db = store.connection()
    space = live_space(store)
    assert space is not None
    vectors = dict(db.execute(f"SELECT chunk_id, embedding FROM {space.table}"))
    rows = list(db.execute("SELECT c.id, f.path, c.text FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY c.id"))
    row_of = {r[0]: n for n, r in enumerate(rows)}
    matrix = np.stack([np.frombuffer(vectors[r[0]], dtype=np.float32) for r in rows])
    texts = list(queries.values())
    asked = LocalEmbedder().embed(texts, kind="query")
    cache: dict = {}
    bm25 = [_fts(path, row_of, match_expression(t), cache) for t in texts]
    group = ["tune" if int(q) % 2 else "held" for q in queries]
    store.close()
    extra = {"docs": [doc_of(r[1]) for r in rows], "qids": list(queries), "qrels": qrels}
    data = Data("subset" if subset else "scifact", matrix, np.asarray(asked), texts, bm25, [r[2] for r in rows], group,
                [path] * len(texts), {path: row_of}, extra)  # fmt: skip
    pickled.parent.mkdir(parents=True, exist_ok=True)
    pickled.write_bytes(pickle.dumps(data))
    return data


def prepare_locomo() -> Data:
    pickled = WORK / "prf-locomo.pickle"
    if pickled.exists():
        return _load(pickled)
    from bench_locomo import LOCOMO, build, write_folder

    from server.index.embeddings.local import LocalEmbedder
    from server.index.engine import MemoryIndex

    embedder = LocalEmbedder()
    samples = json.loads((LOCOMO / "locomo-dev.json").read_text())
    mats, texts, bm25, chunk_text, group, dbs, spans, turns, wanted, qvecs = [], [], [], [], [], [], [], {}, [], []
    row_ids: dict[str, dict[int, int]] = {}
    offset = 0
    cache: dict = {}
    for sample in samples:
        conversation = build(sample)
        folder = write_folder(conversation, WORK / "prf-folders")
        index = MemoryIndex.open(WORK / "prf-locomo", conversation.name, embedder, create=True)
        index.index(folder)
        path = str(index.store.path)
        rows = list(
            index.store.connection().execute(
                "SELECT c.id, f.path, c.start_line, c.end_line, e.vector, c.text FROM chunks c"
                " JOIN files f ON f.id = c.file_id JOIN embedding_cache e ON e.hash = c.hash ORDER BY c.id"
            )
        )
        index.close()
        row_of = {r[0]: offset + n for n, r in enumerate(rows)}
        row_ids[path] = row_of
        mats.append(np.stack([np.frombuffer(r[4], dtype=np.float32) for r in rows]))
        spans += [(conversation.name + "/" + r[1], r[2], r[3]) for r in rows]
        chunk_text += [r[5] for r in rows]
        for dia, (p, line) in conversation.turns.items():
            turns[conversation.name + "/" + dia] = (conversation.name + "/" + p, line)
        questions = [q for q, _ in conversation.questions]
        qvecs.append(np.asarray(embedder.embed(questions, kind="query")))
        for question, dias in conversation.questions:
            texts.append(question)
            bm25.append(_fts(path, row_of, match_expression(question), cache))
            group.append("tune" if conversation.name in ("conv-26", "conv-30", "conv-41") else "held")
            dbs.append(path)
            wanted.append({conversation.name + "/" + d for d in dias})
        offset += len(rows)
        print(conversation.name, len(rows), "chunks", flush=True)
    extra = {"spans": spans, "turns": turns, "wanted": wanted}
    data = Data("locomo", np.concatenate(mats), np.concatenate(qvecs), texts, bm25, chunk_text, group, dbs,
                row_ids, extra)  # fmt: skip
    pickled.write_bytes(pickle.dumps(data))
    return data


# ---------------------------------------------------------------------------------------------------------------
# Ranking


def fuse(sims: np.ndarray, bm25: dict[int, float], pool: int, allowed: np.ndarray | None, vw: float = 0.7):
    """The product's fusion over `pool` candidates a side (rows outside `allowed` never compete)."""
    s = sims if allowed is None else np.where(allowed, sims, -np.inf)
    vector_c = np.argpartition(-s, pool)[:pool].tolist() if len(s) > pool else list(range(len(s)))
    kw = [r for r in bm25 if allowed is None or allowed[r]]
    keyword_c = sorted(kw, key=lambda r: bm25[r])[:pool]
    union = set(vector_c) | set(keyword_c)
    rel = {r: -bm25[r] for r in union if r in bm25}
    best, worst = max(rel.values(), default=0.0), min(rel.values(), default=0.0)
    scores = {}
    for r in union:
        k = (rel[r] - worst) / (best - worst) if r in rel and best > worst else float(r in rel)
        scores[r] = vw * max(0.0, float(sims[r])) + (1 - vw) * k
    return sorted(scores, key=lambda r: (-scores[r], r)), scores


@dataclass(frozen=True)
class Params:
    pool: int = 40
    vk: int = 0  # vector PRF: feedback chunks (0: off)
    va: float = 0.0  # vector PRF: weight of their mean
    vmix: float = 1.0  # share of the PRF'd similarity in the vector score (1: replaces it)
    within: bool = False  # vector PRF: the first pass's candidates scored again, no second search
    kk: int = 0  # keyword PRF: feedback chunks (0: off)
    kn: int = 0  # keyword PRF: expansion words
    krep: int = 1  # times the original words count
    bonus: float = 0.0  # aggregation: share of the second-best chunk added to a document's best (SciFact)
    vw: float = 0.7  # the fusion's vector weight (the product's: chosen for the default model's similarities)


def product_params(data: Data) -> Params:
    """The product's ranking: 40 candidates a side on LoCoMo (its protocol's hits), 100 on SciFact, vector
    feedback from the best chunk at 0.25 within the first pass's candidates."""
    return Params(40 if data.name == "locomo" else 100, vk=1, va=0.25, within=True)


def halves(data: Data) -> dict[str, list[int]]:
    """The query numbers of the tuning half ("tune") and the held-out half ("held")."""
    return {g: [q for q in range(len(data.texts)) if data.group[q] == g] for g in ("tune", "held")}


def bootstrap(deltas: np.ndarray, seed: int = 16) -> tuple[float, float]:
    """The 95% interval of the mean of per-question differences, by a paired bootstrap."""
    rng = np.random.default_rng(seed)
    means = deltas[rng.integers(0, len(deltas), (BOOTSTRAP, len(deltas)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


class Ranker:
    def __init__(self, data: Data) -> None:
        self.data = data
        self.cache: dict = {}
        self.df = Counter()
        for text in data.chunk_text:
            self.df.update(set(w.lower() for w in _WORD.findall(text)))
        self.n = len(data.chunk_text)
        self.allowed = {}
        for db, rows in data.row_ids.items():
            mask = np.zeros(len(data.matrix), dtype=bool)
            mask[list(rows.values())] = True
            self.allowed[db] = mask if len(data.row_ids) > 1 else None

    def expansion(self, q: int, feedback: list[int], scores: dict[int, float], n: int) -> list[str]:
        original = set(query_terms(self.data.texts[q]))
        weight: Counter = Counter()
        for r in feedback:
            words = [w.lower() for w in _WORD.findall(self.data.chunk_text[r])]
            counts = Counter(w for w in words if w not in STOPWORDS and not w.isdigit() and len(w) > 2)
            for w, c in counts.items():
                weight[w] += scores[r] * c / max(1, len(words)) * math.log(self.n / (1 + self.df[w]))
        return [w for w, _ in weight.most_common(n + len(original)) if w not in original][:n]

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        """Every row's vector score for a query vector (a subclass may score other representations)."""
        return self.data.matrix @ vector  # type: ignore[no-any-return]

    def rank(self, q: int, p: Params) -> tuple[list[int], dict[int, float]]:
        d = self.data
        allowed = self.allowed[d.db[q]]
        sims = self.similarities(d.queries[q])
        bm25 = d.bm25[q]
        ranked, scores = self.fuse(q, sims, bm25, p.pool, allowed, p.vw)
        if not (p.vk or p.kk):
            return ranked, scores
        if p.vk:
            mean = d.matrix[ranked[: p.vk]].mean(axis=0)
            q2 = d.queries[q] + p.va * mean
            q2 = q2 / np.linalg.norm(q2)
            sims2 = self.similarities(q2)
            sims = sims2 if p.vmix == 1 else p.vmix * sims2 + (1 - p.vmix) * sims
        if p.kk and p.kn:
            words = self.expansion(q, ranked[: p.kk], scores, p.kn)
            terms = query_terms(d.texts[q])
            match = " OR ".join([terms_expression(terms) or ""] * p.krep + [terms_expression(words) or ""])
            match = " OR ".join(part for part in match.split(" OR ") if part)
            bm25 = _fts(d.db[q], d.row_ids[d.db[q]], match, self.cache)
        if p.within:
            allowed = np.zeros(len(sims), dtype=bool) if allowed is None else allowed.copy()
            allowed[:] = False
            allowed[list(scores)] = True
        return self.fuse(q, sims, bm25, p.pool, allowed, p.vw)

    def fuse(self, q: int, sims: np.ndarray, bm25: dict[int, float], pool: int, allowed: np.ndarray | None,
             vw: float) -> tuple[list[int], dict[int, float]]:  # fmt: skip
        """Query `q`'s fusion (a subclass may fuse otherwise)."""
        return fuse(sims, bm25, pool, allowed, vw)

    def evaluate(self, p: Params) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for g, qs in halves(self.data).items():
            totals: Counter = Counter()
            for scores in self.each(qs, p):
                totals.update(scores)
            out[g] = {k: round(v / len(qs), 4) for k, v in totals.items()}
        return out

    def each(self, qs: list[int], p: Params) -> list[dict[str, float]]:
        """Each query's figures: nDCG@10 and recall@10 (SciFact), r@10 and the line recalls (LoCoMo)."""
        return [(self._locomo if self.data.name == "locomo" else self._scifact)(q, p) for q in qs]

    def _scifact(self, q: int, p: Params) -> dict[str, float]:
        from bench_retrieval_scifact import evaluate

        docs, qids, qrels = self.data.extra["docs"], self.data.extra["qids"], self.data.extra["qrels"]  # type: ignore[index]
        ranked, scores = self.rank(q, p)
        per: dict[str, list[float]] = {}
        for r in ranked[:100]:
            per.setdefault(docs[r], []).append(scores[r])
        agg = {doc: s[0] + p.bonus * (s[1] if len(s) > 1 else 0.0) for doc, s in per.items()}
        ndcg, recall = evaluate({qids[q]: sorted(agg, key=lambda doc: -agg[doc])}, {qids[q]: qrels[qids[q]]})
        return {"ndcg": ndcg, "r10": recall}

    def _locomo(self, q: int, p: Params) -> dict[str, float]:
        from bench_locomo import recall_of

        turns, wanted = self.data.extra["turns"], self.data.extra["wanted"]  # type: ignore[index]
        ranked, _scores = self.rank(q, p)
        got = recall_of(locomo_hits(self.data, ranked), wanted[q], turns)
        return {k: got.get(k, 0.0) for k in ("r@10", "r@50lines", "r@100lines")}


def locomo_hits(data: Data, ranked: list[int]) -> list[dict]:
    """The CLI's hits for LoCoMo chunk rows in ranked order: merged into places, 40 of them (its protocol)."""
    from server.index.places import Span, merge_places

    places = merge_places([Span(r, *data.extra["spans"][r]) for r in ranked], 40)  # type: ignore[index]
    return [{"path": pl.path, "start_line": pl.start_line, "end_line": pl.end_line} for pl in places]


def replay_row(ranker: Ranker, p: Params, base: np.ndarray | None) -> tuple[str, np.ndarray]:
    """One variant replayed on both halves: a table row's cells (each figure as tuning / held out / all, then
    the held-out difference of the last figure from `base`'s, a 95% paired bootstrap; `base` None: the variant is
    the baseline) and its last figure per held-out question, the `base` of the rows after it."""
    scores = {g: ranker.each(qs, p) for g, qs in halves(ranker.data).items()}
    figures = FIGURES[ranker.data.name]
    cells = []
    for figure in figures:
        tune, held = (np.mean([s[figure] for s in scores[g]]) for g in ("tune", "held"))
        every = np.mean([s[figure] for s in scores["tune"] + scores["held"]])
        cells.append(f"{figure} {tune:.3f} / {held:.3f} / {every:.3f}")
    last = np.asarray([s[figures[-1]] for s in scores["held"]])
    low, high = bootstrap(last - (last if base is None else base))
    return " | ".join([*cells, f"held {figures[-1]} delta {low:+.3f}..{high:+.3f}"]), last


def engine_check(weights: tuple[float, ...] = (0.0, 0.25)) -> None:
    """Through the engine on this worktree's SciFact index (no indexing): hybrid nDCG@10 over 100 hits and the
    search time without the query embedding (limit 8, the default) for each feedback weight."""
    from bench_retrieval_scifact import data_folder, evaluate, load, run_engine
    from bench_search_latency import Precomputed

    from server.index.embeddings.chain import as_chain
    from server.index.embeddings.local import LocalEmbedder
    from server.index.engine import MemoryIndex
    from server.index.search import build_options

    _corpus, queries, qrels = load()
    embedder = LocalEmbedder()
    index = MemoryIndex.open(data_folder(), "scifact", embedder)
    vectors = {q: embedder.embed([q], kind="query") for q in queries.values()}
    for weight in weights:
        ndcg, recall = evaluate(run_engine(index, queries, "hybrid", weight), qrels)
        print(f"feedback {weight}: nDCG@10 {ndcg:.4f} recall@10 {recall:.4f}", flush=True)
    index.providers = as_chain(Precomputed(embedder, vectors))  # type: ignore[arg-type]
    times: dict[float, list[float]] = {w: [] for w in weights}
    for query in list(queries.values()) * 3:  # interleaved: the machine's load drifts
        for weight in weights:
            times[weight].append(index.search(query, build_options(limit=8, feedback_weight=weight)).search_ms)
    for weight, spent in times.items():
        spent.sort()
        print(f"feedback {weight}: search p50 {spent[len(spent) // 2]:.1f} ms p95 {spent[int(len(spent) * 0.95)]:.1f}")
    index.close()


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "scifact"
    if which == "engine":
        return engine_check()
    data = prepare_locomo() if which == "locomo" else prepare_scifact(which == "subset")
    ranker = Ranker(data)
    pool = 40 if which == "locomo" else 100
    grid = [Params(pool), Params(pool, vk=1, va=0.25, within=True)]  # the product's defaults before and after
    grid += [Params(pool, vk=k, va=a, within=w) for k in (1, 2, 3, 5) for a in (0.15, 0.25, 0.5, 1.0) for w in (0, 1)]
    grid += [Params(pool, kk=k, kn=n, krep=r) for k in (3, 5, 10) for n in (5, 10) for r in (1, 2)]
    if which != "locomo":
        grid += [Params(pool, bonus=b) for b in (0.05, 0.1, 0.2)]
    for p in grid:
        print(p, json.dumps(ranker.evaluate(p)), flush=True)


if __name__ == "__main__":
    main()
