"""Which languages, frameworks and commands a project uses, told from the manifests at its root.

`read_project_files` is the only I/O: it reads at most `MAX_MANIFEST_BYTES` of each manifest in `MANIFESTS` and
notes which of `MARKERS` (lockfiles, wrappers) exist. `detect_stack` is pure: it never raises on a malformed
manifest, it reports it as "could not be parsed". Used by `memory-proxy init` to seed `memory/project-context.md`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

MAX_MANIFEST_BYTES: Final = 256 * 1024
# Read (at most MAX_MANIFEST_BYTES each), in the order their ecosystems are listed:
MANIFESTS: Final = tuple(
    "package.json Cargo.toml go.mod pyproject.toml requirements.txt composer.json Gemfile pom.xml build.gradle "
    "build.gradle.kts settings.gradle settings.gradle.kts".split()
)
# Only looked for (lockfiles, wrappers):
MARKERS: Final = tuple(
    "tsconfig.json package-lock.json pnpm-lock.yaml yarn.lock bun.lockb bun.lock uv.lock poetry.lock pdm.lock "
    "Pipfile setup.py mvnw gradlew".split()
)
_MAX_VALUE = 80  # a name or version taken from a manifest, as shown


@dataclass(frozen=True)
class ProjectFiles:
    """What `read_project_files` saw: manifest contents (maybe cut at the limit) and the names that exist."""

    contents: Mapping[str, bytes] = field(default_factory=dict)
    present: frozenset[str] = frozenset()
    truncated: frozenset[str] = frozenset()

    @classmethod
    def of(cls, files: Mapping[str, bytes | str], markers: Iterable[str] = ()) -> ProjectFiles:
        """For tests and callers holding the text already."""
        contents = {name: data.encode() if isinstance(data, str) else data for name, data in files.items()}
        return cls(contents, frozenset(contents) | frozenset(markers))


@dataclass(frozen=True)
class Ecosystem:
    """One language's manifest and what it says. `problem` is set when the manifest could not be read."""

    language: str
    manifest: str
    name: str | None = None
    details: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    commands: tuple[tuple[str, str], ...] = ()  # (what, command line), e.g. ("test", "npm test")
    problem: str | None = None


@dataclass(frozen=True)
class Stack:
    ecosystems: tuple[Ecosystem, ...] = ()

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.language for e in self.ecosystems))

    @property
    def name(self) -> str | None:
        return next((e.name for e in self.ecosystems if e.name), None)


def read_project_files(project: Path, limit: int = MAX_MANIFEST_BYTES) -> ProjectFiles:
    """The manifests at the root of `project`, each read up to `limit` bytes; unreadable ones are left out,
    and so is a symlink out of the project."""
    root = Path(os.path.realpath(project))
    contents: dict[str, bytes] = {}
    truncated: set[str] = set()
    for name in MANIFESTS:
        data = _read_regular(root, name, limit + 1)
        if data is not None:
            contents[name] = data[:limit]
            if len(data) > limit:
                truncated.add(name)
    present = {name for name in MARKERS if os.path.lexists(root / name)}
    return ProjectFiles(contents, frozenset(contents) | frozenset(present), frozenset(truncated))


def detect_stack(files: ProjectFiles) -> Stack:
    """Every ecosystem whose manifest is there, in the order of `MANIFESTS`."""
    found: list[Ecosystem] = []
    for detector, language in _DETECTORS:
        try:
            ecosystem = detector(files)
        except _Unparsed as exc:  # the one place a malformed manifest becomes a report
            ecosystem = Ecosystem(language, exc.manifest, problem=str(exc))
        if ecosystem is not None:
            found.append(ecosystem)
    return Stack(tuple(found))


def _pairs(spec: str) -> tuple[tuple[str, str], ...]:
    """`"a=A, b=B"` -> `(("a", "A"), ("b", "B"))`: the hint tables below, one line for several entries."""
    return tuple((key.strip(), label.strip()) for key, _, label in (item.partition("=") for item in spec.split(",")))


# JavaScript / TypeScript ---------------------------------------------------------------------------------------

_NODE_FRAMEWORKS = _pairs(
    "next=Next.js, nuxt=Nuxt, @sveltejs/kit=SvelteKit, @remix-run/react=Remix, astro=Astro, react=React, "
    "react-native=React Native, vue=Vue, svelte=Svelte, @angular/core=Angular, solid-js=Solid, "
    "express=Express, fastify=Fastify, koa=Koa, @nestjs/core=NestJS, electron=Electron, vite=Vite, "
    "tailwindcss=Tailwind CSS, jest=Jest, vitest=Vitest, mocha=Mocha, @playwright/test=Playwright, "
    "eslint=ESLint, typescript=TypeScript"
)
_LOCKFILES = _pairs("pnpm-lock.yaml=pnpm, yarn.lock=yarn, bun.lockb=bun, bun.lock=bun, package-lock.json=npm")
_NODE_SCRIPTS = ("build", "test", "lint", "typecheck", "dev")


def _node(files: ProjectFiles) -> Ecosystem | None:
    document = _json(files, "package.json")
    if document is None:
        return None
    deps = _keys(document, "dependencies", "devDependencies", "peerDependencies", "optionalDependencies")
    typescript = "typescript" in deps or "tsconfig.json" in files.present
    language = "TypeScript" if typescript else "JavaScript"
    manager, source = _node_manager(document, files)
    details = [f"package manager {manager}" + (f" ({source})" if source else "")]
    engines = document.get("engines")
    if isinstance(engines, dict) and (node := _clean(engines.get("node"))):
        details.append(f"Node {node}")
    scripts = document.get("scripts")
    scripts = scripts if isinstance(scripts, dict) else {}
    commands = [("install", f"{manager} install")]
    for script in _NODE_SCRIPTS:
        body = scripts.get(script)
        if isinstance(body, str) and "no test specified" not in body:  # npm init's placeholder test
            commands.append((script, _run_script(manager, script)))
    return Ecosystem(
        language,
        "package.json",
        name=_clean(document.get("name")),
        details=tuple(details),
        frameworks=_hints(deps, _NODE_FRAMEWORKS),
        commands=tuple(commands),
    )


def _node_manager(document: Mapping[str, object], files: ProjectFiles) -> tuple[str, str | None]:
    declared = document.get("packageManager")
    if isinstance(declared, str):
        tool = declared.partition("@")[0]
        if tool in ("npm", "pnpm", "yarn", "bun"):
            return tool, "packageManager"
    for lockfile, tool in _LOCKFILES:
        if lockfile in files.present:
            return tool, lockfile
    return "npm", None


def _run_script(manager: str, script: str) -> str:
    if script == "test" and manager != "bun":  # `bun test` is bun's own runner, not the script
        return f"{manager} test"
    if manager == "yarn":
        return f"yarn {script}"
    return f"{manager} run {script}"


# Rust --------------------------------------------------------------------------------------------------------

_RUST_CRATES = _pairs(
    "tokio=Tokio, axum=axum, actix-web=Actix Web, rocket=Rocket, warp=warp, tauri=Tauri, bevy=Bevy, "
    "clap=clap, serde=Serde, diesel=Diesel, sqlx=SQLx"
)


def _rust(files: ProjectFiles) -> Ecosystem | None:
    document = _toml(files, "Cargo.toml")
    if document is None:
        return None
    package = _table(document, "package")
    details = []
    if edition := _clean(package.get("edition")):
        details.append(f"edition {edition}")
    if rust := _clean(package.get("rust-version")):
        details.append(f"Rust {rust}")
    members = _table(document, "workspace").get("members")
    if isinstance(members, list):
        details.append(f"workspace of {len(members)} members")
    deps = _keys(document, "dependencies", "dev-dependencies") | _keys(_table(document, "workspace"), "dependencies")
    return Ecosystem(
        "Rust",
        "Cargo.toml",
        name=_clean(package.get("name")),
        details=tuple(details),
        frameworks=_hints(deps, _RUST_CRATES),
        commands=(("build", "cargo build"), ("test", "cargo test"), ("lint", "cargo clippy")),
    )


# Go ----------------------------------------------------------------------------------------------------------

_GO_MODULES = _pairs(
    "github.com/gin-gonic/gin=Gin, github.com/labstack/echo=Echo, github.com/gofiber/fiber=Fiber, "
    "github.com/go-chi/chi=chi, github.com/gorilla/mux=gorilla/mux, github.com/spf13/cobra=Cobra, "
    "google.golang.org/grpc=gRPC, gorm.io/gorm=GORM"
)
_GO_LINE = re.compile(r"^(module|go|toolchain)\s+(\S+)\s*$")


def _go(files: ProjectFiles) -> Ecosystem | None:
    text = _text(files, "go.mod")
    if text is None:
        return None
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _GO_LINE.match(line.partition("//")[0].strip())
        if match:
            values.setdefault(match.group(1), match.group(2).strip('"`'))
    if "module" not in values:
        raise _unparsed("go.mod", files, "no module line")
    details = [f"Go {go}"] if (go := _clean(values.get("go"))) else []
    paths = {word for line in text.splitlines() for word in line.split()[:2] if "/" in word}
    frameworks = tuple(label for prefix, label in _GO_MODULES if any(p.startswith(prefix) for p in paths))
    return Ecosystem(
        "Go",
        "go.mod",
        name=_clean(values["module"]),
        details=tuple(details),
        frameworks=frameworks,
        commands=(("build", "go build ./..."), ("test", "go test ./..."), ("lint", "go vet ./...")),
    )


# Python ------------------------------------------------------------------------------------------------------

_PY_PACKAGES = _pairs(
    "django=Django, flask=Flask, fastapi=FastAPI, starlette=Starlette, pydantic=Pydantic, "
    "sqlalchemy=SQLAlchemy, celery=Celery, numpy=NumPy, pandas=pandas, torch=PyTorch, pytest=pytest"
)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _python(files: ProjectFiles) -> Ecosystem | None:
    document = _toml(files, "pyproject.toml")
    try:
        requirements = _text(files, "requirements.txt")
    except _Unparsed:
        if document is None:
            raise
        requirements = None  # pyproject.toml says enough
    if document is None and requirements is None and "setup.py" not in files.present:
        return None
    manifest = (
        "pyproject.toml" if document is not None else "requirements.txt" if requirements is not None else "setup.py"
    )
    document = document or {}
    project, tools = _table(document, "project"), _table(document, "tool")
    poetry = _table(tools, "poetry")
    listed = _strings(project.get("dependencies")) + (requirements or "").splitlines()
    for group in [*_table(project, "optional-dependencies").values(), *_table(document, "dependency-groups").values()]:
        listed += _strings(group)
    deps = {_requirement_name(r) for r in listed} | {name.lower() for name in _table(poetry, "dependencies")}
    details = []
    if version := _clean(project.get("requires-python") or _table(poetry, "dependencies").get("python")):
        details.append(f"Python {version}")
    manager = _python_manager(files, bool(poetry))
    details.append(f"package manager {manager}")
    configured = [tool for tool in ("pytest", "ruff", "mypy", "black") if tool in tools or tool in deps]
    if configured:
        details.append("tools: " + ", ".join(configured))
    run = f"{manager} run " if manager != "pip" else ""
    install = {"uv": "uv sync", "pip": "pip install -e ."}.get(manager, f"{manager} install")
    if manifest == "requirements.txt" and manager == "pip":
        install = "pip install -r requirements.txt"
    commands = [("install", install), ("test", f"{run}pytest")]
    if "ruff" in configured:
        commands.append(("lint", f"{run}ruff check ."))
    if "mypy" in configured:
        commands.append(("typecheck", f"{run}mypy"))
    return Ecosystem(
        "Python",
        manifest,
        name=_clean(project.get("name") or poetry.get("name")),
        details=tuple(details),
        frameworks=_hints(deps, _PY_PACKAGES),
        commands=tuple(commands),
    )


def _python_manager(files: ProjectFiles, poetry: bool) -> str:
    if "uv.lock" in files.present:
        return "uv"
    if poetry or "poetry.lock" in files.present:
        return "poetry"
    if "pdm.lock" in files.present:
        return "pdm"
    if "Pipfile" in files.present:
        return "pipenv"
    return "pip"


def _requirement_name(requirement: str) -> str:
    """`Django>=5.0 ; python_version < "3.12"` -> `django`; "" for a comment or an option line (`-r base.txt`)."""
    match = _REQUIREMENT.match(requirement)
    return match.group(1).lower().replace("_", "-") if match else ""


# PHP ---------------------------------------------------------------------------------------------------------

_PHP_PACKAGES = _pairs(
    "laravel/framework=Laravel, symfony/framework-bundle=Symfony, slim/slim=Slim, phpunit/phpunit=PHPUnit, "
    "pestphp/pest=Pest"
)


def _php(files: ProjectFiles) -> Ecosystem | None:
    document = _json(files, "composer.json")
    if document is None:
        return None
    deps = _keys(document, "require", "require-dev")
    require = document.get("require")
    php = _clean(require.get("php")) if isinstance(require, dict) else None
    scripts = document.get("scripts")
    if isinstance(scripts, dict) and "test" in scripts:
        test = "composer test"
    elif "laravel/framework" in deps:
        test = "php artisan test"
    elif "pestphp/pest" in deps:
        test = "vendor/bin/pest"
    else:
        test = "vendor/bin/phpunit"
    return Ecosystem(
        "PHP",
        "composer.json",
        name=_clean(document.get("name")),
        details=(f"PHP {php}",) if php else (),
        frameworks=_hints(deps, _PHP_PACKAGES),
        commands=(("install", "composer install"), ("test", test)),
    )


# Ruby --------------------------------------------------------------------------------------------------------

_RUBY_GEMS = _pairs("rails=Rails, sinatra=Sinatra, hanami=Hanami, rspec=RSpec, rspec-rails=RSpec, minitest=Minitest")
_GEM = re.compile(r"""^\s*gem\s+["']([^"']+)["']""")
_RUBY_VERSION = re.compile(r"""^\s*ruby\s+["']([^"']+)["']""")


def _ruby(files: ProjectFiles) -> Ecosystem | None:
    text = _text(files, "Gemfile")
    if text is None:
        return None
    gems = {m.group(1) for line in text.splitlines() if (m := _GEM.match(line))}
    version = next((m.group(1) for line in text.splitlines() if (m := _RUBY_VERSION.match(line))), None)
    if "rspec" in gems or "rspec-rails" in gems:
        test = "bundle exec rspec"
    elif "rails" in gems:
        test = "bin/rails test"
    else:
        test = "bundle exec rake test"
    return Ecosystem(
        "Ruby",
        "Gemfile",
        details=(f"Ruby {_clean(version)}",) if _clean(version) else (),
        frameworks=_hints(gems, _RUBY_GEMS),
        commands=(("install", "bundle install"), ("test", test)),
    )


# Java / Kotlin -----------------------------------------------------------------------------------------------

_JVM_HINTS = _pairs(
    "org.springframework.boot=Spring Boot, io.quarkus=Quarkus, io.micronaut=Micronaut, "
    "com.android.application=Android, com.android.library=Android, junit-jupiter=JUnit 5, "
    "org.junit.jupiter=JUnit 5"
)
_JAVA_PROPERTIES = ("maven.compiler.release", "maven.compiler.source", "java.version")
_JAVA_VERSION = re.compile(r"(?:JavaVersion\.VERSION_|JavaLanguageVersion\.of\()\s*(\d+(?:_\d+)?)")
_ROOT_NAME = re.compile(r"""rootProject\.name\s*=\s*["']([^"']+)["']""")


def _maven(files: ProjectFiles) -> Ecosystem | None:
    text = _text(files, "pom.xml")
    if text is None:
        return None
    if "<!DOCTYPE" in text or "<!ENTITY" in text:  # a POM has none; entities are how XML bombs work
        raise _unparsed("pom.xml", files, "it declares a DOCTYPE")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise _unparsed("pom.xml", files, str(exc)) from None
    if _local(root.tag) != "project":
        raise _unparsed("pom.xml", files, "no <project> root")
    top = {_local(child.tag): child for child in root}
    properties = {_local(p.tag): (p.text or "").strip() for p in top.get("properties", ())}
    java = next(filter(None, (properties.get(k) for k in _JAVA_PROPERTIES)), None)
    artifact = top.get("artifactId")
    coordinates = {(el.text or "").strip() for el in root.iter() if _local(el.tag) in ("groupId", "artifactId")}
    kotlin = any(c.startswith("kotlin-") or c == "org.jetbrains.kotlin" for c in coordinates)
    mvn = "./mvnw" if "mvnw" in files.present else "mvn"
    return Ecosystem(
        "Kotlin" if kotlin else "Java",
        "pom.xml",
        name=_clean(artifact.text) if artifact is not None else None,
        details=(f"Java {_clean(java)}",) if _clean(java) else (),
        frameworks=_hints(coordinates, _JVM_HINTS),
        commands=(("build", f"{mvn} package"), ("test", f"{mvn} test")),
    )


def _gradle(files: ProjectFiles) -> Ecosystem | None:
    manifest = next((n for n in ("build.gradle.kts", "build.gradle") if n in files.contents), None)
    if manifest is None:
        return None
    text = _text(files, manifest) or ""
    kotlin = 'kotlin("' in text or "org.jetbrains.kotlin" in text
    settings = _text(files, "settings.gradle.kts") or _text(files, "settings.gradle") or ""
    name = _ROOT_NAME.search(settings)
    java = _JAVA_VERSION.search(text)
    gradle = "./gradlew" if "gradlew" in files.present else "gradle"
    return Ecosystem(
        "Kotlin" if kotlin else "Java",
        manifest,
        name=_clean(name.group(1)) if name else None,
        details=(f"Java {java.group(1).replace('_', '.')}",) if java else (),
        frameworks=tuple(dict.fromkeys(label for key, label in _JVM_HINTS if key in text)),
        commands=(("build", f"{gradle} build"), ("test", f"{gradle} test")),
    )


# Each detector with the language named when its manifest cannot be parsed.
_DETECTORS: tuple[tuple[Callable[[ProjectFiles], Ecosystem | None], str], ...] = (
    (_node, "JavaScript"),
    (_rust, "Rust"),
    (_go, "Go"),
    (_python, "Python"),
    (_php, "PHP"),
    (_ruby, "Ruby"),
    (_maven, "Java"),
    (_gradle, "Java"),
)


# helpers -----------------------------------------------------------------------------------------------------


class _Unparsed(Exception):
    """A manifest that is there but does not parse; `detect_stack` turns it into `Ecosystem.problem`."""

    def __init__(self, manifest: str, reason: str) -> None:
        super().__init__(reason)
        self.manifest = manifest


def _unparsed(name: str, files: ProjectFiles, why: str) -> _Unparsed:
    cut = f"; only its first {MAX_MANIFEST_BYTES // 1024} KiB were read" if name in files.truncated else ""
    return _Unparsed(name, f"{name} could not be parsed ({why[:120]}{cut})")


def _text(files: ProjectFiles, name: str) -> str | None:
    data = files.contents.get(name)
    if data is None:
        return None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise _unparsed(name, files, "not UTF-8") from None


def _json(files: ProjectFiles, name: str) -> dict[str, object] | None:
    text = _text(files, name)
    if text is None:
        return None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _unparsed(name, files, str(exc)) from None
    if not isinstance(document, dict):
        raise _unparsed(name, files, "not a JSON object")
    return document


def _toml(files: ProjectFiles, name: str) -> dict[str, object] | None:
    text = _text(files, name)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise _unparsed(name, files, str(exc)) from None


def _table(document: Mapping[str, object], key: str) -> dict[str, object]:
    value = document.get(key)
    return value if isinstance(value, dict) else {}


def _keys(document: Mapping[str, object], *tables: str) -> set[str]:
    return {str(name).lower() for table in tables for name in _table(document, table)}


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _hints(names: set[str], table: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(label for key, label in table if key in names))


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _clean(value: object) -> str | None:
    """A manifest's value as one short line of printable text, safe inside markdown inline code; else None."""
    if not isinstance(value, str):
        return None
    text = "".join(ch for ch in value if ch.isprintable()).replace("`", "'").strip()
    return text[:_MAX_VALUE] or None


def _read_regular(root: Path, name: str, limit: int) -> bytes | None:
    """Up to `limit` bytes of a regular file in `root`; None when missing, not regular, unreadable or a symlink out
    of `root` (and a FIFO must not hang)."""
    real = os.path.realpath(root / name)
    if not Path(real).is_relative_to(root):
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder with an error
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)
