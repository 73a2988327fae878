"""Errors a person can act on (issue 39, item 2): every command answers an ordinary mistake with
one ``error:`` line naming the input and what to do, exit status 2 and no traceback
(``--debug`` shows it); and ``--help`` and argument errors answer before anything heavy is
imported (checked with torch made unimportable)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from adapters import cli, evaluate, serve, serve_env, serve_sandbox, train, view

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket is closed


def _one_error_line(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--policy", "nosuch:thing"], "error: --policy: unknown policy spec 'nosuch:thing'"),
        (["--policy", "/nonexistent/model"], "error: --policy: no model at /nonexistent/model"),
        (["--policy", "tool=oracle"], "error: --policy: no policy for role(s) ['planner']"),
        (["--policy", "ghost=oracle"], "error: --policy: unknown role 'ghost'"),
        (["--policy", "oracle", "--instance", "garbage"], "error: --instance: a Sokoban instance"),
        (
            ["--policy", "oracle", "--env-config", "nosuch=1"],
            "error: --env-config: unknown config option(s) for SokobanConfig: 'nosuch'",
        ),
        (
            ["--policy", "oracle", "--env-config", "num_boxes=-1"],
            "error: --env-config: num_boxes must be an int in [1, 4]",
        ),
        (
            ["--policy", "oracle", "--env-config", "oops"],
            "error: --env-config: --env-config expects",
        ),
        (["--policy", "oracle", "--json", "/"], "error: --json: / is a directory"),
    ],
)
def test_evaluate_input_errors(capsys, argv, expected):
    err = _one_error_line(capsys, evaluate.main(["--env", "sokoban", *argv]))
    assert err.startswith(expected), err


def test_evaluate_unknown_env_lists_ids_and_aliases(capsys):
    err = _one_error_line(capsys, evaluate.main(["--env", "sokobn", "--policy", "oracle"]))
    assert "unknown env id 'sokobn'" in err and "Did you mean 'sokoban'" in err
    assert "mae (propose_solve_judge)" in err and "marsrl (solver_verifier_corrector)" in err


def test_an_unreachable_server_is_reported_at_once_with_what_to_check(capsys):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    err = _one_error_line(capsys, evaluate.main(["--env", "sokoban", "--policy", f"openai:{url}"]))
    assert f"no OpenAI-compatible server answers at {url}" in err
    assert "check that the server is running" in err
    suite = ["--suite", "sokoban", "--policy", f"openai:{url}#m", "--no-view"]
    assert "no OpenAI-compatible server" in _one_error_line(capsys, evaluate.main(suite))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--env", "nosuch"], "error: --env: unknown env id 'nosuch'"),
        (["--model", "/nonexistent"], "error: --model: no model at /nonexistent"),
        (["--model", "bad name!"], "error: --model: 'bad name!' is neither an existing directory"),
        (["--env-config", "nosuch=1"], "error: --env-config: unknown config option(s)"),
        (["--instance", '{"map": 3}'], "error: --instance: a Sokoban map is a list of strings"),
        (["--lr", "fast"], "error: --lr expects a number, got 'fast'"),
        (["--steps", "-1"], "error: steps must be >= 0"),
        (["--resume", "/nonexistent-run"], "error: --resume: /nonexistent-run holds no run"),
    ],
)
def test_train_input_errors_leave_no_run_directory(capsys, tmp_path, argv, expected):
    out = tmp_path / "run"
    rc = train.main(["--env", "sokoban", "--output-dir", str(out), *argv])
    err = _one_error_line(capsys, rc)
    assert err.startswith(expected), err
    assert not out.exists()


def test_train_reports_an_unreachable_vllm_server(capsys, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    argv = ["--backend", "vllm-server", "--vllm-servers", url, "--output-dir", str(tmp_path / "r")]
    err = _one_error_line(capsys, train.main(argv))
    assert f"error: --vllm-servers: no OpenAI-compatible server answers at {url}/v1" in err
    assert not (tmp_path / "r").exists()


def test_train_unknown_env_lists_the_aliases(capsys):
    err = _one_error_line(capsys, train.main(["--env", "comass"]))
    assert "comas (discussion)" in err and "sage (challenge_plan_solve)" in err


@pytest.mark.parametrize(
    ("main", "argv", "expected"),
    [
        (serve_env.main, ["--env", "nosuch"], "error: --env: unknown env id 'nosuch'"),
        (serve_env.main, ["--env", "math", "--env-config", "x=1"], "error: --env-config: unknown"),
        (serve_sandbox.main, ["--workers", "0"], "error: --workers must be at least 1"),
        (serve.main, ["--model", "/nonexistent"], "error: --model: no model at /nonexistent"),
        (view.main, ["/nonexistent-run"], "error: /nonexistent-run does not exist"),
    ],
)
def test_other_commands_input_errors(capsys, main, argv, expected):
    err = _one_error_line(capsys, main(argv))
    assert err.startswith(expected), err


def test_view_refuses_a_file_that_is_no_evaluation(capsys, tmp_path):
    (tmp_path / "x.json").write_text('{"a": 1}')
    err = _one_error_line(capsys, view.main([str(tmp_path / "x.json")]))
    assert "is not an evaluation report" in err


def test_debug_shows_the_traceback():
    with pytest.raises(cli.UsageError, match="unknown policy spec") as info:
        evaluate.main(["--env", "sokoban", "--policy", "nosuch:thing", "--debug"])
    assert isinstance(info.value.__cause__, ValueError)  # the check that failed, with its frames
    out = _run(_WITHOUT, "", "adapters.evaluate", "--env", "x", "--policy", "oracle", "--debug")
    assert out.returncode == 1 and "Traceback" in out.stderr and "unknown env id" in out.stderr


def _run(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


# a module set to None in sys.modules cannot be imported: a missing package, deterministically
_WITHOUT = (
    "import runpy, sys\n"
    "for m in sys.argv[1].split(','): sys.modules[m] = None\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)


@pytest.mark.parametrize(
    ("missing", "argv", "module"),
    [
        ("openenv", ["adapters.serve_env", "--env", "sokoban"], "openenv"),
        ("fastapi", ["adapters.serve_sandbox"], "fastapi"),
        ("uvicorn", ["adapters.serve", "--model", "constant:x", "--port", "0"], "uvicorn"),
        ("torch", ["adapters.train", "--env", "sokoban", "--steps", "1"], "torch"),
    ],
)
def test_a_missing_extra_names_the_pip_command(missing, argv, module):
    out = _run(_WITHOUT, missing, *argv)
    assert out.returncode == 2, out.stderr
    extra = cli.EXTRAS[module]
    assert out.stderr.strip().splitlines() == [
        f"error: {module} is not installed; it comes with the {extra} extra: "
        f'pip install -e ".[{extra}]"'
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["adapters.train", "--help"],
        ["adapters.evaluate", "--help"],
        ["adapters.view", "--help"],
        ["adapters.serve", "--help"],
        ["adapters.serve_env", "--help"],
        ["adapters.serve_sandbox", "--help"],
        ["adapters.train", "--env", "nosuch"],
        ["adapters.train", "--model", "/nonexistent"],
        ["adapters.evaluate", "--env", "nosuch", "--policy", "oracle"],
        ["adapters.evaluate", "--env", "sokoban", "--policy", "nosuch:x"],
        ["adapters.evaluate", "--no-such-flag"],
        ["adapters.sft", "--help"],
        ["adapters.sft", "--env", "nosuch"],
        ["adapters.sft", "--env", "sokoban", "--roles", "judge"],
        ["adapters.sft", "--env", "sokoban", "--no-train"],
    ],
)
def test_help_and_argument_errors_import_nothing_heavy(argv):
    """With torch, transformers and peft unimportable, --help and argument errors still
    answer as usual: they are decided before the heavy imports (what makes them fast)."""
    out = _run(_WITHOUT, "torch,transformers,peft,openenv,fastapi,uvicorn", *argv)
    if argv[-1] == "--help":
        assert out.returncode == 0 and "usage:" in out.stdout, out.stderr
    else:
        assert out.returncode == 2 and "error:" in out.stderr, out.stderr
        assert "not installed" not in out.stderr and "Traceback" not in out.stderr


def test_the_extras_table_matches_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {
        name: extra
        for extra in ("train", "docker", "trl", "serve", "ray", "vllm")
        for req in extras[extra]
        for name in [req.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()]
    }
    assert {m: names.get(m) for m in cli.EXTRAS} == cli.EXTRAS
    assert set(names) == set(cli.EXTRAS)
