"""Propose-solve-judge: Multi-Agent Evolve (MAE), one self-play round per episode.

=================  ==========================================================
id (alias)         ``propose_solve_judge`` (``mae``)
agents             ``proposer``, ``solver``, ``judge``
actions            completion text (``str``)
observations       ``{"prompt": str}``
episode            proposer, judge (question), solver x N, judge x N (difficulty, not
                   trained), solver, judge (solver phase on a pool question), judge (a
                   pair of the pair dataset); at most 5 + 2N steps
render modes       ``human``, ``ansi``
=================  ==========================================================

One backbone plays three roles (MAE Section 4). Each episode is one round of MAE's training
step (Section 4.4, Algorithm 1): a proposer phase, then a solver phase.

Proposer phase.

1. **proposer** writes a new question inside ``<question>...</question>``. With probability
   ``reference_prob`` (default 0.5, MAE's best "half reference" setting, Section 5) it is shown a
   reference question drawn from the pool, *without* its answer; otherwise it writes from
   scratch.
2. **judge** rates the question 1-10 inside ``<score>`` with MAE 4.3's rubric
   (:data:`QUESTION_RUBRIC`: 1-3 unsolvable, self-contradictory or against common sense; 4-7
   reasonable but ambiguous; 8-10 clear, well-formed and logically sound);
   ``quality = (s - 1) / 9`` clipped to [0, 1], 0.5 when unparsable. With the 0.7 filter a
   question passes from a score of 8 (``7/9 = 0.78``); a 7 (``6/9 = 0.67``) is filtered, so the
   rubric's "ambiguous" band is exactly the filtered one.
3. **solver** answers the question ``num_answers`` times (N = 5, MAE Table 3 "N samples to
   estimate difficulty"), each inside ``<answer>...</answer>``. The N prompts are identical; the
   solver does not see its earlier answers.
4. **judge** rates each answer 1-10 (correctness first: any error 1-3, correct with small gaps
   4-7, flawless 8-10), in answer order; ``s_i = (s - 1) / 9`` clipped, 0.5 when unparsable.

Steps 3-4 exist only to measure the question's difficulty (MAE 4.1: "We sample answers from the
Solver and collect their score as evaluated by the Judge"); the public MAE code samples them
inside the proposer's reward function and never trains on them. So by default
(``train_difficulty=False``) these 2N steps are not training samples: their infos say
``trainable: False`` (with ``untrainable_reason``) and they return reward 0 (the judge's scores
still make the difficulty; ``infos`` keep each answer's and score's format).
``train_difficulty=True`` makes them training samples (solver ``0.5 s_i + 0.5 format`` by
award, judge its format), as in this module's v0.

Solver phase (MAE 4.4 (2): "The Solver samples from the valid dataset"; its answers are rated by
the Judge, and the judge phase trains on those question-answer pairs):

5. **solver** answers one question of the pool (``instance.task``: drawn at reset from the same
   split as the reference, independently of it; the question just proposed joins the pool
   only at the end of the episode), inside ``<answer>``;
6. **judge** rates that answer as in step 4.

Judge phase (MAE 4.4 (3): "The Judge samples from the pair dataset"):

7. the question-answer pair of step 5 joins the pool's **pair dataset**
   (:meth:`QuestionPool.add_pair <envs.pools.QuestionPool.add_pair>`, shared by the run like the
   questions), and the **judge** rates a pair drawn from it (same split as the episode; the
   draw may be this episode's own pair, the only one in a fresh pool), with the answer rubric
   of step 4.

By default (``judge_data="pairs"``) step 6 scores the solver's answer for the solver's reward
only (not a judge training sample: ``trainable: False``, reward 0) and step 7 is the judge's
training sample, as in the public MAE code, whose judge batches come from the ``general_pair``
dataset (``absolute_zero_reasoner/trainer/ppo/azr_ray_trainer.py``,
``_create_train_judge_dataloader``) filled with the solver's question-answer pairs
(``add_general_pair_batch``). ``judge_data="episode"`` keeps the earlier reading: step 6 is the
judge's training sample and there is no step 7.

Steps 5 and 7 (5 and 6 with ``judge_data="episode"``) are training samples. The solver phase runs
whatever happened to the proposed question (filtered or missing: the solver still trains).
``solver_phase=False`` leaves it out (the episode ends after the proposer phase; with
``train_difficulty=False`` the solver then never trains: MAE's "no solver training" ablation,
Table 2).

Schedule: the N difficulty answers come first, then their N judgements (the order of MAE 4.4).
The judge sees the content of the solver's ``<answer>`` block, or the whole (clipped) response
when there is none.

Rewards (``mixing="none"``: the reward is the weighted sum of the components, the papers'
formulas; every weight is a field of :class:`MaeRewards`):

- proposer: ``(quality + difficulty + format) / 3`` with ``difficulty = 1 - mean(s_1..s_N)`` and
  ``format`` = 1 when exactly one non-empty ``<question>`` block exists (MAE: "presence and
  uniqueness"), else 0. When ``quality < quality_threshold`` (0.7) the question is *filtered*:
  it does not enter the pool and the difficulty term is dropped: ``quality/3 + format/3``
  (as in the public MAE code). With several ``<question>`` blocks the last one is used (format
  0). No usable ``<question>`` block (missing, empty, unclosed, or longer than
  ``max_question_chars``) gives the proposer 0 and ends the proposer phase: there is nothing to
  judge, so the episode goes straight to the solver phase.
- solver (solver phase): ``0.5 * s + 0.5 * format`` (s = the judge's normalised score of its
  answer, format = exactly one non-empty ``<answer>`` block).
- judge: ``format`` only: 1 when its output has exactly one ``<score>`` block holding a number
  in [1, 10], else 0 (a second score block, a missing block or prose make the score unparsable,
  so it also counts 0.5 for the agent being judged). Its rating of the solver-phase answer is a
  training sample (MAE 4.4 (3): the judge trains on the solver phase's question-answer pairs),
  and so is its question rating (MAE 4.3 gives the judge both evaluation tasks and the format
  reward; the public MAE code trains only the answer ratings: ``train_question_judge=False``).

Delayed rewards. The proposer's and the solver's rewards depend on later judge steps: their own
steps return 0 (``reward_parts`` with no components and a ``pending`` reason) and the final
reward arrives through ``award()`` (``last_awards``, ``infos[agent]["reward_parts"]["for_step"]``)
in the judge step that settles it: the proposer's when the last difficulty answer is judged, or
right after the question is judged when it is filtered; the solver's when the judge rates its
solver-phase answer. Cumulative rewards equal the final rewards. Rollout engines should use
parallel sampling (or attach awards) for this setting.

Filtered questions. By default (``solve_filtered=False``) a filtered question gets no difficulty
answers: its difficulty would be dropped anyway. With ``solve_filtered=True`` the solver and the
judge still answer and score it N times (the proposer's reward stays ``quality/3 + format/3``).

The question pool (:class:`envs.pools.QuestionPool`). An episode's *instance* is one pool item:
the reference question (the seed or an earlier accepted question, with its answer when known),
plus whether it is shown (``use_reference``). Its split is the hash of the question text. At the
end of an episode whose question was accepted (``quality >= quality_threshold``) the question is
added to the pool (``add_to_pool=True``), de-duplicated by normalised text, with its quality and
difficulty in ``metadata``. Pools are shared: ``raw_env.create_shared(**config)`` builds one
(``{"pool": QuestionPool}``) to pass to every env of a run as ``envs.make("mae", pool=pool)``;
without ``pool=`` each env builds its own from ``seed_sources``. ``clone()`` shares the pool, so
whichever copy of an episode finishes adds its question: under tree sampling the candidates of
the last step (a judge score) all carry the same question, and de-duplication keeps one copy;
branches dropped earlier never finish and add nothing. Only whole episodes add questions.

Success (``infos[agent]["success"]``): the round's question was accepted (quality at least
``quality_threshold``), i.e. the team produced a question worth adding to the pool.

Oracle (scripted, for tests and upper bounds): the proposer re-emits the instance's question
(so the pool does not grow); the judge gives 9 to that question and 5 to any other, scores an
answer to a question with a known reference (the solver-phase question, or the proposed
question when it restates the reference) 10 when the verifier accepts it (math-verify/NumEq,
code tests, exact text) and 1 otherwise (code: ``1 + 9 * pass rate``), and 5 when the answer is
unknown; the solver answers with the known reference (or says it does not know).

Explicit instance: ``reset(options={"instance": {"question": ..., "answer": ..., "use_reference":
bool, "solve": {...}}})``; ``solve`` is the solver phase's pool item (default: the reference
item itself). Limits (:mod:`envs.core.explicit`): at most 1,000,000 characters of text in all,
and per item at most 256 tests, of which 20 assert tests holding 16,000 characters of code (as
in the code setting: the steps run and plan them all). Checking it then costs the host process
a few milliseconds; a larger one is refused with a ``ValueError`` saying which limit it broke.

Config (:class:`MaeConfig`): ``num_answers`` (5), ``reference_prob`` (0.5),
``quality_threshold`` (0.7), ``solve_filtered`` (False), ``solver_phase`` (True),
``train_difficulty`` (False), ``train_question_judge`` (True), ``add_to_pool`` (True),
``seed_sources`` (:data:`envs.pools.OFFLINE_SEEDS`), ``max_question_chars`` (4000),
``max_shown_chars`` (4000, how much of a question/answer other roles see), ``test_timeout_s``
(5.0, oracle code grading), ``rewards`` (:class:`MaeRewards`). ``max_turns`` is not used (an
episode is one round). ``mode="single"`` is not supported.

Reward audit (conditions the rewarded policy controls):

- proposer: the format (exactly one non-empty ``<question>`` block; several give format 0, none
  gives the proposer 0). The quality threshold is the judge's, another role's, decision; the
  filtered branch, ``quality/3 + format/3``, is the accepted one without its difficulty term,
  so it never pays more than the same question accepted.
- solver: the format of its ``<answer>`` (format 0 without one; the judge then sees the whole
  response). An unparsable judge score gives the answer 0.5 (MAE's fallback), more than a wrong
  answer rated 1; that branch is chosen by the judge's output, and the judge role loses its whole
  reward (format 0) for it.
- judge: its format only.

No spoiled answer earns more than its well-formed twin (``tests/envs/test_monotonicity.py``).

Version history: v0 (initial); v1 (solver phase on a pool question, MAE 4.4; the N difficulty
answers and their scores are not training samples, ``trainable: False``; options
``solver_phase``, ``train_difficulty``, ``train_question_judge``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from envs.core.base import TurnBasedEnv, wrap
from envs.core.config import EnvConfig, Mixing, RewardConfig
from envs.core.explicit import check_size, check_tests
from envs.core.registry import roles_of
from envs.core.rewards import RewardParts
from envs.core.splits import stable_hash
from envs.data.dataset_splits import canonical_text
from envs.pools import OFFLINE_SEEDS, PoolItem, QuestionPool, SharedPoolMixin, verify_answer
from verifiers.extract import clip_text
from verifiers.formats import extract_tag, find_tags
from verifiers.judge import mae_norm, parse_score

__all__ = [
    "QUESTION_RUBRIC",
    "MaeConfig",
    "MaeInstance",
    "MaeRewards",
    "env",
    "raw_env",
    "judge_score",
]

_EPS = 1e-9

# MAE 4.3: the judge's question rubric (bands as in the paper; wording our own)
QUESTION_RUBRIC = (
    "1-3 if the question cannot be solved, contradicts itself or defies common sense; 4-7 if "
    "it is broadly reasonable but ambiguous (unclear wording, missing information, more than "
    "one possible reading); 8-10 only if it is clear, well-formed and logically sound."
)


@dataclass(frozen=True)
class MaeRewards(RewardConfig):
    lam: float = 0.0
    mixing: Mixing = "none"
    proposer_quality: float = 1 / 3
    proposer_difficulty: float = 1 / 3
    proposer_format: float = 1 / 3
    solver_judge: float = 0.5
    solver_format: float = 0.5
    judge_format: float = 1.0
    roles: ClassVar[tuple[str, ...]] = ("proposer", "solver", "judge")


@dataclass(frozen=True)
class MaeConfig(EnvConfig):
    max_turns: int = 1
    num_answers: int = 5
    reference_prob: float = 0.5
    quality_threshold: float = 0.7
    solve_filtered: bool = False
    solver_phase: bool = True
    train_difficulty: bool = False
    train_question_judge: bool = True
    judge_data: Literal["pairs", "episode"] = "pairs"
    add_to_pool: bool = True
    seed_sources: tuple[str, ...] = OFFLINE_SEEDS
    max_question_chars: int = 4000
    max_shown_chars: int = 4000
    test_timeout_s: float = 5.0
    rewards: MaeRewards = field(default_factory=MaeRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.num_answers, bool) or not isinstance(self.num_answers, int):
            raise ValueError(f"num_answers must be an int, got {self.num_answers!r}")
        if not 1 <= self.num_answers <= 64:
            raise ValueError("num_answers must lie in [1, 64]")
        if not 0.0 <= self.reference_prob <= 1.0:
            raise ValueError("reference_prob must lie in [0, 1]")
        if not 0.0 <= self.quality_threshold <= 1.0:
            raise ValueError("quality_threshold must lie in [0, 1]")
        if self.judge_data not in ("pairs", "episode"):
            raise ValueError("judge_data must be 'pairs' or 'episode'")
        if self.max_question_chars < 1 or self.max_shown_chars < 100:
            raise ValueError("max_question_chars must be >= 1 and max_shown_chars >= 100")
        if isinstance(self.seed_sources, str):
            raise ValueError("seed_sources must be a tuple of spec strings, not one string")
        object.__setattr__(self, "seed_sources", tuple(self.seed_sources))


@dataclass(frozen=True)
class MaeInstance:
    """The reference item of an episode, whether the proposer sees it, and the pool question of
    the solver phase (drawn independently from the same split; ``None``: the reference item).
    The split and ``instance_id`` are those of the reference item."""

    item: PoolItem
    use_reference: bool
    solve_item: PoolItem | None = None

    def key(self) -> str:
        return canonical_text(self.item.question)

    @property
    def task(self) -> PoolItem:
        """The question the solver phase answers."""
        return self.solve_item if self.solve_item is not None else self.item


@dataclass
class _State:
    phase: str = "propose"  # propose, judge_question, solve, judge_answer, done
    question: str | None = None
    proposer_format: float = 0.0
    proposer_step: int = -1
    question_score: float | None = None
    quality: float | None = None
    accepted: bool = False
    answers: list[str] = field(default_factory=list)
    answer_formats: list[float] = field(default_factory=list)
    answer_steps: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    difficulty: float | None = None
    task_answer: str | None = None
    task_format: float = 0.0
    task_step: int = -1
    task_score: float | None = None
    proposer_reward: float | None = None
    pool_added: bool | None = None
    pair: dict[str, Any] | None = None  # the judge phase's pair (MAE 4.4 (3))
    next_agent: str = "proposer"
    last_info: dict[str, Any] = field(default_factory=dict)


def judge_score(text: str) -> tuple[float | None, float, str]:
    """``(score or None, format, reason)`` for a judge output: the score is the number in the
    only ``<score>`` block (``None`` when there is no block, several blocks, or no number: then
    it counts 0.5); format is 1 when that number lies in [1, 10] (outside it is clipped by the
    normalisation but earns no format credit).

    >>> judge_score("<think>clear</think><score>8</score>")
    (8.0, 1.0, 'ok')
    >>> judge_score("<score>8</score><score>9</score>")[0:2]
    (None, 0.0)
    >>> judge_score("I give it 8")[0:2]
    (None, 0.0)
    >>> judge_score("<score>11</score>")
    (11.0, 0.0, 'score 11 is outside 1-10')
    """
    blocks = find_tags(text, "score")
    if len(blocks) != 1:
        why = "no <score> block" if not blocks else f"{len(blocks)} <score> blocks"
        return None, 0.0, why
    p = parse_score(text, fallback=False)
    if p.value is None:
        return None, 0.0, p.reason
    if not 1.0 <= p.value <= 10.0:
        return p.value, 0.0, f"score {p.value:g} is outside 1-10"
    return p.value, 1.0, "ok"


class raw_env(SharedPoolMixin, TurnBasedEnv):
    """Propose-solve-judge environment (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "propose_solve_judge_v0",
        "is_parallelizable": False,
    }
    AGENTS = roles_of("propose_solve_judge")
    config_cls = MaeConfig
    config: MaeConfig

    def __init__(
        self,
        config: MaeConfig | None = None,
        *,
        render_mode: str | None = None,
        sandbox: Any = None,
        pool: QuestionPool | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode=render_mode, sandbox=sandbox, **overrides)
        self._init_pool(pool)
        self.state = _State()

    # ------------------------------------------------------------------ instances
    def _sample_instance(self, split: str, seed: int) -> MaeInstance:
        rng = np.random.default_rng(seed)
        item = self.pool.sample(rng, split)
        use_reference = bool(rng.random() < self.config.reference_prob)
        return MaeInstance(item, use_reference, self.pool.sample(rng, split))

    def _instance_key(self, instance: MaeInstance) -> str:
        return instance.key()

    def _instance_from_dict(self, data: Any) -> MaeInstance:
        if isinstance(data, MaeInstance):
            return data
        if isinstance(data, PoolItem):
            return MaeInstance(data, True)
        if not isinstance(data, dict) or "question" not in data:
            raise ValueError(
                'an MAE instance is {"question": str, optional "answer", "kind", "tests", '
                '"entry_point", "use_reference": bool (default True), "solve": the solver '
                "phase's pool item (a dict like this one without use_reference; default: the "
                "reference item)}"
            )
        check_size(data, "the MAE instance")
        check_tests(data.get("tests"))
        if isinstance(data.get("solve"), dict):
            check_tests(data["solve"].get("tests"))
        d = dict(data)
        use_reference = d.pop("use_reference", True)
        if not isinstance(use_reference, bool):
            raise ValueError("use_reference must be a bool")
        solve = d.pop("solve", None)
        if solve is not None and not isinstance(solve, PoolItem | dict):
            raise ValueError("'solve' must be a PoolItem or its dict")
        if isinstance(solve, dict):
            solve = PoolItem.from_dict(solve)
        return MaeInstance(PoolItem.from_dict(d), use_reference, solve)

    def _reset_state(self, instance: MaeInstance) -> None:
        self.state = _State()

    def _next_agent(self, agent: str) -> str:
        return self.state.next_agent

    def _horizon_reached(self) -> bool:
        return False

    # ------------------------------------------------------------------ acting
    def _pending(self, role: str, why: str) -> RewardParts:
        return RewardParts.build(
            role, {}, self.config.rewards, coefficients={}, reasons={"pending": why}
        )

    def _act(self, agent: str, completion: str) -> RewardParts:
        st = self.state
        expected = {
            "propose": "proposer",
            "judge_question": "judge",
            "solve": "solver",
            "solve_pool": "solver",
        }
        phase = st.phase
        if expected.get(phase, "judge") != agent:  # cannot happen through the AEC API
            raise RuntimeError(f"{agent!r} acted in phase {phase!r}")
        if phase == "propose":
            return self._act_proposer(completion)
        if phase == "judge_question":
            return self._act_judge_question(completion)
        if phase == "solve":
            return self._act_solver(completion)
        if phase == "solve_pool":
            return self._act_task_solver(completion)
        if phase == "judge_pool":
            return self._act_task_judge(completion)
        if phase == "judge_pair":
            return self._act_pair_judge(completion)
        return self._act_judge_answer(completion)

    def _act_proposer(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        blocks = find_tags(text, "question")
        usable = [b for b in blocks if b]
        why = ""
        if not usable:
            why = extract_tag(text, "question").reason or "no <question> block"
        elif len(usable[-1]) > cfg.max_question_chars:
            why = f"the question is longer than {cfg.max_question_chars} characters"
        st.proposer_step = self.num_steps
        st.last_info = {"phase": "propose"}
        if why:
            st.proposer_reward = 0.0
            st.last_info["question_ok"] = False
            self._end_proposer_phase()
            zero = {"quality": 0.0, "difficulty": 0.0, "format": 0.0}
            return RewardParts.build("proposer", zero, cfg.rewards, reasons={"format": why})
        st.question = usable[-1]
        st.proposer_format = 1.0 if len(blocks) == 1 else 0.0
        st.phase, st.next_agent = "judge_question", "judge"
        st.last_info["question_ok"] = True
        return self._pending("proposer", "awarded after the judge scores the question/answers")

    def _act_judge_question(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        raw, fmt, why = judge_score(text)
        st.question_score = raw
        st.quality = mae_norm(st.question_score)
        st.accepted = st.quality >= cfg.quality_threshold - _EPS
        st.last_info = {
            "phase": "judge_question",
            "score": st.question_score,
            "quality": st.quality,
            "accepted": st.accepted,
        }
        if not st.accepted:
            self._award_proposer()
        if st.accepted or cfg.solve_filtered:
            st.phase, st.next_agent = "solve", "solver"
        else:
            self._end_proposer_phase()
        if not cfg.train_question_judge:
            st.last_info["format"] = fmt
            return self._untrained("judge", f"a question rating (format {fmt:g}: {why})")
        return RewardParts.build("judge", {"format": fmt}, cfg.rewards, reasons={"format": why})

    def _untrained(self, role: str, why: str) -> RewardParts:
        """A step that is not a training sample (the difficulty samples of MAE 4.1 by default):
        ``infos["trainable"] = False``, reward 0."""
        self.mark_untrainable(why)
        return RewardParts.build(
            role, {}, self.config.rewards, coefficients={}, reasons={"untrained": why}
        )

    def _act_solver(self, text: str) -> RewardParts:
        st = self.state
        fmt_ok = extract_tag(text, "answer").ok
        st.answers.append(text)
        st.answer_formats.append(1.0 if fmt_ok else 0.0)
        st.answer_steps.append(self.num_steps)
        st.last_info = {"phase": "solve", "answer_index": len(st.answers) - 1, "format": fmt_ok}
        if len(st.answers) >= self.config.num_answers:
            st.phase, st.next_agent = "judge_answer", "judge"
        if not self.config.train_difficulty:
            return self._untrained("solver", "a difficulty sample for the proposer's reward")
        return self._pending("solver", "awarded when the judge scores this answer")

    def _answer_parts(self, raw: float | None, why: str, fmt: float) -> RewardParts:
        return RewardParts.build(
            "solver",
            {"judge": mae_norm(raw), "format": fmt},
            self.config.rewards,
            reasons={"judge": f"judge score {raw:g}" if raw is not None else f"{why}: 0.5"},
        )

    def _act_judge_answer(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        i = len(st.scores)
        raw, fmt, why = judge_score(text)
        st.scores.append(mae_norm(raw))
        st.last_info = {"phase": "judge_answer", "answer_index": i, "score": raw}
        if cfg.train_difficulty:
            self.award(
                "solver", self._answer_parts(raw, why, st.answer_formats[i]), st.answer_steps[i]
            )
        if len(st.scores) >= cfg.num_answers:
            st.difficulty = 1.0 - float(np.mean(st.scores))
            if st.accepted:
                self._award_proposer()
            self._end_proposer_phase()
        if not cfg.train_difficulty:
            st.last_info["format"] = fmt
            return self._untrained("judge", f"scores a difficulty sample (format {fmt:g}: {why})")
        return RewardParts.build("judge", {"format": fmt}, cfg.rewards, reasons={"format": why})

    def _end_proposer_phase(self) -> None:
        """After the proposer phase (MAE 4.4 (1)): the solver phase on a pool question, or the
        end of the episode."""
        st = self.state
        if self.config.solver_phase:
            st.phase, st.next_agent = "solve_pool", "solver"
        else:
            st.phase, st.next_agent = "done", "proposer"
            self._finish()

    def _act_task_solver(self, text: str) -> RewardParts:
        st = self.state
        st.task_answer = text
        st.task_format = 1.0 if extract_tag(text, "answer").ok else 0.0
        st.task_step = self.num_steps
        st.last_info = {"phase": "solve_pool"}
        st.phase, st.next_agent = "judge_pool", "judge"
        return self._pending("solver", "awarded when the judge scores this answer")

    def _act_task_judge(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        raw, fmt, why = judge_score(text)
        st.task_score = mae_norm(raw)
        st.last_info = {"phase": "judge_pool", "score": raw}
        self.award("solver", self._answer_parts(raw, why, st.task_format), st.task_step)
        if cfg.judge_data == "episode":
            st.phase, st.next_agent = "done", "proposer"
            self._finish()
            return RewardParts.build("judge", {"format": fmt}, cfg.rewards, reasons={"format": why})
        task = self.instance.task
        self.pool.add_pair(task.question, clip_text(st.task_answer or "", 20_000), task)
        rng = np.random.default_rng(int(stable_hash([self.instance_id, self.num_steps])[:15], 16))
        st.pair = self.pool.sample_pair(rng, task.split)
        st.phase, st.next_agent = "judge_pair", "judge"
        st.last_info["format"] = fmt
        return self._untrained("judge", f"scores the solver's answer (format {fmt:g}: {why})")

    def _act_pair_judge(self, text: str) -> RewardParts:
        """MAE 4.4 (3): the judge rates a pair of the pair dataset; format reward only."""
        st, cfg = self.state, self.config
        raw, fmt, why = judge_score(text)
        st.last_info = {"phase": "judge_pair", "score": raw}
        st.phase, st.next_agent = "done", "proposer"
        self._finish()
        return RewardParts.build("judge", {"format": fmt}, cfg.rewards, reasons={"format": why})

    def _award_proposer(self) -> None:
        st, rw = self.state, self.config.rewards
        comps = {"quality": st.quality or 0.0, "format": st.proposer_format}
        coefs = {"quality": rw.proposer_quality, "format": rw.proposer_format}
        reasons = {"quality": f"judge score {st.question_score}"}
        if st.accepted:
            comps["difficulty"] = float(st.difficulty or 0.0)
            coefs["difficulty"] = rw.proposer_difficulty
        else:
            reasons["difficulty"] = "dropped: quality below the threshold (filtered)"
        parts = RewardParts.build("proposer", comps, rw, coefficients=coefs, reasons=reasons)
        st.proposer_reward = parts.reward
        self.award("proposer", parts, st.proposer_step)

    def _finish(self) -> None:
        st, inst = self.state, self.instance
        if st.accepted and self.config.add_to_pool and st.question is not None:
            meta = {
                "quality": st.quality,
                "difficulty": st.difficulty,
                "reference": inst.item.key if inst.use_reference else None,
            }
            item = PoolItem(
                st.question,
                kind="text",
                source="propose_solve_judge",
                origin="generated",
                metadata=meta,
            )
            st.pool_added = self.pool.add(item)
        # The round succeeds when it produced a question good enough for the pool.
        self.success = bool(st.accepted)
        self.end_episode()

    def _step_info(self, agent: str) -> dict[str, Any]:
        info = dict(self.state.last_info)
        if self.state.phase == "done":
            info.update(
                pool_added=self.state.pool_added, proposer_reward=self.state.proposer_reward
            )
        return info

    # ------------------------------------------------------------------ prompts
    def _clip(self, text: str) -> str:
        return clip_text(text, self.config.max_shown_chars)

    def _shown(self, text: str) -> str:
        ext = extract_tag(text, "answer", unique=False)
        return self._clip(ext.value if ext.ok else text)

    def _prompt(self, agent: str) -> str:
        st = self.state
        if agent != st.next_agent or st.phase == "done":
            return f"You are the {agent} in a propose-solve-judge game. " + (
                "The round is over." if st.phase == "done" else "It is not your turn yet."
            )
        if st.phase == "propose":
            return self._proposer_prompt()
        on_task = st.phase in ("solve_pool", "judge_pool")
        q = self._clip(self.instance.task.question if on_task else st.question or "")
        if st.phase in ("solve", "solve_pool"):
            return (
                "You are the Solver. Answer the question below as well as you can.\n\n"
                f"Question:\n{q}\n\n"
                "Work through it step by step, then write your final answer inside "
                "<answer></answer> (for a programming task: a complete Python program in a "
                "```python block inside the tags)."
            )
        if st.phase == "judge_question":
            return (
                "You are the Judge. Rate the quality of the question below from 1 to 10.\n\n"
                f"Question:\n{q}\n\n"
                f"Guide: {QUESTION_RUBRIC}\n"
                "Explain briefly inside <think></think>, then give only the number inside "
                "<score></score>."
            )
        if st.phase == "judge_pair" and st.pair is not None:
            q, answer = self._clip(st.pair["question"]), st.pair["answer"]
        else:
            answer = st.task_answer if on_task else st.answers[len(st.scores)]
        return (
            "You are the Judge. Rate the answer below from 1 to 10. Correctness comes first.\n\n"
            f"Question:\n{q}\n\nAnswer:\n{self._shown(answer or '')}\n\n"
            "Guide: any factual, logical or calculation error: 1-3; correct but with small "
            "omissions or formatting problems: 4-7; correct, complete and following the "
            "question's instructions: 8-10.\n"
            "Check the answer yourself inside <think></think>, then give only the number inside "
            "<score></score>."
        )

    def _proposer_prompt(self) -> str:
        inst = self.instance
        head = (
            "You are the Proposer in a self-play game with a Solver and a Judge. Write one new "
            "question that is self-contained, clearly worded, has a single well-defined answer, "
            "and is hard enough to challenge a strong solver. The Judge rewards clarity and "
            "solvability; you also earn more when the Solver's answers are judged poor.\n\n"
        )
        if inst.use_reference:
            ref = self._clip(inst.item.question)
            head += (
                "Reference question (for topic and style; write a different question, do not "
                f"copy it):\n{ref}\n\n"
            )
        else:
            head += (
                "Choose any topic: mathematics, programming, science, logic or general "
                "knowledge.\n\n"
            )
        return head + (
            "You may think first. Then write the question alone, without its answer, inside "
            "<question></question>."
        )

    def _render_text(self) -> str:
        st, inst = self.state, self.instance
        lines = [
            f"propose_solve_judge  phase={st.phase}  reference="
            + ("shown" if inst.use_reference else "hidden"),
            f"reference: {clip_text(inst.item.question, 200)}",
        ]
        if st.question is not None:
            lines.append(f"question: {clip_text(st.question, 200)}")
            lines.append(f"quality: {st.quality}  accepted: {st.accepted}")
        if st.scores:
            lines.append("answer scores: " + ", ".join(f"{s:.2f}" for s in st.scores))
        if st.difficulty is not None:
            lines.append(f"difficulty: {st.difficulty:.3f}")
        if st.phase in ("solve_pool", "judge_pool") or st.task_step >= 0:
            lines.append(f"solver phase: {clip_text(inst.task.question, 200)}")
        if st.task_score is not None:
            lines.append(f"solver-phase answer score: {st.task_score:.3f}")
        if st.proposer_reward is not None:
            lines.append(f"proposer reward: {st.proposer_reward:.3f}")
        lines.append(f"pool: {len(self.pool)} questions")
        return "\n".join(lines)

    # ------------------------------------------------------------------ oracle
    def _question_is_reference(self) -> bool:
        q = self.state.question
        return q is not None and canonical_text(q) == canonical_text(self.instance.item.question)

    def _known_item(self) -> PoolItem | None:
        """The item whose reference answer applies to the question in front of the solver or
        the judge now: the solver phase's pool question, or the proposed question when it
        restates the reference; ``None`` when its answer is unknown."""
        st, inst = self.state, self.instance
        if st.phase == "judge_pair":
            item = st.pair["item"] if st.pair is not None else None
            return item if item is not None and (item.answer or item.tests) else None
        if st.phase in ("solve_pool", "judge_pool"):
            item = inst.task
        elif self._question_is_reference():
            item = inst.item
        else:
            return None
        return item if (item.answer or item.tests) else None

    def oracle(self, agent: str) -> str:
        st, item = self.state, self.instance.item
        if agent == "proposer":
            return (
                "<think>I restate a known good question.</think>\n"
                f"<question>{item.question}</question>"
            )
        known = self._known_item()
        if agent == "solver":
            if known is None or known.answer is None:
                return "<answer>I do not know.</answer>"
            if known.kind == "code":
                return f"<answer>\n```python\n{known.answer}\n```\n</answer>"
            return f"<answer>{known.answer}</answer>"
        if agent != "judge":
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        if st.phase not in ("judge_answer", "judge_pool", "judge_pair"):
            score = 9 if self._question_is_reference() else 5
            return f"<think>Scripted rating.</think>\n<score>{score}</score>"
        if known is None:
            return "<think>The reference answer is unknown.</think>\n<score>5</score>"
        if st.phase == "judge_pair":
            answer = st.pair["answer"] if st.pair is not None else ""
        else:
            answer = st.task_answer if st.phase == "judge_pool" else st.answers[len(st.scores)]
        ext = extract_tag(answer or "", "answer", unique=False)
        v = verify_answer(
            known, ext.value, sandbox=self._sandbox, timeout_s=self.config.test_timeout_s
        )
        score = round(1 + 9 * v.score)
        return f"<think>Checked against the reference: {v.reason}.</think>\n<score>{score}</score>"


def env(**kwargs: Any):
    """The wrapped propose-solve-judge AEC env (``envs.make("propose_solve_judge", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
