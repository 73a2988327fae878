"""Round 5: data never names code.

An env id may be ``"package.module:id"``, and resolving one used to import ``package.module``
wherever the id came from. Two commands read ids from files: the episode viewer replays the
records of a run directory (``python -m adapters.view DIR``), and ``python -m adapters.train
--resume DIR`` reads ``DIR/config.yaml``. So a record or a one-line ``config.yaml`` naming
``runs.<dir>.payload:sokoban`` made the reader import ``runs/<dir>/payload.py`` (planted beside
it in a shared run directory) in its own process, and ``this:sokoban`` imported a standard-library
module with a side effect. A record's ``env_config`` also reached the env's constructor unchecked
(``sandbox``, ``render_mode``, ``config`` and options of the wrong type included).

Now an id read from data resolves only against settings already registered
(:func:`envs.registered_spec` imports nothing), the commands name the flag that loads the module
of a setting registered outside the repository (``--import MODULE``), and a record's
``env_config`` is checked against the setting's config class before anything is built. The last
tests show that such a setting still trains, resumes and is viewed when the flag is given.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import envs

REPO = Path(__file__).resolve().parents[2]
PLANTED_ID = "runs.shared_run.payload:sokoban"
PAYLOAD = "import pathlib\n\npathlib.Path({marker!r}).write_text('the payload ran')\n"


def _run(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd``, with ``cwd`` and the checkout importable (as a user runs a
    command in the directory that holds ``runs/``); one still running after ``timeout`` seconds
    is killed and reported with exit status -9."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(cwd), str(REPO)]),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("MAS_DEBUG", None)
    try:
        return subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        out, err = (
            x.decode() if isinstance(x, bytes) else x or "" for x in (exc.stdout, exc.stderr)
        )
        return subprocess.CompletedProcess(args, -9, out, err + f"\n(killed after {timeout} s)")


# a refusal takes about a second; a command that is not refused goes on to load a model
REFUSED_WITHIN_S = 60


def _sokoban_report() -> dict[str, Any]:
    """One oracle episode of 6 x 6 Sokoban, as ``eval_before.json`` holds it."""
    from adapters.evaluation import evaluate
    from adapters.policies.specs import build_policies

    cfg = {"height": 6, "width": 6, "num_boxes": 1}
    roles = envs.make("sokoban", **cfg).unwrapped.possible_agents
    policies, mapping = build_policies(["oracle"], roles)
    rep = evaluate("sokoban", policies, role_policy=mapping, episodes=1, env_config=cfg, seed=3)
    return json.loads(json.dumps(rep.to_dict()))


@pytest.fixture(scope="module")
def sokoban_report() -> dict[str, Any]:
    return _sokoban_report()


def _plant(root: Path, report: dict[str, Any], env_id: str = PLANTED_ID) -> tuple[Path, Path]:
    """A shared run directory ``root/runs/shared_run``: ``payload.py`` (it creates the marker
    file when imported), an ``eval_before.json`` whose record names ``env_id`` and a one-line
    ``config.yaml`` naming it too. Returns the directory and the marker."""
    run = root / "runs" / "shared_run"
    run.mkdir(parents=True)
    marker = root / "payload-ran"
    (run / "payload.py").write_text(PAYLOAD.format(marker=str(marker)))
    rep = json.loads(json.dumps(report))
    rep["env"] = env_id
    for rec in rep["per_episode"]:
        rec["env"] = env_id
    (run / "eval_before.json").write_text(json.dumps(rep))
    (run / "config.yaml").write_text(f"env: {env_id}\n")
    return run, marker


def _raised(call: Any, *args: Any) -> BaseException | None:
    """The exception ``call(*args)`` raised (``None``: it returned), so that a test checks
    first that nothing ran and then how the call was refused."""
    try:
        call(*args)
    except Exception as exc:
        return exc
    return None


def _forget_planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop ``runs`` and its modules from ``sys.modules`` for this test, so that an import of
    the payload in another test cannot hide one in this test."""
    for name in [n for n in sys.modules if n == "runs" or n.startswith("runs.")]:
        monkeypatch.delitem(sys.modules, name)


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The command's one ``error:`` line (exit status 2, nothing else on stderr)."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]


def _page_episodes(page: Path) -> list[dict[str, Any]]:
    raw = re.search(
        r'<script id="data" type="application/octet-stream">([^<]*)</script>', page.read_text()
    )
    assert raw is not None
    return list(json.loads(gzip.decompress(base64.b64decode(raw.group(1))))["episodes"])


# ------------------------------------------------------------------ (a) the viewer's replay


def test_the_viewer_refuses_a_record_naming_a_planted_module(tmp_path, sokoban_report):
    """``python -m adapters.view runs/shared_run``, whose record names the payload beside it:
    nothing is imported, and the one error line names the record and the flag that would load
    the module."""
    _run_dir, marker = _plant(tmp_path, sokoban_report)
    proc = _run(["-m", "adapters.view", "runs/shared_run"], tmp_path, REFUSED_WITHIN_S)
    assert not marker.exists()
    line = _error_line(proc)
    assert f"names env {PLANTED_ID!r}, whose module is not loaded" in line, line
    assert "pass --import runs.shared_run.payload to load it" in line, line
    assert "'before'" in line, line
    # --no-replay builds nothing, so it reads the records as they are
    done = _run(["-m", "adapters.view", "runs/shared_run", "--no-replay"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not marker.exists()


def test_a_replay_in_process_imports_nothing_a_record_names(tmp_path, monkeypatch, sokoban_report):
    """The same record replayed in the process of a command that writes its page by itself
    (a training run, an evaluation), with the planted module importable: :func:`replay` refuses
    it and the page shows the record as recorded, with the reason."""
    from adapters.evaluation.replay import replay
    from adapters.evaluation.viewer import page_data

    run, marker = _plant(tmp_path, sokoban_report)
    _forget_planted(monkeypatch)
    monkeypatch.syspath_prepend(str(tmp_path))
    record = json.loads((run / "eval_before.json").read_text())["per_episode"][0]
    error = _raised(replay, record)
    (episode,) = page_data(run)["episodes"]
    assert not marker.exists()
    assert "runs.shared_run.payload" not in sys.modules
    assert isinstance(error, envs.ModuleNotLoadedError), error
    assert error.module == "runs.shared_run.payload"
    assert "is not loaded" in episode["note"] and episode["grids"] is None


# ------------------------------------------------------------------ (b) --resume


def test_resume_refuses_a_config_naming_a_planted_module(tmp_path, sokoban_report):
    """``--resume runs/shared_run`` whose one-line ``config.yaml`` names the payload: refused
    before the module is imported (and before torch, a model or a checkpoint), with one line
    naming ``config.yaml`` and the flag that loads the module."""
    _run_dir, marker = _plant(tmp_path, sokoban_report)
    args = ["-m", "adapters.train", "--resume", "runs/shared_run"]
    proc = _run(args, tmp_path, REFUSED_WITHIN_S)
    assert not marker.exists()
    line = _error_line(proc)
    assert line == (
        f"error: {Path('runs/shared_run/config.yaml')} names env {PLANTED_ID!r}, whose module is "
        "not loaded: pass --import runs.shared_run.payload to load it (if you trust it: "
        "importing a module runs its code)"
    ), line


def test_trainer_resume_imports_nothing_config_yaml_names(tmp_path, monkeypatch, sokoban_report):
    """``Trainer.resume`` (the Python API the command calls) refuses the same run directory
    before it builds anything."""
    pytest.importorskip("torch")
    from adapters.training.trainer import Trainer
    from tests.adapters.conftest import char_models

    run, marker = _plant(tmp_path, sokoban_report)
    _forget_planted(monkeypatch)
    monkeypatch.syspath_prepend(str(tmp_path))
    error = _raised(lambda: Trainer.resume(run, models=char_models()).close())
    assert not marker.exists()
    assert "runs.shared_run.payload" not in sys.modules
    assert isinstance(error, envs.ModuleNotLoadedError), error


# ------------------------------------------------------------------ (c) a standard-library module


def test_a_standard_library_module_named_by_data_is_not_imported(
    tmp_path, monkeypatch, capsys, sokoban_report
):
    """``this:sokoban`` needs nothing planted: ``import this`` prints the Zen of Python. From a
    record (in process and through the viewer) and from ``config.yaml`` it is refused, and
    ``this`` is never imported."""
    from adapters.evaluation.replay import replay

    monkeypatch.delitem(sys.modules, "this", raising=False)
    record = dict(sokoban_report["per_episode"][0], env="this:sokoban")
    error = _raised(replay, record)
    assert "Zen of Python" not in capsys.readouterr().out
    assert "this" not in sys.modules
    assert isinstance(error, envs.ModuleNotLoadedError) and error.module == "this", error
    _plant(tmp_path, sokoban_report, env_id="this:sokoban")
    for command in (["adapters.view"], ["adapters.train", "--resume"]):
        proc = _run(["-m", *command, "runs/shared_run"], tmp_path, REFUSED_WITHIN_S)
        assert "Zen of Python" not in proc.stdout
        assert "pass --import this to load it" in _error_line(proc)


def test_an_explicit_call_still_imports_the_module_it_names(monkeypatch):
    """What a person types keeps the old meaning: ``envs.spec("module:id")`` imports the module
    (here one already loaded, so nothing runs), and a loaded module's id resolves from data."""
    assert envs.spec("envs.sokoban:sokoban").id == "sokoban"
    assert envs.registered_spec("envs.sokoban:sokoban").id == "sokoban"
    with pytest.raises(ValueError, match="unknown env id 'nosuch'"):
        envs.registered_spec("nosuch")
    monkeypatch.delitem(sys.modules, "this", raising=False)
    with pytest.raises(envs.ModuleNotLoadedError):
        envs.registered_spec("this:sokoban")
    assert "this" not in sys.modules


# ------------------------------------------------------------------ (d) a record's env_config


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"sandbox": "docker"}, "unknown option(s) for SokobanConfig: 'sandbox'"),
        ({"render_mode": "human"}, "unknown option(s) for SokobanConfig: 'render_mode'"),
        ({"config": None}, "unknown option(s) for SokobanConfig: 'config'"),
        ({"height": "6"}, "height must be int, got '6' (str)"),
        ({"num_boxes": True}, "num_boxes must be int, got True (bool)"),
        ({"rewards": {"lam": 0.5, "tool_exec": "1"}}, "rewards: tool_exec must be float"),
    ],
)
def test_a_records_env_config_is_checked_before_the_env_is_built(config, message, sokoban_report):
    """Only the setting's own options, each of its type, reach the constructor: not the
    constructor's other keywords (a sandbox, a render mode, a whole config object) and not
    values of another type. The error names ``env_config`` and the option; the viewer shows
    such a record as recorded, with that reason."""
    from adapters.evaluation.replay import replay

    record = dict(sokoban_report["per_episode"][0], env_config=config)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        replay(record)
    assert str(err.value).startswith("env_config"), err.value


def test_the_viewer_shows_a_record_with_a_bad_config_as_recorded(tmp_path, sokoban_report):
    from adapters.evaluation.viewer import page_data

    rep = json.loads(json.dumps(sokoban_report))
    rep["per_episode"][0]["env_config"] = {"sandbox": "docker"}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(rep))
    (episode,) = page_data(path)["episodes"]
    assert episode["note"].startswith("not replayed (ValueError: env_config: unknown option(s)")


# ------------------------------------------------------------------ a setting kept elsewhere


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> tuple[Path, Path]:
    """One training step of the toy setting of ``tests/adapters/test_outside_setting.py``
    (``--env toy_pkg.echo:echo_toy``, the tiny model, two evaluation episodes): the directory
    that holds ``toy_pkg`` and the run directory."""
    from tests.adapters.test_outside_setting import TOY_MODULE

    root = tmp_path_factory.mktemp("outside")
    pkg = root / "toy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "echo.py").write_text(textwrap.dedent(TOY_MODULE))
    proc = _run(
        ["-m", "adapters.train", "--env", "toy_pkg.echo:echo_toy", "--model", "tiny",
         "--steps", "1", "--eval-episodes", "2", "--output-dir", "runs/toy", "--no-progress"],
        root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root, root / "runs" / "toy"


def test_the_viewer_replays_an_outside_setting_given_its_flag(toy_run):
    """The toy run's records name ``toy_pkg.echo:echo_toy``: without the flag the viewer says
    which flag loads it; with ``--import toy_pkg.echo`` every episode is replayed."""
    root, _run_dir = toy_run
    line = _error_line(_run(["-m", "adapters.view", "runs/toy"], root))
    assert "names env 'toy_pkg.echo:echo_toy', whose module is not loaded" in line, line
    assert "pass --import toy_pkg.echo to load it" in line, line
    page = root / "page.html"
    done = _run(
        ["-m", "adapters.view", "runs/toy", "--import", "toy_pkg.echo", "--out", str(page)], root
    )
    assert done.returncode == 0, done.stderr[-3000:]
    episodes = _page_episodes(page)
    assert episodes and all(not ep["note"] for ep in episodes), [ep["note"] for ep in episodes]
    missing = _run(["-m", "adapters.view", "runs/toy", "--import", "toy_pkg.nosuch"], root)
    assert "--import toy_pkg.nosuch: No module named 'toy_pkg.nosuch'" in _error_line(missing)


def test_resume_continues_an_outside_setting_given_its_flag(toy_run):
    """``--resume`` of the toy run: one line naming ``--import toy_pkg.echo`` without it; with
    it the run resumes at its checkpoint."""
    root, _run_dir = toy_run
    line = _error_line(_run(["-m", "adapters.train", "--resume", "runs/toy"], root))
    assert "config.yaml names env 'toy_pkg.echo:echo_toy'" in line, line
    assert "pass --import toy_pkg.echo to load it" in line, line
    done = _run(
        ["-m", "adapters.train", "--resume", "runs/toy", "--import", "toy_pkg.echo",
         "--no-progress"],
        root,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resuming runs/toy at step 1" in done.stdout, done.stdout[-3000:]
