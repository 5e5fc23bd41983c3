"""`memory-server self-check`: prove an installation can serve before it is shipped or started.

The image build runs it, so a module missing from the image, damaged model weights or a sqlite-vec that does not
load fail `docker build`, not the first start. Each check prints one line; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from server.index.embeddings.select import EmbeddingSettings

DISTRIBUTION = "agent-memory-server"
ENTRY_POINT_GROUP = "console_scripts"


def first_party_packages(distribution: str = DISTRIBUTION) -> list[str]:
    """The top-level packages the installed distribution ships: pyproject's package list, as pip installed it."""
    top_level = importlib.metadata.distribution(distribution).read_text("top_level.txt") or ""
    return sorted(name for name in top_level.split() if name)


def module_names(package: str) -> Iterator[str]:
    """Every module of `package`, the package itself first; `__main__` modules are not imported (they run)."""
    yield package
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            yield info.name


def check_imports(distribution: str = DISTRIBUTION) -> str:
    packages = first_party_packages(distribution)
    if not packages:
        raise RuntimeError(f"{distribution} lists no top-level packages")
    count = 0
    for package in packages:
        for name in module_names(package):
            importlib.import_module(name)
            count += 1
    return f"{count} modules of {', '.join(packages)} import"


def check_entry_points(distribution: str = DISTRIBUTION) -> str:
    scripts = [ep for ep in importlib.metadata.distribution(distribution).entry_points if ep.group == ENTRY_POINT_GROUP]
    if not scripts:
        raise RuntimeError(f"{distribution} declares no console scripts")
    for entry_point in scripts:
        if not callable(entry_point.load()):
            raise RuntimeError(f"{entry_point.name} -> {entry_point.value} is not callable")
    return ", ".join(f"{ep.name} -> {ep.value}" for ep in scripts)


def check_model(settings: EmbeddingSettings) -> str:
    """The local model as the server would run it (local_model, embedding_runtime: the environment over the config
    file), embedding the reference sentences: this machine must give the vectors recorded for the model
    (embeddings.reference)."""
    from server.index.embeddings import reference
    from server.index.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder(  # verifies the weights' sha256
        runtime="torch" if settings.runtime == "torch" else "onnx", local=settings.local_model
    )
    least = reference.check(embedder)
    loaded = embedder.loaded()
    return (
        f"{embedder.model} weights verified, {embedder.dimensions} dimensions, runtime {loaded.runtime} "
        f"({loaded.detail}), its reference vectors reproduced (cosine {least:.4f} at least)"
    )


def check_sqlite() -> str:
    import apsw

    from server.index.store import load_vec

    db = apsw.Connection(":memory:")
    load_vec(db)
    db.execute("CREATE VIRTUAL TABLE v USING vec0(embedding float[2] distance_metric=cosine)")
    db.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1, 0]'), (2, '[0, 1]')")
    nearest = db.execute("SELECT rowid FROM v WHERE embedding MATCH '[0.9, 0.1]' AND k = 1").fetchall()
    db.execute("CREATE VIRTUAL TABLE f USING fts5(body)")
    if nearest != [(1,)]:
        raise RuntimeError(f"sqlite-vec answered {nearest} for the nearest neighbour, expected [(1,)]")
    version = db.execute("SELECT vec_version()").fetchall()[0][0]
    return f"SQLite {apsw.sqlite_lib_version()} with FTS5 and sqlite-vec {version}"


# Each check is given the embedding settings the server would run with; only the model's check reads them.
CHECKS: dict[str, Callable[[EmbeddingSettings], str]] = {
    "imports": lambda _settings: check_imports(),
    "entry points": lambda _settings: check_entry_points(),
    "sqlite": lambda _settings: check_sqlite(),
    "model": check_model,
}


def run(out: TextIO, settings: EmbeddingSettings) -> int:
    failed = 0
    for name, check in CHECKS.items():
        try:
            detail = check(settings)
        except Exception as exc:  # every failure is reported, and the next check still runs
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=out)
        else:
            print(f"ok   {name}: {detail}", file=out)
    return 1 if failed else 0


def cmd_self_check(args: argparse.Namespace) -> int:
    return run(sys.stdout, args.settings.embedding)  # main()'s settings: the environment over the config file


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = commands.add_parser(
        "self-check", help="check that this installation can serve: imports, model weights, SQLite extensions"
    )
    check.set_defaults(func=cmd_self_check)
