"""The starter memory files `memory-proxy init` puts in a project: `MEMORY.md` and `memory/project-context.md`.

`install_templates` never overwrites: each file is created with `open(..., "x")` (O_CREAT | O_EXCL, which also
refuses a symlink in its place) and an existing one is kept. `MEMORY.md` is written only when neither `MEMORY.md`
nor `memory.md` exists. Nothing is written through a `memory/` that links out of the project.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from client_proxy.project.stack import Stack
from syncproto.paths import ROOT_FILES

MEMORY_TEMPLATE: Final = """\
# Project memory

Long-term memory for the coding agents working on this project: what is worth knowing at the start of every
session. Keep it short and current (only the first 200 lines are loaded); put day-to-day notes in the daily log
`memory/YYYY-MM-DD.md` and move what lasts up here.

## Project overview

<!-- What the project is for, who uses it, its main parts and where they live. -->

## Conventions

<!-- Code style, naming, testing, branching and review habits to follow. -->

## Decisions

<!-- One line each, newest first: date, what was decided, why. -->

## Gotchas

<!-- Traps that cost time once: odd setup steps, flaky tests, things that look wrong but are on purpose. -->

## See also

- `memory/project-context.md`: languages, frameworks, and the build and test commands.
"""

CONTEXT_HEAD: Final = """\
# Project context{title}

How this project is built and checked. `memory-proxy init` seeded this page from the manifests it found in the
project folder; correct what is wrong and add what it could not know.
"""

CONTEXT_TAIL: Final = """\
## Layout

<!-- The main folders and what each holds. -->

## Environment

<!-- Services, tools and environment variables the project needs (names only, never secret values). -->
"""

NO_STACK: Final = (
    "<!-- No manifest found (package.json, Cargo.toml, go.mod, pyproject.toml, requirements.txt, composer.json, "
    "Gemfile, pom.xml, build.gradle): name the languages and frameworks here. -->"
)
NO_COMMANDS: Final = "<!-- How to install, build, test and run the project. -->"


@dataclass(frozen=True)
class Outcome:
    path: str  # relative to the project, e.g. "memory/project-context.md"
    status: Literal["created", "kept", "failed"]
    reason: str = ""  # why it failed


def render_project_context(stack: Stack) -> str:
    """`memory/project-context.md` for a detected stack: languages and frameworks, then the guessed commands."""
    title = f": {stack.name}" if stack.name else ""
    stack_lines = []
    for eco in stack.ecosystems:
        if eco.problem:
            stack_lines.append(f"- **{eco.language}** (`{eco.manifest}`): {eco.problem}; describe it by hand")
            continue
        facts = [f"`{eco.name}`"] if eco.name else []
        if eco.frameworks:
            facts.append(", ".join(eco.frameworks))
        facts.extend(eco.details)
        stack_lines.append(f"- **{eco.language}** (`{eco.manifest}`)" + (": " + "; ".join(facts) if facts else ""))
    commands = [f"- {what}: `{line}`" for eco in stack.ecosystems for what, line in eco.commands]
    languages = ", ".join(stack.languages)
    parts = [
        CONTEXT_HEAD.format(title=title),
        "## Stack\n",
        (f"Languages: {languages}.\n\n" if languages else "") + ("\n".join(stack_lines) or NO_STACK) + "\n",
        "## Commands\n",
        ("Guessed from the manifests; keep the ones that work.\n\n" + "\n".join(commands) if commands else NO_COMMANDS)
        + "\n",
        CONTEXT_TAIL,
    ]
    return "\n".join(parts)


def install_templates(project: Path, stack: Stack) -> list[Outcome]:
    """Create the missing starter files in `project`; an `OSError` on one file is reported, not raised."""
    root = Path(os.path.realpath(project))
    outcomes: list[Outcome] = []
    existing = next((name for name in ROOT_FILES if _exists(root, name)), None)
    if existing:
        outcomes.append(Outcome(existing, "kept"))
    else:
        outcomes.append(_create(root, "MEMORY.md", MEMORY_TEMPLATE))
    memory = root / "memory"
    if os.path.lexists(memory) and not Path(os.path.realpath(memory)).is_relative_to(root):
        outcomes.append(Outcome("memory/project-context.md", "failed", "memory/ links outside the project"))
        return outcomes
    try:
        memory.mkdir(exist_ok=True)
    except OSError as exc:
        outcomes.append(Outcome("memory/project-context.md", "failed", f"cannot create memory/: {exc.strerror}"))
        return outcomes
    outcomes.append(_create(root, "memory/project-context.md", render_project_context(stack)))
    return outcomes


def _exists(root: Path, name: str) -> bool:
    """By exact name: on a case-insensitive file system `memory.md` would otherwise answer for `MEMORY.md`."""
    try:
        return name in os.listdir(root)
    except OSError:
        return os.path.lexists(root / name)


def _create(root: Path, relpath: str, text: str) -> Outcome:
    try:
        with open(root / relpath, "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        return Outcome(relpath, "kept")
    except OSError as exc:
        return Outcome(relpath, "failed", exc.strerror or type(exc).__name__)
    return Outcome(relpath, "created")
