"""A setting written outside the repository, following only CONTRIBUTING's "Adding a setting":
``--env package.module:id`` trains it and evaluates it with no edit to ``adapters/``.

The toy setting (``echo_toy``): a caller reads a number and announces it, an echo hears the
caller and repeats it; each earns its correctness (the caller also a small share for being brief,
so that a random model's candidates differ and one step has something to learn), mixed
with the team reward (the echo got the number right) by the base ``RewardConfig``'s convex form
``lam * team + (1 - lam) * local``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

TOY_MODULE = '''
"""echo_toy: a caller announces a number, an echo repeats it (a test setting).

Agents, in turn order: ``caller`` (sees the number), ``echo`` (sees only what the caller said).
A completion answers with ``Answer: <digits>``. Rewards: ``caller_ok`` / ``echo_ok`` (1 when the
answer is the number), ``caller_brief`` (1 - characters / 500, at least 0), team = the
echo's correctness; convex mixing with ``lam`` = 0.5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import envs
from envs.core.base import TurnBasedEnv, wrap
from envs.core.config import EnvConfig, RewardConfig
from envs.core.rewards import RewardParts

_ANSWER = re.compile(r"Answer:\\s*(\\d{1,6})")

envs.register(
    "echo_toy",
    f"{__name__}:env",
    roles=("caller", "echo"),
    description="caller + echo (a test setting)",
    team_reward=True,
)


@dataclass(frozen=True)
class EchoRewards(RewardConfig):
    caller_ok: float = 0.8
    caller_brief: float = 0.2
    echo_ok: float = 1.0
    roles: ClassVar[tuple[str, ...]] = ("caller", "echo")


@dataclass(frozen=True)
class EchoConfig(EnvConfig):
    digits: int = 3
    max_turns: int = 1
    rewards: EchoRewards = field(default_factory=EchoRewards)


class EchoEnv(TurnBasedEnv):
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "echo_toy_v0",
        "is_parallelizable": False,
    }
    AGENTS = envs.roles_of("echo_toy")
    config_cls = EchoConfig
    config: EchoConfig

    def _generate_instance(self, rng):
        return str(int(rng.integers(10 ** (self.config.digits - 1), 10**self.config.digits)))

    def _instance_from_dict(self, data):
        if not (isinstance(data, dict) and set(data) == {"number"}):
            raise ValueError('an echo_toy instance is {"number": "<1 to 6 digits>"}')
        number = data["number"]
        if not (isinstance(number, str) and 1 <= len(number) <= 6 and number.isdigit()):
            raise ValueError('an echo_toy instance is {"number": "<1 to 6 digits>"}')
        return number

    def _reset_state(self, instance):
        self.said = ""

    def _prompt(self, agent):
        if agent == "caller":
            return f"The number is {self.instance}. Announce it as 'Answer: <number>'."
        return f"The caller said: {self.said[:200]!r}. Repeat the number as 'Answer: <number>'."

    def _act(self, agent, completion):
        found = _ANSWER.search(completion[:1000])
        answer = found.group(1) if found else ""
        ok = float(answer == self.instance)
        if agent == "caller":
            self.said = completion[:1000]
            brief = 1.0 - min(len(completion), 500) / 500
            return RewardParts.build(agent, {"ok": ok, "brief": brief}, self.config.rewards)
        self.success = bool(ok)
        self.end_episode()
        return RewardParts.build(agent, {"ok": ok}, self.config.rewards, team=ok)

    def _render_text(self):
        return f"number {self.instance}, caller said {self.said[:80]!r}"

    def oracle(self, agent):
        return f"Answer: {self.instance}"


def env(**kwargs):
    return wrap(EchoEnv(**kwargs))

'''


def _run(args: list[str], tmp_path: Path) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
        "OMP_NUM_THREADS": "1",
    }
    out = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.fixture
def toy_package(tmp_path: Path) -> Path:
    pkg = tmp_path / "toy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "echo.py").write_text(textwrap.dedent(TOY_MODULE))
    return tmp_path


def test_a_setting_outside_the_repository_trains_and_evaluates(toy_package: Path):
    assert not (REPO / "toy_pkg").exists()
    env_id = "toy_pkg.echo:echo_toy"
    # AT-GRPO (the recipe a setting without its own gets), one step with the tiny model
    run_dir = toy_package / "run"
    _run(
        ["-m", "adapters.train", "--env", env_id, "--model", "tiny", "--steps", "1",
         "--eval-episodes", "2", "--output-dir", str(run_dir), "--no-progress"],
        toy_package,
    )  # fmt: skip
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["optimizer_steps"] >= 1 and row["samples_trained"] > 0
    saved = (run_dir / "config.yaml").read_text()
    assert "recipe: at-grpo" in saved
    assert "max_turns" not in saved  # the recipe keeps the setting's own horizon (1 turn)
    # the oracle: both roles right, so the team reward is 1 and every episode a success
    report = toy_package / "oracle.json"
    _run(
        ["-m", "adapters.evaluate", "--env", env_id, "--policy", "oracle", "--episodes", "3",
         "--json", str(report)],
        toy_package,
    )  # fmt: skip
    got = json.loads(report.read_text())
    assert got["success_rate"] == 1.0 and got["team_reward"] == 1.0
    assert got["reward_per_agent"]["echo"] == 1.0  # 0.5 * team 1 + 0.5 * echo_ok 1
    # and as a suite entry
    out = toy_package / "suite"
    _run(
        ["-m", "adapters.evaluate", "--suite", env_id, "--policy", "oracle", "--episodes", "2",
         "--out", str(out)],
        toy_package,
    )  # fmt: skip
    (suite_row,) = json.loads((out / "results.json").read_text())["rows"]
    assert suite_row["setting"] == "echo_toy" and suite_row["mode"] == "multi"
    assert suite_row["success_rate"]["mean"] == 1.0 and suite_row["team_reward"]["mean"] == 1.0
