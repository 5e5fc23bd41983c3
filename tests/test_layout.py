"""The package boundaries of ARCHITECTURE section 2: laptops never get the server (or torch)."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO

FORBIDDEN = {
    "client_proxy": {"server", "torch", "sentence_transformers", "apsw", "sqlite_vec"},
    "channel": {"server", "client_proxy", "torch", "sentence_transformers"},
}


def _imports(path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_never_imports_what_its_side_must_not_have(package):
    sources = sorted((REPO / package).rglob("*.py"))
    assert sources, f"{package}/ has no modules"
    offenders = {
        str(path.relative_to(REPO)): sorted(_imports(path) & FORBIDDEN[package])
        for path in sources
        if _imports(path) & FORBIDDEN[package]
    }
    assert offenders == {}
