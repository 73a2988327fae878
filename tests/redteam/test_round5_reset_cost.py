"""Round 5: an explicit instance costs the host little at reset, in every setting.

A client of the OpenEnv server (``python -m adapters.serve_env``) sends any instance it likes
with ``reset``. Before this round the host checked it at whatever cost it asked for: a 40 x 40
Sokoban room with 6 boxes took a second of CPU and +99 MB per reset (the exact solver ran up to
300,000 states, and a breadth-first layer past that), and three such resets took 3.4 s of the
server's CPU, all accepted. Now an instance is limited in size (the generator's limits for the
puzzles, :mod:`envs.core.explicit` for text and tests), the puzzles' searches run in the host
under a small budget and past it in a bounded worker process, and what cannot be verified is
refused, saying why. The corpus over every setting is
``tests/redteam/test_host_bounds.py::test_no_explicit_instance_stalls_the_host_at_reset``;
this file holds the attack itself and what must not change for honest instances."""

from __future__ import annotations

import resource

import pytest

import envs
from tests.cost import cpu_cost
from verifiers import _bounded
from verifiers.sokoban import Board, solve
from verifiers.sudoku import solve as sudoku_solve

from .test_host_bounds import SUDOKU_HARD, SUDOKU_NO_SOLUTION, _open_room, _sudoku

CPU_S = 0.5
RSS_MB = 64

#: a generated 10 x 10 level with 3 boxes (seed 11 of the train split) whose explicit check
#: needs 234,316 states: past the host's budget, within the default solver_max_nodes
WORKER_LEVEL = [
    "##########",
    "#        #",
    "## @     #",
    "# $      #",
    "#   $ $  #",
    "#    . . #",
    "#     .  #",
    "#        #",
    "#        #",
    "##########",
]


def _reset_cost(env, instance) -> tuple[float, float, str]:
    """CPU seconds and peak-RSS growth (MB) of one reset, and its outcome."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = "accepted"
    with cpu_cost() as spent:
        try:
            env.reset(options={"instance": instance})
        except ValueError as exc:
            outcome = str(exc)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    return spent.seconds, grown, outcome


def test_a_big_sokoban_room_costs_the_host_little():
    """The reported attack, three times: each reset is refused (the generator's 16 x 16 limit)
    at a small cost; before, each cost 0.6-1.1 s of CPU and 80-90 MB, and was accepted."""
    env = envs.make("sokoban")
    env.reset(options={"instance": {"map": ["#####", "#@$.#", "#####"]}})
    for seed in (4, 6, 3):
        cpu, mb, outcome = _reset_cost(env, {"map": _open_room(40, 6, seed=seed)})
        assert cpu < CPU_S and mb < RSS_MB, (cpu, mb, outcome)
        assert "limited to 16x16 cells" in outcome, outcome


def test_a_hard_level_within_the_limits_is_refused_as_too_hard_to_verify():
    """16 x 16 with 4 boxes in an open room: the host stores 50,000 states, the worker the
    rest of the budget; none settles the level, so it is refused (never accepted unverified:
    its solvability and optimum would be unknown)."""
    env = envs.make("sokoban")
    env.reset(options={"instance": {"map": ["#####", "#@$.#", "#####"]}})
    cpu, mb, outcome = _reset_cost(env, {"map": _open_room(16, 4, seed=1)})
    assert cpu < CPU_S and mb < RSS_MB, (cpu, mb, outcome)
    assert "too hard to verify within 300,000 solver nodes" in outcome, outcome
    assert "send a smaller level" in outcome


def test_a_level_past_the_hosts_budget_is_solved_in_the_worker_as_before():
    """Honest levels are unchanged: a generated level whose check needs more states than the
    host spends gets the same shortest solution from the worker as the solver gives here."""
    from verifiers.sokoban import INLINE_NODES

    board = Board.from_xsb(WORKER_LEVEL)
    assert solve(board, max_nodes=INLINE_NODES, exact_budget=True).status == "budget"
    expected = solve(board, max_nodes=300_000)
    assert expected.status == "solved" and expected.nodes > INLINE_NODES
    env = envs.make("sokoban", height=10, width=10, num_boxes=3)
    env.reset(options={"instance": {"map": WORKER_LEVEL}})
    inst = env.unwrapped.instance
    assert (inst.optimal_moves, inst.solution) == (len(expected.moves), expected.moves)
    # the generator's own instance of the same level agrees
    generated = env.unwrapped.sample_instance("train", 11)
    assert generated.map == tuple(WORKER_LEVEL) and generated == inst


def test_a_worker_that_overruns_is_a_refusal_with_its_reason(monkeypatch):
    from verifiers.sokoban import solve_bounded

    def overrun(fn, *args, timeout_s=_bounded.DEADLINE_S):
        raise _bounded.BoundedError("checking took more than 5 s")

    monkeypatch.setattr(_bounded, "call", overrun)
    sol = solve_bounded(Board.from_xsb(WORKER_LEVEL), 300_000)
    assert sol.status == "budget" and sol.reason == "checking took more than 5 s"
    env = envs.make("sokoban", height=10, width=10, num_boxes=3)
    with pytest.raises(ValueError, match=r"too hard to verify .*\(checking took more than 5 s\)"):
        env.reset(options={"instance": {"map": WORKER_LEVEL}})
    with pytest.raises(ValueError, match=r"too hard to verify within 500,000 search nodes"):
        envs.make("sudoku").reset(options={"instance": _sudoku(SUDOKU_NO_SOLUTION)})


def test_a_crafted_sudoku_costs_the_host_little():
    """A 9x9 puzzle without a solution whose proof is a deep search (about a second of CPU in
    the host before): now 20,000 branches here, the rest in the worker, which finds no
    solution."""
    env = envs.make("sudoku")
    env.reset(
        options={"instance": {"puzzle": [[0, 0, 3, 1], [0, 0, 4, 0], [0, 1, 0, 3], [0, 0, 1, 0]]}}
    )
    cpu, mb, outcome = _reset_cost(env, _sudoku(SUDOKU_NO_SOLUTION))
    assert outcome == "the puzzle has no solution"
    assert cpu < CPU_S and mb < RSS_MB, (cpu, mb)


def test_sudoku_checks_are_unchanged_for_honest_puzzles():
    from verifiers.sudoku import check_unique

    puzzle = _sudoku(SUDOKU_HARD)["puzzle"]
    env = envs.make("sudoku")
    env.reset(options={"instance": {"puzzle": puzzle}})
    solution = sudoku_solve(puzzle)
    assert env.unwrapped.instance.solution == tuple(map(tuple, solution))
    assert check_unique(puzzle).solution == solution
    with pytest.raises(ValueError, match="2\\+ solutions"):
        env.reset(options={"instance": {"puzzle": [[0] * 9 for _ in range(9)]}})
    with pytest.raises(ValueError, match="not the puzzle's unique solution"):
        env.reset(options={"instance": {"puzzle": puzzle, "solution": [[1] * 9] * 10**6}})


@pytest.mark.parametrize(
    ("setting", "instance", "message"),
    [
        ("plan_path", {"grid": ["."] * 201, "start": [0, 0], "goal": [1, 0]}, "at most 200"),
        ("math", {"question": "q" * 1_000_001, "answer": "1"}, "at most 1,000,000 characters"),
        ("discussion", {"question": "q" * 1_000_001}, "at most 1,000,000 characters"),
        (
            "solver_verifier_corrector",
            {"question": "q", "answer": ["1"] * 1_000_001},
            "at most 1,000,000 characters",
        ),
        (
            "code",
            {"prompt": "p", "style": "function", "entry_point": "f", "tests": ["assert f()"] * 21},
            "at most 20 assert tests",
        ),
        (
            "code",
            {"prompt": "p", "style": "stdin", "tests": [{"input": "", "output": "1"}] * 257},
            "at most 256 tests",
        ),
        (
            "code",
            {
                "prompt": "p",
                "style": "function",
                "entry_point": "f",
                "tests": ["assert f() == '" + "x" * 16_000 + "'"],
            },
            "at most 16,000 characters of code",
        ),
        (
            "code",
            {
                "prompt": "p",
                "style": "function",
                "entry_point": "f",
                "tests": ["assert f() == 1"],
                "starter_code": "x = 1\n" * 3_000,
            },
            "'starter_code' is 18,000 characters",
        ),
    ],
)
def test_refusals_say_which_limit(setting, instance, message):
    with pytest.raises(ValueError, match=message):
        envs.make(setting).reset(options={"instance": instance})


@pytest.mark.parametrize("setting", ["propose_solve_judge", "challenge_plan_solve"])
def test_pool_settings_limit_their_items(setting):
    from envs.pools import PoolItem, QuestionPool

    pool = QuestionPool([PoolItem("What is 1 + 1?", kind="math", answer="2")], seed_set="r5")
    env = envs.make(setting, pool=pool)
    tests = [{"kind": "assert", "code": "assert f(1) == 1"}] * 21
    item = {"question": "q", "kind": "code", "answer": "def f(x): return x", "tests": tests}
    with pytest.raises(ValueError, match="at most 20 assert tests"):
        env.reset(options={"instance": item})
    nested = "solve" if setting == "propose_solve_judge" else "task"
    ok = {**item, "tests": tests[:1]}
    with pytest.raises(ValueError, match="at most 20 assert tests"):
        env.reset(options={"instance": {**ok, nested: item}})
    with pytest.raises(ValueError, match="at most 1,000,000 characters"):
        env.reset(options={"instance": {**ok, "question": "q" * 1_000_001}})


def test_the_server_answers_400_at_a_small_cost():
    """Through the OpenEnv server: the reported room and a hard level within the limits are
    400s with the reason, each at a small cost to the server process."""
    from fastapi.testclient import TestClient

    from adapters.integrations.openenv import create_app

    with TestClient(create_app("sokoban")) as client:
        assert client.post("/reset", json={"seed": 1}).status_code == 200
        for level, reason in [
            (_open_room(40, 6, seed=1), "limited to 16x16 cells"),
            (_open_room(16, 4, seed=1), "too hard to verify"),
        ]:
            with cpu_cost() as spent:
                r = client.post("/reset", json={"instance": {"map": level}})
            assert r.status_code == 400 and reason in r.json()["detail"], r.text
            assert spent.seconds < CPU_S, spent.seconds
        ok = client.post("/reset", json={"instance": {"map": WORKER_LEVEL}})
        assert ok.status_code == 200, ok.text
