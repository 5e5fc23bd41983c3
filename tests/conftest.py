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
    "tests/server/test_server_cli.py",
    "tests/e2e/test_sync_proxy.py",
    "tests/e2e/test_sync_e2e.py",
    "tests/e2e/test_history_e2e.py",
    "tests/e2e/test_transcripts_e2e.py",
    "tests/e2e/test_proxy_product.py",
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
    "tests/server/index/test_onnx_runtime.py::test_a_server_process_embeds_without_importing_torch",
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
    "tests/server/test_merge.py::test_a_file_of_thousands_of_lines_merges_quickly",
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
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.nodeid.split("[", 1)[0]
        if "local_embedder" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)
        if any(where == entry or where.startswith(entry + "::") for entry in SUBPROCESS):
            item.add_marker(pytest.mark.subprocess)
        if any(where == entry or where.startswith(entry + "::") for entry in SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def local_embedder() -> Iterator[object]:
    """The real all-MiniLM-L6-v2, loaded once for every test that needs it."""
    from server.index.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder()
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
