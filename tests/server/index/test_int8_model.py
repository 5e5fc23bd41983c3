"""The int8 local model (MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2-int8): made by the install step from the float32
export, byte for byte the same each time; loaded only from the packaged weights' export and only as int8; vectors
close to the float32 model's, under a model id of its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from server.index.embeddings.local import LocalEmbedder
from server.index.embeddings.onnx_export import DATA_SUFFIX, exported_from, main, quantise
from server.index.embeddings.onnx_runtime import OnnxEncoder
from server.index.embeddings.select import EmbeddingSettings
from server.index.errors import EmbeddingUnavailableError, InvalidArgumentError
from server.index.model_package import (
    DEFAULT_LOCAL_MODEL,
    FP32,
    INT8,
    RETIRED_ONNX_FILES,
    WEIGHTS_SHA256,
    onnx_model_path,
    packaged_model_dir,
)
from tests.server.index.test_onnx_runtime import small_export

REPO = Path(__file__).resolve().parents[3]
TEXTS = json.loads((REPO / "tests" / "data" / "embedding_texts.json").read_text(encoding="utf-8"))["texts"]


@pytest.fixture(scope="module")
def int8_embedder() -> LocalEmbedder:
    embedder = LocalEmbedder(local=INT8.name)
    embedder.warm_up()
    return embedder


@pytest.mark.model
def test_the_int8_vectors_stay_close_to_the_fp32_vectors_under_their_own_model_id(fp32_embedder, int8_embedder):
    assert fp32_embedder.model == FP32.model_id and int8_embedder.model == INT8.model_id != FP32.model_id
    reference, quantised = fp32_embedder.embed(TEXTS), int8_embedder.embed(TEXTS)
    cosines = np.sum(reference * quantised, axis=1)
    assert quantised.shape == (200, 384)
    assert np.allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    # measured 0.992 / 0.972; per-tensor scales gave a mean of 0.946
    assert cosines.mean() >= 0.985 and cosines.min() >= 0.95, TEXTS[int(cosines.argmin())][:80]
    assert cosines.mean() < 0.99999  # the int8 file really is another model


@pytest.mark.model
def test_the_install_step_quantises_the_same_bytes_every_time(tmp_path):
    installed = onnx_model_path(INT8)
    assert exported_from(installed, INT8.precision) == WEIGHTS_SHA256
    again = quantise(onnx_model_path(FP32), tmp_path / INT8.onnx_file, WEIGHTS_SHA256)
    for suffix in ("", DATA_SUFFIX):
        made = (tmp_path / (again.name + suffix)).read_bytes()
        assert made == (installed.parent / (installed.name + suffix)).read_bytes(), f"{again.name}{suffix} differs"


def test_an_int8_export_of_other_weights_is_refused(tmp_path):
    other = small_export(tmp_path / INT8.onnx_file, "0" * 64, "int8")
    with pytest.raises(EmbeddingUnavailableError, match="not exported from the packaged weights"):
        OnnxEncoder(packaged_model_dir(), other, WEIGHTS_SHA256, precision="int8")
    assert exported_from(other, "int8") == "0" * 64  # the install step makes it again


def test_an_export_of_the_other_precision_is_refused_and_made_again(tmp_path):
    fp32 = small_export(tmp_path / "fp32.onnx", WEIGHTS_SHA256)  # made before int8: no precision
    with pytest.raises(EmbeddingUnavailableError, match="is the fp32 export, expected int8"):
        OnnxEncoder(packaged_model_dir(), fp32, WEIGHTS_SHA256, precision="int8")
    int8 = small_export(tmp_path / "int8.onnx", WEIGHTS_SHA256, "int8")
    with pytest.raises(EmbeddingUnavailableError, match="is the int8 export, expected fp32"):
        OnnxEncoder(packaged_model_dir(), int8, WEIGHTS_SHA256)
    assert exported_from(fp32) == WEIGHTS_SHA256 and exported_from(fp32, "int8") is None
    assert exported_from(int8, "int8") == WEIGHTS_SHA256 and exported_from(int8) is None


def test_a_missing_int8_export_is_a_clear_error_naming_the_fix(tmp_path):
    with pytest.raises(EmbeddingUnavailableError, match=r"no int8 ONNX export.*onnx_export.*MEMORY_LOCAL_MODEL="):
        OnnxEncoder(packaged_model_dir(), tmp_path / INT8.onnx_file, WEIGHTS_SHA256, precision="int8")


def test_the_local_model_setting_is_checked_against_the_runtime():
    assert EmbeddingSettings.from_env({}).local_model == INT8.name == DEFAULT_LOCAL_MODEL.name
    assert EmbeddingSettings.from_env({"MEMORY_LOCAL_MODEL": FP32.name}).local_model == FP32.name  # the way back
    chosen = EmbeddingSettings.from_env({"MEMORY_LOCAL_MODEL": " all-MiniLM-L6-v2-int8 "})
    assert chosen.local_model == INT8.name
    assert EmbeddingSettings.from_env({"MEMORY_EMBEDDING_RUNTIME": "torch"}).local_model == FP32.name
    with pytest.raises(InvalidArgumentError, match="MEMORY_LOCAL_MODEL must be one of all-MiniLM-L6-v2, all-Mini"):
        EmbeddingSettings.from_env({"MEMORY_LOCAL_MODEL": "bge-small"})
    with pytest.raises(InvalidArgumentError, match="int8 runs on MEMORY_EMBEDDING_RUNTIME=onnx only"):
        EmbeddingSettings.from_env({"MEMORY_LOCAL_MODEL": INT8.name, "MEMORY_EMBEDDING_RUNTIME": "torch"})
    with pytest.raises(EmbeddingUnavailableError, match="runs on MEMORY_EMBEDDING_RUNTIME=onnx only"):
        LocalEmbedder(local=INT8.name, runtime="torch")
    with pytest.raises(EmbeddingUnavailableError, match="unknown local model 'bge-small'"):
        LocalEmbedder(local="bge-small")


@pytest.mark.model
def test_the_install_step_makes_the_int8_file_of_this_recipe_and_removes_the_retired_recipes(tmp_path):
    fp32 = tmp_path / FP32.onnx_file
    installed = onnx_model_path(FP32)
    for suffix in ("", DATA_SUFFIX):  # the float32 export as installed: not exported again
        shutil.copyfile(installed.parent / (installed.name + suffix), tmp_path / (fp32.name + suffix))
    for retired in RETIRED_ONNX_FILES:
        for suffix in ("", DATA_SUFFIX):
            (tmp_path / (retired + suffix)).write_bytes(b"an earlier recipe's int8 model")
    assert main([str(fp32)]) == 0
    assert exported_from(tmp_path / INT8.onnx_file, INT8.precision) == WEIGHTS_SHA256
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        name + suffix for name in (FP32.onnx_file, INT8.onnx_file) for suffix in ("", DATA_SUFFIX)
    )


@pytest.mark.model
def test_an_int8_vector_is_the_same_whatever_it_is_embedded_with(int8_embedder):
    # Activations are quantised with one scale per model call: batched, a text's vector moved with its batch-mates
    # (cosine down to 0.991, bench_int8_batching.py), so a rebuild, another server or the cache could each hold
    # another vector for it.
    texts = TEXTS[:24]
    together = int8_embedder.embed(texts)
    alone = np.stack([int8_embedder.embed([text])[0] for text in texts])
    reordered = int8_embedder.embed(list(reversed(texts)))[::-1]
    assert np.array_equal(together, alone) and np.array_equal(together, reordered)
