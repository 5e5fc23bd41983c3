"""The fault loop's workload: what the users of the two laptops do in one step, drawn from the seed's generator.

write    one laptop saves a file (a new line appended, one replaced, or one inserted; now and then a long one)
both     both laptops save the same file at the same moment (merged, or a conflict copy)
race     one laptop deletes a file while the other saves it (the save must survive)
delete   one laptop deletes a file
rename   one laptop renames a file (`mv`: a deletion and a new file to the sync)
restore  one laptop restores an earlier version of a file through the server (`memory-proxy restore`)
"""

from __future__ import annotations

import random

from tests.faults.cluster import NAMES, Cluster
from tests.faults.ledger import Ledger

PATHS = ("MEMORY.md", "memory/notes.md", "memory/decisions.md", "memory/team/people.md", "memory/2026-11-20.md")
OPERATIONS = ("write", "write", "write", "both", "both", "race", "delete", "rename", "restore")
WORDS = ("deploy", "schema", "cache", "retry", "index", "review", "budget", "latency", "backup", "token", "queue")


def edited(rng: random.Random, ledger: Ledger, path: str, text: str | None) -> tuple[str, str]:
    """A new version of `text` holding one new line with a fresh token (now and then a long paragraph); the text
    and its token."""
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
    token = ledger.token()
    line = f"- {words} {token}"
    if rng.random() < 0.1:
        line += " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(200, 600)))
    if not text or not text.strip():
        return f"# {path.rsplit('/', 1)[-1].removesuffix('.md')}\n\n{line}\n", token
    lines = text.splitlines()
    roll = rng.random()
    if roll < 0.6 or len(lines) < 4:
        lines.append(line)
    elif roll < 0.85:
        lines[rng.randrange(2, len(lines))] = line
    else:
        lines.insert(rng.randrange(2, len(lines)), line)
    return "\n".join(lines) + "\n", token


def perform(rng: random.Random, cluster: Cluster, ledger: Ledger, step: int, actor: str | None = None) -> str:
    """Do one step's operation (by `actor` when given: the laptop a fault concerns); what was done."""
    operation = rng.choice(OPERATIONS)
    who = rng.choice(NAMES)
    who = actor or who
    laptop = cluster.laptops[who]
    present = sorted(laptop.files())
    if operation in ("race", "delete", "rename", "restore") and not present:
        operation = "write"
    if operation == "write":
        path = rng.choice(PATHS)
        text, token = edited(rng, ledger, path, laptop.read(path))
        laptop.write(path, text)
        ledger.record(who, path, text, step, token)
        return f"{who} writes {path}"
    if operation == "both":
        path = rng.choice(PATHS)
        texts = {name: edited(rng, ledger, path, cluster.laptops[name].read(path)) for name in NAMES}
        for name in NAMES:
            cluster.laptops[name].write(path, texts[name][0])
            ledger.record(name, path, texts[name][0], step, texts[name][1])
        return f"both write {path}"
    path = rng.choice(present)
    try:
        return _change(rng, cluster, ledger, step, operation, who, path)
    except FileNotFoundError:  # the sync deleted or renamed it a moment ago, as the user looked
        return f"{who} finds {path} gone"


def _change(
    rng: random.Random, cluster: Cluster, ledger: Ledger, step: int, operation: str, who: str, path: str
) -> str:
    """A race, a delete, a rename or a restore of `path`, a file of laptop `who`."""
    laptop = cluster.laptops[who]
    if operation == "race":
        other = next(name for name in NAMES if name != who)
        text, token = edited(rng, ledger, path, cluster.laptops[other].read(path))
        laptop.path(path).unlink()
        ledger.overtaken(who, path)
        cluster.laptops[other].write(path, text)
        ledger.record(other, path, text, step, token)
        return f"{who} deletes {path} while {other} saves it"
    if operation == "delete":
        laptop.path(path).unlink()
        ledger.overtaken(who, path)
        return f"{who} deletes {path}"
    if operation == "rename":
        target = f"memory/moved-{ledger.token()}.md"
        text = laptop.read(path) or ""
        laptop.path(path).rename(laptop.path(target))
        ledger.overtaken(who, path)
        ledger.record(who, target, text, step)
        return f"{who} renames {path} to {target}"
    return _restore(rng, cluster, ledger, who, path, step)


def _restore(rng: random.Random, cluster: Cluster, ledger: Ledger, who: str, path: str, step: int) -> str:
    try:
        listed = cluster.tool(who, "history", path, "--limit", "20")
        current = listed["versions"][0]["hash"] if listed["versions"] else None
        earlier = [v for v in listed["versions"] if v["hash"] is not None and v["hash"] != current]
        if not earlier:
            return f"{who} finds nothing to restore in {path}"
        version = rng.choice(earlier)
        restored = cluster.tool(who, "restore", path, str(version["version"]))
    except (AssertionError, KeyError, ValueError) as exc:  # the server or the link is down: the user tries later
        return f"{who} could not restore {path} ({str(exc)[:80]})"
    text = ledger.known(version["hash"])
    if text is not None and restored.get("changed"):
        ledger.record("restore", path, text, step).acknowledged_as = version["hash"]
    return f"{who} restores {path} to version {version['version']}"
