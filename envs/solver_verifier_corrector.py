"""Solver-Verifier-Corrector: a solution is checked and repaired in a loop (MarsRL).

=================  ==========================================================
id (alias)         ``solver_verifier_corrector`` (``marsrl``)
agents             ``solver``, ``verifier``, ``corrector``
actions            completion text (``str``)
observations       ``{"prompt": str}``
horizon            ``max_steps`` agent steps (default 5: Solver, V1, C1, V2, C2) and at most
                   ``max_checks`` verifier reports; ends early when the verifier accepts or
                   its verdict does not parse
render modes       ``human``, ``ansi``
=================  ==========================================================

Protocol (MarsRL section 3.1). The solver writes a solution ending with ``\\boxed{answer}``. The
verifier checks the current solution and writes a report that ends with a verdict line,
``Verdict: correct`` or ``Verdict: incorrect``. An accepting verdict ends the episode (after
``accept_after`` consecutive accepting verdicts on the same solution, default 1 as in training;
the public inference script asks for several, then the verifier re-checks the same solution).
Otherwise the corrector rewrites the solution given the report, and the verifier checks the new
one: Solver, V1, C1, V2, C2, V, C, ... until acceptance or ``max_steps`` steps (a natural end:
termination, with the final answer chosen as below).

Training and evaluation limits. MarsRL caps a problem at five rollout steps "during the
training phase" (section 3.1: Solver, V1, C1, V2, C2), the defaults here. The paper evaluates
the Figure 1 process with the public inference script (``vc_reasoning_system.py`` of the MarsRL
repository, cited in section 4.1), whose limits differ: the solver answers, the verifier checks,
and then at most ten more rounds each make one check (after a rejection, the corrector first
rewrites the solution); a solution is accepted after four accepting checks in a row. Those are
:data:`EVALUATION_CONFIG`: ``max_checks=11``, ``accept_after=4``, ``max_steps=22`` (one solver
step, eleven checks, ten corrections: the step cap never binds before the check cap), and no
quoting cap in characters (``max_entry_chars`` at its maximum): the evaluation bounds prompts in
tokens, the policy's ``max_prompt_tokens`` (MarsRL 4.1: 32k input tokens; the
``paper:marsrl`` suite sets it). Where the public script lets a verifier report without a
"correct" read as a rejection, the evaluation here checks the same solution again
(``unparsed_verdict="retry"``, counted as one of the eleven checks): an unparsed report is
never shown to the corrector as an error report (see below).

Reasoning blocks. A completion of a thinking model starts with its reasoning and ends it with
``</think>``; what the next agent is shown (the solution to check, the report to act on) is the
text after the last ``</think>`` (``strip_thinking=True``, as the public inference script does),
so a quoted solution is its write-up, not the search that led to it. Answers and verdicts are
read from the whole completion (the last ``\boxed{}`` and the last verdict line win, and they
come after the reasoning).

Verdicts are parsed by :func:`parse_verdict`: the last ``Verdict:`` (or ``Correctness:``) line
or ``\\boxed{correct|incorrect}`` decides; "incorrect", "not correct", "wrong", "has errors",
"invalid", ... are rejections (the public MarsRL code tests ``"correct" in text``, which reads
"incorrect" as acceptance); a missing or ambiguous verdict ("correct/incorrect", "partially
correct") is a format failure (verifier reward 0).

An unparsed verdict is not an error report, so it never reaches the corrector (MarsRL 3.3: "the
Corrector exclusively samples outputs that contain identified errors from the Verifier. If no
such outputs are available, the process terminates early"). By default
(``unparsed_verdict="end"``) the episode terminates after it, the final answer chosen as below;
under grouped rollouts the engine keeps only continuing candidates, so the corrector's inputs
are exactly the verifier's rejections, the right ones first under adaptive sampling.
``unparsed_verdict="retry"``: the verifier checks the same solution again (its prompt says that
its previous report had no verdict); each retry is a step and counts toward ``max_steps``.
Only an explicit acceptance accepts; only an explicit rejection goes to the corrector.

Rewards (MarsRL section 3.2; ``mixing="none"``, every reward is 1 or 0, the paper's positive and
negative samples):

=============  ==================================================================
solver         1 if its boxed final answer matches the reference
               (:func:`verifiers.math_answer.grade`: math-verify + NumEq), else 0
corrector      the same, for its rewritten solution
verifier       1 for a right verdict on the solution it checked (accepting a correct
               solution, rejecting an incorrect one), 0 for a wrong one (rejecting a
               correct solution, accepting an incorrect one) and 0 when the verdict
               does not parse (the reason is in ``reward_parts["reasons"]``)
=============  ==================================================================

Final answer (MarsRL section 2.1): the accepted solution; if none was accepted, the solution the
verifier declared correct most often, ties going to the fewest rejections and then to the latest
(:func:`select_final`). ``infos[agent]["final_answer"]`` holds the current choice after every
step; ``success`` (set at the end) says whether it is correct.

Adaptive sampling (MarsRL section 3.4) with ``adapters.rollout`` (``keep="adaptive"``): the
verifier prefers wrong solutions (reward 0) from the solver and the corrector, and the corrector
prefers reports with reward 1 (rightly found errors); :meth:`raw_env.adaptive_preference` says
which candidates of the acting agent to keep: ``"low"`` for the solver and the corrector,
``"high"`` for the verifier (accepting and unparsed candidates end the episode, so only
rejections go on). A trainer needs nothing else from the env: each step's reward is final at
once (no ``award()``), ``done`` says which candidates can go on, and ``infos`` carry
``verdict`` (True / False / None), ``correct`` and ``answer`` for logging.

Instances: reasoning-gym math by default (``dataset``, ``dataset_size``, ``dataset_seed``, and the
generator's ``dataset_options``, e.g. ``{"max_terms": 2}`` for ``basic_arithmetic``), or a
math set of :data:`envs.data.DATASETS` read from ``data_path`` (e.g. ``dataset="aime25"``), split by
a hash of the question; ``problems=[...]`` to ``envs.make``; or
``reset(options={"instance": {"question": ..., "answer": ...}})`` (the answer is required; at
most 1,000,000 characters of text in all, :mod:`envs.core.explicit`: checking and hashing it
costs the host process a few milliseconds, and a larger one is refused).
``max_turns`` counts correction cycles and truncates only if set low (default 1000).
``mode="single"`` does not exist: the setting is multi-agent by construction.

Reward audit (conditions the rewarded policy controls): the solver's and the corrector's
boxed answer (none, an unclosed box or a hedge over several values: 0, as a wrong answer); the
verifier's verdict line: an unparsed or ambiguous verdict earns 0, as a wrong verdict does, and
ends the episode, which removes later steps but pays the verifier nothing more. No spoiled answer
earns more than its well-formed twin (``tests/envs/test_monotonicity.py``).

Version history: v0 (initial); v1 (an unparsed verdict ends the episode instead of reaching
the corrector as an error report, MarsRL 3.3; ``unparsed_verdict="retry"``); v2 (``max_checks``
and :data:`EVALUATION_CONFIG`, the public inference script's limits; quoted completions without
their reasoning block, ``strip_thinking``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from envs.core.base import TurnBasedEnv, wrap
from envs.core.config import EnvConfig, RewardConfig
from envs.core.registry import roles_of
from envs.core.rewards import RewardParts
from envs.data.records import MathProblem
from envs.discussion import QuestionPoolInstances, problem_from_dict, split_problems
from verifiers.extract import clip_text
from verifiers.math_answer import extract_boxed, grade

__all__ = [
    "EVALUATION_CONFIG",
    "SolverVerifierCorrectorConfig",
    "SolverVerifierCorrectorRewards",
    "VerdictParse",
    "classify_verdict",
    "env",
    "parse_verdict",
    "raw_env",
    "select_final",
]

_MAX_STORED = 200_000
_SCAN_CHARS = 100_000

# ---------------------------------------------------------------------- verdicts
_LABEL = re.compile(
    r"\b(?:final\s+)?(?:verdict|correctness)\b[ \t*_`]*[:：=][ \t]*([^\n]*)", re.IGNORECASE
)
_BOXED_WORD = re.compile(
    r"\\boxed\s*\{\s*(?:\\text(?:bf|rm|tt)?\s*\{\s*)?([A-Za-z][A-Za-z ]{0,40}?)\s*\}", re.IGNORECASE
)
_NO_PROBLEMS = re.compile(
    r"\bno\s+(?:\w+\s+){0,2}(?:errors?|mistakes?|issues?|problems?|flaws?|gaps?)\b", re.I
)
_NEGATIVE = re.compile(
    r"\b(?:incorrect|wrong|invalid|flawed|false|erroneous|incomplete|partially|partly|mostly"
    r"|reject(?:ed)?|fail(?:s|ed)?|no"
    r"|not\s+(?:\w+\s+){0,2}(?:correct|right|valid|accepted|true|sound)"
    r"|isn'?t\s+(?:\w+\s+){0,2}(?:correct|right|valid)"
    r"|(?:has|have|contains?|with)\s+(?:\w+\s+){0,3}(?:errors?|mistakes?|issues?|gaps?|flaws?)"
    r"|errors?\s+found)\b",
    re.IGNORECASE,
)
_POSITIVE = re.compile(r"\b(?:correct|right|valid|true|accept(?:ed)?|pass(?:es|ed)?|yes)\b", re.I)


@dataclass(frozen=True)
class VerdictParse:
    """A parsed verdict: ``value`` is ``True`` (accept), ``False`` (reject) or ``None``."""

    value: bool | None
    reason: str
    phrase: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


def classify_verdict(phrase: str) -> bool | None:
    """``True`` / ``False`` for an accepting / rejecting verdict phrase, ``None`` if unclear.

    >>> [classify_verdict(p) for p in ["correct", "Correct.", "**Incorrect**", "not correct"]]
    [True, True, False, False]
    >>> [
    ...     classify_verdict(p)
    ...     for p in ["wrong", "has errors", "no errors found", "correct/incorrect"]
    ... ]
    [False, False, True, None]
    >>> classify_verdict("partially correct"), classify_verdict("42")
    (None, None)
    """
    s = phrase[:200].lower().replace("n't", " not").replace("n\u2019t", " not")
    s = re.sub(r"[*_`\"'“”‘’]", " ", s)
    good = bool(_NO_PROBLEMS.search(s))
    s = _NO_PROBLEMS.sub(" ", s)
    bad = bool(_NEGATIVE.search(s))
    good = good or bool(_POSITIVE.search(_NEGATIVE.sub(" ", s)))
    if good == bad:
        return None
    return good


def parse_verdict(text: object) -> VerdictParse:
    r"""The verdict of a verifier's report: its last ``Verdict:`` / ``Correctness:`` line or
    ``\boxed{correct|incorrect}``, whichever comes last (boxes holding anything else, such as a
    quoted answer, are ignored). Free text is never searched for "correct".

    >>> parse_verdict("Step 2 is wrong.\nVerdict: incorrect").value
    False
    >>> parse_verdict("All steps check out.\n**Verdict:** correct").value
    True
    >>> parse_verdict("Looks correct to me.").reason
    'no verdict line (Verdict: correct | incorrect)'
    >>> parse_verdict("Verdict: correct\n...on reflection...\nVerdict: not correct").value
    False
    >>> parse_verdict(r"The answer \boxed{12} is fine. \boxed{correct}").value
    True
    >>> parse_verdict("Verdict: correct or incorrect").reason
    "unclear verdict 'correct or incorrect'"
    """
    if not isinstance(text, str):
        return VerdictParse(None, "report is not a string")
    src = text[-_SCAN_CHARS:]
    best: tuple[int, str] | None = None
    for m in _LABEL.finditer(src):
        best = (m.start(), m.group(1))
    for m in _BOXED_WORD.finditer(src):
        if classify_verdict(m.group(1)) is not None and (best is None or m.start() > best[0]):
            best = (m.start(), m.group(1))
    if best is None:
        return VerdictParse(None, "no verdict line (Verdict: correct | incorrect)")
    phrase = best[1].strip()
    value = classify_verdict(phrase)
    if value is None:
        return VerdictParse(None, f"unclear verdict {clip_text(phrase, 80)!r}", phrase)
    return VerdictParse(value, "ok", clip_text(phrase, 80))


def select_final(passes: Sequence[int], flags: Sequence[int], accepted: int | None = None) -> int:
    """Index of the final solution: the accepted one, else the one declared correct most often,
    ties to the fewest rejections, then to the latest.

    >>> select_final([0, 0, 0], [1, 1, 0])          # never accepted: latest unrejected
    2
    >>> select_final([2, 1, 0], [1, 1, 1])          # most often declared correct
    0
    >>> select_final([0, 1], [1, 1], accepted=1)
    1
    """
    if len(passes) != len(flags) or not passes:
        raise ValueError("passes and flags must be non-empty and of equal length")
    if accepted is not None:
        return accepted
    return max(range(len(passes)), key=lambda i: (passes[i], -flags[i], i))


# ---------------------------------------------------------------------- config
@dataclass(frozen=True)
class SolverVerifierCorrectorRewards(RewardConfig):
    """MarsRL's agent-specific rewards: reward = weight * component (``mixing="none"``)."""

    lam: float = 0.0
    mixing: Literal["convex", "additive", "none"] = "none"
    solver_correct: float = 1.0
    verifier_judgment: float = 1.0
    corrector_correct: float = 1.0
    roles: ClassVar[tuple[str, ...]] = ("solver", "verifier", "corrector")
    convex_roles: ClassVar[bool] = False


@dataclass(frozen=True)
class SolverVerifierCorrectorConfig(EnvConfig):
    """max_steps: agent steps per episode (paper: 5). max_checks: verifier reports per episode
    (None: no cap). accept_after: consecutive accepting verdicts that end the episode.
    strip_thinking: quote completions from after their last ``</think>``. dataset / dataset_size /
    dataset_seed / dataset_options: the reasoning-gym pool and its generator's options (or a
    registered math set with ``data_path``).
    max_entry_chars: longest solution/report quoted in a prompt. max_turns: truncation cap in
    correction cycles (default does not bind)."""

    max_steps: int = 5
    max_checks: int | None = None
    accept_after: int = 1
    dataset: str = "gsm_symbolic"
    dataset_size: int = 2000
    dataset_seed: int = 0
    dataset_options: dict[str, Any] | None = None
    data_path: str | None = None
    max_entry_chars: int = 20_000
    strip_thinking: bool = True
    unparsed_verdict: Literal["end", "retry"] = "end"
    max_turns: int = 1000
    rewards: SolverVerifierCorrectorRewards = field(default_factory=SolverVerifierCorrectorRewards)

    def __post_init__(self) -> None:
        if self.mode == "single":
            raise ValueError(
                "solver_verifier_corrector (MarsRL) is inherently multi-agent: mode='single' "
                "does not exist; use mode='multi' (or max_steps=1 for the solver alone)"
            )
        super().__post_init__()
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError("max_steps must be a positive int")
        if not isinstance(self.accept_after, int) or self.accept_after < 1:
            raise ValueError("accept_after must be a positive int")
        if self.max_checks is not None and (
            not isinstance(self.max_checks, int) or self.max_checks < 1
        ):
            raise ValueError("max_checks must be a positive int or None")
        if self.dataset_size < 1 or not 100 <= self.max_entry_chars <= _MAX_STORED:
            raise ValueError(
                f"dataset_size must be >= 1 and max_entry_chars in [100, {_MAX_STORED}]"
            )
        if self.unparsed_verdict not in ("end", "retry"):
            raise ValueError("unparsed_verdict must be 'end' or 'retry'")


# ---------------------------------------------------------------------- state
@dataclass
class _Solution:
    author: str
    step: int
    text: str
    answer: str | None
    correct: bool
    reason: str
    passes: int = 0
    flags: int = 0


@dataclass
class _Report:
    step: int
    solution: int
    text: str
    verdict: bool | None
    reason: str


_VERDICT_FORMAT = "Verdict: correct\nor\nVerdict: incorrect"

EVALUATION_CONFIG: dict[str, Any] = {
    "max_checks": 11,
    "accept_after": 4,
    "max_steps": 22,
    "max_entry_chars": _MAX_STORED,
    "unparsed_verdict": "retry",
}
"""The limits of MarsRL's evaluation process (module docstring: the public inference script)."""


class raw_env(QuestionPoolInstances, TurnBasedEnv):
    """The MarsRL solver-verifier-corrector loop (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "solver_verifier_corrector_v0",
        "is_parallelizable": False,
    }
    AGENTS = roles_of("solver_verifier_corrector")
    config_cls = SolverVerifierCorrectorConfig
    config: SolverVerifierCorrectorConfig
    _shared_attrs = ("_pool",)

    def __init__(
        self,
        config: SolverVerifierCorrectorConfig | None = None,
        *,
        render_mode: str | None = None,
        sandbox: Any = None,
        problems: Iterable[Any] | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode=render_mode, sandbox=sandbox, **overrides)
        self._pool = None
        if problems is not None:
            self._pool = split_problems(problems_with_answers(problems))
        self._solutions: list[_Solution] = []
        self._reports: list[_Report] = []
        self._role = "solver"
        self._streak = 0
        self._accepted: int | None = None
        self._done = False
        self._last_info: dict[str, Any] = {}

    # ------------------------------------------------------------------ instances
    def _instance_from_dict(self, data: Any) -> MathProblem:
        return problem_from_dict(data, require_answer=True)

    def _reset_state(self, instance: MathProblem) -> None:
        self._solutions = []
        self._reports = []
        self._role = "solver"
        self._streak = 0
        self._accepted = None
        self._done = False
        self._last_info = {}

    # ------------------------------------------------------------------ schedule
    def _next_agent(self, agent: str) -> str:
        if self._role == "corrector" and agent == "verifier" and not self._done:
            self.turn += 1
        return self._role

    def _horizon_reached(self) -> bool:
        return self.turn >= self.config.max_turns

    def adaptive_preference(self, agent: str) -> str:
        """MarsRL adaptive sampling: keep the solver's/corrector's *wrong* solutions (the
        verifier's preferred inputs) and the verifier's *right* rejections (the corrector's)."""
        if agent not in self.possible_agents:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return "high" if agent == "verifier" else "low"

    def final_index(self) -> int | None:
        """Index of the solution that is the answer now (see :func:`select_final`)."""
        if not self._solutions:
            return None
        return select_final(
            [s.passes for s in self._solutions],
            [s.flags for s in self._solutions],
            self._accepted,
        )

    # ------------------------------------------------------------------ text
    def _clip(self, text: str) -> str:
        if self.config.strip_thinking and "</think>" in text:
            text = text[text.rfind("</think>") + len("</think>") :].strip()
        return clip_text(text, self.config.max_entry_chars)

    def _prompt(self, agent: str) -> str:
        question = self.instance.question.strip()
        if self._done:
            return f"You are the {agent}. This problem is finished.\n\nProblem:\n{question}"
        if agent != self._role:
            return (
                f"You are the {agent} of a solve-verify-correct team. It is the {self._role}'s "
                f"turn; wait for yours.\n\nProblem:\n{question}"
            )
        if agent == "solver":
            return (
                "You are the SOLVER of a team that solves, verifies and corrects solutions.\n\n"
                f"Problem:\n{question}\n\n"
                "Solve the problem step by step, justifying each step. Put the final answer "
                "alone inside \\boxed{} at the end, for example \\boxed{42}."
            )
        current = self._solutions[-1]
        if agent == "verifier":
            last = self._reports[-1] if self._reports else None
            again = ""
            if (
                last is not None
                and last.verdict is None
                and last.solution == len(self._solutions) - 1
            ):
                again = (
                    "Your previous report on this solution ended without a verdict line; check "
                    "it again and finish with the verdict line.\n\n"
                )
            return again + (
                "You are the VERIFIER of a team that solves, verifies and corrects solutions.\n\n"
                f"Problem:\n{question}\n\nSolution to check (by the {current.author}):\n"
                f"{self._clip(current.text)}\n\n"
                "Check the solution step by step as a strict grader; do not repair it. Report "
                "every problem you find: quote where it occurs and say whether it is a critical "
                "error (it breaks the argument or the result) or a gap in the justification. "
                "The solution is correct only if its reasoning holds and its final answer is "
                "right. End with exactly one of these lines:\n" + _VERDICT_FORMAT
            )
        report = self._reports[-1]
        return (
            "You are the CORRECTOR of a team that solves, verifies and corrects solutions.\n\n"
            f"Problem:\n{question}\n\nCurrent solution (by the {current.author}):\n"
            f"{self._clip(current.text)}\n\nVerifier's report on it:\n{self._clip(report.text)}"
            "\n\nWrite an improved, complete solution. Fix every issue of the report that you "
            "agree with; the verifier can be mistaken, so where you disagree, keep your step and "
            "explain it more clearly. Put the final answer alone inside \\boxed{} at the end."
        )

    # ------------------------------------------------------------------ dynamics
    def _add_solution(self, agent: str, text: str) -> RewardParts:
        box = extract_boxed(text)
        g = grade(text, self.instance.answer, source="boxed")
        answer = None if box.value is None else clip_text(str(box.value), 500)
        self._solutions.append(_Solution(agent, self.num_steps, text, answer, g.correct, g.reason))
        self._last_info.update(answer=answer, correct=g.correct, solution=len(self._solutions) - 1)
        return RewardParts.build(
            agent, {"correct": float(g.correct)}, self.config.rewards, reasons={"correct": g.reason}
        )

    def _verify(self, text: str) -> RewardParts:
        idx = len(self._solutions) - 1
        sol = self._solutions[idx]
        v = parse_verdict(text)
        self._reports.append(_Report(self.num_steps, idx, text, v.value, v.reason))
        truth = "a correct" if sol.correct else "an incorrect"
        if v.value is None:
            judged, why = False, f"unparsable verdict ({v.reason}) on {truth} solution"
        else:
            judged = v.value == sol.correct
            why = f"{'accepted' if v.value else 'rejected'} {truth} solution"
        if v.value:
            sol.passes += 1
            self._streak += 1
        else:
            sol.flags += int(v.value is False)
            self._streak = 0
        checks_left = self.config.max_checks is None or len(self._reports) < self.config.max_checks
        if self._streak >= self.config.accept_after:
            self._accepted = idx
            self._role = "verifier"
            self._finish()
        elif not checks_left:  # the evaluation's last check: no correction follows it
            self._role = "verifier"
            self._finish()
        elif v.value is None:  # not an error report: never sent to the corrector (MarsRL 3.3)
            self._role = "verifier"
            if self.config.unparsed_verdict == "end":
                self._finish()
        else:
            self._role = "verifier" if v.value else "corrector"
        self._last_info.update(verdict=v.value, verdict_reason=v.reason, solution=idx)
        return RewardParts.build(
            "verifier", {"judgment": float(judged)}, self.config.rewards, reasons={"judgment": why}
        )

    def _finish(self) -> None:
        self._done = True
        self.success = bool(self._solutions[self.final_index() or 0].correct)
        self.end_episode()

    def _act(self, agent: str, completion: str) -> RewardParts:
        text = completion[:_MAX_STORED]
        self._last_info = {}
        if agent == "verifier":
            parts = self._verify(text)
        else:
            parts = self._add_solution(agent, text)
            self._role = "verifier"
            self._streak = 0
        if not self._done and self.num_steps + 1 >= self.config.max_steps:
            self._finish()
        final = self.final_index()
        self._last_info.update(
            final_index=final,
            final_answer=None if final is None else self._solutions[final].answer,
            accepted=self._accepted is not None,
        )
        return parts

    def _step_info(self, agent: str) -> dict[str, Any]:
        return dict(self._last_info)

    # ------------------------------------------------------------------ oracle and render
    def oracle(self, agent: str) -> str:
        """A competent completion for ``agent``: the reference answer, or a right verdict."""
        ref = self.instance.answer
        if agent in ("solver", "corrector"):
            return f"I solve the problem step by step and check the result.\n\\boxed{{{ref}}}"
        if agent != "verifier":
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        if not self._solutions:
            return "There is no solution to check yet.\nVerdict: incorrect"
        sol = self._solutions[-1]
        if sol.correct:
            return "Every step holds and the final answer is right.\nVerdict: correct"
        return (
            f"Critical error: the final answer {sol.answer!r} is not the value the problem asks "
            f"for.\nVerdict: incorrect"
        )

    def _render_text(self) -> str:
        lines = [
            f"solver_verifier_corrector: step {self.num_steps}/{self.config.max_steps}, "
            f"success={self.success}",
            "problem: " + clip_text(self.instance.question.strip().replace("\n", " "), 200),
            f"reference: {self.instance.answer}",
        ]
        reports = {r.step: r for r in self._reports}
        events = sorted(
            [(s.step, s) for s in self._solutions] + list(reports.items()), key=lambda e: e[0]
        )
        for step, item in events:
            if isinstance(item, _Solution):
                lines.append(
                    f"[{step}] {item.author}: answer {item.answer!r} correct={item.correct}"
                )
            else:
                lines.append(
                    f"[{step}] verifier on solution {item.solution}: verdict {item.verdict}"
                )
        final = self.final_index()
        if final is not None:
            lines.append(f"final: solution {final} ({self._solutions[final].answer!r})")
        if not self._done:
            lines.append(f"next: {self._role}")
        return "\n".join(lines)


def problems_with_answers(problems: Iterable[Any]) -> list[MathProblem]:
    """Validate that every problem has a reference answer (MarsRL's rewards need one)."""
    return [problem_from_dict(p, require_answer=True) for p in problems]


def env(**kwargs: Any):
    """The wrapped solver-verifier-corrector AEC env (``envs.make("marsrl", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
