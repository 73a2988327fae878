"""The whole-suite benchmark (``adapters.evaluation.suite``,
``python -m adapters.evaluate --suite``): suites, the report (table, JSON, charts) against the
episodes, resuming a killed run, refusing other arguments, concurrent requests to an HTTP policy."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import envs
from adapters.evaluate import main
from adapters.evaluation import SUITES, ArgumentMismatch, SuiteArgs, resolve_suite, run_suite
from adapters.evaluation.replay import replay
from adapters.evaluation.report import fmt_interval
from adapters.evaluation.suite import plan_units
from adapters.policies import ScriptedPolicy

REPO = Path(__file__).resolve().parents[3]
SMALL = "plan_path,sudoku:single,propose_solve_judge"  # 2 + 1 + 1 entries, with and without team


def small_args(**kw) -> SuiteArgs:
    base = dict(
        suite=resolve_suite(SMALL),
        policies=("oracle", "tiny"),
        episodes=3,
        chunk_size=2,  # chunks of 2 and 1 episodes
        max_new_tokens=8,
    )
    base.update(kw)
    return SuiteArgs(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """An uninterrupted run of the small suite: (directory, results)."""
    out = tmp_path_factory.mktemp("suite-full")
    return out, run_suite(small_args(), out, progress=False)


def comparable(results: dict) -> list[dict]:
    """The rows without wall times (the only numbers two runs may differ in)."""
    rows = []
    for row in results["rows"]:
        row = {k: v for k, v in row.items() if k != "seconds"}
        row["chunks"] = [{k: v for k, v in c.items() if k != "seconds"} for c in row["chunks"]]
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------ suites


def test_suites_cover_every_setting_and_both_modes():
    cpu_options = {s: envs.spec(s).cpu_options for s in envs.list_envs()}
    default, full = SUITES["default"], SUITES["all"]
    keys = [e.key for e in default.entries]
    assert keys == [e.key for e in full.entries]
    assert {e.setting for e in default.entries if e.mode == "multi"} == set(envs.list_envs())
    assert sorted(e.setting for e in default.entries if e.mode == "single") == sorted(
        s for s in envs.list_envs() if "single" in envs.spec(s).modes
    )
    assert full.episodes > default.episodes and all(not e.options for e in full.entries)
    # a setting's CPU training sizes are its CPU evaluation sizes where it states both, but for
    # the training maps of Sokoban (8 x 8) and Plan-Path (14 x 14), where their shipped cold
    # starts have room to grow (the suite keeps the quicker 6 x 6 ones)
    larger = {(s, side) for s in ("sokoban", "plan_path") for side in ("height", "width")}
    for setting in envs.list_envs():
        for key, (value, _why) in envs.spec(setting).cpu_train_options.items():
            if (setting, key) in larger:
                assert value > cpu_options[setting][key], (setting, key)
            elif key in cpu_options[setting]:
                assert cpu_options[setting][key] == value, (setting, key)
    for entry in default.entries:  # every entry's options are valid for its setting
        envs.make(entry.setting, **entry.env_config())


def test_resolve_suite_names_and_errors():
    s = resolve_suite("sokoban, math:single,sokoban:multi")
    assert [e.key for e in s.entries] == ["sokoban:multi", "sokoban:single", "math:single"]
    assert s.entries[0].options == envs.spec("sokoban").cpu_options
    with pytest.raises(ValueError, match="unknown env id 'nope'"):
        resolve_suite("nope")
    with pytest.raises(ValueError, match="multi or single"):
        resolve_suite("sokoban:duo")
    with pytest.raises(ValueError, match=r"discussion:single.*mode='single' does not exist"):
        resolve_suite("discussion:single")
    with pytest.raises(ValueError, match="names no setting"):
        resolve_suite(" , ")
    with pytest.raises(ValueError, match="plays every role"):
        small_args(policies=("tool=oracle",))
    with pytest.raises(ValueError, match="given twice"):
        small_args(policies=("oracle", "oracle"))


# ------------------------------------------------------------------------------------ report


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _mean(cell: str) -> float:
    return float(cell.split(" ± ")[0])


def test_report_table_json_and_charts_agree(full_run):
    out, results = full_run
    saved = json.loads((out / "results.json").read_text())
    assert saved == json.loads(json.dumps(results))
    rows = results["rows"]
    # every model policy is followed by its open loop (the scripted policies have none)
    policies = ("oracle", "tiny", "open loop of tiny")
    assert results["policies"] == list(policies)
    assert [(r["setting"], r["mode"], r["policy"]) for r in rows] == [
        (e.setting, e.mode, p) for e in resolve_suite(SMALL).entries for p in policies
    ]
    for row in rows:  # the JSON's numbers are the episodes' numbers
        eps = row["per_episode"]
        assert [e["index"] for e in eps] == [0, 1, 2] and row["episodes"] == 3
        assert row["success_rate"]["mean"] == pytest.approx(sum(e["success"] for e in eps) / 3)
        assert row["completion_tokens"]["mean"] == pytest.approx(
            sum(e["completion_tokens"] for e in eps) / 3
        )
        assert (row["team_reward"] is None) == (row["setting"] == "propose_solve_judge")
        if row["policy"] == "oracle":  # the upper bound: solved everywhere, no model tokens
            assert row["success_rate"]["mean"] == 1.0 and row["completion_tokens"]["mean"] == 0
        elif row["policy"] == "tiny":
            assert row["completion_tokens"]["mean"] > 0
        if row["policy"].startswith("open loop"):  # replayed from the records: no model, no chunks
            assert row["completion_tokens"]["mean"] == 0 and row["seconds"] == 0.0
            assert [c["episodes"] for c in row["chunks"]] == [3]
            team = next(
                r
                for r in rows
                if r["policy"] == "tiny"
                and r["mode"] == row["mode"]
                and r["setting"] == row["setting"]
            )
            _assert_open_loop_of(team["per_episode"], eps)
        else:
            assert [c["episodes"] for c in row["chunks"]] == [2, 1]
        if row["setting"] != "propose_solve_judge":  # the records replay, across chunks too
            for e in eps:
                assert replay(e) == pytest.approx([t["reward"] for t in e["transcript"]])
    # the Markdown table: one line per row, in order, with the JSON's numbers
    md = (out / "report.md").read_text()
    table = [ln for ln in md.splitlines() if re.match(r"\| [a-z_]+ \| (multi|single) \|", ln)]
    assert len(table) == len(rows)
    for line, row in zip(table, rows):
        c = _cells(line)
        assert c[:4] == [row["setting"], row["mode"], row["policy"], "3"]
        assert c[4] == fmt_interval(row["success_rate"])
        assert _mean(c[4]) == pytest.approx(row["success_rate"]["mean"], abs=0.005)
        # the setting's own progress measure comes before the team and shaped rewards
        assert c[5] == f"{fmt_interval(row['progress'])} ({row['progress_label']})"
        assert _mean(c[5].split(" (")[0]) == pytest.approx(
            sum(e["progress"] for e in row["per_episode"]) / 3, abs=0.005
        )
        if row["policy"] == "oracle":
            assert row["progress"]["mean"] == 1.0
        assert c[6] == fmt_interval(row["team_reward"])
        roles = dict(part.split(" ", 1) for part in c[7].split("<br>"))
        assert roles == {r: fmt_interval(iv) for r, iv in row["reward_per_role"].items()}
        assert _mean(c[8]) == pytest.approx(row["completion_tokens"]["mean"], abs=0.5)
        assert float(c[9]) == pytest.approx(row["seconds"], abs=0.05)
    for setting, times in results["seconds_per_setting"].items():
        line = next(
            ln for ln in md.splitlines() if ln.startswith(f"| {setting} | ") and "±" not in ln
        )
        assert float(_cells(line)[-1]) == pytest.approx(times["total"], abs=0.05)
    # one chart per setting, one panel per mode (the width grows with the panels)
    widths = {}
    for setting in ("plan_path", "sudoku", "propose_solve_judge"):
        png = (out / "charts" / f"{setting}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        widths[setting] = struct.unpack(">I", png[16:20])[0]
    assert sorted(p.name for p in (out / "charts").iterdir()) == [
        "plan_path.png",
        "propose_solve_judge.png",
        "sudoku.png",
    ]
    assert widths["plan_path"] == 2 * widths["sudoku"] == 2 * widths["propose_solve_judge"]


def _assert_open_loop_of(team: list[dict], loop: list[dict]) -> None:
    """``loop`` replays, at each role's k-th turn, the completion ``team`` wrote most often there,
    on the team's instances."""
    from collections import Counter

    def turns(ep):
        seen: dict[str, int] = {}
        for t in ep["transcript"]:
            seen[t["role"]] = seen.get(t["role"], 0) + 1
            yield (t["role"], seen[t["role"]] - 1), t["completion"]

    counts: dict = {}
    for ep in team:
        for key, text in turns(ep):
            counts.setdefault(key, Counter())[text] += 1
    assert [e["instance_id"] for e in loop] == [e["instance_id"] for e in team]
    for ep in loop:
        for (role, k), text in turns(ep):
            while (role, k) not in counts:  # a turn the team never reached: its last modal
                k -= 1
            assert text == counts[(role, k)].most_common(1)[0][0]


# ------------------------------------------------------------------------------------ resume


class Killed(Exception):
    pass


def test_killed_run_resumes_without_replaying_an_episode(tmp_path, full_run):
    _out, full = full_run
    args = small_args()
    total = len(plan_units(args))
    played = []

    def kill_after_five(unit):
        played.append(unit.filename)
        if len(played) == 5:
            raise Killed

    with pytest.raises(Killed):
        run_suite(args, tmp_path, progress=False, after_unit=kill_after_five)
    assert sorted(p.name for p in (tmp_path / "units").glob("*.json")) == sorted(played)
    assert not (tmp_path / "results.json").exists()
    # what a kill in the middle of writing a chunk leaves behind: a temporary file
    (tmp_path / "units" / f".{played[0]}.999.tmp").write_text('{"unit": ')
    replayed: list = []
    episodes: list = []
    results = run_suite(
        args, tmp_path, progress=False, after_unit=lambda u: replayed.append(u.filename)
    )
    assert len(replayed) == total - 5 and not set(replayed) & set(played)
    assert comparable(results) == comparable(full)
    # a finished run started again plays nothing and writes the same report
    again = run_suite(args, tmp_path, progress=False, after_unit=episodes.append)
    assert episodes == [] and again == results


def test_other_arguments_on_the_same_out_are_refused(tmp_path, full_run, capsys):
    out, _ = full_run
    before = sorted(p.name for p in (out / "units").iterdir())
    with pytest.raises(ArgumentMismatch, match=r"episodes: 3 -> 4") as err:
        run_suite(small_args(episodes=4), out, progress=False)
    assert "max_new_tokens" not in str(err.value)
    with pytest.raises(
        ArgumentMismatch, match=r"policies: \[\"oracle\", \"tiny\"\] -> \[\"oracle\"\]"
    ):
        run_suite(small_args(policies=("oracle",)), out, progress=False)
    assert sorted(p.name for p in (out / "units").iterdir()) == before
    # the command line says so and exits with status 2
    rc = main(
        ["--suite", SMALL, "--policy", "oracle", "--episodes", "3", "--chunk-size", "2",
         "--max-new-tokens", "8", "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert rc == 2 and "other arguments" in capsys.readouterr().err


@pytest.mark.slow
def test_sigkilled_process_resumes_with_the_same_numbers(tmp_path):
    """A real kill -9 of the command line while it plays, then the same command again."""
    cmd = [
        sys.executable, "-m", "adapters.evaluate", "--suite", "plan_path:single",
        "--policy", "tiny", "--episodes", "12", "--chunk-size", "1", "--max-new-tokens", "48",
        "--threads", "1", "--no-progress",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [*cmd, "--out", str(killed)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if len(list((killed / "units").glob("*.json"))) >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    saved = len(list((killed / "units").glob("*.json")))
    assert 2 <= saved < 12 and not (killed / "results.json").exists()
    for out in (killed, tmp_path / "clean"):
        done = subprocess.run(
            [*cmd, "--out", str(out)], cwd=REPO, env=env, capture_output=True, timeout=600
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    resumed = json.loads((killed / "results.json").read_text())
    clean = json.loads((tmp_path / "clean" / "results.json").read_text())
    assert comparable(resumed) == comparable(clean)
    assert resumed["rows"][0]["episodes"] == 12


# ------------------------------------------------------------------------------------ HTTP


def test_http_policy_gets_concurrent_requests(tmp_path):
    from adapters.integrations.openai_server import make_server

    def slow_answer(_prompt: str) -> str:
        time.sleep(0.02)
        return "#### [U]"

    server = make_server(ScriptedPolicy(slow_answer), model_name="slow")
    inflight = peak = 0
    lock = threading.Lock()
    respond = server.completion_response

    def counting(body):  # requests the server holds at once (before its generation lock)
        nonlocal inflight, peak
        with lock:
            inflight += 1
            peak = max(peak, inflight)
        try:
            return respond(body)
        finally:
            with lock:
                inflight -= 1

    server.completion_response = counting  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    try:
        args = SuiteArgs(
            suite=resolve_suite("plan_path:single"),
            policies=(f"openai:{server.url}#slow",),
            episodes=6,
            chunk_size=6,
        )
        results = run_suite(args, tmp_path, progress=False, concurrency=4)
    finally:
        server.shutdown()
        server.server_close()
    row, loop = results["rows"]
    assert row["episodes"] == 6 and row["success_rate"]["mean"] == 0.0
    assert loop["policy"] == f"open loop of openai:{server.url}#slow" and loop["episodes"] == 6
    assert 2 <= peak <= 4  # requests overlapped, up to the concurrency asked for


# ------------------------------------------------------------------------------------ CLI


def test_cli_suite_run_and_flag_checks(tmp_path, capsys):
    rc = main(
        ["--suite", "plan_path:single", "--policy", "oracle", "--episodes", "2",
         "--out", str(tmp_path / "r"), "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert (
        "| plan_path | single | oracle | 2 | 1.00 ± 0.00 | 1.00 ± 0.00 (distance closed) |" in text
    )
    assert (tmp_path / "r" / "charts" / "plan_path.png").is_file()
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["max_new_tokens"] == SUITES["default"].max_new_tokens and run["episodes"] == 2
    for extra in (["--env-config", "height=5"], ["--mode", "single"], ["--json", "x.json"]):
        with pytest.raises(SystemExit):
            main(["--suite", "plan_path", "--policy", "oracle", *extra])
        assert "describe one setting" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--suite", "plan_path", "--policy", "planner=oracle"])
    assert "plays every role" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--suite", "plan_path", "--env", "plan_path", "--policy", "oracle"])
    assert "not allowed with" in capsys.readouterr().err
