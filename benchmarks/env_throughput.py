"""Environment throughput: resets/s and complete oracle episodes/s per setting.

    python benchmarks/env_throughput.py [--seconds 3] [--only sokoban,sudoku]
    python benchmarks/env_throughput.py --quick     # 0.1 s per measurement (a smoke run)

Resets include instance generation and verification (unique Sudoku solutions, solved Sokoban
levels, reachable Plan-Path goals). Oracle episodes include the tool agents' programs running in
the sandbox. The baseline column runs the same oracle episodes with every program started as a
fresh ``subprocess.run([python, file])`` (the reference implementation's way, no isolation), in
the same run; ``x base`` is our rate over that baseline. Targets are the issue's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import envs
import sandboxes
from benchmarks._quick import parse_args

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class NaiveResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    memory_exceeded: bool = False
    output_truncated: bool = False
    duration_s: float = 0.0
    error: str | None = None
    signal: int | None = None
    calls: tuple = ()
    calls_done: bool = False
    results: str = ""


# What a naive job with calls runs after the program: the calls, each result one line on fd 3
# (the format of sandboxes.calls), in the same fresh interpreter.
_CALLS_TAIL = """
import os as _os, sys as _sys
_sys.path.insert(0, {root!r})
from sandboxes import plain as _plain
for _i, (_path, _args, _kwargs) in enumerate({calls!r}):
    try:
        _t = globals()[_path[0]]
        for _s in _path[1:]:
            _t = _t() if _s == "()" else getattr(_t, _s)
        _rec = ["ok", _plain.encode(_t(*_plain.decode(_args), **_plain.decode(_kwargs)))]
    except BaseException as _e:
        _rec = ["exc", type(_e).__name__, str(_e)[:1000]]
    _os.write(3, ("%s %d %s\\n" % ({nonce!r}, _i, _plain.dumps(_rec))).encode())
_os.write(3, ("%s end\\n" % {nonce!r}).encode())
_os._exit(0)
"""


class NaiveSubprocessSandbox:
    """Baseline only: a fresh interpreter per program, no isolation at all (a results channel
    on fd 3 and the calls of :mod:`sandboxes.calls` made in the same interpreter)."""

    def run(self, code: str, stdin: str = "", limits: object = None) -> NaiveResult:
        return self._run(sandboxes.Job(code, stdin))

    def _run(self, job: sandboxes.Job) -> NaiveResult:
        from sandboxes.calls import parse_results

        stdin = job.stdin.decode() if isinstance(job.stdin, bytes) else job.stdin
        nonce = os.urandom(8).hex()
        code = job.code
        if job.calls is not None:
            calls = [c.to_json() for c in job.calls]
            code += "\n" + _CALLS_TAIL.format(root=str(ROOT), calls=calls, nonce=nonce)
        with (
            tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh,
            tempfile.TemporaryFile() as res,
        ):
            fh.write(code)
            fh.flush()

            def fd3() -> None:
                os.dup2(res.fileno(), 3)

            try:
                t = time.perf_counter()
                p = subprocess.run(
                    [sys.executable, fh.name],
                    input=stdin,
                    capture_output=True,
                    text=True,
                    timeout=10,
                    preexec_fn=fd3,
                )
                out = NaiveResult(
                    p.returncode, p.stdout, p.stderr, duration_s=time.perf_counter() - t
                )
            except subprocess.TimeoutExpired:
                return NaiveResult(None, "", "", timed_out=True)
            finally:
                os.unlink(fh.name)
            res.seek(0)
            out.results = res.read().decode("utf-8", "replace")
        if job.calls is not None:
            out.calls, out.calls_done = parse_results(out.results, nonce, len(job.calls))
        return out

    def run_many(self, jobs: list) -> list[NaiveResult]:
        return [self._run(sandboxes.as_job(job)) for job in jobs]


# (label, env id, config, reset target /s, episode target /s)
CASES = [
    ("sudoku 4x4", "sudoku", {"size": 4}, 5000, 100),
    ("sudoku 9x9", "sudoku", {"size": 9}, 100, 100),
    ("sokoban 6x6 2 boxes", "sokoban", {"num_boxes": 2}, 200, 100),
    ("plan_path 10x10", "plan_path", {}, 5000, 100),
    ("code (HumanEval)", "code", {}, None, 100),
    ("math (reasoning-gym)", "math", {}, None, 100),
    ("propose_solve_judge", "propose_solve_judge", {}, None, None),
    ("challenge_plan_solve", "challenge_plan_solve", {}, None, None),
    ("discussion", "discussion", {}, None, None),
    ("solver_verifier_corrector", "solver_verifier_corrector", {}, None, None),
]


def resets_per_s(env_id: str, config: dict, seconds: float) -> float:
    raw = envs.make(env_id, **config).unwrapped
    raw.reset(seed=0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        raw.reset(seed=n + 1)
        n += 1
    return n / (time.perf_counter() - t0)


def episodes_per_s(
    env_id: str, config: dict, seconds: float, sandbox: object
) -> tuple[float, float]:
    """Oracle episodes per second and their success rate."""
    env = envs.make(env_id, sandbox=sandbox, **config)
    n = solved = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or n == 0:
        env.reset(seed=n)
        for agent in env.agent_iter():
            _, _, term, trunc, info = env.last()
            if term or trunc:
                solved += bool(info.get("success")) and agent == env.possible_agents[0]
                env.step(None)
                continue
            env.step(env.unwrapped.oracle(agent))
        n += 1
    return n / (time.perf_counter() - t0), solved / n


def fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    ap.add_argument("--only", default="", help="comma-separated env ids")
    ap.add_argument("--no-baseline", action="store_true", help="skip the naive-subprocess baseline")
    args = parse_args(ap, argv, seconds=0.1)
    only = {s for s in args.only.split(",") if s}
    sandbox = sandboxes.default()
    naive = NaiveSubprocessSandbox()
    header = (
        f"{'setting':<26} {'resets/s':>10} {'target':>7} {'episodes/s':>11} {'target':>7} "
        f"{'base ep/s':>10} {'x base':>7} {'oracle ok':>9}"
    )
    print(header)
    print("-" * len(header))
    for label, env_id, config, reset_target, ep_target in CASES:
        if only and env_id not in only:
            continue
        if env_id not in envs.list_envs():
            continue
        try:
            rps = resets_per_s(env_id, config, args.seconds)
            eps, ok = episodes_per_s(env_id, config, args.seconds, sandbox)
            base = (
                None if args.no_baseline else episodes_per_s(env_id, config, args.seconds, naive)[0]
            )
        except Exception as exc:  # a setting that is not available here
            print(f"{label:<26} unavailable: {type(exc).__name__}: {exc}"[:120])
            continue
        ratio = None if base is None else eps / base
        print(
            f"{label:<26} {fmt(rps):>10} {fmt(reset_target):>7} {fmt(eps, 1):>11} "
            f"{fmt(ep_target):>7} "
            f"{fmt(base, 1):>10} {fmt(ratio, 1):>7} {ok:>9.0%}"
        )


if __name__ == "__main__":
    main()
