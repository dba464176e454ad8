# syntax=docker/dockerfile:1
# One image for every Primus process: the services, the data executors and the trainers, the CLI and the explorer.
# `make image` builds it where docker or podman runs (no container engine runs on the project's own machines, so
# tests/test_image.py checks this file statically). The arena extension is compiled here, in the build stage, into
# /opt/primus/native: the running image needs no compiler and writes nothing outside /tmp and its volumes, so it
# works with a read-only root file system. It runs as uid 10001, the manifests' runAsUser.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
# Empty: torch from PyPI (CUDA builds on x86_64, which run on CPUs too). A CPU-only image is much smaller:
#   make image TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_INDEX_URL=""
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/primus/venv
ENV PATH=/opt/primus/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PRIMUS_NATIVE_CACHE=/opt/primus/native
WORKDIR /src
COPY pyproject.toml README.md ./
COPY primus ./primus
COPY services ./services
RUN if [ -n "$TORCH_INDEX_URL" ]; then pip install --index-url "$TORCH_INDEX_URL" "torch==2.13.0"; fi \
 && pip install . \
 && python -m primus.native --strict

FROM python:${PYTHON_VERSION}-slim-bookworm
RUN groupadd --gid 10001 primus \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin primus
COPY --from=build /opt/primus /opt/primus
ENV PATH=/opt/primus/venv/bin:$PATH \
    PRIMUS_NATIVE_CACHE=/opt/primus/native \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
# The manifests name the process to run (python -m services.master, ...); alone, the image is the CLI.
ENTRYPOINT ["primus"]
CMD ["--help"]
