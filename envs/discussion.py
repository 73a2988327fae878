"""Discussion: agents take turns solving, evaluating and scoring one question (CoMAS).

=================  ==========================================================
id (alias)         ``discussion`` (``comas``)
agents             ``agent_0`` .. ``agent_{l-1}`` (``num_agents`` = l, default 4);
                   every agent solves, evaluates and scores, at different steps
actions            completion text (``str``)
observations       ``{"prompt": str}`` (it names the acting agent's current job)
horizon            ``num_rounds`` rounds (m, default 2 l); each round is one solution,
                   ``num_evaluations`` (n, default 1) evaluations and n scorings
render modes       ``human``, ``ansi``
=================  ==========================================================

Protocol (CoMAS section 3.1). One episode discusses one question over m rounds. Round i is
1 + 2 n steps of three jobs, in this order:

1. **solution**: an agent writes a step-by-step solution s_i, seeing the question and the
   discussion history h_q, ending with ``\\boxed{answer}``;
2. **evaluation** (j = 1..n): an agent looks for the mistakes of s_i (it sees the question, h_q
   and s_i) and lists them;
3. **scoring** (j = 1..n): an agent reads the question, s_i and e_{i,j} and scores the solution
   in the light of the evaluation, an integer tau in {1, 2, 3} inside ``<score>...</score>``
   (3: fully correct, the criticism does not hold; 2: minor valid flaws; 1: a fatal mistake
   identified).

After the round's evaluations, s_i and its evaluations join h_q; prompts show only the last
``history_rounds`` (kappa, default 2) rounds of it. Scoring is a separate job that never enters
h_q. The acting agent of every step is drawn uniformly at random from all agents (CoMAS 3.1:
u_k ~ Uniform(U) for each interaction step, so an agent may evaluate its own solution), from the
env's own generator seeded at ``reset`` (so equal seeds give equal schedules and
clones continue identically). ``agent_draw="others"`` instead draws evaluators among the agents
other than the solver and scorers among the agents other than the solver and that evaluator
(other than the solver only, when there are fewer than three agents).

Rewards (CoMAS section 3.2, Eq. 7-8; ``mixing="none"``, so reward = weighted component):

=============  =====================================================  ====================
job            reward                                                  arrives
=============  =====================================================  ====================
solution       mean over its n scores of (tau - 1) / 2                 at the round's last
                                                                       scoring (``award``)
evaluation     1 - (tau - 1) / 2 = (3 - tau) / 2 for its own score     at its scoring step
scoring        0 if the score parses to 1, 2 or 3, else -1             at once
=============  =====================================================  ====================

The solution's and the evaluation's own steps return a provisional 0 (``infos[..]["pending"]``);
the final value is delivered with :meth:`~envs.core.base.TurnBasedEnv.award` to the earlier step,
so cumulative rewards equal the final rewards. A score that does not parse (no ``<score>``
block, or a value other than 1, 2, 3; :func:`verifiers.judge.comas_score`, no fallback) gives the
scorer -1, and carries no information about the solution or the evaluation: the evaluation gets
``unscored_value`` (default 0.5, the neutral midpoint that keeps the solver-evaluator game
zero-sum) and the solution's mean is taken over its parsed scores only (``unscored_value`` when
none parsed). The reasons go into ``reward_parts["reasons"]``.

Reference answers never enter rewards (CoMAS needs no verifier). When the question has one,
infos report accuracy: every solution's boxed answer is graded with
:func:`verifiers.math_answer.grade`; the acting agent's info holds ``answer``, ``correct``,
``accuracy`` (share of correct solutions so far), ``majority_answer`` / ``majority_correct``
(the most frequent answer among all solutions, latest wins ties; :func:`majority_answer`).
``success`` (set at the end) is ``majority_correct``; it is ``False`` without a reference.

Instances: reasoning-gym math by default (``dataset="gsm_symbolic"``, ``dataset_size`` problems
generated offline with seed ``dataset_seed`` and the generator's ``dataset_options``, e.g.
``dataset="basic_arithmetic", dataset_options={"max_terms": 2, "max_digits": 2}``), or a math set
of :data:`envs.data.DATASETS` (``dataset="math_l45"``, CoMAS 4.1's MATH levels 4-5) read from
``data_path`` (its released file; without it the hub cache); split by a hash of the question
text; or any ``problems=[MathProblem | dict, ...]`` passed to ``envs.make``; or
``reset(options={"instance": {"question": ..., "answer": ...}})`` (``answer`` optional: without it
the discussion runs the same and only accuracy is not reported); at most 1,000,000 characters
of text in all (:mod:`envs.core.explicit`: checking and hashing it costs the host process a
few milliseconds; a larger one is refused).

``max_turns`` counts rounds and truncates only if set below ``num_rounds`` (its default, 1000,
never binds): the protocol ends by itself (termination) after its last round. ``mode="single"``
does not exist: the setting is multi-agent by construction.

Reward audit (conditions the rewarded policy controls): the scorer's own output decides
whether its score parses; when it does not, the scorer gets -1 (less than the 0 of any parsed
score) and the solution and evaluation it should have scored get ``unscored_value`` (0.5)
instead. An agent drawn to score its own solution (or evaluation) could thus trade a bad score
for the neutral value, but only by paying -1 at its scoring step, more than the 0.5 it can gain:
no step earns more by spoiling its own output. The solution's boxed answer plays no part in
rewards (CoMAS has no verifier); a missing box is reported in infos only
(``tests/envs/test_monotonicity.py``).

Version history: v0 (initial).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from envs.core.base import TurnBasedEnv, wrap
from envs.core.config import EnvConfig, RewardConfig, build_config
from envs.core.explicit import check_size
from envs.core.rewards import RewardParts
from envs.data.dataset_splits import canonical_text, text_key
from envs.data.records import MathProblem
from verifiers.extract import clip_text
from verifiers.judge import comas_rewards, comas_score, parse_score
from verifiers.math_answer import extract_boxed, grade, parse_number

__all__ = [
    "DiscussionConfig",
    "DiscussionRewards",
    "answer_key",
    "env",
    "majority_answer",
    "problem_from_dict",
    "QuestionPoolInstances",
    "question_pool",
    "raw_env",
    "split_problems",
]

_MAX_STORED = 200_000
_MAX_AGENTS = 64
Job = Literal["solution", "evaluation", "scoring"]


# ---------------------------------------------------------------------- question pools
_POOLS: dict[tuple[str, int, int, str | None, str], dict[str, tuple[MathProblem, ...]]] = {}
_POOLS_LOCK = threading.Lock()


def split_problems(problems: Iterable[Any]) -> dict[str, tuple[MathProblem, ...]]:
    """Problems (records or ``{"question", "answer"}`` dicts) grouped by split of their question
    hash, duplicates (same normalised question) dropped, order kept."""
    out: dict[str, list[MathProblem]] = {"train": [], "val": [], "test": []}
    seen: set[str] = set()
    from envs.core.splits import split_of

    for item in problems:
        p = problem_from_dict(item)
        if p.key in seen:
            continue
        seen.add(p.key)
        out[split_of(p.key)].append(p)
    return {k: tuple(v) for k, v in out.items()}


def question_pool(
    dataset: str,
    size: int,
    seed: int,
    data_path: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, tuple[MathProblem, ...]]:
    """The problems of ``dataset`` by split (loaded once per process): a math set of
    :data:`envs.data.catalog.DATASETS` (``aime25``, ``math_l45``, ...; from ``data_path``, or
    the hub cache), else ``size`` reasoning-gym problems generated with ``seed`` and the
    generator's ``options`` (e.g. ``basic_arithmetic``'s ``max_terms``)."""
    from envs.data.catalog import dataset_names

    registered = dataset in dataset_names("math")
    if data_path is not None and not registered:
        raise ValueError(f"data_path needs a dataset of envs.data.DATASETS, not {dataset!r}")
    if options and registered:
        raise ValueError(f"dataset_options are a reasoning-gym generator's, not {dataset!r}'s")
    key = (dataset, int(size), int(seed), data_path, json.dumps(options or {}, sort_keys=True))
    with _POOLS_LOCK:
        if key not in _POOLS:
            if registered:
                from envs.data.catalog import load_dataset

                problems = load_dataset(dataset, data_path)
            else:
                from envs.data.math_sets import load_reasoning_gym

                problems = load_reasoning_gym(dataset, size=size, seed=seed, **(options or {}))
            _POOLS[key] = split_problems(problems)
        return _POOLS[key]


def problem_from_dict(data: Any, *, require_answer: bool = False) -> MathProblem:
    """A :class:`MathProblem` from a record or ``{"question": str, "answer": str | number}``.

    >>> problem_from_dict({"question": "1 + 1?", "answer": 2}).answer
    '2'
    >>> problem_from_dict({"question": "Why?"}).answer
    ''
    """
    if isinstance(data, MathProblem):
        problem = data
    else:
        if not isinstance(data, Mapping) or not isinstance(data.get("question"), str):
            raise ValueError(
                'an instance is {"question": str, "answer": str} (answer optional here) '
                f"or a MathProblem; got {type(data).__name__}"
            )
        check_size(data, "the instance")
        answer = data.get("answer", "")
        if answer is None:
            answer = ""
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(f"answer must be a string or a number, got {type(answer).__name__}")
        question = data["question"]
        problem = MathProblem(
            id=str(data.get("id") or f"explicit/{text_key(question)[:12]}"),
            question=question,
            answer=str(answer).strip(),
            source=str(data.get("source", "explicit")),
        )
    if not problem.question.strip():
        raise ValueError("the question is empty")
    if require_answer and not problem.answer.strip():
        raise ValueError("this setting needs a reference answer: give a non-empty 'answer'")
    return problem


def answer_key(answer: str) -> str:
    """Canonical form of a final answer for counting votes: exact value of plain numbers,
    otherwise the text without whitespace.

    >>> answer_key("1,000"), answer_key(r"\\frac{2}{4}"), answer_key("x + 1")
    ('1000', '1/2', 'x+1')
    """
    value = parse_number(answer)
    if value is not None:
        return str(value)
    return re.sub(r"\s+", "", answer)


def majority_answer(answers: Sequence[str | None]) -> int | None:
    """Index of the majority answer among ``answers`` (``None`` entries do not vote): the most
    frequent :func:`answer_key`, ties going to the latest; its latest occurrence is returned.

    >>> majority_answer(["3", "4", "3.0", None, "4"])
    4
    >>> majority_answer(["3", "4", "3.0"]), majority_answer([None, None])
    (2, None)
    """
    counts: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, a in enumerate(answers):
        if a is None:
            continue
        k = answer_key(a)
        counts[k] = counts.get(k, 0) + 1
        last[k] = i
    if not counts:
        return None
    best = max(counts, key=lambda k: (counts[k], last[k]))
    return last[best]


# ---------------------------------------------------------------------- config
@dataclass(frozen=True)
class DiscussionRewards(RewardConfig):
    """CoMAS rewards: reward = weight * component (``mixing="none"``)."""

    lam: float = 0.0
    mixing: Literal["convex", "additive", "none"] = "none"
    solution_score: float = 1.0
    evaluation_score: float = 1.0
    scoring_penalty: float = 1.0
    unscored_value: float = 0.5
    roles: ClassVar[tuple[str, ...]] = ("solution", "evaluation", "scoring")
    convex_roles: ClassVar[bool] = False


@dataclass(frozen=True)
class DiscussionConfig(EnvConfig):
    """num_agents: l. num_rounds: m (``None``: 2 l). num_evaluations: n. history_rounds: kappa.
    agent_draw: ``"uniform"`` (paper) or ``"others"`` (see the module docstring).
    dataset / dataset_size / dataset_seed / dataset_options: the reasoning-gym pool (its
    generator's options); or ``dataset`` a math set of
    :data:`envs.data.DATASETS` read from ``data_path``. max_entry_chars: longest
    solution/evaluation text quoted in a prompt. max_turns: truncation cap in rounds."""

    num_agents: int = 4
    num_rounds: int | None = None
    num_evaluations: int = 1
    history_rounds: int = 2
    agent_draw: Literal["uniform", "others"] = "uniform"
    dataset: str = "gsm_symbolic"
    dataset_size: int = 2000
    dataset_seed: int = 0
    dataset_options: dict[str, Any] | None = None
    data_path: str | None = None
    max_entry_chars: int = 20_000
    max_turns: int = 1000
    rewards: DiscussionRewards = field(default_factory=DiscussionRewards)

    def __post_init__(self) -> None:
        if self.mode == "single":
            raise ValueError(
                "discussion (CoMAS) is inherently multi-agent: mode='single' does not exist; "
                "use mode='multi' (num_agents=1 gives one agent doing every job)"
            )
        super().__post_init__()
        if not isinstance(self.num_agents, int) or not 1 <= self.num_agents <= _MAX_AGENTS:
            raise ValueError(f"num_agents must be an int in [1, {_MAX_AGENTS}]")
        if self.num_rounds is not None and (
            not isinstance(self.num_rounds, int) or self.num_rounds < 1
        ):
            raise ValueError("num_rounds must be a positive int or None (= 2 * num_agents)")
        if not isinstance(self.num_evaluations, int) or self.num_evaluations < 1:
            raise ValueError("num_evaluations must be a positive int")
        if not isinstance(self.history_rounds, int) or self.history_rounds < 0:
            raise ValueError("history_rounds must be an int >= 0")
        if self.agent_draw not in ("uniform", "others"):
            raise ValueError(f"agent_draw must be 'uniform' or 'others', got {self.agent_draw!r}")
        if self.agent_draw == "others" and self.num_agents < 2:
            raise ValueError("agent_draw='others' needs num_agents >= 2")
        if self.dataset_size < 1 or self.max_entry_chars < 100:
            raise ValueError("dataset_size must be >= 1 and max_entry_chars >= 100")

    @property
    def rounds(self) -> int:
        """m: ``num_rounds``, or 2 l when unset (the paper's setting)."""
        return self.num_rounds if self.num_rounds is not None else 2 * self.num_agents


# ---------------------------------------------------------------------- state
@dataclass
class _Round:
    solver: str
    evaluators: list[str]
    scorers: list[str]
    solution: str = ""
    solution_step: int = -1
    answer: str | None = None
    answer_reason: str = ""
    correct: bool | None = None
    evaluations: list[str] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    scores: list[int | None] = field(default_factory=list)
    solution_values: list[float | None] = field(default_factory=list)


_SCORE_RULES = (
    "3 = the solution is fully correct and none of the criticisms holds;\n"
    "2 = some criticisms are valid but only minor: the solution stays essentially correct;\n"
    "1 = the evaluation exposes at least one fatal mistake that makes the answer wrong."
)


class QuestionPoolInstances:
    """Instances of a math-question setting: ``self._pool`` (the problems passed to
    ``envs.make``) or else the question pool its config names (``dataset``, ``dataset_size``,
    ``dataset_seed``, ``data_path``, ``dataset_options``); a seed picks one problem of a split,
    and a problem is identified by its question text. Mixed in before :class:`TurnBasedEnv`."""

    _pool: dict[str, tuple[MathProblem, ...]] | None
    config: Any

    def _sample_instance(self, split: str, seed: int) -> MathProblem:
        if self._pool is None:
            cfg = self.config
            self._pool = question_pool(
                cfg.dataset, cfg.dataset_size, cfg.dataset_seed, cfg.data_path, cfg.dataset_options
            )
        items = self._pool[split]
        if not items:
            raise ValueError(f"the question pool has no {split} problems; give more problems")
        return items[int(np.random.default_rng(seed).integers(len(items)))]

    def _instance_key(self, instance: MathProblem) -> str:
        return canonical_text(instance.question)


class raw_env(QuestionPoolInstances, TurnBasedEnv):
    """The CoMAS discussion (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "discussion_v0",
        "is_parallelizable": False,
    }
    config_cls = DiscussionConfig
    config: DiscussionConfig
    _shared_attrs = ("_pool",)

    def __init__(
        self,
        config: DiscussionConfig | None = None,
        *,
        render_mode: str | None = None,
        sandbox: Any = None,
        problems: Iterable[Any] | None = None,
        **overrides: Any,
    ) -> None:
        cfg = build_config(DiscussionConfig, config, overrides)
        # the roster depends on num_agents, so it is set per instance before the base reads it
        self.AGENTS = tuple(f"agent_{i}" for i in range(cfg.num_agents))  # type: ignore[misc]
        super().__init__(cfg, render_mode=render_mode, sandbox=sandbox)
        self._pool = split_problems(problems) if problems is not None else None
        self._rounds: list[_Round] = []
        self._phase = 0
        self._done = False
        self._last_info: dict[str, Any] = {}
        self._rng = np.random.default_rng(0)

    # ------------------------------------------------------------------ instances
    def _instance_from_dict(self, data: Any) -> MathProblem:
        return problem_from_dict(data)

    # ------------------------------------------------------------------ schedule
    def _draw(self, exclude: Sequence[str] = ()) -> str:
        pool = [a for a in self.possible_agents if a not in exclude] or list(self.possible_agents)
        return pool[int(self._rng.integers(len(pool)))]

    def _new_round(self) -> _Round:
        n = self.config.num_evaluations
        others = self.config.agent_draw == "others"
        solver = self._draw()
        evaluators = [self._draw([solver] if others else []) for _ in range(n)]
        scorers = []
        for ev in evaluators:
            exclude = (
                ([solver, ev] if len(self.possible_agents) >= 3 else [solver]) if others else []
            )
            scorers.append(self._draw(exclude))
        return _Round(solver=solver, evaluators=evaluators, scorers=scorers)

    def _job(self) -> tuple[Job, int]:
        n = self.config.num_evaluations
        if self._phase == 0:
            return "solution", 0
        if self._phase <= n:
            return "evaluation", self._phase - 1
        return "scoring", self._phase - n - 1

    def _actor(self) -> str:
        rnd = self._rounds[-1]
        job, j = self._job()
        if job == "solution":
            return rnd.solver
        return rnd.evaluators[j] if job == "evaluation" else rnd.scorers[j]

    def current_job(self) -> tuple[Job, int, int] | None:
        """``(job, round, j)`` of the step about to be taken (``None`` once the episode is over);
        ``j`` numbers the evaluations / scorings within the round."""
        if self._done or not self._rounds:
            return None
        job, j = self._job()
        return job, len(self._rounds) - 1, j

    def schedule(self) -> list[tuple[Job, str]]:
        """The (job, agent) pairs of the current round, in order (for tests and logging)."""
        rnd = self._rounds[-1]
        out: list[tuple[Job, str]] = [("solution", rnd.solver)]
        out += [("evaluation", a) for a in rnd.evaluators]
        out += [("scoring", a) for a in rnd.scorers]
        return out

    def _reset_state(self, instance: MathProblem) -> None:
        self._rng = np.random.default_rng(int(self._seed_rng.integers(2**63)))
        self._rounds = [self._new_round()]
        self._phase = 0
        self._done = False
        self._last_info = {}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        super().reset(seed=seed, options=options)
        self.agent_selection = self._actor()

    def _next_agent(self, agent: str) -> str:
        if self._done:
            return agent
        if self._phase >= 1 + 2 * self.config.num_evaluations:
            self._rounds.append(self._new_round())
            self._phase = 0
            self.turn += 1
        return self._actor()

    def _horizon_reached(self) -> bool:
        return self.turn >= self.config.max_turns

    # ------------------------------------------------------------------ text
    def _clip(self, text: str) -> str:
        return clip_text(text, self.config.max_entry_chars)

    def _history_text(self, upto: int) -> str:
        """Rounds before ``upto`` (0-based), trimmed to the last kappa, as prompt text."""
        kappa = self.config.history_rounds
        first = max(0, upto - kappa)
        if kappa == 0 or upto == 0:
            return "(nothing yet)"
        parts = []
        for i in range(first, upto):
            rnd = self._rounds[i]
            parts.append(
                f"--- Round {i + 1}: solution by {rnd.solver} ---\n{self._clip(rnd.solution)}"
            )
            for ev, text in zip(rnd.evaluators, rnd.evaluations):
                parts.append(f"--- Round {i + 1}: evaluation by {ev} ---\n{self._clip(text)}")
        return "\n\n".join(parts)

    def _prompt(self, agent: str) -> str:
        cfg = self.config
        question = self.instance.question.strip()
        if self._done:
            return f"You are {agent}. The discussion of this question is over.\n\n{question}"
        rnd, r = self._rounds[-1], len(self._rounds) - 1
        job, j = self._job()
        actor = self._actor()
        where = f"round {r + 1} of {cfg.rounds}"
        if agent != actor:
            return (
                f"You are {agent}, one of {len(self.possible_agents)} agents discussing a "
                f"question. It is {actor}'s turn ({job}, {where}); wait for your turn.\n\n"
                f"Question:\n{question}"
            )
        head = (
            f"You are {agent}, one of {len(self.possible_agents)} agents who discuss a question "
            f"by turns: solving it, evaluating solutions and scoring evaluations.\n"
            f"YOUR JOB NOW: {job.upper()} ({where}).\n\nQuestion:\n{question}\n\n"
        )
        if job == "solution":
            return (
                head
                + f"Discussion so far (latest {cfg.history_rounds} rounds at most):\n"
                + self._history_text(r)
                + "\n\nWrite your own step-by-step solution; use the discussion where it helps and "
                "avoid the mistakes pointed out in it. Put the final answer alone inside "
                "\\boxed{}, for example \\boxed{42}, at the end."
            )
        if job == "evaluation":
            return (
                head
                + f"Discussion so far (latest {cfg.history_rounds} rounds at most):\n"
                + self._history_text(r)
                + f"\n\nSolution to evaluate (by {rnd.solver}):\n{self._clip(rnd.solution)}\n\n"
                "Hunt for flaws in this solution rather than agreeing with it: go through it and "
                "name each error or weak step you find, saying where it is and why it fails. Be "
                "brief and do not re-derive the whole solution."
            )
        return (
            head
            + f"Solution (by {rnd.solver}):\n{self._clip(rnd.solution)}\n\n"
            + f"Evaluation of it (by {rnd.evaluators[j]}):\n{self._clip(rnd.evaluations[j])}\n\n"
            "Decide whether the evaluation's criticisms hold, then score the solution with an "
            f"integer from 1 to 3:\n{_SCORE_RULES}\n"
            "Give a short reason, then the score in tags, e.g. 'The sign error it finds changes "
            "the result. <score>1</score>'."
        )

    # ------------------------------------------------------------------ dynamics
    def _parts(self, role: str, value: float, reasons: Mapping[str, str]) -> RewardParts:
        key = {"solution": "score", "evaluation": "score", "scoring": "penalty"}[role]
        return RewardParts.build(role, {key: value}, self.config.rewards, reasons=reasons)

    def _accuracy_info(self) -> dict[str, Any]:
        solved = [r for r in self._rounds if r.solution_step >= 0]
        best = majority_answer([r.answer for r in solved])
        out: dict[str, Any] = {
            "majority_answer": None if best is None else solved[best].answer,
            "accuracy": None,
            "majority_correct": None,
        }
        if self.instance.answer and solved:
            out["accuracy"] = sum(bool(r.correct) for r in solved) / len(solved)
            out["majority_correct"] = best is not None and bool(solved[best].correct)
        return out

    def _act(self, agent: str, completion: str) -> RewardParts:
        job, j = self._job()
        rnd = self._rounds[-1]
        text = completion[:_MAX_STORED]
        step = self.num_steps
        info: dict[str, Any] = {"job": job, "round": len(self._rounds) - 1, "pending": False}
        if job == "solution":
            rnd.solution, rnd.solution_step = text, step
            box = extract_boxed(text)
            rnd.answer = None if box.value is None else clip_text(str(box.value), 500)
            rnd.answer_reason = "ok" if box.ok else box.reason
            if self.instance.answer:
                rnd.correct = grade(text, self.instance.answer, source="boxed").correct
            info.update(answer=rnd.answer, answer_reason=rnd.answer_reason, correct=rnd.correct)
            info["pending"] = True
            parts = self._parts("solution", 0.0, {"pending": "scored later by the scorers"})
        elif job == "evaluation":
            rnd.evaluations.append(text)
            rnd.eval_steps.append(step)
            info["pending"] = True
            parts = self._parts("evaluation", 0.0, {"pending": "scored later by a scorer"})
        else:
            parts = self._score(rnd, j, text, info)
        info.update(self._accuracy_info())
        self._phase += 1
        if self._phase >= 1 + 2 * self.config.num_evaluations and len(self._rounds) >= (
            self.config.rounds
        ):
            self._done = True
            acc = self._accuracy_info()
            self.success = bool(acc["majority_correct"])
            info["final_answer"] = acc["majority_answer"]
            self.end_episode()
        self._last_info = info
        return parts

    def _score(self, rnd: _Round, j: int, text: str, info: dict[str, Any]) -> RewardParts:
        rw = self.config.rewards
        tau = comas_score(text)
        sol_r, eval_r, scorer_r = comas_rewards(tau)
        rnd.scores.append(tau)
        rnd.solution_values.append(sol_r)
        if tau is None:
            parsed = parse_score(text, scale_max=3, fallback=False)
            why = parsed.reason if not parsed.ok else f"score {parsed.value:g} is not 1, 2 or 3"
            reasons = {"score": why}
        else:
            reasons = {"score": f"parsed {tau}"}
        info.update(score=tau, scored_agents=[rnd.evaluators[j]])
        value = eval_r if eval_r is not None else rw.unscored_value
        ev_reason = f"score {tau}" if tau is not None else "the score did not parse"
        self.award(
            rnd.evaluators[j],
            self._parts("evaluation", value, {"score": ev_reason}),
            rnd.eval_steps[j],
        )
        if j == self.config.num_evaluations - 1:
            got = [v for v in rnd.solution_values if v is not None]
            value = sum(got) / len(got) if got else rw.unscored_value
            shown = ", ".join("unparsed" if t is None else str(t) for t in rnd.scores)
            self.award(
                rnd.solver,
                self._parts("solution", value, {"scores": shown}),
                rnd.solution_step,
            )
            info["scored_agents"].append(rnd.solver)
        return self._parts("scoring", scorer_r, reasons)

    def _step_info(self, agent: str) -> dict[str, Any]:
        return dict(self._last_info)

    # ------------------------------------------------------------------ oracle and render
    def oracle(self, agent: str) -> str:
        """A competent completion for ``agent``'s current job, using the reference answer."""
        ref = self.instance.answer
        if self._done:
            return ""
        job, _ = self._job()
        rnd = self._rounds[-1]
        if job == "solution":
            if not ref:
                return "I reason through the question step by step; no final value is certain."
            return f"Working through the question step by step gives the result.\n\\boxed{{{ref}}}"
        if rnd.correct is None:
            return (
                "I found no decisive error." if job == "evaluation" else "Unclear. <score>2</score>"
            )
        if job == "evaluation":
            if rnd.correct:
                return "I checked every step; I find no error that changes the final answer."
            return f"The final answer is wrong: the correct result is {ref}, not {rnd.answer}."
        if rnd.correct:
            return "The criticism does not hold; the solution is right. <score>3</score>"
        return "The evaluation finds a fatal mistake in the answer. <score>1</score>"

    def _render_text(self) -> str:
        lines = [
            f"discussion: round {len(self._rounds)}/{self.config.rounds}, success={self.success}",
            "question: " + clip_text(self.instance.question.strip().replace("\n", " "), 200),
        ]
        if self.instance.answer:
            lines.append(f"reference: {self.instance.answer}")
        for i, rnd in enumerate(self._rounds):
            if rnd.solution_step < 0:
                continue
            lines.append(
                f"round {i + 1}: {rnd.solver} -> answer {rnd.answer!r} (correct={rnd.correct}); "
                f"evaluators {rnd.evaluators[: len(rnd.evaluations)]}; "
                f"scorers {rnd.scorers[: len(rnd.scores)]} scores {rnd.scores}"
            )
        if not self._done:
            job, _ = self._job()
            lines.append(f"next: {self._actor()} ({job})")
        return "\n".join(lines)


def env(**kwargs: Any):
    """The wrapped discussion AEC env (``envs.make("discussion", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
