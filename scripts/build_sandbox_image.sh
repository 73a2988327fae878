#!/usr/bin/env bash
# Build the Docker image used by sandboxes.DockerSandbox (idempotent):
#
#   bash scripts/build_sandbox_image.sh
#
# If the image already exists, nothing happens. Otherwise a minimal Debian rootfs with python3 is
# made with debootstrap (no image registry needed, only a Debian mirror), imported as the base
# image, and sandboxes/Dockerfile is built on top of it, adding the toolchains of the sandbox
# service's languages from Debian packages (gcc, g++, nodejs, default-jdk-headless, golang-go,
# python3-pytest).
# Measured cold on a loaded 2-core machine: 108-165 s and 1.27 GB (42-72 s and 161 MB without
# the toolchains; adapters/integrations/languages.py has the breakdown).
#
# Environment:
#   MAS_SANDBOX_IMAGE       image to build (default mas-sandbox:latest; DockerSandbox's default)
#   MAS_SANDBOX_BASE_IMAGE  imported rootfs image (default mas-sandbox-base:bookworm)
#   MAS_SANDBOX_SUITE       Debian suite (default bookworm)
#   MAS_SANDBOX_MIRROR      Debian mirror for debootstrap (default: debootstrap's own)
#   MAS_SANDBOX_TOOLCHAINS  Debian packages for the other languages (default: the Dockerfile's;
#                           empty: Python only)
#   MAS_SANDBOX_FORCE=1     rebuild even if the image exists (one built before the toolchains
#                           were added, without their label, is rebuilt anyway)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${MAS_SANDBOX_IMAGE:-mas-sandbox:latest}"
BASE_IMAGE="${MAS_SANDBOX_BASE_IMAGE:-mas-sandbox-base:bookworm}"
SUITE="${MAS_SANDBOX_SUITE:-bookworm}"
MIRROR="${MAS_SANDBOX_MIRROR:-}"

log() { echo "[build_sandbox_image] $*"; }

if ! docker info >/dev/null 2>&1; then
  log "no Docker Engine answers (start dockerd first)" >&2
  exit 1
fi

LABEL_KEY=org.mas-rl-envs.toolchains  # set by sandboxes/Dockerfile since it installs toolchains
if [ "${MAS_SANDBOX_FORCE:-0}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  if docker image inspect -f '{{json .Config.Labels}}' "$IMAGE" | grep -q "\"$LABEL_KEY\""; then
    log "$IMAGE already exists; nothing to do"
    exit 0
  fi
  log "$IMAGE predates the languages' toolchains: rebuilding it"
fi

if [ "${MAS_SANDBOX_FORCE:-0}" = 1 ] || ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "debootstrap is missing: apt-get install debootstrap (Debian/Ubuntu)" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    log "debootstrap needs root" >&2
    exit 1
  fi
  ROOT="$(mktemp -d /tmp/mas-sandbox-rootfs.XXXXXX)"
  trap 'rm -rf "$ROOT"' EXIT
  log "debootstrap $SUITE (minbase + python3) into $ROOT"
  # python3, not python3-minimal: the minimal package lacks json, ctypes, resource, ...
  # shellcheck disable=SC2086
  debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOT" $MIRROR >/tmp/mas-sandbox-debootstrap.log 2>&1 || {
    tail -n 30 /tmp/mas-sandbox-debootstrap.log >&2
    log "debootstrap failed (full log: /tmp/mas-sandbox-debootstrap.log)" >&2
    exit 1
  }
  rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
  log "importing the rootfs as $BASE_IMAGE"
  tar -C "$ROOT" -c . | docker import - "$BASE_IMAGE" >/dev/null
  rm -rf "$ROOT"
  trap - EXIT
fi

log "building $IMAGE from sandboxes/Dockerfile (BASE=$BASE_IMAGE)"
build_args=(--build-arg BASE="$BASE_IMAGE")
if [ -n "${MAS_SANDBOX_TOOLCHAINS+set}" ]; then
  build_args+=(--build-arg TOOLCHAINS="$MAS_SANDBOX_TOOLCHAINS")
fi
docker build "${build_args[@]}" -t "$IMAGE" sandboxes/
docker run --rm --network none "$IMAGE" python3 -c "import ctypes, json, mmap, resource" \
  || { log "the image's python3 lacks needed modules" >&2; exit 1; }
# the languages' executables the image has (the sandbox service lists them in /v1/languages)
docker run --rm --network none "$IMAGE" python3 -c "import shutil; print('toolchains:', \
  ' '.join(n for n in ('g++', 'gcc', 'node', 'javac', 'go', 'bash') if shutil.which(n)))"
log "done: $IMAGE"
