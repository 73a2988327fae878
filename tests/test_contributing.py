"""CONTRIBUTING's "Adding a setting", done the way it says in a copy of the checkout: a module in
``envs/``, its registration in ``envs/__init__.py`` and its tests, three files and nothing else;
then the suite's registry-driven tests (the PettingZoo contract, clones, splits, the reward
audit, the registry listing, the evaluation suites, the recipes' CPU scale-down) run on it.

The setting is the toy of ``tests/adapters/test_outside_setting.py`` (a caller announces a
number, an echo repeats it), moved into the package.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.adapters.test_outside_setting import TOY_MODULE
from tests.checkout import package_copy

SETTING_MODULE = (
    textwrap.dedent(TOY_MODULE).split("\nenvs.register(")[0].replace("import envs\n", "", 1)
)
REGISTRATION = (
    'register("echo_toy", "envs.echo_toy:env", description="caller + echo (a test setting)", '
    "team_reward=True)\n"
)
SETTING_TESTS = '''
"""echo_toy: rewards by hand, a format failure, the oracle."""

import pytest

import envs


def test_rewards_by_hand_and_the_oracle():
    env = envs.make("echo_toy")
    env.reset(seed=3)
    number = env.unwrapped.instance
    env.step(f"Answer: {number}")  # caller: 0.5 * 0 (team pending) + 0.5 * (0.8 + 0.2 * brief)
    brief = 1 - len(f"Answer: {number}") / 500
    assert env.rewards["caller"] == pytest.approx(0.5 * (0.8 + 0.2 * brief))
    env.step("no number here")  # echo: wrong, so team 0 and local 0
    assert env.rewards["echo"] == 0.0 and not env.unwrapped.success
    env.reset(seed=3)
    for agent in ("caller", "echo"):
        env.step(env.unwrapped.oracle(agent))
    assert env.unwrapped.success
'''
# the registry-driven tests: those parametrized by setting (run on the new one), and those that
# check every setting at once
PER_SETTING = ["tests/envs/test_contract.py"]
EVERY_SETTING = [
    "tests/envs/test_echo_toy.py",
    "tests/envs/test_core.py::test_list_envs_has_every_setting_and_aliases",
    "tests/adapters/evaluation/test_suite.py::test_suites_cover_every_setting_and_both_modes",
    "tests/adapters/training/test_recipes.py::test_cpu_scale_down_keeps_every_protocol",
]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def test_a_new_setting_touches_three_files_and_passes_the_registry_tests(tmp_path):
    repo = package_copy(tmp_path / "repo")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    # CONTRIBUTING step 1: the module
    (repo / "envs" / "echo_toy.py").write_text(SETTING_MODULE)
    # step 2: the registration, beside the others in envs/__init__.py
    init = repo / "envs" / "__init__.py"
    text = init.read_text()
    anchor = "register_gymnasium_ids()"
    assert text.count(anchor) == 1
    init.write_text(text.replace(anchor, REGISTRATION + anchor))
    # step 3: its tests
    (repo / "tests" / "envs" / "test_echo_toy.py").write_text(SETTING_TESTS.lstrip())
    changed = sorted(line[3:] for line in _git(repo, "status", "--porcelain").splitlines())
    assert changed == ["envs/__init__.py", "envs/echo_toy.py", "tests/envs/test_echo_toy.py"]

    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    for args in (["-k", "echo_toy", *PER_SETTING], EVERY_SETTING):
        out = subprocess.run(
            [*pytest, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=900
        )
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
        summary = out.stdout.strip().splitlines()[-1]
        passed = int(summary.split(" passed")[0].split()[-1])
        assert passed >= (8 if args[0] == "-k" else len(EVERY_SETTING)), summary
