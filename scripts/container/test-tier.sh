#!/usr/bin/env bash
# The container tier (`make test-container`, and `.ci/run` after `make test`): an engine that answers, or a private
# one started for the run and stopped after it; then tests/container, which build the image from the working tree
# and run the shipped compose.yaml. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
eval "$(scripts/container/engine.sh start)"
trap 'scripts/container/engine.sh stop' EXIT
.venv/bin/pytest -m container tests/container "$@"
echo "container tier: $((SECONDS - started)) s in all" >&2
