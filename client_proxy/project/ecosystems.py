"""What each language's manifest says: one detector per ecosystem (JavaScript, Rust, Go, Python, PHP, Ruby, Java),
pure, over the manifests `read_project_files` saw."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from client_proxy.project.manifests import (
    ProjectFiles,
    UnparsedError,
    clean,
    hints_of,
    json_of,
    keys_of,
    local_name,
    pairs,
    strings_of,
    table_of,
    text_of,
    toml_of,
    unparsed,
)


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


# JavaScript / TypeScript ---------------------------------------------------------------------------------------

_NODE_FRAMEWORKS = pairs(
    "next=Next.js, nuxt=Nuxt, @sveltejs/kit=SvelteKit, @remix-run/react=Remix, astro=Astro, react=React, "
    "react-native=React Native, vue=Vue, svelte=Svelte, @angular/core=Angular, solid-js=Solid, "
    "express=Express, fastify=Fastify, koa=Koa, @nestjs/core=NestJS, electron=Electron, vite=Vite, "
    "tailwindcss=Tailwind CSS, jest=Jest, vitest=Vitest, mocha=Mocha, @playwright/test=Playwright, "
    "eslint=ESLint, typescript=TypeScript"
)
_LOCKFILES = pairs("pnpm-lock.yaml=pnpm, yarn.lock=yarn, bun.lockb=bun, bun.lock=bun, package-lock.json=npm")
_NODE_SCRIPTS = ("build", "test", "lint", "typecheck", "dev")


def _node(files: ProjectFiles) -> Ecosystem | None:
    document = json_of(files, "package.json")
    if document is None:
        return None
    deps = keys_of(document, "dependencies", "devDependencies", "peerDependencies", "optionalDependencies")
    typescript = "typescript" in deps or "tsconfig.json" in files.present
    language = "TypeScript" if typescript else "JavaScript"
    manager, source = _node_manager(document, files)
    details = [f"package manager {manager}" + (f" ({source})" if source else "")]
    engines = document.get("engines")
    if isinstance(engines, dict) and (node := clean(engines.get("node"))):
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
        name=clean(document.get("name")),
        details=tuple(details),
        frameworks=hints_of(deps, _NODE_FRAMEWORKS),
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

_RUST_CRATES = pairs(
    "tokio=Tokio, axum=axum, actix-web=Actix Web, rocket=Rocket, warp=warp, tauri=Tauri, bevy=Bevy, "
    "clap=clap, serde=Serde, diesel=Diesel, sqlx=SQLx"
)


def _rust(files: ProjectFiles) -> Ecosystem | None:
    document = toml_of(files, "Cargo.toml")
    if document is None:
        return None
    package = table_of(document, "package")
    details = []
    if edition := clean(package.get("edition")):
        details.append(f"edition {edition}")
    if rust := clean(package.get("rust-version")):
        details.append(f"Rust {rust}")
    members = table_of(document, "workspace").get("members")
    if isinstance(members, list):
        details.append(f"workspace of {len(members)} members")
    deps = keys_of(document, "dependencies", "dev-dependencies") | keys_of(
        table_of(document, "workspace"), "dependencies"
    )
    return Ecosystem(
        "Rust",
        "Cargo.toml",
        name=clean(package.get("name")),
        details=tuple(details),
        frameworks=hints_of(deps, _RUST_CRATES),
        commands=(("build", "cargo build"), ("test", "cargo test"), ("lint", "cargo clippy")),
    )


# Go ----------------------------------------------------------------------------------------------------------

_GO_MODULES = pairs(
    "github.com/gin-gonic/gin=Gin, github.com/labstack/echo=Echo, github.com/gofiber/fiber=Fiber, "
    "github.com/go-chi/chi=chi, github.com/gorilla/mux=gorilla/mux, github.com/spf13/cobra=Cobra, "
    "google.golang.org/grpc=gRPC, gorm.io/gorm=GORM"
)
_GO_LINE = re.compile(r"^(module|go|toolchain)\s+(\S+)\s*$")


def _go(files: ProjectFiles) -> Ecosystem | None:
    text = text_of(files, "go.mod")
    if text is None:
        return None
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _GO_LINE.match(line.partition("//")[0].strip())
        if match:
            values.setdefault(match.group(1), match.group(2).strip('"`'))
    if "module" not in values:
        raise unparsed("go.mod", files, "no module line")
    details = [f"Go {go}"] if (go := clean(values.get("go"))) else []
    paths = {word for line in text.splitlines() for word in line.split()[:2] if "/" in word}
    frameworks = tuple(label for prefix, label in _GO_MODULES if any(p.startswith(prefix) for p in paths))
    return Ecosystem(
        "Go",
        "go.mod",
        name=clean(values["module"]),
        details=tuple(details),
        frameworks=frameworks,
        commands=(("build", "go build ./..."), ("test", "go test ./..."), ("lint", "go vet ./...")),
    )


# Python ------------------------------------------------------------------------------------------------------

_PY_PACKAGES = pairs(
    "django=Django, flask=Flask, fastapi=FastAPI, starlette=Starlette, pydantic=Pydantic, "
    "sqlalchemy=SQLAlchemy, celery=Celery, numpy=NumPy, pandas=pandas, torch=PyTorch, pytest=pytest"
)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _python(files: ProjectFiles) -> Ecosystem | None:
    document = toml_of(files, "pyproject.toml")
    try:
        requirements = text_of(files, "requirements.txt")
    except UnparsedError:
        if document is None:
            raise
        requirements = None  # pyproject.toml says enough
    if document is None and requirements is None and "setup.py" not in files.present:
        return None
    manifest = (
        "pyproject.toml" if document is not None else "requirements.txt" if requirements is not None else "setup.py"
    )
    document = document or {}
    project, tools = table_of(document, "project"), table_of(document, "tool")
    poetry = table_of(tools, "poetry")
    listed = strings_of(project.get("dependencies")) + (requirements or "").splitlines()
    for group in [
        *table_of(project, "optional-dependencies").values(),
        *table_of(document, "dependency-groups").values(),
    ]:
        listed += strings_of(group)
    deps = {_requirement_name(r) for r in listed} | {name.lower() for name in table_of(poetry, "dependencies")}
    details = []
    if version := clean(project.get("requires-python") or table_of(poetry, "dependencies").get("python")):
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
        name=clean(project.get("name") or poetry.get("name")),
        details=tuple(details),
        frameworks=hints_of(deps, _PY_PACKAGES),
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

_PHP_PACKAGES = pairs(
    "laravel/framework=Laravel, symfony/framework-bundle=Symfony, slim/slim=Slim, phpunit/phpunit=PHPUnit, "
    "pestphp/pest=Pest"
)


def _php(files: ProjectFiles) -> Ecosystem | None:
    document = json_of(files, "composer.json")
    if document is None:
        return None
    deps = keys_of(document, "require", "require-dev")
    require = document.get("require")
    php = clean(require.get("php")) if isinstance(require, dict) else None
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
        name=clean(document.get("name")),
        details=(f"PHP {php}",) if php else (),
        frameworks=hints_of(deps, _PHP_PACKAGES),
        commands=(("install", "composer install"), ("test", test)),
    )


# Ruby --------------------------------------------------------------------------------------------------------

_RUBY_GEMS = pairs("rails=Rails, sinatra=Sinatra, hanami=Hanami, rspec=RSpec, rspec-rails=RSpec, minitest=Minitest")
_GEM = re.compile(r"""^\s*gem\s+["']([^"']+)["']""")
_RUBY_VERSION = re.compile(r"""^\s*ruby\s+["']([^"']+)["']""")


def _ruby(files: ProjectFiles) -> Ecosystem | None:
    text = text_of(files, "Gemfile")
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
        details=(f"Ruby {clean(version)}",) if clean(version) else (),
        frameworks=hints_of(gems, _RUBY_GEMS),
        commands=(("install", "bundle install"), ("test", test)),
    )


# Java / Kotlin -----------------------------------------------------------------------------------------------

_JVM_HINTS = pairs(
    "org.springframework.boot=Spring Boot, io.quarkus=Quarkus, io.micronaut=Micronaut, "
    "com.android.application=Android, com.android.library=Android, junit-jupiter=JUnit 5, "
    "org.junit.jupiter=JUnit 5"
)
_JAVA_PROPERTIES = ("maven.compiler.release", "maven.compiler.source", "java.version")
_JAVA_VERSION = re.compile(r"(?:JavaVersion\.VERSION_|JavaLanguageVersion\.of\()\s*(\d+(?:_\d+)?)")
_ROOT_NAME = re.compile(r"""rootProject\.name\s*=\s*["']([^"']+)["']""")


def _maven(files: ProjectFiles) -> Ecosystem | None:
    text = text_of(files, "pom.xml")
    if text is None:
        return None
    if "<!DOCTYPE" in text or "<!ENTITY" in text:  # a POM has none; entities are how XML bombs work
        raise unparsed("pom.xml", files, "it declares a DOCTYPE")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise unparsed("pom.xml", files, str(exc)) from None
    if local_name(root.tag) != "project":
        raise unparsed("pom.xml", files, "no <project> root")
    top = {local_name(child.tag): child for child in root}
    properties = {local_name(p.tag): (p.text or "").strip() for p in top.get("properties", ())}
    java = next(filter(None, (properties.get(k) for k in _JAVA_PROPERTIES)), None)
    artifact = top.get("artifactId")
    coordinates = {(el.text or "").strip() for el in root.iter() if local_name(el.tag) in ("groupId", "artifactId")}
    kotlin = any(c.startswith("kotlin-") or c == "org.jetbrains.kotlin" for c in coordinates)
    mvn = "./mvnw" if "mvnw" in files.present else "mvn"
    return Ecosystem(
        "Kotlin" if kotlin else "Java",
        "pom.xml",
        name=clean(artifact.text) if artifact is not None else None,
        details=(f"Java {clean(java)}",) if clean(java) else (),
        frameworks=hints_of(coordinates, _JVM_HINTS),
        commands=(("build", f"{mvn} package"), ("test", f"{mvn} test")),
    )


def _gradle(files: ProjectFiles) -> Ecosystem | None:
    manifest = next((n for n in ("build.gradle.kts", "build.gradle") if n in files.present), None)
    if manifest is None:
        return None
    text = text_of(files, manifest) or ""
    kotlin = 'kotlin("' in text or "org.jetbrains.kotlin" in text
    settings = text_of(files, "settings.gradle.kts") or text_of(files, "settings.gradle") or ""
    name = _ROOT_NAME.search(settings)
    java = _JAVA_VERSION.search(text)
    gradle = "./gradlew" if "gradlew" in files.present else "gradle"
    return Ecosystem(
        "Kotlin" if kotlin else "Java",
        manifest,
        name=clean(name.group(1)) if name else None,
        details=(f"Java {java.group(1).replace('_', '.')}",) if java else (),
        frameworks=tuple(dict.fromkeys(label for key, label in _JVM_HINTS if key in text)),
        commands=(("build", f"{gradle} build"), ("test", f"{gradle} test")),
    )


# Each detector with the language named when its manifest cannot be parsed.
DETECTORS: tuple[tuple[Callable[[ProjectFiles], Ecosystem | None], str], ...] = (
    (_node, "JavaScript"),
    (_rust, "Rust"),
    (_go, "Go"),
    (_python, "Python"),
    (_php, "PHP"),
    (_ruby, "Ruby"),
    (_maven, "Java"),
    (_gradle, "Java"),
)
