"""Shared fixtures: the real local sandbox and a scripted fake for classification tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def sandbox():
    """The shared local sandbox (bubblewrap); tests needing it fail loudly if it is broken."""
    import sandboxes

    sb = sandboxes.default()
    res = sb.run("print(6 * 7)")
    assert res.stdout == "42\n", f"the local sandbox does not work here: {res}"
    return sb


class FakeSandbox:
    """Returns pre-made ExecResults in order and records the jobs it was given."""

    def __init__(self, results):
        self.results = list(results)
        self.jobs = []

    def run_many(self, jobs):
        jobs = list(jobs)
        self.jobs.extend(jobs)
        out, self.results = self.results[: len(jobs)], self.results[len(jobs) :]
        return out


@pytest.fixture
def fake_sandbox():
    return FakeSandbox
