"""The default local runtime (onnxruntime on the install-time ONNX export) against sentence-transformers: the same
vectors, so switching runtimes keeps every index's vector identity; and a server process that never loads torch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from server.index.embeddings.local import LocalEmbedder
from server.index.embeddings.onnx_export import DATA_SUFFIX, PRECISION_KEY, WEIGHTS_KEY, exported_from
from server.index.embeddings.onnx_runtime import SPLIT_CALLS, OnnxEncoder, OnnxTuning, batches, mean_pool
from server.index.embeddings.select import EmbeddingSettings
from server.index.errors import EmbeddingUnavailableError, InvalidArgumentError
from server.index.model_package import WEIGHTS_SHA256, onnx_model_path, packaged_model_dir

REPO = Path(__file__).resolve().parents[3]
TEXTS = json.loads((REPO / "tests" / "data" / "embedding_texts.json").read_text(encoding="utf-8"))["texts"]


@pytest.mark.model
def test_the_onnx_runtime_gives_sentence_transformers_vectors_for_varied_and_truncated_texts(fp32_embedder):
    assert fp32_embedder.runtime == "onnx"
    light = fp32_embedder.embed(TEXTS)
    torch_vectors = LocalEmbedder(runtime="torch").embed(TEXTS)
    cosines = np.sum(light * torch_vectors, axis=1)
    assert light.shape == torch_vectors.shape == (200, 384)
    assert cosines.min() >= 0.9999, TEXTS[int(cosines.argmin())][:80]
    assert np.allclose(np.linalg.norm(light, axis=1), 1.0, atol=1e-5)


@pytest.mark.model
def test_a_text_embeds_the_same_alone_and_in_a_batch_of_longer_ones(fp32_embedder):
    alone = fp32_embedder.embed(["the staging database is rebuilt every Sunday"])
    batched = fp32_embedder.embed([TEXTS[95], "the staging database is rebuilt every Sunday", TEXTS[3]])
    assert float(alone[0] @ batched[1]) >= 0.99999


def encoder(tuning: OnnxTuning) -> OnnxEncoder:
    return OnnxEncoder(packaged_model_dir(), onnx_model_path(), WEIGHTS_SHA256, tuning)


@pytest.mark.model
def test_batches_run_side_by_side_give_the_vectors_of_one_call_at_a_time_over_every_cpu():
    side_by_side = encoder(OnnxTuning(workers=2)).encode(TEXTS)
    one_at_a_time = encoder(SPLIT_CALLS).encode(TEXTS)
    assert side_by_side.shape == one_at_a_time.shape == (200, 384)
    assert np.sum(side_by_side * one_at_a_time, axis=1).min() >= 0.99999


@pytest.mark.model
def test_encode_calls_from_several_threads_at_once_each_get_their_own_vectors():
    shared = encoder(OnnxTuning(workers=2))
    parts = [TEXTS[0:70], TEXTS[70:140], TEXTS[140:200]]
    alone = [shared.encode(part) for part in parts]
    together: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda n=n: together.update({n: shared.encode(parts[n])})) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(together) == [0, 1, 2]
    for n in range(3):
        assert np.sum(together[n] * alone[n], axis=1).min() >= 0.99999


@pytest.mark.model
def test_an_idle_encoder_burns_no_cpu_after_a_call():
    idle = encoder(OnnxTuning())
    idle.encode(TEXTS[:40])
    started = time.process_time()
    time.sleep(0.5)  # the interval measured, not a wait for an event: spinning threads burnt ~30 ms of it
    assert time.process_time() - started < 0.01


def test_batches_keep_every_text_once_longest_first_within_the_token_budget():
    lengths = [5, 256, 40, 256, 3, 120, 256, 7] * 5
    groups = batches(lengths, max_batch=4, max_tokens=512)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    for group in groups:
        assert len(group) <= 4
        assert len(group) * max(lengths[i] for i in group) <= 512 or len(group) == 1
        assert lengths[group[0]] == max(lengths[i] for i in group)


def test_mean_pooling_ignores_padding_and_normalises():
    hidden = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]], dtype=np.int64)
    assert np.allclose(mean_pool(hidden, mask), [[1.0, 0.0]])


def test_a_missing_export_is_a_clear_error_naming_the_fix(tmp_path):
    with pytest.raises(EmbeddingUnavailableError, match=r"onnx_export.*MEMORY_EMBEDDING_RUNTIME=torch"):
        OnnxEncoder(packaged_model_dir(), tmp_path / "absent.onnx", WEIGHTS_SHA256)


def small_export(path: Path, weights_sha256: str, precision: str | None = None) -> Path:
    """A one-node ONNX graph carrying an export's metadata (no precision: as made before the int8 model), and its
    (empty) weights file beside it."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "other",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    props = {WEIGHTS_KEY: weights_sha256} | ({PRECISION_KEY: precision} if precision else {})
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(path))
    path.with_name(path.name + DATA_SUFFIX).write_bytes(b"")
    return path


def test_an_export_of_other_weights_is_refused(tmp_path):
    other = small_export(tmp_path / "other.onnx", "0" * 64)
    with pytest.raises(EmbeddingUnavailableError, match="not exported from the packaged weights"):
        OnnxEncoder(packaged_model_dir(), other, WEIGHTS_SHA256)


def test_the_install_step_exports_again_only_when_the_export_is_missing_damaged_or_of_other_weights(tmp_path):
    export = small_export(tmp_path / "model.onnx", WEIGHTS_SHA256)
    assert exported_from(export) == WEIGHTS_SHA256
    export.with_name(export.name + DATA_SUFFIX).unlink()
    assert exported_from(export) is None
    small_export(export, WEIGHTS_SHA256).write_bytes(b"not a protobuf of a graph \xff\x00")
    assert exported_from(export) is None
    assert exported_from(tmp_path / "absent.onnx") is None


def test_the_runtime_setting_defaults_to_onnx_and_refuses_unknown_names():
    assert EmbeddingSettings.from_env({}).runtime == "onnx"
    assert EmbeddingSettings.from_env({"MEMORY_EMBEDDING_RUNTIME": " Torch "}).runtime == "torch"
    with pytest.raises(InvalidArgumentError, match="MEMORY_EMBEDDING_RUNTIME must be one of onnx, torch"):
        EmbeddingSettings.from_env({"MEMORY_EMBEDDING_RUNTIME": "tensorflow"})


@pytest.mark.model
def test_a_server_process_embeds_without_importing_torch():
    probe = (
        "import sys\n"
        "from server.cli import selfcheck\n"
        "selfcheck.check_imports()\n"  # every first-party module, as the image's self-check imports them
        "from server.cli.main import build_parser\n"
        "from server.settings import Settings\n"
        "import os\n"
        "embedder = Settings.from_env(os.environ).select_embedder(os.environ)[0]\n"
        "assert embedder.embed(['a note']).shape == (1, 384)\n"
        "loaded = {'torch', 'sentence_transformers', 'transformers'} & set(sys.modules)\n"
        "assert not loaded, f'imported {loaded}'\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "MEMORY_EMBEDDING_PROVIDERS": "local"}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
