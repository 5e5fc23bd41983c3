"""Stack detection from a project's manifests (`client_proxy.project.stack`) and the project-context page it seeds."""

from __future__ import annotations

import json
import os

import pytest

from client_proxy.project.stack import (
    MAX_MANIFEST_BYTES,
    Ecosystem,
    ProjectFiles,
    Stack,
    detect_stack,
    read_project_files,
)
from client_proxy.project.templates import render_project_context


def detect(files: dict[str, str | bytes], *markers: str) -> tuple[Ecosystem, ...]:
    return detect_stack(ProjectFiles.of(files, markers)).ecosystems


def only(files: dict[str, str | bytes], *markers: str) -> Ecosystem:
    (ecosystem,) = detect(files, *markers)
    return ecosystem


def commands(ecosystem: Ecosystem) -> dict[str, str]:
    return dict(ecosystem.commands)


# JavaScript / TypeScript ---------------------------------------------------------------------------------------


PACKAGE_JSON = {
    "name": "web-app",
    "engines": {"node": ">=20"},
    "scripts": {"build": "next build", "test": "vitest run", "lint": "eslint ."},
    "dependencies": {"next": "15.0.0", "react": "19.0.0"},
    "devDependencies": {"typescript": "5.6.0", "vitest": "2.0.0"},
}


def test_package_json_gives_the_name_frameworks_and_scripts():
    eco = only({"package.json": json.dumps(PACKAGE_JSON)}, "pnpm-lock.yaml")
    assert (eco.language, eco.manifest, eco.name) == ("TypeScript", "package.json", "web-app")
    assert eco.frameworks == ("Next.js", "React", "Vitest", "TypeScript")
    assert eco.details == ("package manager pnpm (pnpm-lock.yaml)", "Node >=20")
    assert commands(eco) == {
        "install": "pnpm install",
        "build": "pnpm run build",
        "test": "pnpm test",
        "lint": "pnpm run lint",
    }


@pytest.mark.parametrize(
    ("markers", "declared", "manager", "test"),
    [
        ((), None, "npm", "npm test"),
        (("package-lock.json",), None, "npm", "npm test"),
        (("yarn.lock",), None, "yarn", "yarn test"),
        (("bun.lockb",), None, "bun", "bun run test"),
        (("package-lock.json",), "pnpm@9.12.0", "pnpm", "pnpm test"),
    ],
)
def test_the_package_manager_comes_from_package_manager_else_the_lockfile(markers, declared, manager, test):
    document = {"name": "x", "scripts": {"test": "jest"}, **({"packageManager": declared} if declared else {})}
    eco = only({"package.json": json.dumps(document)}, *markers)
    assert eco.details[0].startswith(f"package manager {manager}") and commands(eco)["test"] == test


def test_plain_javascript_without_typescript_and_npm_inits_placeholder_test_is_not_a_command():
    document = {"name": "api", "dependencies": {"express": "4"}, "scripts": {"test": 'echo "Error: no test specified"'}}
    eco = only({"package.json": json.dumps(document)})
    assert eco.language == "JavaScript" and eco.frameworks == ("Express",)
    assert commands(eco) == {"install": "npm install"}


def test_a_tsconfig_makes_it_typescript_and_vue_and_svelte_are_named():
    document = {"dependencies": {"vue": "3", "svelte": "4"}}
    eco = only({"package.json": json.dumps(document)}, "tsconfig.json")
    assert eco.language == "TypeScript" and eco.frameworks == ("Vue", "Svelte") and eco.name is None


# Rust, Go ------------------------------------------------------------------------------------------------------


def test_cargo_toml_gives_the_package_name_and_edition():
    cargo = '[package]\nname = "fastgrep"\nedition = "2021"\n\n[dependencies]\ntokio = "1"\nclap = "4"\n'
    eco = only({"Cargo.toml": cargo})
    assert (eco.language, eco.name, eco.details) == ("Rust", "fastgrep", ("edition 2021",))
    assert eco.frameworks == ("Tokio", "clap") and commands(eco)["test"] == "cargo test"


def test_a_cargo_workspace_counts_its_members():
    eco = only({"Cargo.toml": '[workspace]\nmembers = ["a", "b", "c"]\n'})
    assert eco.name is None and eco.details == ("workspace of 3 members",)


def test_go_mod_gives_the_module_and_go_version():
    go_mod = (
        "// the service\nmodule github.com/acme/service\n\ngo 1.22\n\n"
        "require (\n\tgithub.com/gin-gonic/gin v1.10.0\n\tgithub.com/spf13/cobra v1.8.0 // indirect\n)\n"
    )
    eco = only({"go.mod": go_mod})
    assert (eco.language, eco.name, eco.details) == ("Go", "github.com/acme/service", ("Go 1.22",))
    assert eco.frameworks == ("Gin", "Cobra")
    assert commands(eco) == {"build": "go build ./...", "test": "go test ./...", "lint": "go vet ./..."}


# Python --------------------------------------------------------------------------------------------------------


def test_pyproject_gives_the_name_python_version_frameworks_and_tools():
    pyproject = (
        '[project]\nname = "shop"\nrequires-python = ">=3.12"\ndependencies = ["Django>=5.0", "celery[redis]"]\n'
        '[project.optional-dependencies]\ndev = ["pytest", "ruff"]\n[tool.mypy]\nstrict = true\n'
    )
    eco = only({"pyproject.toml": pyproject}, "uv.lock")
    assert (eco.language, eco.manifest, eco.name) == ("Python", "pyproject.toml", "shop")
    assert eco.frameworks == ("Django", "Celery", "pytest")
    assert eco.details == ("Python >=3.12", "package manager uv", "tools: pytest, ruff, mypy")
    assert commands(eco) == {
        "install": "uv sync",
        "test": "uv run pytest",
        "lint": "uv run ruff check .",
        "typecheck": "uv run mypy",
    }


def test_a_poetry_project_is_read_from_tool_poetry():
    pyproject = '[tool.poetry]\nname = "legacy"\n[tool.poetry.dependencies]\npython = "^3.10"\nFlask = "^3"\n'
    eco = only({"pyproject.toml": pyproject})
    assert (eco.name, eco.frameworks) == ("legacy", ("Flask",))
    assert eco.details[:2] == ("Python ^3.10", "package manager poetry")
    assert commands(eco)["test"] == "poetry run pytest"


def test_requirements_txt_alone_is_a_python_project():
    requirements = "# web\nfastapi==0.115\n-r base.txt\npydantic_settings\n"
    eco = only({"requirements.txt": requirements})
    assert (eco.manifest, eco.frameworks) == ("requirements.txt", ("FastAPI",))
    assert commands(eco) == {"install": "pip install -r requirements.txt", "test": "pytest"}


def test_setup_py_alone_is_a_python_project():
    eco = only({}, "setup.py")
    assert (eco.language, eco.manifest, commands(eco)["install"]) == ("Python", "setup.py", "pip install -e .")


# PHP, Ruby, Java -----------------------------------------------------------------------------------------------


def test_composer_json_gives_the_name_php_version_and_framework():
    composer = {"name": "acme/blog", "require": {"php": "^8.2", "laravel/framework": "^11"}}
    eco = only({"composer.json": json.dumps(composer)})
    assert (eco.language, eco.name, eco.details, eco.frameworks) == ("PHP", "acme/blog", ("PHP ^8.2",), ("Laravel",))
    assert commands(eco) == {"install": "composer install", "test": "php artisan test"}


def test_gemfile_gives_the_ruby_version_and_gems():
    gemfile = (
        'source "https://rubygems.org"\nruby "3.3.0"\ngem "rails", "~> 7.1"\n'
        "group :test do\n  gem 'rspec-rails'\nend\n"
    )
    eco = only({"Gemfile": gemfile})
    assert (eco.language, eco.details, eco.frameworks) == ("Ruby", ("Ruby 3.3.0",), ("Rails", "RSpec"))
    assert commands(eco)["test"] == "bundle exec rspec"


POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <parent><groupId>org.springframework.boot</groupId><artifactId>spring-boot-starter-parent</artifactId></parent>
  <groupId>com.acme</groupId>
  <artifactId>orders</artifactId>
  <properties><java.version>21</java.version></properties>
</project>
"""


def test_pom_xml_gives_the_artifact_java_version_and_spring_boot():
    eco = only({"pom.xml": POM}, "mvnw")
    assert (eco.language, eco.name, eco.details, eco.frameworks) == ("Java", "orders", ("Java 21",), ("Spring Boot",))
    assert commands(eco) == {"build": "./mvnw package", "test": "./mvnw test"}


def test_a_kotlin_gradle_build_gives_the_root_project_name():
    build = 'plugins {\n    kotlin("jvm") version "2.0.0"\n}\nkotlin { jvmToolchain(17) }\n'
    settings = 'rootProject.name = "ktapp"\n'
    eco = only({"build.gradle.kts": build, "settings.gradle.kts": settings}, "gradlew")
    assert (eco.language, eco.manifest, eco.name) == ("Kotlin", "build.gradle.kts", "ktapp")
    assert commands(eco) == {"build": "./gradlew build", "test": "./gradlew test"}


def test_a_groovy_gradle_build_for_java():
    build = "plugins { id 'java' }\njava { toolchain { languageVersion = JavaLanguageVersion.of(17) } }\n"
    eco = only({"build.gradle": build})
    assert (eco.language, eco.details, commands(eco)["test"]) == ("Java", ("Java 17",), "gradle test")


# several, none, malformed --------------------------------------------------------------------------------------


def test_a_polyglot_project_lists_every_ecosystem_in_a_fixed_order():
    stack = detect_stack(
        ProjectFiles.of({"pyproject.toml": '[project]\nname = "backend"\n', "package.json": '{"name": "frontend"}'})
    )
    assert [e.manifest for e in stack.ecosystems] == ["package.json", "pyproject.toml"]
    assert stack.languages == ("JavaScript", "Python") and stack.name == "frontend"


def test_no_manifest_means_an_empty_stack():
    assert detect_stack(ProjectFiles.of({"README.md": "hi"})) == Stack()


@pytest.mark.parametrize(
    ("manifest", "text", "language"),
    [
        ("package.json", '{"name": "broken",', "JavaScript"),
        ("package.json", "[1, 2]", "JavaScript"),
        ("package.json", b"\xff\xfe{}", "JavaScript"),
        ("Cargo.toml", "[package\nname = 1", "Rust"),
        ("go.mod", "this is not a go.mod\n", "Go"),
        ("pyproject.toml", "[project]\nname = ", "Python"),
        ("composer.json", "{'single': 'quotes'}", "PHP"),
        ("Gemfile", b"gem '\xff'", "Ruby"),
        ("pom.xml", "<project><artifactId>x</project>", "Java"),
        ("pom.xml", "<notaproject/>", "Java"),
        ("pom.xml", '<!DOCTYPE lolz [<!ENTITY lol "lol">]><project>&lol;</project>', "Java"),
        ("package.json", "[" * 100_000, "JavaScript"),
    ],
)
def test_a_malformed_manifest_is_reported_not_raised(manifest, text, language):
    eco = only({manifest: text})
    assert (eco.language, eco.manifest) == (language, manifest)
    assert eco.problem is not None and eco.problem.startswith(f"{manifest} could not be parsed (")
    assert eco.commands == () and eco.name is None


def test_a_malformed_manifest_does_not_hide_the_others():
    ecosystems = detect({"package.json": "{oops", "go.mod": "module example.com/ok\n"})
    assert [(e.manifest, e.problem is None) for e in ecosystems] == [("package.json", False), ("go.mod", True)]


def test_a_broken_requirements_txt_beside_a_good_pyproject_is_ignored():
    eco = only({"pyproject.toml": '[project]\nname = "ok"\n', "requirements.txt": b"\xff\xff"})
    assert eco.problem is None and eco.name == "ok"


def test_wrong_types_in_a_manifest_are_ignored_not_fatal():
    document = {"name": 42, "scripts": ["test"], "dependencies": "react", "engines": {"node": 20}}
    eco = only({"package.json": json.dumps(document)})
    assert (
        eco.problem is None
        and eco.name is None
        and eco.frameworks == ()
        and commands(eco) == {"install": "npm install"}
    )


def test_names_from_manifests_are_one_short_line_without_backticks():
    document = {"name": "evil`\n## injected heading\n" + "x" * 200}
    eco = only({"package.json": json.dumps(document)})
    assert eco.name is not None and "\n" not in eco.name and "`" not in eco.name and len(eco.name) <= 80


# reading the files ---------------------------------------------------------------------------------------------


def test_reading_takes_manifests_and_markers_from_the_project_root(tmp_path):
    (tmp_path / "package.json").write_text('{"name": "site"}')
    (tmp_path / "yarn.lock").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "Cargo.toml").write_text('[package]\nname = "deep"\n')
    files = read_project_files(tmp_path)
    assert set(files.contents) == {"package.json"} and files.present == {"package.json", "yarn.lock"}
    assert only_of(files).details[0] == "package manager yarn (yarn.lock)"


def only_of(files: ProjectFiles) -> Ecosystem:
    (ecosystem,) = detect_stack(files).ecosystems
    return ecosystem


def test_reading_is_bounded_and_a_cut_manifest_says_so(tmp_path):
    (tmp_path / "package.json").write_text(json.dumps({"name": "big", "x": "y" * MAX_MANIFEST_BYTES}))
    files = read_project_files(tmp_path)
    assert len(files.contents["package.json"]) == MAX_MANIFEST_BYTES and files.truncated == {"package.json"}
    problem = only_of(files).problem
    assert problem is not None and f"only its first {MAX_MANIFEST_BYTES // 1024} KiB were read" in problem


def test_a_manifest_linked_out_of_the_project_is_not_read(tmp_path):
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (outside / "package.json").write_text('{"name": "not-ours"}')
    (project / "package.json").symlink_to(outside / "package.json")
    assert read_project_files(project).contents == {}


def test_a_fifo_or_folder_named_like_a_manifest_is_skipped_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "go.mod")
    (tmp_path / "Cargo.toml").mkdir()
    assert read_project_files(tmp_path).contents == {}


# the project-context page --------------------------------------------------------------------------------------


def test_the_project_context_lists_languages_and_guessed_commands():
    stack = detect_stack(ProjectFiles.of({"package.json": json.dumps(PACKAGE_JSON), "go.mod": "module x.io/y\n"}))
    page = render_project_context(stack)
    assert page.startswith("# Project context: web-app\n")
    assert "Languages: TypeScript, Go." in page
    assert "- **TypeScript** (`package.json`): `web-app`; Next.js, React, Vitest, TypeScript; " in page
    assert "- test: `pnpm test`" not in page and "- test: `npm test`" in page  # no lockfile given: npm
    assert "- test: `go test ./...`" in page
    assert page.index("## Stack") < page.index("## Commands") < page.index("## Layout") < page.index("## Environment")


def test_the_project_context_without_a_manifest_asks_for_the_stack():
    page = render_project_context(Stack())
    assert page.startswith("# Project context\n") and "No manifest found" in page and "How to install" in page


def test_the_project_context_says_which_manifest_could_not_be_parsed():
    page = render_project_context(detect_stack(ProjectFiles.of({"Cargo.toml": "[["})))
    assert "- **Rust** (`Cargo.toml`): Cargo.toml could not be parsed (" in page
