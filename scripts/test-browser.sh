#!/usr/bin/env bash
# The memory browser's tests in real headless Chromium: Debian's `chromium` package (installed when missing; needs
# root), driven by Playwright from PyPI. Playwright never downloads a browser build here: the tests point it at
# /usr/bin/chromium. Screenshots of the main views land in build/screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh chromium chromium
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
exec .venv/bin/pytest -m browser "$@"
