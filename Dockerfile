# memory-server: the remote side. Build: docker compose build   (or scripts/container/build-image.py, which also
# builds without a container registry: docs/deploy.md, "Building without a container registry"). Run: docker compose up -d
#
# Stage 1 installs the project into /opt/venv with the same script `make` uses. pip installs exactly the packages
# pyproject.toml lists, so the image holds what the project ships and nothing else; `memory-server self-check` then
# imports every one of their modules, verifies the model's weights and loads sqlite-vec, so an incomplete image fails
# here. install.sh also exports the model to ONNX with torch, and slim-venv.sh then removes torch: the server runs
# the export with onnxruntime. Stage 2 is the runtime: the base image and that virtualenv.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
# Where pip finds the CPU-only torch wheel (an unpinned torch is a CUDA build of several GB). Empty: pip's settings
# (below) say where, e.g. a find-links folder holding torch-2.13.0+cpu.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# DL3064 takes TOKENIZERS_PARALLELISM for a token; it is the tokenizers library's thread switch.
# hadolint ignore=DL3064
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# binutils only for `strip` in slim-venv.sh; this stage is thrown away.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends binutils \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The builder's pip settings and CA bundle, when given as BuildKit secrets (build-image.py passes the host's), are
# mounted for this one step and never stored in a layer.
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca.pem,target=/etc/ssl/certs/build-ca.pem \
    scripts/install.sh /opt/venv server \
    && scripts/container/slim-venv.sh /opt/venv \
    && /opt/venv/bin/memory-server self-check

FROM ${BASE_IMAGE}
# hadolint ignore=DL3064
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    MEMORY_DATA_DIR=/data \
    MEMORY_KEYS_DIR=/keys \
    MEMORY_PORT=8765
RUN groupadd --system --gid 10001 memory \
    && useradd --system --uid 10001 --gid memory --home-dir /data --no-create-home --shell /usr/sbin/nologin memory \
    && mkdir -p /data /keys \
    && chown 10001:10001 /data \
    && chmod 0700 /data
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8765
# No proxy: Docker may set http_proxy in the container (from the client's proxies), and urllib would follow it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.build_opener(urllib.request.ProxyHandler({})).open('http://127.0.0.1:8765/healthz', timeout=4).status != 200)"]
STOPSIGNAL SIGTERM
# Inside the container the server must listen on every interface; compose decides what the host publishes.
ENTRYPOINT ["memory-server", "serve", "--host", "0.0.0.0"]
