"""Reusable checks of the environment contract (docs/design.md section 3), used by the per-setting
tests and by test_contract.py over every registered setting."""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator
from typing import Any

import envs

GARBAGE = [
    "",
    " ",
    "\x00\x01\x02",
    "####",
    "#### ",
    "####\n",
    "```python\n",
    "```python\nprint(1)",
    "```\n```",
    "```python\n```",
    "```python\nraise SystemExit(3)\n```",
    "```python\nimport sys; sys.stdout.write('\\xff' * 10)\n```",
    "[[[[[[[[[[",
    "]]]]",
    "{}",
    "null",
    "#### []",
    "#### [[]]",
    "#### [1, 2, 3]",
    "#### {'a': 1}",
    "<score>11</score>",
    "<answer></answer>",
    "\\boxed{",
    "\\boxed{}}}}",
    "😀" * 1000,
    "a" * 300_000,
    "#### " + "[U," * 20_000,
    "\ud800",
    "\r\n\r\n####\r\n[U]\r\n",
]

_FRAGMENTS = [
    "```python\n",
    "```py\n",
    "\n```\n",
    "```",
    "####",
    "#### ",
    "\n",
    "[",
    "]",
    "[U,R,D,L]",
    "[[1,2],[3,4]]",
    "[1,2,3]",
    ",",
    '"',
    "'",
    "print(",
    ")",
    "print(1)",
    "import os",
    "0",
    "9",
    "-1",
    "1e309",
    "NaN",
    "<score>",
    "</score>",
    "<answer>",
    "</answer>",
    "<question>",
    "</question>",
    "<plan>",
    "</plan>",
    "\\boxed{",
    "}",
    "{",
    "**Test Input:**",
    "**Test Output:**",
    "correct",
    "incorrect",
    "\x00",
    "é",
    "中",
    "\t",
]


def fuzz_completions(seed: int, n: int) -> Iterator[str]:
    """``n`` seeded random completions built from format fragments and random characters."""
    rng = random.Random(seed)
    alphabet = string.printable + "éß中😀"
    for i in range(n):
        if i < len(GARBAGE) and rng.random() < 0.5:
            yield GARBAGE[i]
            continue
        pieces = []
        for _ in range(rng.randint(0, 12)):
            if rng.random() < 0.6:
                pieces.append(rng.choice(_FRAGMENTS))
            else:
                pieces.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))))
        yield "".join(pieces)


def play(
    env: Any, policy: Callable[[Any, str], str], seed: int | None = None, options=None
) -> dict:
    """Play one episode of a wrapped env; return rewards per agent, success and step count."""
    env.reset(seed=seed, options=options)
    totals: dict[str, float] = {a: 0.0 for a in env.possible_agents}
    steps = 0
    success = False
    for agent in env.agent_iter():
        _, reward, term, trunc, info = env.last()
        totals[agent] += reward
        success = success or bool(info.get("success"))
        if term or trunc:
            env.step(None)
            continue
        env.step(policy(env, agent))
        steps += 1
    return {"rewards": totals, "success": success, "steps": steps}


def oracle_policy(env: Any, agent: str) -> str:
    return env.unwrapped.oracle(agent)


def snapshot(raw: Any) -> tuple:
    """Observable state of a raw env, for exact comparisons."""
    obs = {a: raw.observe(a)["prompt"] for a in raw.agents}
    return (
        raw.agent_selection if raw.agents else None,
        list(raw.agents),
        dict(raw._cumulative_rewards),
        dict(raw.terminations),
        dict(raw.truncations),
        repr(raw.infos),
        obs,
        raw.turn,
        raw.success,
    )


def check_clone_independent(env_id: str, seed: int = 0, **config: Any) -> None:
    """Stepping a clone never changes the original; the original then continues exactly as an
    untouched twin does."""
    original = envs.make(env_id, **config)
    twin = envs.make(env_id, **config)
    original.reset(seed=seed)
    twin.reset(seed=seed)
    first = original.agent_selection
    original.step(original.unwrapped.oracle(first))
    twin.step(twin.unwrapped.oracle(first))
    before = snapshot(original.unwrapped)
    clone = original.unwrapped.clone()
    rng = random.Random(seed)
    for agent in clone.agent_iter(50):
        _, _, term, trunc, _ = clone.last()
        if term or trunc:
            clone.step(None)
            continue
        clone.step(rng.choice(GARBAGE[:24]) if rng.random() < 0.5 else clone.oracle(agent))
    assert snapshot(original.unwrapped) == before, "stepping the clone changed the original"
    for a, b in zip(original.agent_iter(), twin.agent_iter()):
        assert a == b
        la, lb = original.last(), twin.last()
        assert la[0] == lb[0] and la[1:4] == lb[1:4] and repr(la[4]) == repr(lb[4])
        if la[2] or la[3]:
            original.step(None)
            twin.step(None)
            continue
        action = original.unwrapped.oracle(a)
        original.step(action)
        twin.step(action)
    assert not original.agents and not twin.agents
