"""verl's all-timeout pattern against ``serve_sandbox``: a burst of infinite loops with a few
correct programs among them, sent the way verl's sandbox-fusion reward client sends them (its
HTTP timeout is ``compile_timeout + run_timeout + 10`` s per attempt; only a 504 is retried,
after 1 s then 2 s, three attempts in all; anything else is an ``api_error``, scored -1). No
request may be lost: every infinite loop comes back ``TimeLimitExceeded`` and every correct
program ``Success``.

Scaled to a CI machine: verl's defaults are 64 concurrent requests with 10 s timeouts, and the
service's default ``--workers`` is 64 so that all of them start at once; here 32 requests with
2 s timeouts, against 32 workers (the same ratio), and against 4 workers with a queue (the 504
path: queued requests are answered 504 within ``--queue-timeout`` instead of running out the
client's deadline, and verl's retries get them through).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.integrations.conftest import Server

RUN_TIMEOUT = 2
COMPILE_TIMEOUT = 2
API_SLACK = 10  # verl adds this to compile_timeout + run_timeout for its HTTP timeout
RETRY_DELAYS = (1, 2)
LOOP = "while True:\n    pass\n"
CORRECT = "print(sum(range(10)))\n"


def verl_call(url: str, code: str) -> tuple[dict | None, str | None]:
    """One request with verl's timeout and 504-only retry rules: (response JSON, api error)."""
    payload = {
        "compile_timeout": COMPILE_TIMEOUT,
        "run_timeout": RUN_TIMEOUT,
        "code": code,
        "stdin": "",
        "memory_limit_MB": 1024,
        "language": "python",
        "files": {},
        "fetch_files": [],
    }
    error = None
    for attempt in range(1 + len(RETRY_DELAYS)):
        try:
            r = requests.post(
                url + "/run_code",
                json=payload,
                timeout=COMPILE_TIMEOUT + RUN_TIMEOUT + API_SLACK,
            )
        except requests.RequestException as exc:
            return None, f"request error: {exc}"
        if r.status_code == 504:
            error = f"504 on attempt {attempt + 1}"
            if attempt < len(RETRY_DELAYS):
                time.sleep(RETRY_DELAYS[attempt])
            continue
        if r.status_code != 200:
            return None, f"HTTP {r.status_code}"
        return r.json(), None
    return None, error


@pytest.mark.parametrize(
    "workers, extra",
    [("32", ()), ("4", ("--queue", "64"))],
    ids=["workers-32", "workers-4-queued"],
)
def test_all_timeout_burst_loses_no_request(workers, extra):
    server = Server("adapters.serve_sandbox", "--workers", workers, *extra).wait()
    try:
        codes = [CORRECT if i % 8 == 0 else LOOP for i in range(32)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(len(codes)) as pool:
            out = list(pool.map(lambda c: verl_call(server.url, c), codes))
        elapsed = time.monotonic() - t0
    finally:
        server.stop()
    errors = [e for _, e in out if e is not None]
    print(f"[admission] workers={workers}: {len(errors)}/{len(codes)} lost, {elapsed:.1f} s")
    assert not errors, f"{len(errors)} of {len(codes)} requests lost: {errors[:3]}"
    for code, (resp, _) in zip(codes, out, strict=True):
        assert resp is not None
        if code == CORRECT:
            assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "45\n", resp
        else:
            assert resp["run_result"]["status"] == "TimeLimitExceeded", resp
    # all at once: about one run_timeout; queued on 4 workers: 8 rounds of 2 s, plus retries
    assert elapsed < (RUN_TIMEOUT + 8 if workers == "32" else 40), elapsed
