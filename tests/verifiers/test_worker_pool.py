"""The worker pool shared by the math grader and the bounded checks
(:mod:`verifiers._worker_pool`): deadlines, replacement, one worker per caller, per-process pools.
The worker here is ``cat``: it echoes every request line, and answers nothing it was not sent."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from verifiers._worker_pool import PipeWorker, SharedPool, WorkerPool


def _cat() -> PipeWorker:
    return PipeWorker(subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE))


@pytest.fixture
def pool():
    p = WorkerPool(1, _cat)
    yield p
    p.close()


def test_a_silent_worker_costs_the_deadline_and_an_escaping_error_replaces_it(pool):
    with pool.checkout() as lease:
        w = lease.get()
        assert w.write(b'{"x": 1}\n', 1.0) and w.recv(1.0) == {"x": 1}
        t = time.monotonic()
        assert w.recv(0.2) is None and w.failure == "deadline"
        assert 0.2 <= time.monotonic() - t < 1.0
    with pytest.raises(KeyError), pool.checkout() as lease:
        assert lease.get() is w  # kept after a clean checkout
        raise KeyError("out of step")
    assert pool.restarts == 1 and not w.alive() and w not in pool._all
    with pool.checkout() as lease:
        fresh = lease.get()
        assert fresh is not w and fresh.alive() and pool._all == {fresh}


def test_a_dead_or_garbling_worker_is_seen_and_replaced(pool):
    with pool.checkout() as lease:
        w = lease.get()
        assert w.write(b"[1, 2]\n", 1.0) and w.recv(1.0) is None and w.failure == "garbled"
        w.proc.kill()
        w.proc.wait()
        assert w.recv(1.0) is None and w.failure == "exited"
        assert not w.write(b"{}\n", 1.0)
        assert lease.get() is not w and pool.restarts == 1


def test_one_worker_serves_one_caller_at_a_time(pool):
    held = threading.Event()
    order: list[str] = []

    def other() -> None:
        held.wait()
        with pool.checkout():
            order.append("other")

    thread = threading.Thread(target=other)
    thread.start()
    with pool.checkout() as lease:
        lease.get()
        held.set()
        time.sleep(0.2)
        order.append("first")
    thread.join(5)
    assert order == ["first", "other"]


def test_close_kills_every_worker():
    p = WorkerPool(2, _cat)
    with p.checkout() as a, p.checkout() as b:
        workers = [a.get(), b.get()]
    p.close()
    assert p.closed and not any(w.alive() for w in workers) and not p._all


def test_the_shared_pool_is_sized_from_the_environment_and_made_again(monkeypatch):
    monkeypatch.setenv("MAS_TEST_WORKERS", "3")
    shared = SharedPool(lambda n: WorkerPool(n, _cat), "MAS_TEST_WORKERS")
    first = shared.get()
    assert first.n_workers == 3 and shared.get() is first
    first.close()
    second = shared.get()
    assert second is not first and second.n_workers == 3
    monkeypatch.setattr(second, "pid", os.getpid() + 1)  # as seen from a forked child
    monkeypatch.setenv("MAS_TEST_WORKERS", "0")
    third = shared.get()
    assert third is not second and third.n_workers == min(2, os.cpu_count() or 1)
