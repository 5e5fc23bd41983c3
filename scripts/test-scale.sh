#!/usr/bin/env bash
# The scale-out tier (`make test-scale`, and `.ci/run`): two real memory-server replicas on one real PostgreSQL
# behind Debian's nginx (installed when missing; needs root), laptops through it. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh nginx nginx
rm -f build/test-scale.json
exec .venv/bin/pytest -m scale -v "$@" tests/scale
