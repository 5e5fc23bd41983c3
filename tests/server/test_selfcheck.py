"""`memory-server self-check`, the gate at the end of the image build: it passes on a complete installation and
names what is missing or broken otherwise."""

from __future__ import annotations

import io

import numpy as np
import pytest

from server.cli import selfcheck
from server.cli.main import main
from server.index.embeddings.select import EmbeddingSettings

SETTINGS = EmbeddingSettings()  # the defaults: what the server runs with nothing configured


@pytest.mark.model
def test_a_complete_installation_passes_every_check(local_embedder):
    out = io.StringIO()
    assert selfcheck.run(out, SETTINGS) == 0
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == [f"ok   {name}" for name in selfcheck.CHECKS]
    assert "channel, client_proxy, redaction, server" in lines[0]


def test_the_checked_packages_are_the_ones_the_distribution_ships():
    assert {"server", "channel", "client_proxy", "redaction"} <= set(selfcheck.first_party_packages())


def test_a_package_missing_from_the_installation_fails_the_imports_check_by_name(monkeypatch):
    monkeypatch.setattr(selfcheck, "first_party_packages", lambda distribution=None: ["server", "redaktion"])
    monkeypatch.setitem(selfcheck.CHECKS, "model", lambda _settings: "skipped here")
    out = io.StringIO()
    assert selfcheck.run(out, SETTINGS) == 1
    assert "FAIL imports: ModuleNotFoundError: No module named 'redaktion'" in out.getvalue()
    assert "ok   sqlite:" in out.getvalue()  # one failure does not hide the other checks


def test_the_entrypoint_module_of_every_console_script_is_loaded():
    assert "memory-server -> server.cli:main" in selfcheck.check_entry_points()


@pytest.mark.model
def test_a_model_that_no_longer_gives_its_reference_vectors_fails_the_model_check(local_embedder, monkeypatch):
    from server.index.embeddings import reference

    found = reference.recorded(local_embedder.model)
    assert "its reference vectors reproduced (cosine " in selfcheck.check_model(SETTINGS)
    moved = np.roll(found, 1, axis=0)  # each sentence given another's vector, as a model computing wrongly would
    monkeypatch.setattr(reference, "recorded", lambda model_id: moved)
    out = io.StringIO()
    assert selfcheck.run(out, SETTINGS) == 1
    assert f"FAIL model: EmbeddingUnavailableError: {local_embedder.model} embeds its reference" in out.getvalue()
    assert "this machine computes another model" in out.getvalue()


@pytest.mark.parametrize("named", ["--config", "MEMORY_CONFIG"])
def test_the_model_check_verifies_the_model_the_config_file_names(named, tmp_path, monkeypatch, capsys):
    import server.index.embeddings.local as local

    config = tmp_path / "memory-server.toml"
    config.write_text('local_model = "all-MiniLM-L6-v2"\n')
    config.chmod(0o600)
    for variable in ("MEMORY_CONFIG", "MEMORY_LOCAL_MODEL", "MEMORY_EMBEDDING_RUNTIME"):
        monkeypatch.delenv(variable, raising=False)
    built: dict[str, str] = {}

    def refuse(runtime: str, local: str) -> None:
        built.update(runtime=runtime, local=local)
        raise RuntimeError("not loaded in this test")

    monkeypatch.setattr(local, "LocalEmbedder", refuse)
    monkeypatch.setattr(selfcheck, "CHECKS", {"model": selfcheck.CHECKS["model"]})
    argv = ["self-check"]
    if named == "--config":
        argv = ["--config", str(config), *argv]
    else:
        monkeypatch.setenv("MEMORY_CONFIG", str(config))

    assert main(argv) == 1
    assert "FAIL model: RuntimeError: not loaded in this test" in capsys.readouterr().out
    assert built == {"runtime": "onnx", "local": "all-MiniLM-L6-v2"}
