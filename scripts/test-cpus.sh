#!/usr/bin/env bash
# The local models on CPUs this machine is not (`make test-cpus`, and `.ci/run`): QEMU's user-mode emulation of x86
# CPUs without VNNI (one with AVX2 and no AVX-512, one with SSE4.2 alone) and of two ARM64 cores (with and without
# the dot product) runs them; their vectors must match those recorded on a CPU with VNNI. Debian's qemu-user (and
# debootstrap, for the ARM64 Python) are installed when missing (needs root). A few minutes: every instruction is
# emulated, and the first run fetches Debian's arm64 Python and the aarch64 wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh qemu-x86_64 qemu-user
MEMORY_ARM64_DIR=$(scripts/arm64-python.sh)
export MEMORY_ARM64_DIR
exec .venv/bin/pytest -m cpus "$@"
