"""Fixtures of the red-team suite: the sandboxes of tests/sandboxes (one per backend, module
scope; Docker tests are marked ``docker``) and fresh result caches for every test."""

from __future__ import annotations

import pytest

import sandboxes
from tests.sandboxes.conftest import docker_sandbox, local_sandbox, one_worker_sandbox

__all__ = ["docker_sandbox", "local_sandbox"]


@pytest.fixture(autouse=True)
def fresh_caches():
    """Results are cached per program and tests, not per backend: start every test clean."""
    import envs.code.testing
    import envs.pools
    import verifiers.math_answer
    import verifiers.plain_tests

    for cache in (envs.code.testing._REPORTS, envs.code.testing._TESTER):
        cache.clear()
    envs.pools._CACHE.clear()
    verifiers.math_answer._CACHE.clear()
    verifiers.plain_tests._DISCOVERED.clear()
    verifiers.plain_tests._CONCRETE.clear()
    yield


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def make_one_worker(request):
    """A factory of fresh one-worker sandboxes of the parametrised backend."""
    made = []

    def make():
        lim = sandboxes.Limits(wall_s=10, cpu_s=10, memory_mb=256, max_procs=64)
        sb = one_worker_sandbox(request.param, lim)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()
