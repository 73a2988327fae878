"""Output past 64 KiB through the SandboxFusion-compatible service (issue 24, root cause D):
before the fix a 200,000-byte stdout came back as its last 3,392 bytes with status
``Success``."""

from __future__ import annotations

import requests

LINE = "0123456789abcdef" * 4 + "\n"
TEXT = (LINE * (200_000 // len(LINE) + 1))[:200_000]


def test_200kb_of_stdout_through_the_service(server_factory):
    service = server_factory({"local": ("adapters.serve_sandbox", "--workers", "1")})["local"]
    for _ in range(2):  # twice on the one worker: the second job sees nothing of the first
        body = {"code": f"import sys\nsys.stdout.write({TEXT!r})", "language": "python"}
        r = requests.post(service.url + "/run_code", json=body, timeout=60)
        assert r.status_code == 200
        out = r.json()
        assert out["status"] == "Success" and out["message"] == ""
        assert out["run_result"]["stdout"] == TEXT
