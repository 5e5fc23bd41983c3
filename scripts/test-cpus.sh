#!/usr/bin/env bash
# The local models on x86 CPUs without VNNI (`make test-cpus`, and `.ci/run`): QEMU's user-mode emulation of a CPU
# with AVX2 and no AVX-512, and of one with SSE4.2 alone, runs them; their vectors must match those recorded on a CPU
# with VNNI. Debian's qemu-user is installed when missing (needs root). About a minute: every instruction is emulated.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh qemu-x86_64 qemu-user
exec .venv/bin/pytest -m cpus "$@"
