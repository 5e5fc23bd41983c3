# Sourced by the container scripts: where they keep what is worth keeping between runs on one machine (the Debian
# base's root filesystem, a private engine's images and build cache).
if [[ -z "${MEMORY_CACHE_DIR:-}" ]]; then
    MEMORY_CACHE_DIR=/var/cache/agent-memory-server
    mkdir -p "$MEMORY_CACHE_DIR" 2>/dev/null || MEMORY_CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/agent-memory-server
fi
mkdir -p "$MEMORY_CACHE_DIR"
