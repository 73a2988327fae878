"""Propose-solve-judge: Multi-Agent Evolve (MAE), one self-play round per episode.

=================  ==========================================================
id (alias)         ``propose_solve_judge`` (``mae``)
agents             ``proposer``, ``solver``, ``judge``
actions            completion text (``str``)
observations       ``{"prompt": str}``
episode            proposer, judge (question), solver x N, judge x N; at most 2 + 2N steps
render modes       ``human``, ``ansi``
=================  ==========================================================

One backbone plays three roles (MAE Section 4). Each episode:

1. **proposer** writes a new question inside ``<question>...</question>``. With probability
   ``reference_prob`` (default 0.5, MAE's best "half reference" setting, Section 5) it is shown a
   reference question drawn from the pool, *without* its answer; otherwise it writes from
   scratch.
2. **judge** rates the question 1-10 inside ``<score>`` (clarity, well-posedness, solvability,
   challenge); ``quality = (s - 1) / 9`` clipped to [0, 1], 0.5 when unparsable.
3. **solver** answers the question ``num_answers`` times (N = 5, MAE Table 3 "N samples to
   estimate difficulty"), each inside ``<answer>...</answer>``. The N prompts are identical; the
   solver does not see its earlier answers.
4. **judge** rates each answer 1-10 (correctness first: any error 1-3, correct with small gaps
   4-7, flawless 8-10), in answer order; ``s_i = (s - 1) / 9`` clipped, 0.5 when unparsable.

Schedule: the N answers come first, then the N judgements (MAE Section 4.4 has a solver phase
followed by a judge phase). The judge sees the content of the solver's ``<answer>`` block, or the
whole (clipped) response when there is none.

Rewards (``mixing="none"``: the reward is the weighted sum of the components, the papers'
formulas; every weight is a field of :class:`MaeRewards`):

- proposer: ``(quality + difficulty + format) / 3`` with ``difficulty = 1 - mean(s_1..s_N)`` and
  ``format`` = 1 when exactly one non-empty ``<question>`` block exists (MAE: "presence and
  uniqueness"), else 0. When ``quality < quality_threshold`` (0.7) the question is *filtered*:
  it does not enter the pool and the difficulty term is dropped: ``quality/3 + format/3``
  (as in the public MAE code). With several ``<question>`` blocks the last one is used (format
  0). No usable ``<question>`` block (missing, empty, unclosed, or longer than
  ``max_question_chars``) gives the proposer 0 and **ends the episode**: there is nothing to
  judge or solve, so solver and judge do not act.
- solver: ``0.5 * s_i + 0.5 * format`` (format = exactly one non-empty ``<answer>`` block).
- judge: ``format`` only: 1 when its output has exactly one ``<score>`` block holding a number
  in [1, 10], else 0 (a second score block, a missing block or prose make the score unparsable,
  so it also counts 0.5 for the agent being judged).

Delayed rewards. The proposer's and the solver's rewards depend on later judge steps: their own
steps return 0 (``reward_parts`` with no components and a ``pending`` reason) and the final
reward arrives through ``award()`` (``last_awards``, ``infos[agent]["reward_parts"]["for_step"]``)
in the judge step that settles it: the solver's answer i when the judge scores it, the
proposer's when the last answer is judged, or right after the question is judged when it is
filtered. Cumulative rewards equal the final rewards. Rollout engines should use parallel
sampling (or attach awards) for this setting.

Filtered questions. By default (``solve_filtered=False``) the episode ends after the judge scores
a filtered question: its difficulty would be dropped anyway, and MAE's solver trains on questions
from the valid set (Section 4.4, "The Solver samples from the valid dataset"). With
``solve_filtered=True`` the solver and the judge still answer and score it (their rewards as
above; the proposer's reward stays ``quality/3 + format/3``).

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
answer to a question with a known reference 10 when the verifier accepts it (math-verify/NumEq,
code tests, exact text) and 1 otherwise (code: ``1 + 9 * pass rate``), and 5 when the answer is
unknown; the solver answers with the known reference (or says it does not know).

Config (:class:`MaeConfig`): ``num_answers`` (5), ``reference_prob`` (0.5),
``quality_threshold`` (0.7), ``solve_filtered`` (False), ``add_to_pool`` (True),
``seed_sources`` (:data:`envs.pools.OFFLINE_SEEDS`), ``max_question_chars`` (4000),
``max_shown_chars`` (4000, how much of a question/answer other roles see), ``test_timeout_s``
(5.0, oracle code grading), ``rewards`` (:class:`MaeRewards`). ``max_turns`` is not used (an
episode is one round). ``mode="single"`` is not supported.

Version history: v0 (initial).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from envs.core.base import TurnBasedEnv, wrap
from envs.core.config import EnvConfig, Mixing, RewardConfig
from envs.core.rewards import RewardParts
from envs.data.splits import canonical_text
from envs.pools import OFFLINE_SEEDS, PoolItem, QuestionPool, SharedPoolMixin, verify_answer
from verifiers.extract import clip_text
from verifiers.formats import extract_tag, find_tags
from verifiers.judge import mae_norm, parse_score

__all__ = ["MaeConfig", "MaeInstance", "MaeRewards", "env", "raw_env", "judge_score"]

_EPS = 1e-9


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
        if self.max_question_chars < 1 or self.max_shown_chars < 100:
            raise ValueError("max_question_chars must be >= 1 and max_shown_chars >= 100")
        if isinstance(self.seed_sources, str):
            raise ValueError("seed_sources must be a tuple of spec strings, not one string")
        object.__setattr__(self, "seed_sources", tuple(self.seed_sources))


@dataclass(frozen=True)
class MaeInstance:
    """The reference item of an episode and whether the proposer sees it."""

    item: PoolItem
    use_reference: bool

    def key(self) -> str:
        return canonical_text(self.item.question)


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
    proposer_reward: float | None = None
    pool_added: bool | None = None
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
    AGENTS = ("proposer", "solver", "judge")
    DELAYED_REWARDS = True  # the proposer's and solver's rewards arrive by award()
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
        return MaeInstance(item, bool(rng.random() < self.config.reference_prob))

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
                '"entry_point", "use_reference": bool (default True)}'
            )
        d = dict(data)
        use_reference = d.pop("use_reference", True)
        if not isinstance(use_reference, bool):
            raise ValueError("use_reference must be a bool")
        return MaeInstance(PoolItem.from_dict(d), use_reference)

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
        expected = {"propose": "proposer", "judge_question": "judge", "solve": "solver"}
        phase = st.phase
        if expected.get(phase, "judge") != agent:  # cannot happen through the AEC API
            raise RuntimeError(f"{agent!r} acted in phase {phase!r}")
        if phase == "propose":
            return self._act_proposer(completion)
        if phase == "judge_question":
            return self._act_judge_question(completion)
        if phase == "solve":
            return self._act_solver(completion)
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
            st.phase, st.next_agent = "done", "solver"
            st.proposer_reward = 0.0
            st.last_info["question_ok"] = False
            self.end_episode()
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
            if not cfg.solve_filtered:
                st.phase, st.next_agent = "done", "proposer"
                self._finish()
        if st.phase != "done":
            st.phase, st.next_agent = "solve", "solver"
        return RewardParts.build("judge", {"format": fmt}, cfg.rewards, reasons={"format": why})

    def _act_solver(self, text: str) -> RewardParts:
        st = self.state
        fmt_ok = extract_tag(text, "answer").ok
        st.answers.append(text)
        st.answer_formats.append(1.0 if fmt_ok else 0.0)
        st.answer_steps.append(self.num_steps)
        st.last_info = {"phase": "solve", "answer_index": len(st.answers) - 1}
        if len(st.answers) >= self.config.num_answers:
            st.phase, st.next_agent = "judge_answer", "judge"
        return self._pending("solver", "awarded when the judge scores this answer")

    def _act_judge_answer(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        i = len(st.scores)
        raw, fmt, why = judge_score(text)
        s = mae_norm(raw)
        st.scores.append(s)
        st.last_info = {"phase": "judge_answer", "answer_index": i, "score": raw}
        solver_parts = RewardParts.build(
            "solver",
            {"judge": s, "format": st.answer_formats[i]},
            cfg.rewards,
            reasons={"judge": f"judge score {raw:g}" if raw is not None else f"{why}: 0.5"},
        )
        self.award("solver", solver_parts, st.answer_steps[i])
        if len(st.scores) >= cfg.num_answers:
            st.difficulty = 1.0 - float(np.mean(st.scores))
            if st.accepted:
                self._award_proposer()
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

    def _shown_answer(self, i: int) -> str:
        text = self.state.answers[i]
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
        q = self._clip(st.question or "")
        if st.phase == "solve":
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
                "Guide: 1-3 ill-posed (ambiguous, missing information, unanswerable, not a "
                "question, or it gives away its own answer); 4-6 answerable but vague, trivial "
                "or badly worded; 7-8 clear, self-contained and solvable; 9-10 clear, "
                "self-contained, solvable and genuinely challenging.\n"
                "Explain briefly inside <think></think>, then give only the number inside "
                "<score></score>."
            )
        i = len(st.scores)
        return (
            "You are the Judge. Rate the answer below from 1 to 10. Correctness comes first.\n\n"
            f"Question:\n{q}\n\nAnswer:\n{self._shown_answer(i)}\n\n"
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
        if st.proposer_reward is not None:
            lines.append(f"proposer reward: {st.proposer_reward:.3f}")
        lines.append(f"pool: {len(self.pool)} questions")
        return "\n".join(lines)

    # ------------------------------------------------------------------ oracle
    def _question_is_reference(self) -> bool:
        q = self.state.question
        return q is not None and canonical_text(q) == canonical_text(self.instance.item.question)

    def oracle(self, agent: str) -> str:
        st, item = self.state, self.instance.item
        if agent == "proposer":
            return f"<think>I restate a known good question.</think>\n<question>{item.question}</question>"
        known = self._question_is_reference() and (item.answer or item.tests)
        if agent == "solver":
            if not known or item.answer is None:
                return "<answer>I do not know.</answer>"
            if item.kind == "code":
                return f"<answer>\n```python\n{item.answer}\n```\n</answer>"
            return f"<answer>{item.answer}</answer>"
        if agent != "judge":
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        if st.phase != "judge_answer":
            score = 9 if self._question_is_reference() else 5
            return f"<think>Scripted rating.</think>\n<score>{score}</score>"
        if not known:
            return "<think>The reference answer is unknown.</think>\n<score>5</score>"
        ext = extract_tag(st.answers[len(st.scores)], "answer", unique=False)
        v = verify_answer(
            item, ext.value, sandbox=self._sandbox, timeout_s=self.config.test_timeout_s
        )
        score = round(1 + 9 * v.score)
        return f"<think>Checked against the reference: {v.reason}.</think>\n<score>{score}</score>"


def env(**kwargs: Any):
    """The wrapped propose-solve-judge AEC env (``envs.make("propose_solve_judge", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
