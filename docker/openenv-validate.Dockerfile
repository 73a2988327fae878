# The image `openenv validate .` builds and runs (openenv.yaml's validation.execution): the
# OpenEnv server image with this checkout's packages over the ones it was built with, so the
# runtime checks see the code under validation. Build the server image first:
#
#   bash scripts/build_env_server_image.sh && openenv validate .
#
# OpenEnv runs the container read-only, as an unprivileged user, with /tmp as its only writable
# place; the setting is the server image's default (MAS_ENV=sokoban), which runs no programs.
ARG SERVER_IMAGE=mas-env-server:latest
FROM $SERVER_IMAGE
COPY envs /app/envs
COPY verifiers /app/verifiers
COPY sandboxes /app/sandboxes
COPY adapters /app/adapters
