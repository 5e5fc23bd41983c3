#!/usr/bin/env bash
# The seeded fault-injection loop (`make test-faults`, and `.ci/run`): a laptop's wrong clock is the real libfaketime
# (Debian's `faketime`, installed when missing; needs root, as the small tmpfs that fills does). Arguments go to
# scripts/faults.py (`--seeds N`, `--seed S`, `--steps N`, `--keep`).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v faketime >/dev/null; then
    echo "test-faults.sh: installing faketime" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install --yes --quiet faketime >&2 || {
        apt-get update --quiet >&2
        apt-get install --yes --quiet faketime >&2
    }
fi
exec .venv/bin/python scripts/faults.py "$@"
