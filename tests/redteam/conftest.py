"""Fixtures of the red-team suite: one sandbox per backend (module scope), fresh caches.

Docker tests are marked ``docker`` and need the Docker Engine and the sandbox image (skipped
without, unless ``MAS_REQUIRE_DOCKER=1``, as in tests/sandboxes).
"""

from __future__ import annotations

import pytest

import sandboxes
from tests.sandboxes.conftest import _docker_or_skip

LIMITS = sandboxes.Limits(wall_s=5, cpu_s=5, memory_mb=512, max_output_bytes=256 * 1024)


@pytest.fixture(scope="module")
def local_sb():
    with sandboxes.LocalSandbox(workers=2, limits=LIMITS) as sb:
        yield sb


@pytest.fixture(scope="module")
def docker_sb():
    sb = _docker_or_skip()
    try:
        yield sb
    finally:
        sb.close()


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
