"""Every forgery of :mod:`tests.redteam.attacks`, through ``env.step`` on the real sandbox (both
backends for the ones that run code): it earns no more than the honest wrong answer, and the
host process survives (the step returns, the sandbox still works)."""

from __future__ import annotations

import os

import pytest

from .attacks import ALL, CONTROLS, Forgery

SANDBOXED = [f for f in ALL if f.sandboxed]
PURE = [f for f in ALL if not f.sandboxed]


def test_at_least_thirty_forgeries_over_the_sandboxed_settings():
    assert len({f.name for f in ALL}) == len(ALL) >= 30
    assert {f.setting for f in ALL} == {"code", "math", "mae", "sage", "marsrl"}


def _check(forgery: Forgery, sb) -> None:
    pid = os.getpid()
    honest = forgery.play(forgery.honest, sb)
    forged = forgery.play(forgery.forged, sb)
    assert forged <= honest + 1e-9, (forgery.name, forged, honest)
    assert os.getpid() == pid
    assert sb is None or sb.run("print(6 * 7)").stdout == "42\n"  # the sandbox still works


@pytest.mark.parametrize("forgery", SANDBOXED, ids=str)
def test_forgery_local(forgery, local_sandbox):
    _check(forgery, local_sandbox)


@pytest.mark.docker
@pytest.mark.parametrize("forgery", SANDBOXED, ids=str)
def test_forgery_docker(forgery, docker_sandbox):
    _check(forgery, docker_sandbox)


@pytest.mark.parametrize("forgery", PURE, ids=str)
def test_forgery_without_code(forgery):
    _check(forgery, None)


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c[0].__name__)
def test_correct_answers_still_beat_honest_wrong_ones(control, backend, request):
    play, correct, honest = control
    sb = request.getfixturevalue(f"{backend}_sandbox")
    assert play(correct, sb) > play(honest, sb)
