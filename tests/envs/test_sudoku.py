"""Sudoku: unique instances, hand-computed rewards (AT-GRPO A.1.3), oracle and garbage policies."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import envs
from envs.core.render import COLORS
from envs.sudoku import SudokuInstance, grid_text
from tests.envs.contract import GARBAGE, oracle_policy, play
from verifiers.sudoku import (
    conflicts,
    count_solutions,
    generate_puzzle,
    is_consistent,
    is_solution,
    parse_proposal,
    solve,
)

# A 4x4 puzzle with exactly one solution (10 blanks, 6 givens).
PUZZLE = [[0, 0, 3, 1], [0, 0, 4, 0], [0, 1, 0, 3], [0, 0, 1, 0]]
SOLUTION = [[2, 4, 3, 1], [1, 3, 4, 2], [4, 1, 2, 3], [3, 2, 1, 4]]
# A valid full Sudoku that keeps the given 3 at (1,3) but not the given 1 at (1,4): the
# reference implementation counted any valid grid like this as solved.
VALID_BUT_WRONG = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
LAM = 0.6


def _parts(env, agent):
    return env.infos[agent]["reward_parts"]


def _fresh(mode="multi", **config):
    env = envs.make("sudoku", mode=mode, **config)
    env.reset(options={"instance": {"puzzle": PUZZLE}})
    return env


def _grid(env):
    return env.unwrapped.state.grid


def tool_code(printed) -> str:
    text = printed if isinstance(printed, str) else json.dumps(printed)
    return f"```python\nprint({text!r})\n```"


def planner_local(legal, prog):
    return 0.15 + 0.55 * legal + 0.30 * prog


# ---------------------------------------------------------------------- instances
def test_500_generated_puzzles_have_exactly_one_solution():
    raws = {n: envs.make("sudoku", size=n).unwrapped for n in (4, 6, 9)}
    sizes = [4] * 250 + [9] * 200 + [6] * 50
    for k, n in enumerate(sizes):
        split = ("train", "val", "test")[k % 3]
        inst = raws[n].sample_instance(split, k)
        puzzle = [list(r) for r in inst.puzzle]
        assert len(puzzle) == n and all(len(r) == n for r in puzzle)
        assert sum(r.count(0) for r in puzzle) == {4: 10, 6: 20, 9: 45}[n]
        assert count_solutions(puzzle, limit=2) == 1
        assert solve(puzzle) == [list(r) for r in inst.solution]
        assert is_solution(puzzle, inst.solution)
        assert raws[n].split_of_instance(inst) == split


def test_generation_is_deterministic_and_splits_use_unrelated_puzzles():
    raw = envs.make("sudoku", size=9).unwrapped
    for seed in range(5):
        a, b = raw.sample_instance("val", seed), raw.sample_instance("val", seed)
        assert a == b
        train = raw.sample_instance("train", seed)
        # A relabelling keeps the blank pattern; different splits use different base puzzles.
        blanks = [[v == 0 for v in row] for row in a.puzzle]
        assert blanks != [[v == 0 for v in row] for row in train.puzzle]


def test_blanks_option_and_generator_limits():
    env = envs.make("sudoku", size=9, blanks=30)
    env.reset(seed=1)
    assert sum(r.count(0) for r in env.unwrapped.instance.puzzle) == 30
    env = envs.make("sudoku", size=6)
    env.reset(seed=1)
    assert len(env.unwrapped.instance.puzzle) == 6
    assert count_solutions(env.unwrapped.instance.puzzle) == 1
    with pytest.raises(ValueError, match="size must be one of"):
        envs.make("sudoku", size=5)
    with pytest.raises(ValueError, match="blanks must lie in"):
        envs.make("sudoku", size=4, blanks=13)
    with pytest.raises(ValueError, match="blanks must lie in"):
        generate_puzzle(np.random.default_rng(0), 4, 14)
    puzzle, _ = generate_puzzle(np.random.default_rng(0), 4, 12)  # minimal: 4 clues
    assert count_solutions(puzzle) == 1 and sum(r.count(0) for r in puzzle) == 12


def test_solver_counts():
    assert count_solutions(PUZZLE, limit=10) == 1
    assert count_solutions([[0] * 4 for _ in range(4)], limit=1000) == 288
    assert count_solutions([[1, 0, 0, 4], [0, 0, 1, 0], [0, 4, 0, 0], [4, 0, 0, 1]]) == 0
    assert count_solutions([[1, 1, 0, 0]] + [[0] * 4] * 3) == 0
    two = [list(r) for r in SOLUTION]
    two[0][0] = two[0][3] = two[1][0] = two[1][3] = 0  # 2/1 and 1/2 swap: two solutions
    assert count_solutions(two) == 2


def test_reference_bug_valid_grid_ignoring_givens_is_not_a_solution():
    assert is_consistent(VALID_BUT_WRONG) and not is_solution(PUZZLE, VALID_BUT_WRONG)
    assert is_solution(PUZZLE, SOLUTION)
    env = _fresh(mode="single")
    env.step("#### " + json.dumps(VALID_BUT_WRONG))
    p = _parts(env, "planner")
    assert not env.infos["planner"]["success"] and p["team"] == 0.0
    assert not env.terminations["planner"]
    assert p["components"]["legal"] == 0.0 and "given" in p["reasons"]["apply"]
    # The givens stay; the rejected edits are not applied.
    assert all(_grid(env)[r][c] == PUZZLE[r][c] for r in range(4) for c in range(4) if PUZZLE[r][c])


def test_explicit_instance_validation():
    env = envs.make("sudoku")
    bad = [
        ("not a dict", "instance is"),
        ({"grid": PUZZLE}, "instance is"),
        ({"puzzle": PUZZLE, "extra": 1}, "unknown Sudoku instance keys"),
        ({"puzzle": [[0, 0, 0], [0, 0, 0], [0, 0, 0]]}, "unsupported Sudoku size 3"),
        ({"puzzle": [[0] * 4, [0] * 4, [0] * 3, [0] * 4]}, "row 3 must be a list of 4"),
        ({"puzzle": [[5, 0, 0, 0]] + [[0] * 4] * 3}, r"outside \[0, 4\]"),
        ({"puzzle": [[True, 0, 0, 0]] + [[0] * 4] * 3}, "not an int"),
        ({"puzzle": [[1, 0, 0, 0], [0, 1, 0, 0], [0] * 4, [0] * 4]}, "box 1 has 1 twice"),
        # The reference implementation's fallback puzzle: its givens clash.
        ({"puzzle": [[1, 0, 0, 4], [0, 0, 1, 0], [0, 4, 0, 0], [4, 0, 0, 1]]}, "box 3 has 4 twice"),
        ({"puzzle": [[0, 0, 3, 4], [0, 0, 0, 0], [3, 0, 0, 0], [4, 0, 0, 0]]}, "no solution"),
        ({"puzzle": [[1, 2, 3, 4]] + [[0] * 4] * 3}, "2\\+ solutions"),
        ({"puzzle": SOLUTION}, "no blank"),
        ({"puzzle": PUZZLE, "solution": VALID_BUT_WRONG}, "not the puzzle's unique solution"),
    ]
    for instance, message in bad:
        with pytest.raises(ValueError, match=message):
            env.reset(options={"instance": instance})
    env.reset(options={"instance": {"puzzle": np.array(PUZZLE)}})
    assert env.unwrapped.instance.solution == tuple(map(tuple, SOLUTION))
    # A 9x9 instance is accepted by a 4x4-configured env; instances round-trip.
    nine = envs.make("sudoku", size=9).unwrapped.sample_instance("test", 0)
    env.reset(options={"instance": nine})
    assert env.unwrapped.instance == nine and isinstance(nine, SudokuInstance)


def test_parse_proposal_shapes():
    assert parse_proposal(json.dumps(SOLUTION), 4).value.kind == "grid"
    assert parse_proposal("[[1,1,2]]", 4).value.steps == ((1, 1, 2),)
    for text, reason in [
        ("[]", "empty list"),
        ("[1, 2, 3]", "list of lists"),
        ("[[1, 2], [2, 1]]", "grid of 4 rows"),
        ("[[1, 1, 0]]", "digit 0 is not an int in 1..4"),
        ("[[1, 1, 2.0]]", "digit 2.0"),
        ("[[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,7]]", r"\(4, 4\) is 7"),
        ('{"grid": 1}', "expected a JSON list"),
        ("no json", "no JSON"),
    ]:
        out = parse_proposal(text, 4)
        assert not out.ok
        assert re.search(reason, out.reason), (text, out.reason)


# ---------------------------------------------------------------------- planner rewards
def test_planner_solution_grid():
    env = _fresh(mode="single")
    env.step("All rules hold.\n#### " + json.dumps(SOLUTION))
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "legal": 1.0, "prog": pytest.approx(10 / 16)}
    assert p["team"] == 1.0 and p["mask"] == 1.0
    assert p["reward"] == pytest.approx(LAM + (1 - LAM) * planner_local(1, 10 / 16))
    assert p["reward"] == pytest.approx(0.955)
    assert env.terminations["planner"] and env.infos["planner"]["success"]


def test_planner_steps_progress_conflicts_and_overwrites():
    env = _fresh(mode="single")
    env.step("#### [[1,1,2],[1,2,4]]")  # two correct fills
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "legal": 1.0, "prog": pytest.approx(2 / 16)}
    assert p["team"] == 0.0
    assert p["reward"] == pytest.approx((1 - LAM) * (0.15 + 0.55 + 0.30 * 2 / 16))  # 0.295
    assert _grid(env)[0] == [2, 4, 3, 1]

    env.step("#### [[2,1,3]]")  # row 2 column 1 gets 3: column 1 is fine, box 1 has no 3 yet...
    p = _parts(env, "planner")
    # ...but (2,1)=3 is wrong and (2,2) must be 3 later; no rule is broken yet.
    assert p["components"] == {"fmt": 1.0, "legal": 1.0, "prog": pytest.approx(1 / 16)}

    env.step("#### [[2,2,3]]")  # a second 3 in row 2 and box 1: duplicate
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "legal": 0.0, "prog": pytest.approx(1 / 16)}
    assert p["reward"] == pytest.approx(0.4 * (0.15 + 0.30 / 16))  # 0.0675
    assert "rule violations: row 2 has 3 twice" in env.observe("planner")["prompt"]

    env.step("#### [[2,1,1],[2,2,3]]")  # overwrite earlier fills: nothing newly filled
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "legal": 1.0, "prog": 0.0}
    assert _grid(env)[1] == [1, 3, 4, 0]
    assert env.truncations["planner"]  # max_turns = 4


def test_planner_given_edit_rejected_rest_applied():
    """A.1.3 legal = 1{no row/column/subgrid duplicates in G_k}: the rejected edit of a given
    is not in G_k (row 1 = 2 . 3 1, no duplicate): legal 1; local = 0.15 + 0.55 + 0.30 / 16.
    legal_counts_givens=True (the stricter reading): legal 0."""
    env = _fresh(mode="single")
    env.step("#### [[1,3,2],[1,1,2],[1,4,1]]")  # (1,3) is the given 3; (1,4) restates its 1
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "legal": 1.0, "prog": pytest.approx(1 / 16)}
    assert p["reward"] == pytest.approx((1 - LAM) * (0.15 + 0.55 + 0.30 / 16))
    assert "(1,3): write 2 over the given 3" in p["reasons"]["apply"]
    assert "(1,4)" not in p["reasons"]["apply"]
    assert _grid(env)[0] == [2, 0, 3, 1]
    env = _fresh(mode="single", legal_counts_givens=True)
    env.step("#### [[1,3,2],[1,1,2],[1,4,1]]")
    assert _parts(env, "planner")["components"]["legal"] == 0.0


def test_planner_grid_with_zeros_erases_fills():
    env = _fresh(mode="single")
    env.step("#### [[1,1,4]]")  # wrong digit, no duplicate
    assert _parts(env, "planner")["components"]["legal"] == 1.0
    env.step("#### " + json.dumps(PUZZLE))  # the original puzzle: erases (1,1)
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "legal": 1.0, "prog": 0.0}
    assert _grid(env) == PUZZLE
    partial = [row[:] for row in PUZZLE]
    partial[0][0] = 0
    partial[0][2] = 0  # blanking a given is an edit of a given
    env.step("#### " + json.dumps(partial))
    p = _parts(env, "planner")
    # the erasure of the given is rejected; G_k (the puzzle) has no duplicate: legal 1
    assert p["components"]["legal"] == 1.0 and "erase the given 3" in p["reasons"]["apply"]
    assert _grid(env) == PUZZLE


def test_planner_progress_counts_only_newly_filled_cells():
    env = _fresh(mode="single")
    env.step("#### [[1,1,4],[1,2,2]]")  # (1,1) wrong, (1,2) wrong: row 1 = 4 2 3 1, legal
    env.step("#### " + json.dumps(SOLUTION))  # fixes 2 filled cells, fills the other 8
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "legal": 1.0, "prog": pytest.approx(8 / 16)}
    assert p["team"] == 1.0 and env.infos["planner"]["success"]


@pytest.mark.parametrize(
    "completion",
    [
        "no marker at all " + json.dumps(SOLUTION),
        "#### ",
        "#### [[1,5,2]]",
        "#### [[1,1,2,3]]",
        "#### [[0,0],[1,1]]",
        "#### the answer is 2",
        "#### []",
    ],
)
def test_planner_format_failures_score_zero(completion):
    env = _fresh(mode="single")
    env.step(completion)
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 0.0, "legal": 0.0, "prog": 0.0}
    assert p["reward"] == 0.0 and p["reasons"]["fmt"]
    assert _grid(env) == PUZZLE


# ---------------------------------------------------------------------- tool rewards
def test_tool_prints_solution():
    env = _fresh(tool_team="proposal")  # the team term of the tool's own proposal
    env.step(tool_code(SOLUTION))
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "san": 1.0}
    assert p["team"] == 1.0 and p["reward"] == pytest.approx(1.0)
    assert _grid(env) == PUZZLE  # the tool never changes the state
    assert env.infos["tool"]["tool_proposal"] == json.dumps(SOLUTION, separators=(",", ":"))
    prompt = env.observe("planner")["prompt"]
    assert "print(" in prompt and "Parsed proposal: [[2,4,3,1]" in prompt


@pytest.mark.parametrize(
    ("printed", "components"),
    [
        ([[1, 1, 2]], {"fmt": 1.0, "exec": 1.0, "san": 1.0}),  # a correct fill, not solved
        ([[1, 1, 3]], {"fmt": 1.0, "exec": 1.0, "san": 0.0}),  # 3 twice in row 1
        # over a given: rejected, nothing applied: "all applied edits" holds vacuously
        ([[1, 3, 2]], {"fmt": 1.0, "exec": 0.0, "san": 1.0}),
        ([[1, 3, 2], [1, 1, 2]], {"fmt": 1.0, "exec": 0.0, "san": 1.0}),  # one rejected
        ([[1, 3, 3]], {"fmt": 1.0, "exec": 1.0, "san": 1.0}),  # restates a given: no edit
        (PUZZLE, {"fmt": 1.0, "exec": 1.0, "san": 1.0}),  # the grid as it is: no edit
        (VALID_BUT_WRONG, {"fmt": 1.0, "exec": 0.0, "san": 0.0}),  # rejected + duplicates
        ([[1, 1, 5]], {"fmt": 0.0, "exec": 0.0, "san": 0.0}),  # digit out of range
        ([[0, 1, 2]], {"fmt": 0.0, "exec": 0.0, "san": 0.0}),  # row index out of bounds
        ("solved it", {"fmt": 0.0, "exec": 0.0, "san": 0.0}),
    ],
)
def test_tool_components_hand_computed(printed, components):
    env = _fresh()
    env.step(tool_code(printed))
    p = _parts(env, "tool")
    assert p["components"] == components
    assert p["team"] == 0.0 and p["mask"] == 1.0
    local = 0.10 * components["fmt"] + 0.20 * components["exec"] + 0.70 * components["san"]
    assert p["reward"] == pytest.approx((1 - LAM) * local)
    assert _grid(env) == PUZZLE


def test_tool_crash_no_block_and_timeout():
    env = _fresh(tool_wall_s=1.0)
    env.step("```python\nraise ValueError('nope')\n```")
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 0.0, "exec": 0.0, "san": 0.0}
    assert "ValueError" in p["reasons"]["exec"] and p["reward"] == 0.0
    env.step("")
    env.step("I would fill (1,1) with 2")
    p = _parts(env, "tool")
    assert p["components"]["fmt"] == 0.0 and p["reasons"]["fmt"] == "no code block found"
    env.step("")
    env.step("```python\nwhile True:\n    pass\n```")
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 0.0, "exec": 0.0, "san": 0.0}
    assert "timed out" in p["reasons"]["exec"]


def test_tool_mask_zero_when_the_sandbox_fails():
    class Broken:
        def run(self, code, stdin="", limits=None):
            from types import SimpleNamespace

            return SimpleNamespace(
                exit_code=-1,
                stdout="",
                stderr="",
                timed_out=False,
                memory_exceeded=False,
                output_truncated=False,
                duration_s=0.0,
                error="worker died",
            )

    env = envs.make("sudoku", sandbox=Broken())
    env.reset(options={"instance": {"puzzle": PUZZLE}})
    env.step(tool_code(SOLUTION))
    p = _parts(env, "tool")
    assert p["mask"] == 0.0 and "sandbox failure" in p["reasons"]["exec"]
    assert p["reward"] == 0.0


def test_oracle_tool_recovers_from_wrong_fills():
    env = _fresh(tool_team="proposal")
    env.step("")
    env.step("#### [[1,1,4],[1,2,2]]")  # consistent but wrong: the grid has no solution now
    env.step(env.unwrapped.oracle("tool"))
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "san": 1.0} and p["team"] == 1.0
    env.step(env.unwrapped.oracle("planner"))
    assert env.infos["planner"]["success"]


# ---------------------------------------------------------------------- episodes
@pytest.mark.parametrize("mode", ["multi", "single"])
def test_oracle_solves_200_val_and_garbage_none(mode):
    solved = 0
    for size, count in ((4, 150), (9, 50)):
        env = envs.make("sudoku", size=size, mode=mode)
        for s in range(count):
            solved += play(env, oracle_policy, seed=s, options={"split": "val"})["success"]
    assert solved == 200
    env = envs.make("sudoku", mode=mode)
    garbage = [*GARBAGE, "#### " + json.dumps(VALID_BUT_WRONG), tool_code(VALID_BUT_WRONG)]
    for s in range(60):
        out = play(
            env, lambda e, a, s=s: garbage[s % len(garbage)], seed=s, options={"split": "val"}
        )
        assert not out["success"]
        assert all(np.isfinite(v) for v in out["rewards"].values())


def test_prompts_show_task_grid_tool_and_history():
    env = _fresh()
    tool_prompt = env.observe("tool")["prompt"]
    assert "4x4 Sudoku" in tool_prompt and "2 rows x 2 columns" in tool_prompt
    assert grid_text(PUZZLE, (2, 2)) in tool_prompt
    assert json.dumps(PUZZLE, separators=(",", ":")) in tool_prompt
    assert "```python" in tool_prompt
    env.step(tool_code([[1, 1, 2]]))
    env.step("#### [[1,1,2]]")
    later = env.observe("tool")["prompt"]
    assert "History of earlier turns" in later and "planner answer: [[1,1,2]]" in later
    assert "2 . | 3 1" in later  # the current grid
    single = _fresh(mode="single").observe("planner")["prompt"]
    assert "tool agent's program" not in single and "####" in single


def test_render_ansi_and_rgb():
    env = envs.make("sudoku", render_mode="ansi")
    env.reset(options={"instance": {"puzzle": PUZZLE}})
    text = env.render()
    assert "----+----" in text and ". . | 3 1" in text
    env = envs.make("sudoku", render_mode="rgb_array", mode="single")
    env.reset(options={"instance": {"puzzle": PUZZLE}})
    env.step("#### [[1,1,2],[2,2,3],[2,1,3]]")  # (2,1) and (2,2) clash: both red
    img = env.render()
    assert img.shape == (4 * 32 + 1, 4 * 32 + 1, 3) and img.dtype == np.uint8
    colours = {tuple(int(x) for x in c) for c in np.unique(img.reshape(-1, 3), axis=0)}
    for name in ("given", "filled", "error", "bold_line", "floor"):
        assert COLORS[name] in colours, name
    assert conflicts(_grid(env)) == [("row", 2, 3), ("box", 1, 3)]
    six = envs.make("sudoku", size=6, render_mode="rgb_array")
    six.reset(seed=0)
    frame = six.render()
    assert frame.shape == (6 * 32 + 1, 6 * 32 + 1, 3)
    # Boxes are 2 rows x 3 columns: a bold horizontal line below row 2, none below row 1.
    assert tuple(frame[2 * 32, 5]) == COLORS["bold_line"]
    assert tuple(frame[32, 5]) != COLORS["bold_line"]


def test_random_proposals_match_independent_checks():
    """Random well-formed answers on a 9x9 grid: every planner score re-derived with the pure
    verifiers (conflicts, givens, newly filled cells, solved)."""
    env = envs.make("sudoku", size=9, mode="single", max_turns=50)
    rng = np.random.default_rng(7)
    for episode in range(12):
        env.reset(seed=episode)
        inst = env.unwrapped.instance
        for _ in range(40):
            if not env.agents or env.terminations["planner"] or env.truncations["planner"]:
                break
            before = [row[:] for row in _grid(env)]
            is_steps = rng.random() < 0.5
            noise = float(rng.choice([0.0, 0.02, 0.3]))  # share of random digits
            blank = float(rng.choice([0.0, 0.5]))  # share of cells left blank (grids)

            def digit(r, c, noise=noise, solution=inst.solution):
                return int(rng.integers(1, 10)) if rng.random() < noise else solution[r][c]

            if is_steps:
                cells = rng.integers(0, 9, size=(int(rng.integers(1, 12)), 2)).tolist()
                answer = [[r + 1, c + 1, digit(r, c)] for r, c in cells]
            else:
                answer = [
                    [0 if rng.random() < blank else digit(r, c) for c in range(9)] for r in range(9)
                ]
            env.step("#### " + json.dumps(answer))
            p = _parts(env, "planner")
            after = _grid(env)
            if is_steps:
                edits = [(r - 1, c - 1, v) for r, c, v in answer]
            else:
                edits = [(r, c, answer[r][c]) for r in range(9) for c in range(9)]
            touched_given = any(inst.puzzle[r][c] not in (0, v) for r, c, v in edits)
            assert all(
                after[r][c] == g
                for r, row in enumerate(inst.puzzle)
                for c, g in enumerate(row)
                if g
            )
            newly = sum(1 for r in range(9) for c in range(9) if before[r][c] == 0 and after[r][c])
            assert p["components"]["fmt"] == 1.0
            assert p["components"]["legal"] == float(is_consistent(after))
            assert touched_given or not p["reasons"].get("apply")
            assert p["components"]["prog"] == pytest.approx(newly / 81)
            assert p["team"] == float(is_solution(inst.puzzle, after))
            assert env.infos["planner"]["success"] == (p["team"] == 1.0)


def test_fuzzed_planner_answers_on_6x6_and_9x9():
    from tests.envs.contract import fuzz_completions

    for size in (6, 9):
        env = envs.make("sudoku", size=size, mode="single")
        completions = fuzz_completions(seed=size, n=1500)
        env.reset(seed=0)
        seed = 1
        for completion in completions:
            if not env.agents or env.terminations["planner"] or env.truncations["planner"]:
                env.reset(seed=seed)
                seed += 1
            env.step(completion)
            p = _parts(env, "planner")
            assert np.isfinite(p["reward"]) and 0.0 <= p["reward"] <= 1.0


@pytest.mark.parametrize(
    ("printed", "default", "strict"),
    [(PUZZLE, 1.0, 0.0), ([[1, 3, 3]], 1.0, 0.0), ([[1, 1, 2]], 1.0, 1.0), ([[1, 1, 3]], 0.0, 0.0)],
)
def test_a13_san_no_op_proposal_satisfies_all_applied_edits(printed, default, strict):
    """AT-GRPO A.1.3: s_san = 1 "if all applied edits satisfy local Sudoku constraints". A
    proposal that applies no edit satisfies it vacuously: fmt 1, exec 1, san 1 -> local 1.0,
    reward 0.4 * 1.0 = 0.40 (team 0). san_needs_change=True (the stricter reading): san 0,
    local 0.3, reward 0.12."""
    env = _fresh()
    env.step(tool_code(printed))
    p = _parts(env, "tool")
    assert p["components"]["san"] == default
    assert p["reward"] == pytest.approx(
        (1 - LAM) * (0.1 + 0.2 * p["components"]["exec"] + 0.7 * default)
    )
    env = _fresh(san_needs_change=True)
    env.step(tool_code(printed))
    assert _parts(env, "tool")["components"]["san"] == strict
    if printed is PUZZLE:
        assert _parts(env, "tool")["reward"] == pytest.approx(0.12)


def test_a13_team_term_is_one_value_per_turn():
    """A.1.3: r^team_k = 1{k = T, Solved(h_k)} for the state after the turn. The tool prints the
    solution (fmt, exec, san all 1) but the planner's answer does not parse, the grid stays
    unsolved: team 0 for the turn, tool 0.6 * 0 + 0.4 * 1.0 = 0.40 (1.00 under
    tool_team="proposal"). Adopting it solves the grid: team 1, tool 1.00."""
    env = _fresh()
    env.step(tool_code(SOLUTION))
    env.step("I agree")
    (award,) = env.unwrapped.last_awards
    assert award["reward_parts"]["team"] == 0.0
    assert award["reward_parts"]["reward"] == pytest.approx(0.40)
    env = _fresh()
    env.step(tool_code(SOLUTION))
    env.step("#### " + json.dumps(SOLUTION))
    assert env.unwrapped.last_awards[0]["reward_parts"]["reward"] == pytest.approx(1.0)
