#!/usr/bin/env bash
# Build the OpenEnv server image (docker/env-server.Dockerfile) on the sandbox's Debian base
# image (made by scripts/build_sandbox_image.sh, so no image registry is needed):
#
#   bash scripts/build_env_server_image.sh      # MAS_ENV_SERVER_IMAGE (default mas-env-server:latest)
#
# The context is a temporary directory with the packages and, as pip-ca.crt, the CA bundle pip
# trusts here ($PIP_CERT, else $SSL_CERT_FILE; empty if neither), so the image's pip reaches
# PyPI through the same TLS proxy as the host's.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${MAS_ENV_SERVER_IMAGE:-mas-env-server:latest}"
BASE_IMAGE="${MAS_SANDBOX_BASE_IMAGE:-mas-sandbox-base:bookworm}"
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  bash scripts/build_sandbox_image.sh
fi
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp -r pyproject.toml README.md openenv.yaml envs verifiers sandboxes adapters "$ctx"/
find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
ca="${PIP_CERT:-${SSL_CERT_FILE:-}}"
if [ -n "$ca" ] && [ -f "$ca" ]; then cp "$ca" "$ctx/pip-ca.crt"; else : > "$ctx/pip-ca.crt"; fi
docker build --build-arg BASE="$BASE_IMAGE" -f docker/env-server.Dockerfile -t "$IMAGE" "$ctx"
