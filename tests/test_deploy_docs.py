"""docs/deploy.md stays true where that is cheap to check: its commands parse, its config file and compose
snippets are accepted, its variables and metrics exist, and the README's configuration table names every setting."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from client_proxy.cli import build_parser as proxy_parser
from server.cli.main import build_parser as server_parser
from server.memory.service import MemoryService
from server.observe.metrics import sessions_collector
from server.observe.metrics_app import service_metrics
from server.settings import CONFIG_VARIABLE, VARIABLES, Settings
from tests.conftest import REPO

DOC = (REPO / "docs" / "deploy.md").read_text()
README = (REPO / "README.md").read_text()
OURS = {"memory-server": "server", "memory-admin": "server", "memory-proxy": "proxy"}


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.S)


def commands() -> list[tuple[str, list[str], bool]]:
    """(program, arguments, whole) of every `memory-server`, `memory-admin` and `memory-proxy` run in the shell
    blocks (whole commands) and inline code (maybe shortened: `memory-proxy init`), also through
    `docker compose exec` and `docker compose run --entrypoint`."""
    found = []
    lines = [(line, True) for block in blocks("sh") for line in block.splitlines()]
    spans = re.findall(r"`([^`\n]+)`", DOC)
    ours = [
        span for span in spans if (span.split(" ")[0] in OURS or span.startswith("docker compose ")) and " " in span
    ]
    lines += [(span, False) for span in ours if "..." not in span]
    for line, whole in lines:
        for part in line.split("&&"):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue  # the Python of a heredoc
            while words and re.fullmatch(r"\w+=\S*", words[0]):
                words = words[1:]  # VAR=value before the command
            if words[:3] in (["docker", "compose", "exec"], ["docker", "compose", "run"]):
                program, rest = None, words[3:]
                while rest and rest[0].startswith("-"):
                    option, rest = rest[0], rest[1:]
                    if option == "--entrypoint":
                        program, rest = rest[0], rest[1:]
                service, words = rest[0], rest[1:]
                assert service == "memory-server", line
                words = [program, *words] if program else words
            if words and words[0] in OURS:
                found.append((words[0], words[1:], whole))
    return found


def test_the_guide_names_commands_of_every_kind():
    seen = {(program, args[0] if args and not args[0].startswith("-") else "") for program, args, _ in commands()}
    for expected in ("keys", "callers", "config", "index"):
        assert any(program in ("memory-server", "memory-admin") and sub == expected for program, sub in seen)
    assert ("memory-proxy", "init") in seen and ("memory-proxy", "show") in seen


def _id(value: object) -> str:
    return " ".join(value) if isinstance(value, list) else "" if isinstance(value, bool) else str(value)


@pytest.mark.parametrize(("program", "args", "whole"), commands(), ids=_id)
def test_every_command_in_the_guide_parses(program, args, whole, capsys):
    """A whole command parses; a shortened one names commands and options that exist (with `--help` added,
    argparse stops at the help of the deepest command it reached, before asking for required arguments)."""
    parser = server_parser(Settings()) if OURS[program] == "server" else proxy_parser()
    try:
        parser.parse_args(args if whole else [*args, "--help"])
    except SystemExit as exit:
        if exit.code != 0:
            pytest.fail(f"`{program} {' '.join(args)}` does not parse: {capsys.readouterr().err}")


def test_the_config_file_example_is_accepted(tmp_path):
    (example,) = blocks("toml")
    path = tmp_path / "memory-server.toml"
    path.write_text(example)
    settings = Settings.from_env({}, config_file=path)
    assert settings.log_format == "json" and settings.metrics_port == 9100
    assert {key for key, origin in settings.origins.items() if origin == "file"} == {
        line.split("=")[0].strip() for line in example.splitlines() if "=" in line and not line.startswith("#")
    }


def test_the_compose_snippet_is_valid_beside_compose_yaml(tmp_path):
    (override,) = blocks("yaml")
    services = yaml.safe_load(override)["services"]
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    for service in services.values():
        assert service["network_mode"].removeprefix("service:") in compose["services"]
    (tmp_path / "compose.override.yaml").write_text(override)
    checker = Path(sys.executable).parent / "check-jsonschema"
    args = [str(checker), "--builtin-schema", "vendor.compose-spec", str(tmp_path / "compose.override.yaml")]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_what_the_guide_says_about_compose_matches_compose_yaml():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    service = compose["services"]["memory-server"]
    passed = {name for name, value in service["environment"].items() if str(value).endswith(":-}")}
    sentence = re.search(r"compose itself passes only\s+(.*?)\s+\(each only when set", DOC, flags=re.S)
    assert sentence and set(re.findall(r"`(\w+)`", sentence.group(1))) == passed
    assert "./keys:/keys:ro" in service["volumes"] and service["cap_drop"] == ["ALL"]
    assert "# - ./config:/config:ro" in (REPO / "compose.yaml").read_text()
    assert "name" not in compose  # docker-compose 1.29 refuses a top-level name: the folder names the project
    assert "`memory_memory-data` in a folder named `memory`" in DOC and "memory-data" in compose["volumes"]


def test_every_variable_the_guide_names_exists():
    compose_variables = set(re.findall(r"\$\{(\w+)", (REPO / "compose.yaml").read_text()))
    proxy_variables = {"MEMORY_PROXY_HOME"}
    scripts = (REPO / "scripts" / "container").iterdir()
    build_variables = {name for script in scripts for name in re.findall(r"\bMEMORY_[A-Z_]+", script.read_text())}
    known = set(VARIABLES) | {CONFIG_VARIABLE} | compose_variables | proxy_variables | build_variables
    named = set(re.findall(r"\b(?:MEMORY|VOYAGE|OPENAI)_[A-Z_]+\b", DOC))
    assert named and named <= known, named - known


def test_every_metric_the_guide_names_is_exported(tmp_path):
    service = MemoryService(tmp_path, None)
    metrics = service_metrics(service)
    metrics.collectors.append(sessions_collector(lambda: 0))
    exported = {family.name for family in metrics.families(lambda _index: True)}
    service.close()
    section = DOC[DOC.index("## Metrics") : DOC.index("## Logs")]
    named = set(re.findall(r"`(memory_[a-z_]+)`", section)) | set(
        re.findall(r"`(memory_\w+_(?:total|seconds|bytes))`", DOC)
    )
    assert named and named <= exported, named - exported
    table = DOC[DOC.index("| metric | what |") :]
    assert exported <= set(re.findall(r"`(memory_[a-z_]+)`", table)), exported - set(table.split("`"))


def test_the_readme_configuration_table_names_every_setting_and_the_guide_links_resolve():
    section = README[README.index("## Configuration") : README.index("## How search works")]
    for variable in (*VARIABLES, CONFIG_VARIABLE):
        assert f"`{variable}`" in section, variable
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", README, re.M)}
    for anchor in re.findall(r"\(\.\./README\.md#([\w-]+)\)", DOC):
        assert anchor in headings
    assert "[docs/deploy.md](docs/deploy.md)" in section
