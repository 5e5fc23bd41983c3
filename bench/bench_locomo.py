"""Conversational recall on LoCoMo (development half), through the product's own CLI, by the protocol in
`../shared/data/locomo-dev/README.md`.

Each conversation becomes a memory folder of daily-log files (`memory/YYYY-MM-DD-sNN.md`, one turn per line) and an
index of its own, built with `memory-server index`; every question with evidence is asked through
`memory-server search --queries` with 40 hits. Reported per conversation and overall: the share of a question's
evidence turns inside the line ranges of the top 5 and top 10 hits, and of the hits read in rank order until 50 and
100 lines have been returned (what an agent reads).

    .venv/bin/python bench/bench_locomo.py [--data DIR] [--mode auto|hybrid|vector|keyword] [--name NAME]
Environment variables of the server (MEMORY_*) apply to both commands, so settings are compared run against run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from common import CACHE, REPO, report, save_json, table, timer

LOCOMO = Path(os.environ.get("LOCOMO_DIR", REPO.parent / "shared" / "data" / "locomo-dev"))
HITS = 40
SERVER = REPO / ".venv" / "bin" / "memory-server"
DIA_ID = re.compile(r"D:?(\d+):(\d+)")


@dataclass
class Conversation:
    name: str
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text
    turns: dict[str, tuple[str, int]] = field(default_factory=dict)  # "D1:3" -> (path, line)
    questions: list[tuple[str, set[str]]] = field(default_factory=list)  # (question, evidence dia ids)


def session_date(text: str) -> dt.date:
    """`1:56 pm on 8 May, 2023` -> 2023-05-08."""
    day = text.split(" on ", 1)[1].strip()
    return dt.datetime.strptime(day, "%d %B, %Y").date()


def turn_line(turn: dict[str, str]) -> str:
    text = " ".join(str(turn["text"]).split())
    if turn.get("blip_caption"):
        text += f" [shares a photo: {' '.join(str(turn['blip_caption']).split())}]"
    return f"- **{turn['speaker']}:** {text}"


def evidence_ids(evidence: Iterable[str]) -> set[str]:
    found = set()
    for entry in evidence:
        for session, turn in DIA_ID.findall(str(entry)):
            found.add(f"D{int(session)}:{int(turn)}")
    return found


def build(sample: dict) -> Conversation:
    data = sample["conversation"]
    conversation = Conversation(sample["sample_id"])
    number = 1
    while f"session_{number}_date_time" in data:
        turns = data.get(f"session_{number}") or []
        if turns:
            date = session_date(data[f"session_{number}_date_time"])
            path = f"memory/{date.isoformat()}-s{number:02}.md"
            speakers = f"{data['speaker_a']} and {data['speaker_b']}"
            lines = [f"# {date.isoformat()} - conversation between {speakers} (session {number})", ""]
            for turn in turns:
                lines.append(turn_line(turn))
                conversation.turns[turn["dia_id"]] = (path, len(lines))
            conversation.files[path] = "\n".join(lines) + "\n"
        number += 1
    for qa in sample["qa"]:
        wanted = evidence_ids(qa.get("evidence") or [])
        if wanted:
            conversation.questions.append((str(qa["question"]), wanted))
    return conversation


def write_folder(conversation: Conversation, root: Path) -> Path:
    folder = root / conversation.name
    if folder.exists():
        shutil.rmtree(folder)
    for path, text in conversation.files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, "utf-8")
    return folder


def cli(data_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [str(SERVER), "--data-dir", str(data_dir), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"memory-server {' '.join(args[:3])} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def covers(hits: list[dict], path: str, line: int) -> bool:
    """Whether one of `hits` holds line `line` of `path`."""
    return any(hit["path"] == path and hit["start_line"] <= line <= hit["end_line"] for hit in hits)


def within_lines(hits: list[dict], budget: int) -> list[dict]:
    """The first hits an agent reads with `budget` lines to read (the hit that crosses the budget included)."""
    taken, lines = [], 0
    for hit in hits:
        if lines >= budget:
            break
        taken.append(hit)
        lines += hit["end_line"] - hit["start_line"] + 1
    return taken


def recall_of(hits: list[dict], wanted: set[str], turns: dict[str, tuple[str, int]]) -> dict[str, float]:
    places = [turns[dia] for dia in wanted if dia in turns]
    if not places:
        return {}

    def covered(selected: list[dict]) -> float:
        return sum(covers(selected, path, line) for path, line in places) / len(places)

    return {
        "r@5": covered(hits[:5]),
        "r@10": covered(hits[:10]),
        "r@50lines": covered(within_lines(hits, 50)),
        "r@100lines": covered(within_lines(hits, 100)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=LOCOMO, help="folder holding locomo-dev.json (or a split)")
    parser.add_argument("--mode", default="auto", choices=["auto", "hybrid", "vector", "keyword"])
    parser.add_argument("--name", default="locomo", help="name of the result files under bench/results/")
    args = parser.parse_args()
    samples = json.loads(next(args.data.glob("*.json")).read_text())
    work = CACHE / "locomo" / args.name
    if work.exists():
        shutil.rmtree(work)
    rows, per_question, timings = [], [], {}
    for sample in samples:
        conversation = build(sample)
        folder = write_folder(conversation, work / "folders")
        data_dir = work / "data"
        with timer() as indexing:
            cli(data_dir, "index", str(folder), "--index", conversation.name, "--json")
        queries = work / f"{conversation.name}.jsonl"
        queries.write_text(
            "".join(json.dumps({"id": str(n), "query": q}) + "\n" for n, (q, _) in enumerate(conversation.questions))
        )
        with timer() as searching:
            out = cli(data_dir, "search", "--index", conversation.name, "--queries", str(queries),
                      "--limit", str(HITS), "--mode", args.mode)  # fmt: skip
        answers = {entry["id"]: entry for entry in map(json.loads, out.splitlines())}
        scores = []
        for n, (_question, wanted) in enumerate(conversation.questions):
            hits = answers[str(n)].get("hits", [])
            score = recall_of(hits, wanted, conversation.turns)
            if score:
                scores.append(score)
        per_question += scores
        mean = {key: sum(s[key] for s in scores) / len(scores) for key in scores[0]}
        chunk_lines = [h["end_line"] - h["start_line"] + 1 for a in answers.values() for h in a.get("hits", [])[:10]]
        rows.append([conversation.name, len(scores), *mean.values(), sorted(chunk_lines)[len(chunk_lines) // 2]])
        timings[conversation.name] = {"index_s": indexing[0], "search_s": searching[0], "questions": len(scores)}
        print(f"{conversation.name}: {mean} ({indexing[0]:.0f} s indexing, {searching[0]:.0f} s searching)", flush=True)
    overall = {key: sum(s[key] for s in per_question) / len(per_question) for key in per_question[0]}
    rows.append(["all", len(per_question), *overall.values(), ""])
    body = table(["conversation", "questions", "r@5", "r@10", "r@50lines", "r@100lines", "median hit lines"], rows)
    settings = {k: v for k, v in sorted(os.environ.items()) if k.startswith("MEMORY_")}
    body += f"\n\nMode {args.mode}; server settings from the environment: {settings or 'defaults'}."
    report(args.name, "LoCoMo conversational recall (memory-server index + search, 40 hits)", body)
    save_json(args.name, {"overall": overall, "rows": rows, "timings": timings, "mode": args.mode})


if __name__ == "__main__":
    sys.exit(main())
