"""Admission under bursts larger than the workers: a queued request's clock starts when it runs,
not when its client sent it, so a small host gives the scores of a large one.

verl's sandbox-fusion client gives each request ``compile_timeout + run_timeout + 10`` s (a
per-read timeout of ``requests``), retries only a 504 (after 1 s, then 2 s) and scores anything
else that fails as an API error (-1). A request queued behind busy workers gets its answer's
first bytes (spaces) every ``--keepalive`` seconds, so that timeout restarts while it waits; the
queue's bound is answered with 504 at once. The scaled all-timeout burst runs verl's own
``check_correctness`` (``tests/integrations/peers/verl``) on 2 workers.
"""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.integrations.conftest import Server
from tests.integrations.peers.verl import verl_scorer

SLEEP = "import time\ntime.sleep({s})\nprint('slept')\n"
LOOP = "while True:\n    pass\n"


def _post(url: str, code: str, timeout: tuple[float, float] = (5.0, 30.0)) -> requests.Response:
    body = {"code": code, "language": "python", "run_timeout": 10}
    return requests.post(url + "/run_code", json=body, timeout=timeout)


@pytest.mark.serial  # requests a few tenths of a second apart must arrive in order
def test_a_queued_request_outlives_its_clients_read_timeout():
    """One worker, held 3 s by a sleeping program. A request with a 1 s read timeout queues
    behind it and still gets its result (kept alive by spaces); with keep-alive off it gets 504
    at the queue timeout; past the queue's bound, 504 at once. A client that gives up while
    queued leaves the queue: its program never runs and delays nobody."""
    server = Server(
        "adapters.serve_sandbox", "--workers", "1", "--queue", "2", "--keepalive", "0.3"
    )
    strict = Server(
        "adapters.serve_sandbox", "--workers", "1", "--keepalive", "0", "--queue-timeout", "1"
    )
    try:
        server.wait()
        strict.wait()
        with ThreadPoolExecutor(4) as pool:
            holder = pool.submit(_post, server.url, SLEEP.format(s=3))
            time.sleep(0.8)  # the holder runs
            t0 = time.monotonic()
            queued = pool.submit(_post, server.url, "print(6 * 7)", (5.0, 1.0))
            time.sleep(0.3)
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            ghost = socket.create_connection((host, int(port)))
            body = json.dumps({"code": SLEEP.format(s=5), "language": "python"}).encode()
            head = "POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            ghost.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            time.sleep(0.3)
            over = _post(server.url, "print(1)")  # holder running, two queued: the bound
            ghost.close()  # gives up while queued
            r = queued.result(timeout=60)
            waited = time.monotonic() - t0
            assert holder.result(timeout=60).json()["run_result"]["stdout"] == "slept\n"
        assert over.status_code == 504 and "queue is full" in over.json()["detail"]
        assert r.status_code == 200 and r.text.startswith(" ")  # kept alive, then the JSON
        assert r.json()["run_result"]["stdout"] == "42\n" and waited > 1.5
        t1 = time.monotonic()
        after = _post(server.url, "print(2)")  # the ghost's 5 s program does not run first
        assert after.json()["run_result"]["stdout"] == "2\n" and time.monotonic() - t1 < 3
        with ThreadPoolExecutor(2) as pool:
            pool.submit(_post, strict.url, SLEEP.format(s=3))
            time.sleep(0.8)
            refused = _post(strict.url, "print(1)")
        assert refused.status_code == 504 and "within 1 s" in refused.json()["detail"]
    finally:
        server.stop()
        strict.stop()


STAMP = "import time\nprint(time.time())\nblock = bytearray(24 << 20)\ntime.sleep(1.5)\n"


@pytest.mark.serial  # requests 0.3 s apart must arrive in order
def test_jobs_wait_for_the_memory_budget_not_only_for_a_worker():
    """Four workers but a 300 MiB budget: a request asking 200 MiB and one asking 60 run side
    by side; a second 200 MiB request waits until the first ends (first come first served: a
    request behind it would wait too, not overtake it)."""
    server = Server(
        "adapters.serve_sandbox",
        "--workers",
        "4",
        "--memory-budget-mb",
        "300",
        "--keepalive",
        "0.3",
    ).wait()

    def start(memory: int) -> float:
        body = {"code": STAMP, "language": "python", "run_timeout": 10, "memory_limit_MB": memory}
        r = requests.post(server.url + "/run_code", json=body, timeout=(5.0, 30.0))
        assert r.json()["status"] == "Success", r.text
        return float(r.json()["run_result"]["stdout"])

    try:
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(start, 200)
            time.sleep(0.3)
            small = pool.submit(start, 60)
            time.sleep(0.3)
            second = pool.submit(start, 200)
            t1, t3, t2 = first.result(60), small.result(60), second.result(60)
    finally:
        server.stop()
    assert t3 < t2  # fitted beside the first: not queued behind the second
    assert t2 - t1 > 1.4  # waited for the first job's memory


def test_admission_order_under_a_memory_budget():
    """First come first served: a large request at the head is not overtaken by a small one
    behind it; when it gives up, the small one is admitted."""
    import asyncio

    from adapters.integrations.sandbox_fusion import Admission

    async def scenario() -> list[bool]:
        gate = Admission(slots=4, max_queue=4, memory_mb=1000)
        held = gate.enter(600)
        big = gate.enter(800)  # waits for memory
        small = gate.enter(100)  # would fit, but queues behind big
        seen = [held.granted, big.granted, small.granted]
        big.release()  # the client gave up
        seen.append(small.granted)
        huge = gate.enter(5000)  # more than the budget: runs alone once the rest are done
        seen.append(huge.granted)
        held.release()
        small.release()
        seen += [huge.granted, gate.reserved_mb == 1000]
        return seen

    assert asyncio.run(scenario()) == [True, False, False, True, False, True, True]


@pytest.mark.slow
def test_verls_all_timeout_burst_on_two_workers():
    """verl's all-timeout pattern, scaled: 32 infinite loops at once (verl's client runs 32
    threads here) with a 2 s limit on 2 workers: 32 s of work, so most requests wait longer than
    verl's 14 s per-request timeout and its 27 s of 504 retries. Every one must score -3 (a
    time-out), as on 64 workers; before keep-alive, most scored -1."""
    utils = verl_scorer()
    server = Server("adapters.serve_sandbox", "--workers", "2").wait()
    try:
        t0 = time.monotonic()
        cases = {"inputs": [""] * 32, "outputs": ["never"] * 32}
        results, meta = utils.check_correctness(server.url + "/run_code", cases, LOOP, timeout=2)
        elapsed = time.monotonic() - t0
    finally:
        server.stop()
    print(f"[admission] 32 loops on 2 workers: {results.count(-3)} time-outs in {elapsed:.0f} s")
    assert results == [-3] * 32, [m["status"] for m in meta]
    assert elapsed > 27  # the burst outlasted verl's retries: the keep-alive carried it
