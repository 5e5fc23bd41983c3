#!/usr/bin/env bash
# Where scripts/install.sh takes torch from: prints pip's arguments for it, one per line (nothing: pip's settings).
#   scripts/torch-index.sh VENV
# PyPI's torch for Linux (x86_64 and aarch64 alike) is a CUDA build that pulls several GB of CUDA libraries, so on
# Linux torch comes from PyTorch's CPU wheel index, unless pip's own settings (a find-links folder) already hold
# torch 2.13.0+cpu. TORCH_INDEX_URL, when set, decides instead: an index URL, or empty for pip's settings alone (the
# Dockerfile sets it; build-image.py empties it when it serves a local wheel). Elsewhere (macOS) PyPI's is CPU-only.
set -euo pipefail
venv=${1:?usage: scripts/torch-index.sh VENV}
cpu_index=https://download.pytorch.org/whl/cpu
if [[ -n "${TORCH_INDEX_URL+set}" ]]; then
    if [[ -n "$TORCH_INDEX_URL" ]]; then printf '%s\n' --index-url "$TORCH_INDEX_URL"; fi
elif [[ "$(uname -s)" == Linux ]] && ! "$venv/bin/pip" install --dry-run --quiet --disable-pip-version-check \
    --no-deps --no-index torch==2.13.0+cpu >/dev/null 2>&1; then
    printf '%s\n' --index-url "$cpu_index"
fi
