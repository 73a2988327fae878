"""CONTRIBUTING's "Adding a setting", done the way it says in a copy of the checkout: a module in
``envs/``, its registration in ``envs/__init__.py`` (its roles declared there once), its tests
and its cases in the suite's audits (the reward audit, the host-bounds corpus), and nothing
else; then every registry-driven test of the fast suite runs: each test parametrized by setting
(the PettingZoo contract, clones, splits, the reward audit, the Gymnasium and OpenEnv entries)
on the new one, and each check of all settings at once (``test_every_setting_*``).

The setting is the toy of ``tests/adapters/test_outside_setting.py`` (a caller announces a
number, an echo repeats it), moved into the package.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.adapters.test_outside_setting import TOY_MODULE
from tests.checkout import package_copy

# the module without its own registration (step 2 puts it in envs/__init__.py)
SETTING_MODULE = re.sub(
    r"\nenvs\.register\(\n.*?\n\)\n", "\n", textwrap.dedent(TOY_MODULE), count=1, flags=re.S
)
REGISTRATION = (
    'register("echo_toy", "envs.echo_toy:env", roles=("caller", "echo"), '
    'description="caller + echo (a test setting)", team_reward=True)\n'
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
# step 3, the setting's place in the suite's audits: a case of the reward audit (its honest
# answer is the oracle's on the audit's seed) and explicit instances for the host-bounds corpus
AUDIT_CASE = """    Case(
        "echo_toy_caller", lambda: _env("echo_toy"), [f"Answer: {_env('echo_toy').instance}"]
    ),
"""
RESET_ENTRIES = """
RESET_CORPUS["echo_toy"] = {"long_number": lambda: {"number": "9" * 100_000}}
SMALL_INSTANCE["echo_toy"] = {"number": "123"}
"""
# the registry-driven tests: every test parametrized by setting (its id names the setting), and
# every test that checks all settings at once (its name says ``every_setting``, CONTRIBUTING)
SELECT = ["-m", "not slow", "-k", "echo_toy or every_setting", "tests"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def test_a_new_setting_added_the_contributing_way_passes_every_registry_test(tmp_path):
    repo = package_copy(tmp_path / "repo")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    # CONTRIBUTING step 1: the module
    (repo / "envs" / "echo_toy.py").write_text(SETTING_MODULE)
    # step 2: the registration, beside the others in envs/__init__.py
    init = repo / "envs" / "__init__.py"
    init.write_text(init.read_text() + REGISTRATION)
    # step 3: its tests, and its cases in the suite's audits
    (repo / "tests" / "envs" / "test_echo_toy.py").write_text(SETTING_TESTS.lstrip())
    audit = repo / "tests" / "envs" / "test_monotonicity.py"
    text = audit.read_text()
    end = text.index("\n]\n", text.index("\nCASES = ["))
    audit.write_text(text[: end + 1] + AUDIT_CASE + text[end + 1 :])
    bounds = repo / "tests" / "redteam" / "test_host_bounds.py"
    text = bounds.read_text()
    anchor = '@pytest.mark.parametrize("setting", sorted(RESET_CORPUS))'
    assert text.count(anchor) == 1
    bounds.write_text(text.replace(anchor, RESET_ENTRIES.lstrip() + "\n\n" + anchor))
    changed = sorted(line[3:] for line in _git(repo, "status", "--porcelain").splitlines())
    assert changed == [
        "envs/__init__.py",
        "envs/echo_toy.py",
        "tests/envs/test_echo_toy.py",
        "tests/envs/test_monotonicity.py",
        "tests/redteam/test_host_bounds.py",
    ]

    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    pytest = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *SELECT]
    out = subprocess.run(pytest, cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    passed = re.findall(r"^PASSED (\S+)", out.stdout, re.M)
    per_setting = [t for t in passed if "echo_toy" in t]
    every = {t.split("::")[-1] for t in passed if "every_setting" in t.split("::")[-1]}
    # the contract, clones, splits, the reward audit and the Gymnasium and OpenEnv entries ran
    # on the new setting; and every registry-wide check (the registry listing, the recipes,
    # the evaluation suites, the audits' coverage, the Gymnasium ids) passed with it in
    assert len(per_setting) >= 16, per_setting
    for module in ("test_contract", "test_monotonicity", "test_gymnasium_env", "test_openenv"):
        assert any(module in t for t in per_setting), (module, per_setting)
    assert len(every) >= 7, sorted(every)
