#!/usr/bin/env bash
# `scripts/ensure-package.sh COMMAND PACKAGE`: install Debian's PACKAGE (as root, apt-get) when COMMAND is not on
# the PATH; the test tiers that need a system program (chromium, faketime) call it first.
set -euo pipefail
command -v "$1" >/dev/null && exit 0
echo "ensure-package.sh: installing $2" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install --yes --quiet "$2" >&2 || {
    apt-get update --quiet >&2
    apt-get install --yes --quiet "$2" >&2
}
