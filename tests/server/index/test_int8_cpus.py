"""The int8 model gives the same vectors on every x86 CPU. On one without VNNI (AVX-512 VNNI or AVX-VNNI: most x86
CPUs before 2021, AMD's before Zen 4) onnxruntime sums two u8 x s8 products into an int16, which 8-bit weights
overflow; the model's 7-bit weights (`onnx_export.INT8_RECIPE`) keep every sum in range.

The vectors of `tests/data/int8_vectors.json` were computed on a CPU with AVX-512 VNNI. This CPU's must match them
(in `make test`), and so must those of an emulated CPU with AVX2 and neither VNNI: QEMU's user-mode `-cpu max`
(`make test-cpus`, which installs Debian's qemu-user when missing). Record them again after a change of the int8
recipe, on a CPU with VNNI: `.venv/bin/python -m tests.server.index.test_int8_cpus`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

from server.index.embeddings import onnx_export
from server.index.embeddings.local import LocalEmbedder
from server.index.embeddings.onnx_export import MAX_INT8_WEIGHT, widest_int8_weight
from server.index.model_package import FP32, INT8, WEIGHTS_SHA256, onnx_model_path
from tests.conftest import REPO

RECORDED = REPO / "tests" / "data" / "int8_vectors.json"
TEXTS = json.loads((REPO / "tests" / "data" / "embedding_texts.json").read_text(encoding="utf-8"))["texts"]
COUNT = 8  # texts embedded: each takes seconds under emulation
# Cosine of a vector to the recorded one. The integer products are exact on every CPU; the float operators between
# them (layer norms, GELU, softmax) round differently with other vector widths, and a value that lands on the other
# side of an activation's quantisation step moves the rest a little: measured 0.9983 at least over 40 texts under
# QEMU (0.9874 with the 8-bit weights before).
LEAST_COSINE = 0.997
EMULATED_CPU = ["qemu-x86_64", "-cpu", "max"]  # QEMU 7.2's TCG: AVX2, FMA, no AVX-512 and no VNNI

# Run by the emulated CPU: its features as numpy detects them, then the vectors, as JSON on stdout.
CHILD = """
import json, sys
import numpy as np
try:
    from numpy._core._multiarray_umath import __cpu_features__ as features
except ImportError:
    from numpy.core._multiarray_umath import __cpu_features__ as features
from server.index.embeddings.local import LocalEmbedder
texts = json.loads(sys.stdin.read())
vectors = LocalEmbedder(local=sys.argv[1]).embed(texts)
json.dump({"features": {k: bool(v) for k, v in features.items()}, "vectors": vectors.tolist()}, sys.stdout)
"""


def recorded() -> np.ndarray:
    data = json.loads(RECORDED.read_text(encoding="utf-8"))
    assert data["model"] == INT8.model_id, "the int8 recipe changed: record the vectors again (see the docstring)"
    assert data["texts"] == TEXTS[:COUNT]
    return np.array(data["vectors"], dtype=np.float32)


def cosines(vectors: np.ndarray) -> np.ndarray:
    return np.sum(vectors * recorded(), axis=1)  # type: ignore[no-any-return]


def test_every_int8_weight_fits_seven_bits_so_no_cpu_overflows_its_sums():
    model = onnx.load(str(onnx_model_path(INT8)), load_external_data=True)
    assert 2 * 255 * MAX_INT8_WEIGHT <= 2**15 - 1
    assert 0 < widest_int8_weight(model) <= MAX_INT8_WEIGHT


@pytest.mark.model
def test_an_int8_model_with_a_weight_over_seven_bits_is_refused_not_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "MAX_INT8_WEIGHT", MAX_INT8_WEIGHT - 1)  # as if the quantiser used one bit more
    target = tmp_path / INT8.onnx_file
    with pytest.raises(RuntimeError, match=f"a weight of magnitude {MAX_INT8_WEIGHT}, over {MAX_INT8_WEIGHT - 1}"):
        onnx_export.quantise(onnx_model_path(FP32), target, WEIGHTS_SHA256)
    assert list(tmp_path.iterdir()) == []


def test_this_cpu_gives_the_recorded_int8_vectors(local_embedder):
    assert local_embedder.model == INT8.model_id
    found = cosines(local_embedder.embed(TEXTS[:COUNT]))
    assert found.min() >= LEAST_COSINE, TEXTS[int(found.argmin())][:80]


@pytest.mark.cpus
def test_a_cpu_without_vnni_gives_the_recorded_int8_vectors():
    if shutil.which(EMULATED_CPU[0]) is None:
        pytest.fail("qemu-x86_64 is not installed: `make test-cpus` installs Debian's qemu-user")
    done = subprocess.run(
        [*EMULATED_CPU, sys.executable, "-c", CHILD, INT8.name],
        input=json.dumps(TEXTS[:COUNT]),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    features = answer["features"]
    assert features["AVX2"] and not features["AVX512F"] and not features["AVX512VNNI"], features
    found = cosines(np.array(answer["vectors"], dtype=np.float32))
    assert found.min() >= LEAST_COSINE, TEXTS[int(found.argmin())][:80]


def record() -> None:
    """Write tests/data/int8_vectors.json from this CPU's vectors (it must have VNNI)."""
    from numpy._core._multiarray_umath import __cpu_features__ as features

    if not features["AVX512VNNI"]:
        raise SystemExit("record on a CPU with AVX-512 VNNI: the vectors are the reference every other CPU meets")
    vectors = LocalEmbedder(local=INT8.name).embed(TEXTS[:COUNT])
    head = {
        "about": "the int8 model's vectors on a CPU with AVX-512 VNNI (tests/server/index/test_int8_cpus.py)",
        "model": INT8.model_id,
        "texts": TEXTS[:COUNT],
    }
    rows = ",\n  ".join(json.dumps([round(float(x), 7) for x in row]) for row in vectors)  # a vector a line
    RECORDED.write_text(json.dumps(head, indent=1)[:-2] + f',\n "vectors": [\n  {rows}\n ]\n}}\n', encoding="utf-8")


if __name__ == "__main__":
    record()
