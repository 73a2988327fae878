# The OpenEnv server of a setting (python -m adapters.serve_env) as an image, for OpenEnv's
# `from_docker_image`, AutoEnv and SkyRL's OpenEnv integration (container port 8000):
#
#   bash scripts/build_env_server_image.sh                 # mas-env-server:latest
#
# The build context is the one the script assembles (the packages, pyproject.toml, README.md,
# openenv.yaml and pip-ca.crt), not the repository root.
#   docker run -p 8000:8000 -e MAS_ENV=sokoban mas-env-server:latest
#
# Environment: MAS_ENV (the setting, default sokoban), MAS_SERVE_ARGS (more serve_env flags,
# e.g. "--max-sessions 16 --env-config num_boxes=2"), MAS_SERVICE_TOKEN (bearer token, optional).
# The code settings run their programs with the local (bubblewrap) backend, which needs the
# container to allow namespaces (docker run --privileged, or a seccomp/AppArmor profile that
# permits unshare); the other settings need nothing more.
ARG BASE=mas-sandbox-base:bookworm
FROM $BASE

RUN set -eu; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3-venv python3-pip python3-dev gcc libc6-dev bubblewrap ca-certificates; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv  # gcc: some dependencies (pycosat) ship only sources

ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 MAS_ENV=sokoban MAS_SERVE_ARGS=""
WORKDIR /app
COPY . .
# pip-ca.crt: the CA bundle pip trusts on the building host (empty when none is set), for
# builds behind a TLS-intercepting proxy; the build script puts it in the context
RUN set -eu; \
    if [ -s pip-ca.crt ]; then export PIP_CERT=/app/pip-ca.crt; fi; \
    pip install --no-cache-dir ".[serve]"; \
    rm -f pip-ca.crt

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"
CMD ["sh", "-c", "exec python -m adapters.serve_env --host 0.0.0.0 --port 8000 --env \"$MAS_ENV\" $MAS_SERVE_ARGS"]
