"""Fixtures of the red-team suite: the sandboxes of tests/sandboxes (one per backend, module
scope; Docker tests are marked ``docker``) and fresh result caches for every test."""

from __future__ import annotations

import pytest

from tests.sandboxes.conftest import docker_sandbox, local_sandbox

__all__ = ["docker_sandbox", "local_sandbox"]


@pytest.fixture(autouse=True)
def fresh_caches():
    """Results are cached per program and tests, not per backend: start every test clean."""
    import envs.code
    import envs.pools
    import verifiers.code_tests
    import verifiers.math_answer

    for cache in (envs.code._REPORTS, envs.code._TESTER):
        cache.clear()
    envs.pools._CACHE.clear()
    verifiers.math_answer._CACHE.clear()
    verifiers.code_tests._DISCOVERED.clear()
    yield
