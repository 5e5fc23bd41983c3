"""Every local model gives the same vectors on every x86 CPU. On one without VNNI (AVX-512 VNNI or AVX-VNNI: Intel's
laptops and desktops before Ice Lake, its Xeons before Cascade Lake, AMD's before Zen 4) onnxruntime's AVX2 kernel
sums two u8 x s8 products into an int16, which 8-bit weights overflow; the int8 model's 7-bit weights
(`onnx_export.INT8_RECIPE`) keep every sum in range.

ARM64 servers (Graviton, Ampere, a Raspberry Pi, Docker on an Apple silicon Mac) run onnxruntime's ARM kernels: with
the dot-product instructions (ARMv8.2's SDOT/UDOT) or, on older cores, widening multiplies. Both add into int32s.

The reference vectors (`embeddings.reference`, recorded on a CPU with AVX-512 VNNI) must come back on the CPU running
`make test`, and under QEMU's user mode (`make test-cpus`, which installs Debian's qemu-user when missing) on emulated
x86 CPUs without VNNI, one with AVX2 and one with SSE4.2 alone, and on two ARM64 cores, one with the dot product and
one without. The ARM64 side (`scripts/arm64-python.sh`: Debian's arm64 Python with the aarch64 wheels of the server's
run-time dependencies, as the image holds them) also runs the image's self-check: every module imports, sqlite-vec
loads and answers, the default model's vectors come back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import pytest

from server.index.embeddings import onnx_export, reference
from server.index.embeddings.onnx_export import MAX_INT8_WEIGHT, widest_int8_weight
from server.index.embeddings.reference import SENTENCES
from server.index.model_package import FP32, INT8, LOCAL_MODELS, WEIGHTS_SHA256, onnx_model_path
from tests.conftest import REPO

QEMU = "qemu-x86_64"
# The CPUs QEMU 7.2's TCG emulates, and what each must (True) and must not (False) have as numpy detects it: "max" has
# AVX2 and FMA, no AVX-512 and no VNNI (onnxruntime's saturating u8 x s8 kernel); Nehalem has SSE4.2 and no AVX (its
# SSE kernel widens to int16 products, and numpy needs SSE4.2 at least).
EMULATED_CPUS = {
    "max": {"AVX2": True, "AVX512F": False, "AVX512VNNI": False},
    "Nehalem-v1": {"SSE42": True, "AVX": False, "AVX2": False},
}

QEMU_ARM64 = "qemu-aarch64"


# The ARM64 cores, as numpy detects them, and the /proc/cpuinfo each has: QEMU 7.2 does not make one up for ARM, and
# onnxruntime's CPU detection crashes on the host's x86 file, so the test writes it into the Python's root directory
# (QEMU's -L finds a path there first). Neoverse N1 (Graviton 2, Ampere Altra) has the dot product; Cortex-A72
# (Raspberry Pi 4, Graviton 1) has not.
class ArmCore(NamedTuple):
    features: dict[str, bool]  # as numpy must detect them
    variant: str  # /proc/cpuinfo's "CPU variant" and "CPU part" (the MIDR's fields)
    part: str
    flags: str  # its "Features" past the ARMv8.0 ones every core here has


ARM64_CPUS = {
    "neoverse-n1": ArmCore(
        {"ASIMD": True, "ASIMDDP": True}, "0x3", "0xd0c", "atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"
    ),
    "cortex-a72": ArmCore({"ASIMD": True, "ASIMDDP": False}, "0x0", "0xd08", "cpuid"),
}

# Run by the emulated CPU: its features as numpy detects them, then every local model's vectors of the reference
# sentences, as JSON on stdout.
CHILD = """
import json, os, sys
try:
    from numpy._core._multiarray_umath import __cpu_features__ as features
except ImportError:
    from numpy.core._multiarray_umath import __cpu_features__ as features
from server.index.embeddings.local import LocalEmbedder
from server.index.embeddings.reference import SENTENCES
from server.index.model_package import LOCAL_MODELS
checked = json.loads(os.environ.get("MEMORY_CHECKED_SENTENCES", "{}"))
vectors = {}
for name in LOCAL_MODELS:
    embedder = LocalEmbedder(local=name)
    rows = checked.get(embedder.model, list(range(len(SENTENCES))))
    vectors[embedder.model] = {"rows": rows, "vectors": embedder.embed([SENTENCES[i] for i in rows]).tolist()}
json.dump({"features": {k: bool(v) for k, v in features.items()}, "vectors": vectors}, sys.stdout)
"""
# QEMU 7.2 runs the float32 model's AVX2 and FMA kernels at about 1.7 s a token (the int8 model's at a tenth of that):
# the five sentences, batched and padded, took over 300 s. On the emulated x86 CPUs the float32 model embeds the
# shortest reference sentence, the same kernels on fewer rows; it embeds all five natively (`make test`'s reference
# check) and on the ARM64 cores, and the int8 model, whose integer sums are what differ between x86 CPUs, all five.
EMULATED_X86_SENTENCES = {FP32.model_id: [SENTENCES.index("ok")]}


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


def test_this_cpu_gives_every_local_models_reference_vectors(local_embedder, fp32_embedder):
    assert {local_embedder.model, fp32_embedder.model} == {model.model_id for model in LOCAL_MODELS.values()}
    for embedder in (local_embedder, fp32_embedder):
        assert reference.check(embedder) >= reference.LEAST_COSINE


def test_the_reference_vectors_are_unit_vectors_of_every_local_model_and_no_other():
    for model in LOCAL_MODELS.values():
        vectors = reference.recorded(model.model_id)
        assert vectors.shape == (len(reference.SENTENCES), 384)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    stored = json.loads(reference.REFERENCE_FILE.read_text(encoding="utf-8"))["vectors"]
    assert set(stored) == {model.model_id for model in LOCAL_MODELS.values()}  # no retired model's


def test_vnni_is_read_from_the_cpu_flags_linux_reports(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n", encoding="utf-8")
    assert reference.has_vnni(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n", encoding="utf-8")
    assert not reference.has_vnni(cpuinfo)
    assert not reference.has_vnni(tmp_path / "absent")


@pytest.mark.cpus
@pytest.mark.parametrize("cpu", EMULATED_CPUS)
def test_a_cpu_without_vnni_gives_every_local_models_reference_vectors(cpu):
    if shutil.which(QEMU) is None:
        pytest.fail(f"{QEMU} is not installed: `make test-cpus` installs Debian's qemu-user")
    answer = _run_emulated([QEMU, "-cpu", cpu, sys.executable], EMULATED_X86_SENTENCES)
    _assert_reference_vectors(answer, EMULATED_CPUS[cpu])


@pytest.mark.cpus
@pytest.mark.parametrize("cpu", ARM64_CPUS)
def test_an_arm64_cpu_with_or_without_the_dot_product_gives_every_local_models_reference_vectors(cpu):
    answer = _run_emulated(_arm64_python(cpu))
    _assert_reference_vectors(answer, ARM64_CPUS[cpu].features)


@pytest.mark.cpus
def test_the_images_self_check_passes_on_arm64_with_the_aarch64_wheels_of_every_server_dependency():
    done = subprocess.run(
        [
            *_arm64_python("neoverse-n1"),
            "-c",
            "import sys; from server.cli.main import main; sys.exit(main(['self-check']))",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    checks = [line.split(":", 1)[0] for line in done.stdout.splitlines()]
    assert checks == ["ok   imports", "ok   entry points", "ok   sqlite", "ok   model"], done.stdout


def _arm64_python(cpu: str) -> list[str]:
    """The command line of scripts/arm64-python.sh's Python on the emulated core `cpu`, its /proc/cpuinfo written."""
    root = os.environ.get("MEMORY_ARM64_DIR")
    if not root or shutil.which(QEMU_ARM64) is None:
        pytest.fail("no ARM64 Python: `make test-cpus` builds one (scripts/arm64-python.sh) and sets MEMORY_ARM64_DIR")
    sysroot = Path(root) / "sysroot"
    core = ARM64_CPUS[cpu]
    block = (
        f"BogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 {core.flags}\n"
        f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: {core.variant}\nCPU part\t: {core.part}\n"
        "CPU revision\t: 1\n\n"
    )
    cpuinfo = "".join(f"processor\t: {n}\n{block}" for n in range(2))
    (sysroot / "proc" / "cpuinfo").write_text(cpuinfo, encoding="utf-8")
    return [QEMU_ARM64, "-cpu", cpu, "-L", str(sysroot), str(Path(root) / "venv" / "bin" / "python")]


def _run_emulated(python: list[str], checked: dict[str, list[int]] | None = None) -> dict:
    """CHILD's answer, run by `python` (an emulator's command line ending in a Python); `checked`: the reference
    sentences a model embeds (by index), where not all five."""
    env = {**os.environ, "MEMORY_CHECKED_SENTENCES": json.dumps(checked or {})}
    done = subprocess.run(
        [*python, "-c", CHILD], capture_output=True, text=True, cwd=REPO, env=env, timeout=900, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _assert_reference_vectors(answer: dict, features: dict[str, bool]) -> None:
    assert {name: answer["features"][name] for name in features} == features
    assert set(answer["vectors"]) == {model.model_id for model in LOCAL_MODELS.values()}
    for model_id, got in answer["vectors"].items():
        found = np.array(got["vectors"], dtype=np.float32)
        least = float(np.min(np.sum(found * reference.recorded(model_id)[got["rows"]], axis=1)))
        assert least >= reference.LEAST_COSINE, f"{model_id}: {least:.4f}"
