#!/usr/bin/env bash
# The seeded fault-injection loop (`make test-faults`, and `.ci/run`): a laptop's wrong clock is the real libfaketime
# (Debian's `faketime`, installed when missing; needs root, as the small tmpfs that fills does). Arguments go to
# scripts/faults.py (`--seeds N`, `--seed S`, `--steps N`, `--keep`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh faketime faketime
exec .venv/bin/python scripts/faults.py "$@"
