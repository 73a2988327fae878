"""No completion, up to an env's size limit, makes ``env.step`` raise, spend more than 0.5 s of
the host process's CPU time or raise its peak RSS by 64 MB (issue 24's targets; what is
expensive runs in the sandbox or in a bounded worker process); no explicit instance a client
sends makes ``env.reset`` do so either (it is accepted or refused with a ``ValueError``); and
each host-side parser and grader has a bound, tested."""

from __future__ import annotations

import random
import resource
import time
from collections.abc import Callable
from typing import Any

import pytest

import envs
import sandboxes
from envs.pools import PoolItem, QuestionPool
from tests.cost import cpu_cost
from verifiers.assert_plans import plan_test
from verifiers.code_tests import TestCase, run_tests
from verifiers.host_eval import MAX_STEPS
from verifiers.written_tests import parse_assert_tests, parse_stdin_tests, split_assert_block

from .attacks import CLIP, HALF, INC, SUM, py

LIMIT = 200_000  # EnvConfig.max_completion_chars


def _fill(unit: str, head: str = "", tail: str = "") -> str:
    n = LIMIT - len(head) - len(tail)
    return head + (unit * (n // len(unit) + 1))[:n] + tail


HOSTILE = {
    "blanks": _fill(" \t"),
    "backticks": _fill("`"),
    "fence_lines": _fill("```\n"),
    "braces": _fill("{"),
    "boxes": _fill("\\boxed{"),
    "tags": _fill("<answer>"),
    "test_markers": _fill("**Test Input:**\n1\n**Test Output:**\n"),
    "asserts": _fill("assert clip(1, 0, 2) == 1\n", "```python\n", "\n```"),
    "deep_minus": "```python\nassert clip([], 0, 1) == " + "-" * 150_000 + "1\n```",
    "plus_chain": "```python\nassert clip(1, 0, 2) == 1" + "+1" * 99_000 + "\n```",
    "defs": _fill("def clip(x, lo, hi):\n    return x\n", "```python\n", "\n```"),
    "nested_lists": "```python\nassert clip(" + "[" * 55 + "]" * 55 + ", 0, 1) == 1\n```",
    "huge_int": "```python\nassert clip(1, 0, 2) == 10 ** 10 ** 10\n```",
    "long_loop": "```python\nfor i in range(10 ** 9):\n    assert clip(i, 0, 5) == min(i, 5)\n```",
    "verdicts": _fill("Verdict: correct\nVerdict: incorrect\n"),
    # issue 24, root cause C: work the node count did not see
    "modpow": "```python\nassert clip(pow(3, 2 ** 20000, 2 ** 20000 + 7), 0, 2) == 1\n```",
    "percent_width": "```python\nassert clip(1, 0, 2) == len('%01500000000d' % 0)\n```",
    "format_width": "```python\nassert clip(1, 0, 2) == len(f'{0:01500000000d}')\n```",
    "list_scans": "```python\nx = list(range(99999))\ny = [i in x for i in range(19000)]\n"
    "assert clip(1, 0, 2) == len(y)\n```",
    "shared_rows": "```python\na = [0] * 99999\nb = [a] * 99999\nc = [list(a)] * 99999\n"
    "assert clip(1, 0, 2) == (b == c)\n```",
    "big_products": "```python\nx = 2 ** 99000 - 1\ny = [x * x for i in range(50)]\n"
    "assert clip(1, 0, 2) == 1\n```",
}


def _pool() -> QuestionPool:
    items = [PoolItem(f"What is {i} + {i}?", kind="math", answer=str(2 * i)) for i in range(20)]
    return QuestionPool(items, seed_set="bounds")


def _env(name: str, sb):
    if name == "code_function":
        env = envs.make("code", sandbox=sb, max_turns=2)
        env.reset(options={"instance": CLIP})
    elif name == "code_stdin":
        env = envs.make("code", sandbox=sb, max_turns=1)
        env.reset(options={"instance": SUM})
    elif name == "math":
        env = envs.make("math", sandbox=sb, max_turns=1)
        env.reset(options={"instance": {"question": "What is 6 * 7?", "answer": "42"}})
    elif name in ("mae", "sage"):
        env = envs.make(
            name,
            sandbox=sb,
            pool=_pool(),
            **({"num_answers": 1} if name == "mae" else {"num_samples": 1}),
        )
        env.reset(options={"instance": INC})
    else:
        env = envs.make("marsrl", sandbox=sb, max_steps=3)
        env.reset(options={"instance": {"question": "What is 6 * 7?", "answer": "42"}})
    return env


@pytest.fixture
def sb(local_sandbox):
    return local_sandbox


CPU_S = 0.5
RSS_MB = 64


@pytest.mark.parametrize(
    "setting", ["code_function", "code_stdin", "math", "mae", "sage", "marsrl"]
)
def test_no_completion_raises_or_stalls_the_host(setting, sb):
    """Issue 24's targets: no step costs more than 0.5 s of this process's CPU time or raises
    its peak RSS by 64 MB (the peak is measured after a warm-up step, so imports and caches
    that any first step fills do not count)."""
    warm = _env(setting, sb)
    warm.step("warm-up")
    worst = (0.0, "")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for name, text in HOSTILE.items():
        assert len(text) <= LIMIT
        env = _env(setting, sb)
        for _ in range(4):
            agent = env.agent_selection
            if env.terminations[agent] or env.truncations[agent]:
                break
            with cpu_cost() as spent:
                env.step(text)  # never raises
            used = spent.seconds
            worst = max(worst, (used, f"{name} as {agent}"))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert worst[0] < CPU_S, worst
    assert grown_mb < RSS_MB, grown_mb


# ---------------------------------------------------------------- explicit instances at reset


def _open_room(side: int, boxes: int, seed: int) -> list[str]:
    """A walled ``side`` x ``side`` room, empty inside, with ``boxes`` boxes, as many goals and
    the player at random cells away from the walls: the breadth-first solver's worst case
    (every box can go anywhere)."""
    rng = random.Random(seed)
    cells = [(r, c) for r in range(2, side - 2) for c in range(2, side - 2)]
    pick = rng.sample(cells, 2 * boxes + 1)
    rows = [list("#" * side)] + [list("#" + " " * (side - 2) + "#") for _ in range(side - 2)]
    rows.append(list("#" * side))
    for i, (r, c) in enumerate(pick):
        rows[r][c] = "$" if i < boxes else "." if i < 2 * boxes else "@"
    return ["".join(r) for r in rows]


def _maze(side: int) -> dict[str, Any]:
    """A ``side`` x ``side`` serpentine corridor: the longest breadth-first search the grid
    allows, start and goal at its two ends."""
    grid = []
    for r in range(side):
        if r % 2 == 0:
            grid.append("." * side)
        else:
            gap = side - 1 if r % 4 == 1 else 0
            grid.append("".join("." if c == gap else "#" for c in range(side)))
    return {"grid": grid, "start": [0, 0], "goal": [side - 1 if side % 2 else side - 2, 0]}


#: a 9x9 puzzle without a solution whose proof costs the counting solver about 290,000 branches
#: (about a second of CPU): one given of a hard puzzle changed
SUDOKU_NO_SOLUTION = (
    ".......12........3..23..4....1....5..4....6..7....1..4..8..5...6.....2.1.....7..."
)
#: a unique 9x9 puzzle made to defeat naive backtracking (about 19,000 branches here)
SUDOKU_HARD = "..............3.85..1.2.......5.7.....4...1...9.......5......73..2.1........4...9"


def _sudoku(text: str) -> dict[str, Any]:
    return {
        "puzzle": [
            [0 if ch == "." else int(ch) for ch in text[r * 9 : r * 9 + 9]] for r in range(9)
        ]
    }


def _text(question: int, answer: int, **extra: Any) -> dict[str, Any]:
    """A question (words) and an answer (digits) of these lengths."""
    words = ("word " * (question // 5 + 1))[:question]
    return {"question": words.strip() + "?", "answer": "4" * answer, **extra}


def _assert_tests(n: int) -> dict[str, Any]:
    """``n`` assert tests, each a literal to evaluate and a comprehension that uses up the host's
    in-process planning budget (so it is planned again in the worker): the most host work a test
    of this length can ask."""
    literal = "[" + "1," * 360 + "]"
    tests = [
        f"assert f({i}) == len({literal}) * 0 + len([i * i for i in range(3900)])" for i in range(n)
    ]
    return {
        "prompt": "Return 3900.",
        "style": "function",
        "entry_point": "f",
        "solution": "def f(x):\n    return 3900\n",
        "tests": tests,
    }


def _stdin_tests(n: int) -> dict[str, Any]:
    """``n`` stdin tests of 1,900-character inputs whose golden program writes past the output
    limit on each (the most result bytes for the host to read)."""
    return {
        "prompt": "Echo.",
        "style": "stdin",
        "solution": "import sys\nsys.stdout.write('x' * 70000)\n",
        "tests": [{"input": f"{i} " + " " * 1900, "output": "x" * 1900} for i in range(n)],
    }


def _code_item(kind: str, n_tests: int) -> dict[str, Any]:
    return {
        "question": "Write f(x) returning x.",
        "kind": kind,
        "answer": "def f(x):\n    return x\n",
        "entry_point": "f",
        "tests": [{"kind": "stdio", "stdin": "1", "expected_stdout": "1"}] * n_tests,
    }


_TEXT_AT_LIMIT = _text(600_000, 390_000)
_TEXT_OVER_LIMIT = _text(3_000_000, 1_000_000)

#: per setting: the most expensive explicit instances within its limits and some beyond them
#: (each built when measured; an instance beyond a limit may be refused, cheaply)
RESET_CORPUS: dict[str, dict[str, Callable[[], Any]]] = {
    "sokoban": {
        # 40 x 40 with 7 boxes: 0.9 s of CPU and about 120 MB in the solver before the fix
        "room_40x40_7_boxes": lambda: {"map": _open_room(40, 7, seed=5)},
        "room_16x16_4_boxes": lambda: {"map": _open_room(16, 4, seed=1)},
    },
    "sudoku": {
        "no_solution_deep_search": lambda: _sudoku(SUDOKU_NO_SOLUTION),
        "hard_unique": lambda: _sudoku(SUDOKU_HARD),
        "empty_9x9": lambda: {"puzzle": [[0] * 9 for _ in range(9)]},
    },
    "plan_path": {
        "maze_200x200": lambda: _maze(200),
        "two_million_rows": lambda: {"grid": ["."] * 2_000_000, "start": [0, 0], "goal": [1, 0]},
    },
    "code": {
        "assert_tests_at_limits": lambda: _assert_tests(20),
        "stdin_tests_at_limits": lambda: _stdin_tests(256),
        "assert_tests_over_limit": lambda: _assert_tests(100),
        "starter_code_200k": lambda: {
            **_assert_tests(1),
            "starter_code": "x = 1\n" * 33_000,
        },
    },
    "math": {
        "text_at_limit": lambda: _TEXT_AT_LIMIT,
        "text_over_limit": lambda: _TEXT_OVER_LIMIT,
        "choices_at_limit": lambda: {
            **_text(100, 1),
            "answer_format": "choice",
            "choices": ["x" * 98] * 9_000,
        },
    },
    "propose_solve_judge": {
        "text_at_limit": lambda: {**_TEXT_AT_LIMIT, "kind": "math"},
        "text_over_limit": lambda: {**_TEXT_OVER_LIMIT, "kind": "math"},
        "code_item_at_limits": lambda: {
            **_code_item("code", 256),
            "solve": _code_item("code", 256),
        },
        "code_item_over_limit": lambda: _code_item("code", 20_000),
    },
    "challenge_plan_solve": {
        "text_at_limit": lambda: {**_TEXT_AT_LIMIT, "kind": "math"},
        "text_over_limit": lambda: {**_TEXT_OVER_LIMIT, "kind": "math"},
        "code_item_at_limits": lambda: {**_code_item("code", 256), "task": _code_item("code", 256)},
        "code_item_over_limit": lambda: _code_item("code", 20_000),
    },
    "discussion": {
        "text_at_limit": lambda: _TEXT_AT_LIMIT,
        "text_over_limit": lambda: _TEXT_OVER_LIMIT,
    },
    "solver_verifier_corrector": {
        "text_at_limit": lambda: _TEXT_AT_LIMIT,
        "text_over_limit": lambda: _TEXT_OVER_LIMIT,
    },
}
#: a small instance of each setting: the warm-up reset (imports and caches any reset fills)
SMALL_INSTANCE: dict[str, Any] = {
    "sokoban": {"map": ["#####", "#@$.#", "#####"]},
    "sudoku": {"puzzle": [[0, 0, 3, 1], [0, 0, 4, 0], [0, 1, 0, 3], [0, 0, 1, 0]]},
    "plan_path": {"grid": ["..", ".."], "start": [0, 0], "goal": [1, 1]},
    "code": CLIP,
    "math": {"question": "What is 6 * 7?", "answer": "42"},
    "propose_solve_judge": INC,
    "challenge_plan_solve": INC,
    "discussion": {"question": "What is 6 * 7?", "answer": "42"},
    "solver_verifier_corrector": {"question": "What is 6 * 7?", "answer": "42"},
}


def _reset_env(setting: str, sb):
    if setting in ("propose_solve_judge", "challenge_plan_solve"):
        return envs.make(setting, sandbox=sb, pool=_pool())
    return envs.make(setting, sandbox=sb)


def test_reset_corpus_covers_every_setting():
    assert sorted(RESET_CORPUS) == sorted(envs.list_envs()) == sorted(SMALL_INSTANCE)


@pytest.mark.parametrize("setting", sorted(RESET_CORPUS))
def test_no_explicit_instance_stalls_the_host_at_reset(setting, sb):
    """Round 5: a client's explicit instance cost the host what it asked for at reset (a 40 x 40
    Sokoban room with boxes: a second of CPU and about 100 MB in the exact solver; a crafted
    Sudoku: a second; a code instance's many tests or long starter code: seconds and gigabytes).
    Now each reset, the reset observation included, costs under 0.5 s of this process's CPU and
    64 MB of peak RSS, or is refused with a ``ValueError`` (a 400 through the server): sizes
    are limited (``envs.core.explicit``, the puzzles' own limits) and the puzzles' searches run
    in the host under a small budget, past it in a bounded worker process."""
    env = _reset_env(setting, sb)
    env.reset(options={"instance": SMALL_INSTANCE[setting]})
    env.observe(env.agent_selection)
    costs = []
    for name, build in RESET_CORPUS[setting].items():
        instance = build()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        outcome = "accepted"
        with cpu_cost() as spent:
            try:
                env.reset(options={"instance": instance})
                env.observe(env.agent_selection)
            except ValueError as exc:
                outcome = f"refused: {str(exc)[:120]}"
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
        costs.append((name, round(spent.seconds, 3), round(grown_mb, 1), outcome))
        del instance
    assert all(cpu < CPU_S and mb < RSS_MB for _, cpu, mb, _ in costs), costs


# ---------------------------------------------------------------- magnitude, not length

#: programs whose results are small in text and huge in magnitude (issue 36, root cause C), and
#: tests whose conversions or roundings are: each as the completion of the role that writes it
MAGNITUDE = {
    "decimal_400001_digits": "Decimal('4E+400000')",
    "decimal_exponent_999999999": "Decimal('4E+999999999')",
    "decimals_at_the_bound": "[Decimal('4.4E+4300')] * 3000",
    "fraction_of_megabit_parts": (
        "Fraction(random.getrandbits(1 << 20), random.getrandbits(1 << 20) | 1)"
    ),
    "decimal_beside_a_megabit_int": "[Decimal(1), random.getrandbits(1 << 20)]",
}
_PROGRAM = "import random\nfrom decimal import Decimal\nfrom fractions import Fraction\n"
SAGE_TESTS = [  # a challenger's own tests of its reference
    "assert round(half(5)) == 2",
    # a Decimal at the decoding bound, grown by the test's arithmetic, converted again and again
    "assert [round(half(1) * half(1) * half(1) * half(1) * half(1) * half(1)) for i in range(300)]"
    " == [2]",
]
TESTER_MAGNITUDE = [
    "assert half(4) == round(2, -10 ** 9) + 2",
    "assert half(4) == 2 + 0 * round(7 ** 35000, -30000)",
    "assert half(4) == 2 + 0 * sum(divmod(7 ** 35000, 3 ** 50000))",
]


def _step_cost(env, text: str) -> tuple[float, str]:
    agent = env.agent_selection
    with cpu_cost() as spent:
        env.step(text)
    return spent.seconds, agent


@pytest.mark.parametrize("name", sorted(MAGNITUDE))
def test_magnitude_corpus_costs_the_host_little(name, sb):
    """Issue 36, C: a 14-character Decimal('4E+400000') returned by a program made a golden
    test's round() convert a 400,001-digit integer in the host (4-8 s of CPU in one step). Each
    value, as a coder's result (golden tests round, floor, truncate and %d-format it) and as a
    SAGE challenger's reference (its own tests do), costs the host under 0.5 s and 64 MB."""
    program = _PROGRAM + f"def half(x):\n    return {MAGNITUDE[name]}\n"
    warm = envs.make("code", sandbox=sb, mode="single")
    warm.reset(options={"instance": HALF})
    warm.step(py("def half(x):\n    return x / 2"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def coder_cost() -> tuple[float, str]:
        coder = envs.make("code", sandbox=sb, mode="single")
        coder.reset(options={"instance": HALF})
        return _step_cost(coder, py(program))

    def sage_cost(tests: str) -> tuple[float, str]:
        challenge = (
            "<question>Write half(x) returning x / 2.</question>\n"
            f"<tests>\n{tests}\n</tests>\n<solution>\n```python\n{program}\n```\n</solution>"
        )
        return _step_cost(_env("sage", sb), challenge)

    # the cheaper of two plays of each step: CPU time also grows when other processes share
    # the cores (cache and frequency), which is not what is measured here
    costs = [min(coder_cost(), coder_cost())]
    costs += [min(sage_cost(t), sage_cost(t)) for t in SAGE_TESTS]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert max(costs)[0] < CPU_S, costs
    assert grown_mb < RSS_MB, grown_mb


@pytest.mark.parametrize("test", TESTER_MAGNITUDE)
def test_tester_roundings_are_bounded_by_magnitude(test, sb):
    """round(2, -10 ** 9) made 10 ** (10 ** 9) on the host (minutes and gigabytes); the
    division behind a rounding or a divmod of big integers is charged by the product of their
    sizes."""
    env = envs.make("code", sandbox=sb, max_turns=2)
    env.reset(options={"instance": HALF})
    env.step(py(HALF["solution"]))
    cost, agent = _step_cost(env, f"```python\n{test}\n```")
    assert agent == "tester" and cost < CPU_S, cost


# ---------------------------------------------------------------- one bound each


def test_deeply_nested_tester_answer_is_a_format_failure():
    """The 445-character answer that made ast.unparse raise RecursionError."""
    tests, problem = parse_assert_tests("```python\nassert f([]) == " + "-" * 400 + "1\n```", "f")
    assert tests == [] and "nested deeper" in problem
    tests, problem = parse_assert_tests(
        "```python\nassert f(1) == 1" + "+1" * 60_000 + "\n```", "f"
    )
    assert tests == [] and "does not parse" in problem
    assert split_assert_block("assert f(1) == " + "-" * 400 + "1")[0] == ()


@pytest.mark.parametrize("unit", [" ", "\t ", "> ", "**", "```\n", "~~~\n"])
def test_stdin_test_parsing_is_linear(unit):
    text = "**Test Input:**" + unit * (LIMIT // len(unit))
    with cpu_cost() as spent:
        parse_stdin_tests(text)
    assert spent.seconds < 0.5


def test_crafted_stderr_costs_the_host_nothing(sb):
    """Tracebacks are not parsed any more: 1 MB of fake frames on stderr is just a failure."""
    frame = '  File "main.py", line 1, in <module>\n    assert f() == 1\n'
    prog = f"import sys\nsys.stderr.write({frame!r} * 20_000)\nraise AssertionError\n"
    lim = sandboxes.Limits(wall_s=5, cpu_s=5, max_output_bytes=1 << 20)
    with cpu_cost() as spent:
        rep = run_tests(prog, [TestCase.asserts("assert f() == 1")] * 4, sandbox=sb, limits=lim)
    assert not any(r.passed for r in rep.results)
    assert spent.seconds < 0.5


@pytest.mark.parametrize(
    "code",
    [
        "assert f(1) == 10 ** 10 ** 10",  # a huge expected value
        "assert f(1) == [0] * 10 ** 9",  # a huge expected list
        "for i in range(10 ** 9):\n    assert f(i) == i",  # too many steps
        "x = 1\n" * (MAX_STEPS + 10) + "assert f(x) == 1",  # too many statements
        "assert f(1) == 1 << (1 << 40)",
        "assert f('a' * 10 ** 6) == 'a'.join(['b'] * 10 ** 6)",
        # issue 24, root cause C
        "assert f(1) == pow(3, 2 ** 20000, 2 ** 20000 + 7)",
        "assert f(1) == len('%01500000000d' % 0)",
        "assert f(1) == len(f'{0:01500000000d}')",
        "x = list(range(99999))\ny = [i in x for i in range(19000)]\nassert f(1) == len(y)",
        "a = [0] * 99999\nb = [a] * 99999\nc = [list(a)] * 99999\nassert f(1) == (b == c)",
    ],
)
def test_host_evaluation_is_bounded(code):
    """Beyond a bound the host does not evaluate the test (it goes to a sandbox job). Planning
    runs in the calling thread, so its cost is this thread's CPU time (the process's would count
    threads earlier tests left running)."""
    with cpu_cost(time.thread_time) as spent:
        plan = plan_test(code, "f", "")
    assert not plan.static and ("more than" in plan.why or "too large" in plan.why), plan
    assert spent.seconds < 1.0


def test_math_grader_deadlines_cover_writes():
    """A worker stuck on one grading must not block the requests written behind it: the old
    pool blocked writing (64 KiB pipe) with no deadline, for as long as the grading took."""
    from verifiers._math_pool import MathPool
    from verifiers.math_answer import grade_many

    pool = MathPool(1)
    try:
        long_ok = "\\boxed{" + "+".join(["\\frac{1}{2}"] * 120) + "}"
        # symbolic references, so that both go to the workers (against a plain number such
        # arithmetic is rejected before any worker sees it)
        pairs = [("\\boxed{9^{9^{9^{9^{9}}}}}", "\\sqrt{1}")] + [(long_ok, "\\sqrt{3600}")] * 15
        t = time.perf_counter()
        out = grade_many(pairs, timeout_s=2.0, pool=pool)
        wall = time.perf_counter() - t
        assert out[0].transient and "timed out" in out[0].reason
        assert all(g.correct and g.method != "fast" for g in out[1:])  # graded by the workers
        assert wall < 60, wall
    finally:
        pool.close()


BIG = {
    "prompt": "Write f(n): a list of n empty lists.",
    "style": "function",
    "entry_point": "f",
    "solution": "def f(n):\n    return [[] for _ in range(n)]\n",
    "tests": ["assert f(2) == [[], []]", "assert f(0) == []"],
}


def test_huge_results_cost_the_host_little(local_sandbox):
    """The tester asks for results of about a megabyte from the golden program, twice, and
    from every mutant: decoding them is bounded by the results channel's size."""
    env = envs.make("code", sandbox=local_sandbox, max_turns=2)
    env.reset(options={"instance": BIG})
    env.step("```python\ndef f(n):\n    return [[] for _ in range(n)]\n```")
    tests = "".join(f"assert f({130_000 + i}) == []\n" for i in range(5))  # ~1 MB each
    with cpu_cost() as spent:
        env.step(f"```python\n{tests}```")
    assert spent.seconds < 2.0
    parts = env.infos["tester"]["reward_parts"]
    assert parts["components"]["valid"] == 0.0  # the golden program fails them (too big)
