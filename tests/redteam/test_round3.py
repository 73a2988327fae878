"""Issue 24's attacks that are not reward forgeries of one completion: secrets in reasons,
state carried between jobs, output buffers (the forgeries themselves are rows of
:mod:`tests.redteam.attacks`, ``ROUND3``)."""

from __future__ import annotations

import json

import envs

from .attacks import CLIP, py


def test_golden_source_and_values_never_reach_the_testers_reasons(local_sandbox):
    """Root cause A: a failed golden run's reason quoted what the golden program returned, so
    a test returning the program's own source put it in ``reward_parts`` (which ``serve_env``
    sends to clients). Tests that could fetch it are now invalid, and no reason about the
    golden run shows a value it returned."""
    leaks = [
        "assert clip(5, 0, 10) == 5 and __builtins__.eval(\"open('/tmp/job/main.py').read()\") == 0",
        "assert clip(5, 0, 10) == 7",  # the golden returns 5: that 5 must not be shown
        "assert clip(5, 0, 10) == 7, clip(5, 0, 10)",  # nor through the assert's message
        "assert clip.__globals__ == 0",
    ]
    for test in leaks:
        env = envs.make("code", sandbox=local_sandbox, max_turns=2).unwrapped
        env.reset(options={"instance": CLIP})
        env.step(py(CLIP["solution"]))
        env.step(f"```python\n{test}\n```")
        parts = env.infos["tester"]["reward_parts"]
        text = json.dumps(parts["reasons"])
        assert parts["components"]["valid"] == 0.0, (test, parts)
        assert "return lo" not in text and "returned" not in text, (test, text)
