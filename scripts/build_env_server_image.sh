#!/usr/bin/env bash
# Build the OpenEnv server image (docker/env-server.Dockerfile) on the sandbox's Debian base
# image (made by scripts/build_sandbox_image.sh, so no image registry is needed):
#
#   bash scripts/build_env_server_image.sh      # MAS_ENV_SERVER_IMAGE (default mas-env-server:latest)
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${MAS_ENV_SERVER_IMAGE:-mas-env-server:latest}"
BASE_IMAGE="${MAS_SANDBOX_BASE_IMAGE:-mas-sandbox-base:bookworm}"
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  bash scripts/build_sandbox_image.sh
fi
docker build --build-arg BASE="$BASE_IMAGE" -f docker/env-server.Dockerfile -t "$IMAGE" .
