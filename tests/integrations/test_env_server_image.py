"""The OpenEnv server image (``docker/env-server.Dockerfile``) started the way OpenEnv's own
clients start one, ``EnvClient.from_docker_image`` (LocalDockerProvider: ``docker run -p
PORT:8000 -e ...``), and an oracle episode played through it against an in-process twin. The
setting is MarsRL's (no agent code to run: bubblewrap inside a container needs privileges that
``from_docker_image`` does not grant)."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

import envs
from adapters.integrations.openenv import MasAction, MasEnvClient
from tests.integrations.conftest import flush

IMAGE = os.environ.get("MAS_ENV_SERVER_IMAGE", "mas-env-server:latest")
pytestmark = pytest.mark.docker


def _image_present() -> bool:
    try:
        out = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def test_episode_through_from_docker_image():
    if not _image_present():
        if os.environ.get("MAS_REQUIRE_DOCKER") == "1":
            pytest.fail(f"MAS_REQUIRE_DOCKER=1 but {IMAGE} is missing")
        pytest.skip(f"{IMAGE} not built (bash scripts/build_env_server_image.sh)")

    from openenv.core.containers.runtime.providers import LocalDockerProvider

    class Patient(LocalDockerProvider):
        """OpenEnv's provider with a longer wait for /health (a loaded CI machine)."""

        def wait_for_ready(self, base_url: str, timeout_s: float = 30.0) -> None:
            super().wait_for_ready(base_url, timeout_s=max(timeout_s, 180.0))

    async def play() -> tuple[bool, float, float]:
        client = await MasEnvClient.from_docker_image(
            IMAGE, provider=Patient(), env_vars={"MAS_ENV": "solver_verifier_corrector"}
        )
        try:
            twin = envs.make("solver_verifier_corrector").unwrapped
            twin.reset(seed=7)
            flush(twin)
            result = await client.reset(seed=7)
            total = twin_total = 0.0
            while not result.done:
                assert result.observation.agent == twin.agent_selection
                completion = twin.oracle(twin.agent_selection)
                twin.step(completion)
                twin_total += sum(twin.rewards.values())
                flush(twin)
                result = await client.step(MasAction(completion=completion))
                total += result.reward
            return bool(result.observation.success), total, twin_total
        finally:
            await client.close()

    success, total, twin_total = asyncio.run(play())
    assert success and total == pytest.approx(twin_total)
