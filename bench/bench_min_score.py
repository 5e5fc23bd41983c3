"""Choosing the default `min_score`: how well a score threshold keeps the hits that answer a question and returns
nothing when memory holds no answer, through the product's CLI.

- Answerable: each LoCoMo (development half) question asked on its own conversation's index; what matters is the
  score of the first hit holding an evidence turn.
- Off-topic: the 300 SciFact test queries asked on every conversation's index.
- Unanswerable in the same domain: each conversation's questions asked on the next conversation's index (other
  people, same kind of talk), the hard case.
For thresholds from 0 to 0.7: the share of answerable questions whose evidence hit survives, and the share of
off-topic and unanswerable questions that get an empty answer.

    .venv/bin/python bench/bench_min_score.py [--reuse RUN] [--name NAME]   (RUN: a bench_locomo run whose indexes
    to reuse; NAME: of the results, `min_score` unless given. MEMORY_LOCAL_MODEL chooses the model, as for the server)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from bench_locomo import HITS, LOCOMO, build, cli, write_folder
from common import CACHE, SCIFACT, percentile, report, save_json, table

THRESHOLDS = (0.0, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)


def ask(data_dir: Path, index: str, queries: list[str], scratch: Path) -> list[list[dict]]:
    """The hits of every query, in order (40 each, no threshold)."""
    scratch.write_text("".join(json.dumps({"id": str(n), "query": q}) + "\n" for n, q in enumerate(queries)))
    # min_score 0: every hit, ungated (the default gate would empty the answers whose best hit is under it)
    out = cli(data_dir, "search", "--index", index, "--queries", str(scratch), "--limit", str(HITS), "--min-score", "0")
    answers = {entry["id"]: entry.get("hits", []) for entry in map(json.loads, out.splitlines())}
    return [answers.get(str(n), []) for n in range(len(queries))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reuse", help="reuse the indexes of this bench_locomo run (bench/.cache/locomo/NAME)")
    parser.add_argument("--name", default="min_score", help="name of the result files under bench/results/")
    args = parser.parse_args()
    # The gate is tested on the best hit's score before vector feedback (which only ever raises it): the score
    # measured here must be that one, so the CLI searches run without feedback.
    os.environ["MEMORY_FEEDBACK_WEIGHT"] = "0"
    samples = json.loads((LOCOMO / "locomo-dev.json").read_text())
    conversations = [build(sample) for sample in samples]
    work = CACHE / args.name.replace("_", "-")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    data_dir = CACHE / "locomo" / args.reuse / "data" if args.reuse else work / "data"
    if not args.reuse:
        for conversation in conversations:
            folder = write_folder(conversation, work / "folders")
            cli(data_dir, "index", str(folder), "--index", conversation.name, "--json")
    tested = {line.split("\t")[0] for line in list((SCIFACT / "qrels" / "test.tsv").open())[1:]}
    queries = [json.loads(line) for line in (SCIFACT / "queries.jsonl").open()]
    scifact_test = [query["text"] for query in queries if query["_id"] in tested]

    evidence_scores: list[float] = []  # the score of the first hit holding evidence (0 when none in 40)
    off_topic: list[float] = []  # top-1 score, 0 for an empty answer
    unanswerable: list[float] = []
    for number, conversation in enumerate(conversations):
        questions = [q for q, _ in conversation.questions]
        answers = ask(data_dir, conversation.name, questions, work / "own.jsonl")
        for hits, (_q, wanted) in zip(answers, conversation.questions, strict=True):
            places = [conversation.turns[d] for d in wanted if d in conversation.turns]
            holding = [
                h for h in hits if any(h["path"] == p and h["start_line"] <= n <= h["end_line"] for p, n in places)
            ]
            evidence_scores.append(holding[0]["score"] if holding else 0.0)
        off_topic += [hits[0]["score"] if hits else 0.0 for hits in ask(data_dir, conversation.name, scifact_test,
                                                                          work / "scifact.jsonl")]  # fmt: skip
        other = conversations[(number + 1) % len(conversations)]
        foreign = [q for q, _ in other.questions]
        unanswerable += [hits[0]["score"] if hits else 0.0 for hits in ask(data_dir, conversation.name, foreign,
                                                                             work / "foreign.jsonl")]  # fmt: skip
        print(f"{conversation.name}: done", flush=True)

    found = [s for s in evidence_scores if s > 0]
    rows = []
    for threshold in THRESHOLDS:
        kept = sum(s >= threshold for s in found) / len(evidence_scores)
        empty_off = sum(s < threshold for s in off_topic) / len(off_topic)
        empty_foreign = sum(s < threshold for s in unanswerable) / len(unanswerable)
        rows.append([threshold, kept, empty_off, empty_foreign])
    spread = [
        ["evidence hit (answerable)", len(found), *(percentile(found, q) for q in (1, 5, 50, 95))],
        ["top hit, off-topic", len(off_topic), *(percentile(off_topic, q) for q in (1, 5, 50, 95))],
        ["top hit, unanswerable", len(unanswerable), *(percentile(unanswerable, q) for q in (1, 5, 50, 95))],
    ]
    body = "\n\n".join(
        [
            f"{len(evidence_scores)} answerable LoCoMo questions ({len(found)} with evidence in the 40 hits), "
            f"{len(off_topic)} off-topic (SciFact) and {len(unanswerable)} unanswerable (another conversation's) "
            "questions, hybrid search with default settings.",
            "## Score spread\n\n" + table(["what", "n", "p1", "p5", "p50", "p95"], spread),
            "## Thresholds\n\n"
            + table(["min_score", "answerable: evidence kept", "off-topic: empty", "unanswerable: empty"], rows),
        ]
    )
    report(args.name, "Choosing the default min_score (LoCoMo dev + SciFact queries)", body)
    save_json(args.name, {"thresholds": rows, "spread": spread})


if __name__ == "__main__":
    sys.exit(main())
