"""The package boundaries of ARCHITECTURE section 2: laptops never get the server (or torch)."""

from __future__ import annotations

import ast
import re

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


# Which of the project's own packages each package may import: the table in docs/architecture.md ("Packages and
# what each may import"), which the tests below read and check the code against.
PROJECT = ("channel", "client_proxy", "redaction", "server", "syncproto")
_ROW = re.compile(r"^\| `(\w+)` \| .* \| (.*) \|$")


def _documented_imports() -> dict[str, set[str]]:
    text = (REPO / "docs" / "architecture.md").read_text("utf-8")
    section = text.split("## Packages and what each may import", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n\n")[2]  # the first table of the section
    rows = {}
    for line in table.splitlines():
        match = _ROW.match(line)
        if match:
            rows[match.group(1)] = set(re.findall(r"`(\w+)`", match.group(2)))
    return rows


MAY_IMPORT = _documented_imports()


def test_the_documented_table_names_every_package_once():
    assert sorted(MAY_IMPORT) == sorted(PROJECT)
    assert all(allowed <= set(PROJECT) for allowed in MAY_IMPORT.values())


@pytest.mark.parametrize("package", PROJECT)
def test_a_package_imports_only_the_project_packages_its_row_allows(package):
    offenders = {
        str(path.relative_to(REPO)): sorted((_imports(path) & set(PROJECT)) - MAY_IMPORT[package] - {package})
        for path in sorted((REPO / package).rglob("*.py"))
        if (_imports(path) & set(PROJECT)) - MAY_IMPORT[package] - {package}
    }
    assert offenders == {}


def test_the_sync_protocol_package_needs_nothing_but_the_standard_library():
    import sys

    outside = {
        str(path.relative_to(REPO)): sorted(_imports(path) - set(sys.stdlib_module_names) - {"syncproto", "__future__"})
        for path in sorted((REPO / "syncproto").rglob("*.py"))
        if _imports(path) - set(sys.stdlib_module_names) - {"syncproto", "__future__"}
    }
    assert outside == {}


def _module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its body (lazy imports inside functions too).
    `from package import name` counts as importing `package.name` when that is a module of its own."""
    modules = {_module_name(path): path for package in PROJECT for path in (REPO / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        [*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])]
                    )
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            graph[name].update(target for target in targets if target in modules and target != name)
    return graph


def test_no_module_imports_itself_through_a_circle():
    graph = _import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert circles == []


def test_outside_the_index_engine_errors_come_from_server_errors():
    graph = _import_graph()
    reaching_in = sorted(
        name
        for name, targets in graph.items()
        if "server.index.errors" in targets and not name.startswith(("server.index", "server.errors"))
    )
    assert reaching_in == []
