"""`memory-server self-check`, the gate at the end of the image build: it passes on a complete installation and
names what is missing or broken otherwise."""

from __future__ import annotations

import io

import numpy as np
import pytest

from server.cli import selfcheck


@pytest.mark.model
def test_a_complete_installation_passes_every_check(local_embedder):
    out = io.StringIO()
    assert selfcheck.run(out) == 0
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == [f"ok   {name}" for name in selfcheck.CHECKS]
    assert "channel, client_proxy, redaction, server" in lines[0]


def test_the_checked_packages_are_the_ones_the_distribution_ships():
    assert {"server", "channel", "client_proxy", "redaction"} <= set(selfcheck.first_party_packages())


def test_a_package_missing_from_the_installation_fails_the_imports_check_by_name(monkeypatch):
    monkeypatch.setattr(selfcheck, "first_party_packages", lambda distribution=None: ["server", "redaktion"])
    monkeypatch.setitem(selfcheck.CHECKS, "model", lambda: "skipped here")
    out = io.StringIO()
    assert selfcheck.run(out) == 1
    assert "FAIL imports: ModuleNotFoundError: No module named 'redaktion'" in out.getvalue()
    assert "ok   sqlite:" in out.getvalue()  # one failure does not hide the other checks


def test_the_entrypoint_module_of_every_console_script_is_loaded():
    assert "memory-server -> server.cli:main" in selfcheck.check_entry_points()


@pytest.mark.model
def test_a_model_that_no_longer_gives_its_reference_vectors_fails_the_model_check(local_embedder, monkeypatch):
    from server.index.embeddings import reference

    found = reference.recorded(local_embedder.model)
    assert "its reference vectors reproduced (cosine " in selfcheck.check_model()
    moved = np.roll(found, 1, axis=0)  # each sentence given another's vector, as a model computing wrongly would
    monkeypatch.setattr(reference, "recorded", lambda model_id: moved)
    out = io.StringIO()
    assert selfcheck.run(out) == 1
    assert f"FAIL model: EmbeddingUnavailableError: {local_embedder.model} embeds its reference" in out.getvalue()
    assert "this machine computes another model" in out.getvalue()
