#!/usr/bin/env bash
# A Docker engine for the container tests, on a machine that may have none running.
#   eval "$(scripts/container/engine.sh start)"    uses the engine that answers, or starts a private one
#   scripts/container/engine.sh stop               stops the private engine, if `start` started it
# A private engine needs root: Debian's docker.io (installed when missing, with docker-compose and debootstrap),
# `dockerd` with its own socket, state in the cache folder (so images and build cache outlive the run) and no
# changes to the host's firewall. Its log: $MEMORY_CACHE_DIR/dockerd.log.
set -euo pipefail
source "$(dirname "$0")/common.sh"
run=/run/agent-memory-dockerd
socket=$run/docker.sock
marker=$run/started-by-engine-sh

answers() { docker info >/dev/null 2>&1; }
compose_present() { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null; }

install_missing() {
    local wanted=()
    command -v dockerd >/dev/null || wanted+=(docker.io)
    compose_present || wanted+=(docker-compose)
    command -v debootstrap >/dev/null || wanted+=(debootstrap)
    if ((${#wanted[@]})); then
        echo "engine.sh: installing ${wanted[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get install --yes --quiet "${wanted[@]}" >&2 || {
            apt-get update --quiet >&2
            apt-get install --yes --quiet "${wanted[@]}" >&2
        }
    fi
}

start() {
    if answers; then
        [[ -n "${DOCKER_HOST:-}" ]] && echo "export DOCKER_HOST=$DOCKER_HOST"
        return 0
    fi
    export DOCKER_HOST=unix://$socket
    if answers; then  # a private engine from an earlier run still serves: use it, leave it to whoever started it
        echo "export DOCKER_HOST=$DOCKER_HOST"
        return 0
    fi
    if [[ $(id -u) != 0 ]]; then
        echo "engine.sh: no Docker engine answers, and only root can start a private one" >&2
        return 1
    fi
    install_missing
    mkdir -p "$run" "$MEMORY_CACHE_DIR/docker"
    # --iptables=false and friends: the engine leaves the host's firewall and forwarding alone; published ports
    # still work on the host through docker-proxy.
    nohup dockerd --storage-driver=overlay2 --iptables=false --ip-forward=false --ip-masq=false \
        --data-root "$MEMORY_CACHE_DIR/docker" --exec-root "$run/exec" --pidfile "$run/dockerd.pid" \
        -H "$DOCKER_HOST" >"$MEMORY_CACHE_DIR/dockerd.log" 2>&1 </dev/null &
    touch "$marker"
    for _ in $(seq 120); do
        if answers; then
            echo "engine.sh: started a private engine on $DOCKER_HOST" >&2
            echo "export DOCKER_HOST=$DOCKER_HOST"
            return 0
        fi
        sleep 0.5
    done
    echo "engine.sh: dockerd did not answer within 60 s; its log:" >&2
    tail -n 20 "$MEMORY_CACHE_DIR/dockerd.log" >&2
    return 1
}

stop() {
    [[ -f "$marker" ]] || return 0
    rm -f "$marker"
    local pid
    pid=$(cat "$run/dockerd.pid" 2>/dev/null) || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || { echo "engine.sh: stopped the private engine" >&2; return 0; }
        sleep 0.5
    done
    echo "engine.sh: dockerd $pid did not stop within 30 s" >&2
    return 1
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: scripts/container/engine.sh start|stop" >&2; exit 2 ;;
esac
