"""Which languages, frameworks and commands a project uses, told from the manifests at its root.

`read_project_files` (`client_proxy.project.manifests`) is the only I/O. `detect_stack` is pure: it never raises on a
malformed manifest, it reports it as "could not be parsed". Used by `memory-proxy init` to seed
`memory/project-context.md`. The detectors are in `client_proxy.project.ecosystems`.
"""

from __future__ import annotations

from dataclasses import dataclass

from client_proxy.project.ecosystems import DETECTORS, Ecosystem
from client_proxy.project.manifests import (
    MANIFESTS,
    MARKERS,
    MAX_MANIFEST_BYTES,
    ProjectFiles,
    UnparsedError,
    read_project_files,
)

__all__ = [
    "MANIFESTS",
    "MARKERS",
    "MAX_MANIFEST_BYTES",
    "Ecosystem",
    "ProjectFiles",
    "Stack",
    "detect_stack",
    "read_project_files",
]


@dataclass(frozen=True)
class Stack:
    ecosystems: tuple[Ecosystem, ...] = ()

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.language for e in self.ecosystems))

    @property
    def name(self) -> str | None:
        return next((e.name for e in self.ecosystems if e.name), None)


def detect_stack(files: ProjectFiles) -> Stack:
    """Every ecosystem whose manifest is there, in the order of `MANIFESTS`."""
    found: list[Ecosystem] = []
    for detector, language in DETECTORS:
        try:
            ecosystem = detector(files)
        except UnparsedError as exc:  # the one place a malformed manifest becomes a report
            ecosystem = Ecosystem(language, exc.manifest, problem=str(exc))
        if ecosystem is not None:
            found.append(ecosystem)
    return Stack(tuple(found))
