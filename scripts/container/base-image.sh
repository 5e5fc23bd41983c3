#!/usr/bin/env bash
# Builds a Debian bookworm base image equivalent to python:3.11-slim-bookworm from Debian's own packages, for
# machines that reach a Debian mirror and PyPI but no container registry (see docs/deploy.md, "Building without a
# container registry"). The root filesystem is cached as a tarball, so a second run on the same machine only imports.
#   scripts/container/base-image.sh [IMAGE]        default IMAGE: memory-server-base:bookworm
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), MEMORY_CACHE_DIR (default
# /var/cache/agent-memory-server, or ~/.cache/agent-memory-server when that is not writable).
set -euo pipefail
image=${1:-memory-server-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# python3.11-venv brings ensurepip's wheels: the Dockerfile makes its virtualenv with them. Debian's pip is asked
# for only so that debootstrap resolves python3.11-venv's dependencies; it is purged below (as in python:*-slim,
# pip lives in virtualenvs).
packages=python3.11,python3.11-venv,python3-pip,ca-certificates
recipe=2  # bump when the steps below change, so a cached root filesystem is rebuilt
source "$(dirname "$0")/common.sh"
# The tarball's name says what is inside it, so a change of package list or mirror builds a new one.
key=$(printf '%s\n' "$packages" "$mirror" "$recipe" | sha256sum | cut -c1-12)
tarball=$MEMORY_CACHE_DIR/bookworm-$key.tar

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image already present" >&2
    exit 0
fi
if [[ ! -s "$tarball" ]]; then
    command -v debootstrap >/dev/null || {
        echo "debootstrap is not installed: apt-get install debootstrap (Debian, Ubuntu)" >&2
        exit 1
    }
    root=$(mktemp -d "$MEMORY_CACHE_DIR/rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    echo "debootstrap: bookworm with $packages from $mirror" >&2
    debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >&2
    chroot "$root" dpkg --purge python3-pip python3-wheel python3-setuptools python3-pkg-resources >&2
    # What Debian's slim images leave out, now and for packages installed later: docs, man pages, translations.
    cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
SLIM
    find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
    find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
        "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian/* "$root"/var/log/*.log
    tar -C "$root" --numeric-owner -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
fi
docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    "$tarball" "$image" >/dev/null
echo "base image $image imported from $tarball" >&2
