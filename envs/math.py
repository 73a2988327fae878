"""Math: a reasoner solves step by step, a tool agent computes with Python (AT-GRPO A.1.1, A.2.2).

=================  ==========================================================
id                 ``math``
agents             ``reasoner``, ``tool`` (``mode="single"``: ``reasoner``)
actions            completion text (``str``)
observations       ``{"prompt": str}``
horizon            ``max_turns`` turns (default 4); ends on agreement;
                   ``mode="single"``: ``single_turns`` (default 1)
render modes       ``human``, ``ansi``
=================  ==========================================================

Workflow. Each turn the reasoner writes a step-by-step solution ending with its final answer in
``\\boxed{...}`` (or on a last line ``#### answer``), and the tool agent writes one ```python
code block that prints the answer (its last non-empty printed line is its answer); the env runs
it in the sandbox. Both see the problem and the mismatch history of earlier turns: the
reasoner's solution (clipped) and extracted answer, the tool's program and printed output.
Neither sees the other's answer of the same turn (the paper generates both in parallel). After
the tool's step the two answers are compared with the math verifier (math-verify front end,
NumEq with delta 1e-6, the reasoner's answer as reference); when they are equivalent (agreement)
the episode ends, otherwise it ends at the horizon. The team's final answer is the reasoner's
answer of the last turn; success: it is correct.

Rewards (``r = lam * team + (1 - lam) * mask * local``, ``lam = 0.70``; "correct" means
equivalent to the reference answer under the same verifier):

- team: A.1.1's sparse ``1{k = T, CheckFinal = pass}`` for both agents of turn k. ``k = T``
  means "turn k is the episode's final turn": the horizon turn, or the turn whose tool step
  ends the episode by agreement (the env terminates there, so that turn is T). The final answer
  is the reasoner's answer of that turn. So the tool earns 1 when its step ends the episode
  with a correct final answer (agreeing with a correct reasoner, or any tool step of the
  horizon turn after a correct reasoner), and so does the reasoner of that turn. The reasoner
  acts first and cannot know whether the tool will agree: in the horizon turn its team reward
  is known at once (that turn is final whatever the tool does) and comes with its step; in an
  earlier turn its step returns team 0 and, when the tool's step then ends the episode with a
  correct answer, its complete reward (team 1) arrives by ``award()`` in the tool's step
  (``last_awards``; the base class replaces the provisional reward). Hand-computed (A.1.1): a
  correct reasoner (fmt 1, step 1) with an agreeing tool earns ``0.7 * 1 + 0.3 * (0.2 + 0.8)
  = 1.0``, and so does the tool (``0.7 + 0.3 * (0.1 + 0.1 + 0.8)``). Under tree sampling only
  the kept reasoner candidate's episode reaches the tool's step; ``award_lookahead() = 1`` tells
  the rollout engine to let every unkept reasoner candidate play the tool's K completions of the
  kept branch too (the tool does not see the reasoner's answer of the same turn, so that is the
  award each candidate would have earned), so all K reasoner candidates are credited alike.
  ``rewards={"team_credit": "ending_step"}`` restores the earlier reading (only the step that ends
  the episode earns the team reward: the reasoner's is always 0 in multi mode; no delayed reward,
  each reward depends only on its own candidate).
- reasoner: fmt 0.20 (a ``\\boxed{}`` or ``####`` answer is present and non-empty),
  step 0.80 (its extracted answer is correct). The paper's tool weight for the reasoner is 0.
- tool: fmt 0.10 (exactly one python code block that compiles, run within the time, memory and
  output budget, printing a non-empty answer line), tool 0.10 (the program exited normally: no
  exception, timeout or memory error), step 0.80 (it exited normally and its printed answer is
  correct).
- mask: 1 when the reference answer is available (always), except 0 for the tool when the
  sandbox itself failed.
- mixing: A.1's convex form above is the default; the main text's Eq. 4 ``r = alpha * team +
  local`` (no mask; AT-GRPO 5.1 uses alpha = 1) is ``rewards={"mixing": "additive"}``
  (``"alpha"`` to change it). The two readings disagree in scale; A.1 gives lam per setting,
  so it is the default.

Single mode (the single-agent baseline, AT-GRPO 5.1: "one agent performs reasoning ... in a
single turn; single-turn termination"): only the reasoner acts, for ``single_turns`` turns
(default 1: its first answer ends the episode). Team: 1 at the ending step when that answer is
correct. With ``single_turns=None`` it gets ``max_turns`` turns, sees its own earlier answers,
and the episode ends when its answer is equivalent to its answer of the previous turn (it
stands by its answer; correctness plays no part) or at the horizon.

Success ends an episode, so an episode that succeeds at the horizon is reported as terminated;
one that fails there is truncated.

Data (config ``dataset``): ``"reasoning_gym"`` (default; each instance generated offline by one
of the ``generators``, chosen and seeded per instance: GSM8K-style ``gsm_symbolic`` and
``basic_arithmetic`` by default, ``generator_options`` passed through), or any dataset of
:data:`envs.data.catalog.DATASETS` played by this setting (math: ``"gsm8k"``, ``"math"``,
``"polaris"``, ``"aime24"``, ``"aime25"``, ``"olympiadbench"``, ``"amc"``, ...; question answering:
``"mmlu"``, ``"gpqa"``, ``"squad"``, ``"bbh"``, ...) with ``data_path`` (a local file or directory
in the released format; without it the hub cache), ``data_split`` and ``data_options``. Splits
are by the question's content hash. Explicit instance: ``reset(options={"instance":
{"question": ..., "answer": ...}})``, optionally with ``answer_format``, ``choices`` and
``aliases``; at most 1,000,000 characters of text in all (:mod:`envs.core.explicit`: checking
and hashing it then costs the host process a few milliseconds; a larger one is refused).

Questions that are not math (``answer_format`` other than ``"math"``: multiple choice, short
answers, BBH, yes/no) are graded by :func:`verifiers.answer_formats.check_answer` instead of the
math verifier: the reasoner's answer is read from its ``\\boxed{}``, ``<answer>`` tags or "the
answer is ..." phrase, the tool's from its last printed line, and the two agree when one checks
against the other.

Reward audit (conditions the rewarded policy controls): the reasoner, whether its answer
is boxed or marked (fmt; an unclosed box, or one hedged over several values, grades wrong:
:mod:`verifiers.math_answer`); the tool, whether its program exits cleanly and prints an answer
line (a crash costs tool and step, and never pays fmt). Agreement, which ends the episode, is
decided by both agents together and pays nothing by itself: the team term is the correctness of
the final answer. The mask removes the local term only when the sandbox itself failed, never for
something the policy wrote. No spoiled answer earns more than its well-formed twin
(``tests/envs/test_monotonicity.py``).

Version history: v0 (initial); v1 (A.1.1 team reward for the reasoner of the final turn,
``team_credit``; single mode is single-turn by default, ``single_turns``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from envs.core.base import wrap
from envs.core.config import RewardConfig
from envs.core.explicit import check_size
from envs.core.program import ProblemPool, ProgramConfig, ProgramEnv, fence, indent, verdict
from envs.core.registry import roles_of
from envs.core.rewards import RewardParts
from envs.data.catalog import dataset_names, load_dataset
from envs.data.dataset_splits import canonical_text
from envs.data.records import MathProblem
from verifiers.answer_formats import check_answer
from verifiers.code_tests import check_compiles
from verifiers.extract import Extraction, clip_text, extract_code_block
from verifiers.math_answer import extract_boxed, extract_marker_answer, extract_program_answer

__all__ = ["MathConfig", "MathRewards", "env", "raw_env", "reasoner_answer"]

_FORMAT_KEYS = ("answer_format", "choices", "aliases")
# answer formats show placeholders, never a value a constant policy could answer with
_ANSWER_RULES = {
    "choice": "the letter of the chosen option, as \\boxed{<letter>}",
    "qa": "a short answer (a few words), as \\boxed{<answer>}",
    "bbh": "the answer in the form the question asks for, as \\boxed{<answer>}",
    "yesno": "yes or no, as \\boxed{<yes or no>}",
}

DATASETS = ("reasoning_gym", *dataset_names("math"))

# a problem that is an arithmetic expression (reasoning-gym's basic_arithmetic)
_EXPRESSION = re.compile(r"^Calculate ([0-9+\-*/(). ]{1,200})\.$")


TEAM_CREDITS = ("final_turn", "ending_step")


@dataclass(frozen=True)
class MathRewards(RewardConfig):
    """A.1.1 weights. team_credit: who receives the team reward ``1{k = T, pass}``:
    ``"final_turn"`` (A.1.1: both agents of the final turn) or ``"ending_step"`` (only the step
    that ends the episode; no delayed award)."""

    lam: float = 0.70
    reasoner_fmt: float = 0.20
    reasoner_step: float = 0.80
    tool_fmt: float = 0.10
    tool_tool: float = 0.10
    tool_step: float = 0.80
    team_credit: str = "final_turn"
    roles: ClassVar[tuple[str, ...]] = ("reasoner", "tool")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.team_credit not in TEAM_CREDITS:
            raise ValueError(f"team_credit must be one of {TEAM_CREDITS}, got {self.team_credit!r}")


@dataclass(frozen=True)
class MathConfig(ProgramConfig):
    """dataset / generators / generator_options: see the module docstring. wall_s / memory_mb /
    max_output_bytes: limits of the tool's program. grade_timeout_s: deadline of one symbolic
    grading."""

    dataset: str = "reasoning_gym"
    generators: tuple[str, ...] = ("gsm_symbolic", "basic_arithmetic")
    generator_options: dict[str, Any] | None = None
    grade_timeout_s: float = 3.0
    rewards: MathRewards = field(default_factory=MathRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}, got {self.dataset!r}")
        if isinstance(self.generators, str) or not self.generators:
            raise ValueError("generators must be a non-empty tuple of reasoning-gym names")
        object.__setattr__(self, "generators", tuple(self.generators))


def reasoner_answer(text: object) -> Extraction:
    r"""The reasoner's final answer: the last ``\boxed{}``, else the line after ``####``.

    >>> reasoner_answer("so the total is \\boxed{12}").value
    '12'
    >>> reasoner_answer("work\n#### 7").value
    '7'
    >>> reasoner_answer("I think 7").reason
    "no \\boxed{} or '####' answer found"
    """
    box = extract_boxed(text)
    if box.ok:
        return box
    mark = extract_marker_answer(text)
    if mark.ok:
        inner = extract_boxed(mark.value)
        return inner if inner.ok else mark
    if not isinstance(text, str):
        return Extraction(None, "completion is not a string")
    if box.reason.startswith(("empty", "unclosed")):
        return box
    if mark.reason.startswith("nothing"):
        return mark
    return Extraction(None, "no \\boxed{} or '####' answer found")


@functools.lru_cache(maxsize=16)
def _pool(dataset: str, data_path, data_split, options: tuple) -> ProblemPool:
    kwargs = dict(options)
    if data_split is not None:
        kwargs["split"] = data_split
    problems = load_dataset(dataset, data_path, **kwargs)
    return ProblemPool([p for p in problems if str(p.answer).strip()], dataset)


@dataclass
class _Turn:
    turn: int
    solution: str | None = None  # the reasoner's completion, clipped
    answer: str | None = None
    answer_error: str | None = None
    code: str | None = None
    output: str | None = None
    tool_answer: str | None = None
    tool_error: str | None = None
    agreed: bool = False


class raw_env(ProgramEnv):
    """Reasoner + tool environment (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "math_v0",
        "is_parallelizable": False,
    }
    AGENTS = roles_of("math")
    SINGLE_AGENTS: ClassVar[tuple[str, ...]] = ("reasoner",)
    config_cls = MathConfig
    config: MathConfig
    _shared_attrs: ClassVar[tuple[str, ...]] = ("instance",)

    # ------------------------------------------------------------------ instances
    def _generate_instance(self, rng: np.random.Generator) -> MathProblem:
        from envs.data import load_reasoning_gym

        gens = self.config.generators
        name = gens[int(rng.integers(len(gens)))]
        seed = int(rng.integers(2**31 - 1))
        opts = self.config.generator_options or {}
        return load_reasoning_gym(name, size=1, seed=seed, **opts)[0]

    def _sample_instance(self, split: str, seed: int) -> MathProblem:
        cfg = self.config
        if cfg.dataset == "reasoning_gym":
            return super()._sample_instance(split, seed)
        opts = tuple(sorted((cfg.data_options or {}).items()))
        return _pool(cfg.dataset, cfg.data_path, cfg.data_split, opts).pick(split, seed)

    def _instance_key(self, instance: MathProblem) -> str:
        return canonical_text(instance.question)

    def _instance_from_dict(self, data: Any) -> MathProblem:
        if isinstance(data, MathProblem):
            return data
        if not isinstance(data, dict) or not {"question", "answer"} <= set(data):
            raise ValueError('a math instance is {"question": str, "answer": str | number}')
        check_size(data, "the math instance")
        extra = set(data) - {"question", "answer", "id", "solution", *_FORMAT_KEYS}
        if extra:
            raise ValueError(f"unknown math instance keys {sorted(extra)}")
        q, a = data["question"], data["answer"]
        if not isinstance(q, str) or not q.strip():
            raise ValueError("'question' must be a non-empty string")
        if isinstance(a, bool) or not isinstance(a, str | int | float) or not str(a).strip():
            raise ValueError("'answer' must be a non-empty string or a number")
        fmt = {k: data[k] for k in _FORMAT_KEYS if k in data}
        for k in ("choices", "aliases"):
            v = fmt.get(k, ())
            if isinstance(v, str) or not all(isinstance(x, str) for x in v):
                raise ValueError(f"{k!r} must be a list of strings")
        return MathProblem(
            id=str(data.get("id", "")),
            question=q,
            answer=str(a).strip(),
            source="explicit",
            solution=str(data.get("solution", "")),
            **fmt,
        )

    def _reasoner_answer(self, completion: str) -> Extraction:
        """The reasoner's answer: :func:`reasoner_answer` for math; for other formats, the
        answer the format's checker reads (a letter for multiple choice)."""
        inst = self.instance
        if inst.answer_format == "math":
            return reasoner_answer(completion)
        c = check_answer(
            completion,
            inst.answer,
            answer_format=inst.answer_format,
            choices=inst.choices,
            aliases=inst.aliases,
        )
        return Extraction(c.extracted, c.reason) if c.extracted else Extraction(None, c.reason)

    def _reset_state(self, instance: MathProblem) -> None:
        self.history: list[_Turn] = []
        self._current = _Turn(0)
        self.final_answer: str | None = None
        self.final_correct = False
        # the reasoner's step of the current turn, kept for its team award: (step, parts)
        self._reasoner_step: tuple[int, RewardParts] | None = None

    # ------------------------------------------------------------------ grading
    def _equiv(self, answer: str | None, reference: str | None) -> tuple[bool, str]:
        if answer is None or reference is None:
            return False, "no answer"
        inst = self.instance
        if inst.answer_format != "math":
            aliases = inst.aliases if reference == inst.answer else ()
            c = check_answer(
                answer,
                reference,
                answer_format=inst.answer_format,
                choices=inst.choices,
                aliases=aliases,
            )
            return c.correct, c.reason
        from verifiers.math_answer import grade

        g = grade(answer, reference, source="answer", timeout_s=self.config.grade_timeout_s)
        return g.correct, g.reason

    # ------------------------------------------------------------------ acting
    def _act(self, agent: str, completion: str) -> RewardParts:
        if agent == "reasoner":
            return self._act_reasoner(completion)
        return self._act_tool(completion)

    def _act_reasoner(self, completion: str) -> RewardParts:
        cfg = self.config
        rec = self._current
        reasons: dict[str, str] = {}
        ext = self._reasoner_answer(completion)
        rec.solution = clip_text(completion, 1500) if isinstance(completion, str) else None
        if ext.ok:
            rec.answer = clip_text(str(ext.value), 500)
            correct, why = self._equiv(str(ext.value), self.instance.answer)
            if not correct:
                reasons["step"] = why
        else:
            rec.answer_error = ext.reason
            correct = False
            reasons["fmt"] = ext.reason
        self.final_answer = str(ext.value) if ext.ok else None
        self.final_correct = correct
        team = 0.0
        if cfg.mode == "single":
            prev = self.history[-1].answer if self.history else None
            same = ext.ok and prev is not None and self._equiv(str(ext.value), prev)[0]
            rec.agreed = bool(same)
            if same or self._is_last_step("reasoner"):
                team = self._finish(end=bool(same))
            self._close_turn()
        elif cfg.rewards.team_credit == "final_turn" and self.turn >= self.horizon - 1:
            team = float(correct)  # the horizon turn is final whatever the tool does
        comps = {"fmt": float(ext.ok), "step": float(correct)}
        parts = RewardParts.build("reasoner", comps, cfg.rewards, team=team, reasons=reasons)
        self._reasoner_step = (self.num_steps, parts)
        return parts

    def _act_tool(self, completion: str) -> RewardParts:
        cfg = self.config
        rec = self._current
        reasons: dict[str, str] = {}
        mask = 1.0
        fmt = ran_ok = correct = False
        block = extract_code_block(completion, single=True)
        if not block.ok:
            reasons["fmt"] = block.reason
            rec.tool_error = block.reason
        else:
            rec.code = str(block.value)
            build = check_compiles(rec.code)
            if not build.ok:
                reasons["fmt"] = rec.tool_error = f"the program does not compile: {build.reason}"
            else:
                result = self._run_program(rec.code)
                v = verdict(result)
                rec.output = clip_text(result.stdout or "", 1500)
                printed = extract_program_answer(result.stdout or "")
                ran_ok = v.ok
                fmt = v.within_budget and not v.infra and printed.ok
                if v.infra:
                    mask = 0.0
                    reasons["mask"] = v.reason
                if not v.ok:
                    reasons["tool"] = v.reason
                if not printed.ok:
                    reasons["fmt"] = printed.reason
                elif not v.within_budget:
                    reasons["fmt"] = v.reason
                if printed.ok:
                    rec.tool_answer = clip_text(str(printed.value), 500)
                if ran_ok and printed.ok:
                    correct, why = self._equiv(str(printed.value), self.instance.answer)
                    if not correct:
                        reasons["step"] = why
                rec.tool_error = (
                    None if v.ok and printed.ok else (v.reason if not v.ok else printed.reason)
                )
        if ran_ok and rec.tool_answer is not None and rec.answer is not None:
            rec.agreed = self._equiv(rec.tool_answer, self.final_answer)[0]
        team = 0.0
        if rec.agreed or self._is_last_step("tool"):
            team = self._finish(end=rec.agreed)
            self._award_reasoner(team)
        self._close_turn()
        comps = {"fmt": float(fmt), "tool": float(ran_ok), "step": float(correct)}
        return RewardParts.build("tool", comps, cfg.rewards, team=team, mask=mask, reasons=reasons)

    def _finish(self, end: bool) -> float:
        """The episode ends now: by agreement (``end``) or at the horizon (the base class
        truncates; a success terminates instead). Returns the team reward."""
        self.success = bool(self.final_correct)
        if end:
            self.end_episode()
        return float(self.success)

    def award_lookahead(self) -> int:
        """1 when the reasoner's team reward can arrive with the tool's step, else 0."""
        multi = self.config.mode == "multi"
        return 1 if multi and self.config.rewards.team_credit == "final_turn" else 0

    def _award_reasoner(self, team: float) -> None:
        """A.1.1: the reasoner of the final turn earns the team reward too. Its step came
        first with team 0 (it could not know that the tool would agree); when the tool's step
        ends the episode with a correct final answer, the reasoner's complete reward arrives by
        ``award()``. (At the horizon turn the reasoner already received it at its own step.)"""
        if self.config.rewards.team_credit != "final_turn" or self._reasoner_step is None:
            return
        step, parts = self._reasoner_step
        if parts.team != team:
            why = "the tool's step ended the episode: this was the final turn (A.1.1)"
            reasons = {**parts.reasons, "team": why}
            self.award("reasoner", dataclasses.replace(parts, team=team, reasons=reasons), step)

    def _close_turn(self) -> None:
        self.history.append(self._current)
        self._current = _Turn(self.turn + 1)

    def _step_info(self, agent: str) -> dict[str, Any]:
        rec = self.history[-1] if self.history else self._current
        if agent == "reasoner" and self.config.mode == "multi":
            rec = self._current
            return {"answer": rec.answer}
        if agent == "reasoner":
            return {"answer": rec.answer, "agreed": rec.agreed}
        return {"tool_answer": rec.tool_answer, "agreed": rec.agreed}

    # ------------------------------------------------------------------ prompts
    def _history_text(self) -> str:
        recs = self.history[-self.config.history_turns :] if self.config.history_turns else []
        if not recs:
            return ""
        single = self.config.mode == "single"
        lines = ["History of earlier turns (oldest first):"]
        for r in recs:
            lines.append(f"Turn {r.turn + 1}:")
            who = "Your" if single else "The reasoner's"
            if r.solution is not None:
                lines.append(indent(f"{who} solution (clipped):\n{fence(r.solution, 1500, '')}"))
            lines.append(
                indent(f"{who} final answer: {r.answer or '(none: ' + str(r.answer_error) + ')'}")
            )
            if single:
                continue
            lines.append(indent(f"The tool agent's program:\n{fence(r.code, 2500)}"))
            lines.append(indent(f"Its printed output:\n{fence(r.output or '', 800, '')}"))
            shown = r.tool_answer if r.tool_answer is not None and not r.tool_error else None
            lines.append(
                indent(f"The tool's answer: {shown or '(none: ' + str(r.tool_error) + ')'}")
            )
            lines.append(indent("The two answers " + ("agree." if r.agreed else "do not agree.")))
        return "\n".join(lines)

    def _prompt(self, agent: str) -> str:
        """The role's instructions and answer rules first (the same text for every problem of a
        role and turn kind, so a batch of prompts shares that prefix), then the problem and the
        history."""
        cfg = self.config
        problem = "Problem:\n" + fence(self.instance.question.strip(), 12_000, "")
        hist = self._history_text()
        parts = [problem, hist] if hist else [problem]
        if agent == "reasoner":
            answer_rule = (
                "Start with a short summary of your plan under **Reasoning Steps:**, then solve "
                "the problem concisely. Finish with the final answer alone in \\boxed{...} (a "
                "single number or simplified expression; several answers go in one box, "
                "separated by commas), as \\boxed{<answer>}; nothing after the box."
            )
            other = _ANSWER_RULES.get(self.instance.answer_format)
            if other:
                answer_rule = (
                    "Start with a short summary of your plan under **Reasoning Steps:**, then "
                    f"answer concisely. Finish with the final answer alone in \\boxed{{...}}: "
                    f"{other}; nothing after the box."
                )
            if not hist:
                role = "You are the reasoner: solve the math problem by careful reasoning."
            elif cfg.mode == "single":
                role = (
                    "You are the reasoner. Check your previous solution for mistakes and solve "
                    "the problem again. The episode ends when you give the same final answer as "
                    "in your previous turn."
                )
            else:
                role = (
                    "You are the reasoner. Compare your previous answer with the tool agent's "
                    "printed result. If the program exposes a slip in your work, adopt the "
                    "corrected value; if the program is likely wrong (edge cases, precision, "
                    "misread problem), keep the mathematically right answer. Then solve again "
                    "carefully."
                )
            return "\n\n".join([role + " " + answer_rule, *parts])
        rule = (
            "Write one ```python code block (exactly one) with a program that computes the "
            "answer: standard library only, deterministic, no input, no network, at most "
            f"{cfg.wall_s:g} s. Print ONLY the final answer (a number or a simplified expression) "
            "on the last line."
        )
        if not hist:
            role = "You are the tool agent: solve the problem with Python."
        else:
            role = (
                "You are the tool agent. Judge whether the reasoner's answer or your previous "
                "printed result is more likely right (exact vs. floating-point arithmetic, edge "
                "cases, the question actually asked), then fix or rewrite your program; prefer "
                "exact arithmetic (integers, fractions)."
            )
        return "\n\n".join([role + " " + rule, *parts])

    def _render_text(self) -> str:
        p = self.instance
        lines = [
            f"math [{p.id or self.instance_id}] turn {self.turn}/{self.horizon}, "
            f"success={self.success}, reference answer {clip_text(p.answer, 80)!r}",
            "question: " + clip_text(" ".join(p.question.split()), 200),
        ]
        for r in self.history[-3:]:
            tool = "" if self.config.mode == "single" else f", tool {r.tool_answer or '-'}"
            agree = ", agreed" if r.agreed else ""
            lines.append(f"  turn {r.turn + 1}: reasoner {r.answer or '-'}{tool}{agree}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ oracle
    def oracle(self, agent: str) -> str:
        """A correct completion. The tool's program evaluates the problem's expression when the
        question is one (``Calculate 37 * 56.``: ``print(37 * 56)``, computed, not copied) and
        prints the reference answer otherwise; the reasoner states the reference answer."""
        ans = self.instance.answer
        if agent == "reasoner":
            return f"**Reasoning Steps:** use the known result.\n\n\\boxed{{{ans}}}"
        expr = _EXPRESSION.match(self.instance.question.strip())
        if expr is not None:
            return f"```python\nprint({expr.group(1).strip()})\n```"
        return f"```python\nprint({ans!r})\n```"


def env(**kwargs: Any):
    """The wrapped math AEC env (``envs.make("math", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
