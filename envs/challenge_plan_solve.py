"""Challenge-plan-solve with a critic: SAGE, one self-evolution round per episode.

=================  ==========================================================
id (alias)         ``challenge_plan_solve`` (``sage``)
agents             ``challenger``, ``planner``, ``solver``, ``critic``
                   (``planning=False``: no ``planner``)
actions            completion text (``str``)
observations       ``{"prompt": str}``
episode            challenger, critic, solver x N_s (difficulty, not trained), planner,
                   critic, solver
render modes       ``human``, ``ansi``
=================  ==========================================================

Four roles share one backbone (SAGE Section 4, Algorithm 1). An episode's instance
(:class:`SageInstance`) is two items of the question pool, drawn independently (Algorithm 1
line 5 and line 16, each ``(q, v) ~ D``): the challenger's reference item ``(q_ref, v_ref)`` and
the plan-solve item; each is a math question with its reference answer, or a programming task
with assert tests and a reference program. Each episode runs both phases of Algorithm 1:

Challenge phase.

1. **challenger** sees the reference item (question and verifier) and writes a new question of
   the same kind with its verifier: math ``<question>`` + ``<answer>`` (the exact final answer);
   code ``<question>`` + ``<tests>`` (Python asserts calling the function) + ``<solution>`` (a
   reference program). The verifier is *valid* when (math) the answer is one short line that
   math-verify parses and that is not prose, or (code) the tests compile, contain at least one
   assert, and the challenger's own reference program passes all of them in the sandbox (SAGE
   4.2: "parsable and executable for code tests"; tests alone cannot be executed without a
   program).
2. **critic** rates the question 1-10 in ``<score>``: ``s_q = Norm(s)``.
3. If ``s_q >= alpha`` (0.7) and the verifier is valid, **solver** answers the new question
   ``num_samples`` times (N_s, default 4; the paper does not give its value) without a plan; each
   answer is graded by the external verifier, ``s_gt_j`` in [0, 1] (math 0/1, code pass rate),
   and ``r_d = 1 - mean_j s_gt_j``. Otherwise these samples are skipped: the difficulty would
   be suppressed anyway (Eq. 6), so sampling them (Algorithm 1 line 8) only costs time.
   These N_s samples exist only for ``r_d`` (Algorithm 1 lines 8-9; the solver is trained on
   ``r_s`` of line 25, the plan-solve answer): by default (``train_difficulty=False``) their
   infos say ``trainable: False`` and they return reward 0 (``s_gt`` and ``r_f`` stay in their
   infos). ``train_difficulty=True`` trains them with ``0.5 s_gt + 0.5 r_f`` (this module's v0).

Plan-solve phase (Algorithm 1 lines 16-25), on the plan-solve item: drawn from the pool at reset
independently of the reference (line 16), from the same split (the question accepted in this
round joins the pool only at the end of the episode, so it is not drawn in its own round).
``plan_source="reference"`` uses the challenger's reference item instead (this module's v0),
``"accepted"`` the new question when it was accepted (else the drawn item):

4. **planner** writes a plan in ``<plan>...</plan>``; 5. **critic** rates it: ``s_p = Norm(s)``;
6. **solver** answers, seeing the plan only if ``s_p >= beta`` (0.3); graded by the verifier
   (``s_gt``), never by the critic. A planner output without a usable ``<plan>`` block is still
   a plan for Eqs. 6-8 (the critic scores the plan, ``s_p = Norm(score)``); the tags only enter
   the format score. So by default (``untagged_plan="critic"``) the whole (clipped) output goes
   to the critic as the plan, and only ``r_f`` loses the tag: hand case, a critic score of 5
   gives ``s_p = 4/9 = 0.444``, ``r_p = 0.5 * 0.444 + 0.5 * 0 = 0.222``, and the plan passes the
   gate (0.444 >= 0.3). An empty output has nothing to score: ``s_p = 0``, no critic step.
   ``untagged_plan="zero"`` keeps the earlier reading (no tags: ``s_p = 0``, no critic step,
   the solver answers alone).

``Norm(s)`` (SAGE Eq. 2): ``s`` on [0, 1], ``(s - 1) / 9`` on (1, 10], 0.5 otherwise (also when
no score parses). As written, ``Norm(1) = 1``: a critic that writes 1, the lowest mark of the
1-10 scale it is asked for (4.1: "scores typically on a 1-10 scale"), would give top marks, and
such a question would pass alpha and enter the pool. The paper contradicts itself here, so the
default (``critic_norm="scale"``) reads a score of exactly 1 as the bottom of the scale:
``Norm(1) = 0``, otherwise Eq. 2 (``s`` on [0, 1), ``(s - 1) / 9`` on [1, 10]).
``critic_norm="sage"`` is Eq. 2 literally (``Norm(1) = 1``); ``"linear"`` uses ``(s - 1) / 9``
clipped to [0, 1] (MAE's normalisation: also maps 0.8 to 0).
Thresholds compare with a 1e-9 tolerance (an integer score of 8 passes alpha, 7 does not).

Rewards (``mixing="none"``: the weighted sum of components; weights in :class:`SageRewards`):

- challenger, by the two conditions of SAGE 4.2 (Algorithm 1 line 10):

  ================================  ===========================================================
  verifier valid, ``s_q >= alpha``  ``(s_q + r_d + r_f) / 3`` (Eq. 5); the question enters the
                                    pool
  verifier valid, ``s_q < alpha``   ``(s_q + r_f) / 2`` (Eq. 6, weights ``filtered_*``)
  verifier not valid                ``(s_q + 0 + r_f) / 3``: Eq. 5 with ``r_d = 0``
  ================================  ===========================================================

  No usable ``<question>`` block (missing, empty, unclosed) is a challenge without a valid
  verifier: ``s_q = 0`` and no critic step; a question longer than ``max_question_chars`` also
  has ``r_f = 0``.

  Eq. 6 covers ``s_q < alpha`` only (the paper suppresses the difficulty "to avoid rewarding
  'hard' but ill-posed tasks"). Validity is decided by what the challenger itself writes, so
  paying an invalid verifier Eq. 6's rate would make spoiling one's own verifier a strategy: a
  question rated 9 earns ``(8/9 + 1) / 2 = 0.944`` with a prose word beside its answer against
  ``(8/9 + 0 + 1) / 3 = 0.630`` for the same question with a valid verifier that the solver
  answers correctly. An invalid verifier therefore gets nothing for the verifier-dependent term
  and never more than the valid twin of the same challenge (``tests/envs/test_monotonicity.py``).
  The paper's own formula is not monotone in ``s_q`` across alpha: a valid question just under
  it with perfect format earns ``(6/9 + 1) / 2 = 0.833``, one just over it that the solver
  answers correctly ``(7/9 + 0 + 1) / 3 = 0.593``. The critic (another role) decides ``s_q``,
  not the challenger, so the default keeps Eq. 6 as written (``below_alpha="eq6"``);
  ``below_alpha="eq5"`` pays a question under alpha Eq. 5 with ``r_d = 0`` too, which makes the
  challenger's reward non-decreasing in ``s_q``.
- planner: ``0.5 s_p + 0.5 r_f``.
- solver (final answer): ``0.2 s~_p + 0.6 s_gt + 0.2 r_f`` with ``s~_p = s_p`` when the plan
  passed the gate, else 0; with ``planning=False``: ``0.5 s_gt + 0.5 r_f`` (weights ``noplan_*``).
  Difficulty samples (step 3) are not trained by default (see above); with
  ``train_difficulty=True`` they get ``0.5 s_gt + 0.5 r_f``. Their ``infos`` say
  ``phase="difficulty"``.
- critic: ``r_f`` of its output (``<score>``); a score block without a number counts 0.

Reward audit (conditions the rewarded policy controls):

- challenger: its question block (none: no critic step, s_q = 0, and no verifier) and its
  verifier's validity (see the table above: an invalid verifier is paid Eq. 5 with r_d = 0, never
  more than the same challenge with a valid verifier). A math reference is valid only when a
  correct answer can match it: in canonical form, its own canonical value grading as correct
  against it under the solver's grader (:func:`verifiers.math_answer.reference_form`; ``221,``
  and ``2 21`` parse, and the solver's correct ``221`` grades wrong against them). A code
  reference is valid when it passes its own tests and every test calls only the entry point the
  question names and is decided on the host over the program's results
  (:func:`envs.pools.unfair_tests`; a test run as a job of its own could use randomness or the
  machine's state to pass the reference's run and fail the solvers'). An invalid challenge never
  enters the pool. ``s_q`` itself is the critic's score, another role's output.
- planner: its ``<plan>`` tags (r_f); an untagged plan still goes to the critic by default. The
  gate beta is decided by the critic's score.
- solver: its ``<answer>`` block (without one nothing is graded); correctness comes from the
  verifier, never from the critic.
- critic: its ``<score>`` format (a block without a number counts 0).

``tests/envs/test_monotonicity.py`` checks that no spoiled completion earns more than its honest
twin, and ``tests/redteam`` (rows 4A, 4B) the spoiled verifiers by their whole reward.

``r_f`` is SAGE's soft format score (4.1) over the role's required tags (challenger: see above;
planner ``plan``; solver ``answer``; critic ``score``): per tag 1 when present once and non-empty,
``duplicate_credit`` (0.5) when repeated, 0 when missing, empty or unclosed, averaged; an empty
output scores ``empty_format_score`` (0.5). Answers are read from the last ``<answer>`` block
only (an answer outside the tags is not graded); for code, a fenced block inside it is used.

Delayed rewards: the challenger's reward is known after the critic (filtered) or the last
difficulty sample; the planner's after the critic scores its plan. Their own steps return 0
(``reward_parts`` with a ``pending`` reason) and the final reward arrives by ``award()``.

The question pool (:class:`envs.pools.QuestionPool`): instances are drawn from it (only items
with a verifier; an instance's split is the hash of its reference question, and its plan-solve
item comes from the same split), and at the end of an episode an accepted
question (``s_q >= alpha`` and valid verifier) is added with its verifier (``add_to_pool``),
de-duplicated by normalised text, with ``s_q`` and ``r_d`` in ``metadata``. Share one pool per
run: ``raw_env.create_shared(**config)`` returns ``{"pool": QuestionPool}`` for
``envs.make("sage", pool=...)``; ``clone()`` shares it; whichever copy of an episode finishes adds
its question, and the last step (the final answer) cannot change acceptance, so the candidates of
a tree-sampled last step add the same question once.

Oracle: the challenger re-emits the reference item (so the pool does not grow); the critic gives
9 to a question whose verifier is valid and 2 otherwise, and 8 to a plan; the planner writes
numbered steps (from the item's worked solution when it has one); the solver answers with the
known reference answer or program of the question in front of it.

Explicit instance: ``reset(options={"instance": {"question": ..., "kind": ..., "answer": ...,
"task": {...}}})``; ``task`` is the plan-solve item (default: the reference item itself).
Limits (:mod:`envs.core.explicit`): at most 1,000,000 characters of text in all, and per item
at most 256 tests, of which 20 assert tests holding 16,000 characters of code (as in the code
setting: the steps run and plan them all). Checking it then costs the host process a few
milliseconds; a larger one is refused with a ``ValueError`` saying which limit it broke.

Config (:class:`SageConfig`): ``num_samples`` (4), ``alpha`` (0.7), ``beta`` (0.3), ``planning``
(True), ``plan_source`` ("pool"), ``train_difficulty`` (False), ``add_to_pool`` (True),
``critic_norm`` ("scale"), ``below_alpha`` ("eq6"),
``duplicate_credit`` (0.5), ``empty_format_score`` (0.5), ``seed_sources``
(:data:`envs.pools.OFFLINE_SEEDS`), ``max_question_chars`` (4000), ``max_shown_chars`` (4000),
``max_tests`` (20), ``test_timeout_s`` (5.0), ``rewards``. ``max_turns`` is not used.

Version history: v0 (initial); v1 (the plan-solve item is an independent pool draw,
``plan_source="pool"``; difficulty samples are not training samples, ``train_difficulty``;
``Norm(1) = 0`` by default, ``critic_norm="scale"``); v2 (a plan without ``<plan>`` tags goes to
the critic, ``untagged_plan``); v3 (an invalid verifier is paid Eq. 5 with ``r_d = 0``, not
Eq. 6; ``below_alpha``; a math reference must be canonical and match its own value, a code
reference's tests must be decided on the host).
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
from envs.data.dataset_splits import canonical_text
from envs.pools import (
    OFFLINE_SEEDS,
    PoolItem,
    QuestionPool,
    SharedPoolMixin,
    assert_block,
    check_code_reference,
    check_math_reference,
    code_from_answer,
    first_function,
    verify_answer,
)
from verifiers.code_tests import TestCase
from verifiers.extract import clip_text
from verifiers.formats import check_format, find_tags
from verifiers.judge import mae_norm, parse_score, sage_norm
from verifiers.written_tests import split_assert_block

__all__ = ["SageConfig", "SageInstance", "SageRewards", "env", "raw_env"]

_EPS = 1e-9
_REQUIRED = {"math": ("question", "answer"), "code": ("question", "tests", "solution")}


@dataclass(frozen=True)
class SageRewards(RewardConfig):
    lam: float = 0.0
    mixing: Mixing = "none"
    challenger_quality: float = 1 / 3
    challenger_difficulty: float = 1 / 3
    challenger_format: float = 1 / 3
    filtered_quality: float = 0.5  # challenger with a valid verifier under alpha (Eq. 6)
    filtered_format: float = 0.5
    planner_plan: float = 0.5
    planner_format: float = 0.5
    solver_plan: float = 0.2
    solver_correct: float = 0.6
    solver_format: float = 0.2
    noplan_correct: float = 0.5  # solver without planning, and difficulty samples
    noplan_format: float = 0.5
    critic_format: float = 1.0
    roles: ClassVar[tuple[str, ...]] = (
        "challenger",
        "filtered",
        "planner",
        "solver",
        "noplan",
        "critic",
    )


@dataclass(frozen=True)
class SageConfig(EnvConfig):
    max_turns: int = 1
    num_samples: int = 4
    alpha: float = 0.7
    beta: float = 0.3
    planning: bool = True
    plan_source: Literal["pool", "reference", "accepted"] = "pool"
    untagged_plan: Literal["critic", "zero"] = "critic"
    train_difficulty: bool = False
    add_to_pool: bool = True
    critic_norm: Literal["scale", "sage", "linear"] = "scale"
    below_alpha: Literal["eq6", "eq5"] = "eq6"
    duplicate_credit: float = 0.5
    empty_format_score: float | None = 0.5
    seed_sources: tuple[str, ...] = OFFLINE_SEEDS
    max_question_chars: int = 4000
    max_shown_chars: int = 4000
    max_tests: int = 20
    test_timeout_s: float = 5.0
    rewards: SageRewards = field(default_factory=SageRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int):
            raise ValueError(f"num_samples must be an int, got {self.num_samples!r}")
        if not 1 <= self.num_samples <= 64:
            raise ValueError("num_samples must lie in [1, 64]")
        for name in ("alpha", "beta", "duplicate_credit"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1]")
        if self.empty_format_score is not None and not 0.0 <= self.empty_format_score <= 1.0:
            raise ValueError("empty_format_score must lie in [0, 1] or be None")
        if self.plan_source not in ("pool", "reference", "accepted"):
            raise ValueError("plan_source must be 'pool', 'reference' or 'accepted'")
        if self.untagged_plan not in ("critic", "zero"):
            raise ValueError("untagged_plan must be 'critic' or 'zero'")
        if self.below_alpha not in ("eq6", "eq5"):
            raise ValueError("below_alpha must be 'eq6' or 'eq5'")
        if self.critic_norm not in ("scale", "sage", "linear"):
            raise ValueError("critic_norm must be 'scale', 'sage' or 'linear'")
        if self.max_question_chars < 1 or self.max_shown_chars < 100 or self.max_tests < 1:
            raise ValueError("max_question_chars, max_tests >= 1 and max_shown_chars >= 100")
        if isinstance(self.seed_sources, str):
            raise ValueError("seed_sources must be a tuple of spec strings, not one string")
        object.__setattr__(self, "seed_sources", tuple(self.seed_sources))


@dataclass(frozen=True)
class SageInstance:
    """The challenger's reference item and the plan-solve item (Algorithm 1 lines 5 and 16:
    two independent draws from the pool, both from the split of the reference; ``task=None``:
    the reference item). The split and ``instance_id`` are those of the reference."""

    item: PoolItem
    task: PoolItem | None = None

    @property
    def plan_item(self) -> PoolItem:
        return self.task if self.task is not None else self.item


@dataclass
class _State:
    phase: str = (
        "challenge"  # challenge, critic_question, difficulty, plan, critic_plan, solve, done
    )
    challenger_step: int = -1
    challenger_rf: float = 0.0
    new_item: PoolItem | None = None
    valid: bool = False
    valid_reason: str = ""
    s_q: float | None = None
    eligible: bool = False
    accepted: bool = False
    gt_scores: list[float] = field(default_factory=list)
    r_d: float | None = None
    challenger_reward: float | None = None
    plan_item: PoolItem | None = None
    plan: str | None = None
    planner_step: int = -1
    planner_rf: float = 0.0
    s_p: float | None = None
    gate: bool = False
    s_gt: float | None = None
    pool_added: bool | None = None
    next_agent: str = "challenger"
    last_info: dict[str, Any] = field(default_factory=dict)


def _last_block(text: str, tag: str) -> str | None:
    usable = [b for b in find_tags(text, tag) if b]
    return usable[-1] if usable else None


class raw_env(SharedPoolMixin, TurnBasedEnv):
    """Challenge-plan-solve environment (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "challenge_plan_solve_v0",
        "is_parallelizable": False,
    }
    AGENTS = roles_of("challenge_plan_solve")
    config_cls = SageConfig
    config: SageConfig

    def __init__(
        self,
        config: SageConfig | None = None,
        *,
        render_mode: str | None = None,
        sandbox: Any = None,
        pool: QuestionPool | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, render_mode=render_mode, sandbox=sandbox, **overrides)
        if not self.config.planning:
            self.possible_agents = [a for a in self.possible_agents if a != "planner"]
            self.observation_spaces.pop("planner")
            self.action_spaces.pop("planner")
        self._init_pool(pool)
        self.state = _State()

    # ------------------------------------------------------------------ instances
    @staticmethod
    def _eligible(item: PoolItem) -> bool:
        return item.verifiable and item.kind in _REQUIRED

    def _sample_instance(self, split: str, seed: int) -> SageInstance:
        rng = np.random.default_rng(seed)
        item = self.pool.sample(rng, split, where=self._eligible)
        return SageInstance(item, self.pool.sample(rng, split, where=self._eligible))

    def _instance_key(self, instance: SageInstance) -> str:
        return canonical_text(instance.item.question)

    def _pool_item(self, data: Any) -> PoolItem:
        item = data if isinstance(data, PoolItem) else None
        if item is None:
            if not isinstance(data, dict) or "question" not in data:
                raise ValueError(
                    'a SAGE instance is a PoolItem or {"question": str, "kind": "math"|"code", '
                    '"answer": str (math: final answer; code: reference program), "tests": '
                    '[TestCase dicts] (code), ..., "task": the plan-solve item (a dict like '
                    "this one; default: the reference item)}"
                )
            check_tests(data.get("tests"))
            item = PoolItem.from_dict(data)
        if not self._eligible(item):
            raise ValueError(
                "a SAGE instance needs kind 'math' with an answer or 'code' with tests"
            )
        return item

    def _instance_from_dict(self, data: Any) -> SageInstance:
        if isinstance(data, SageInstance):
            return data
        task = None
        if isinstance(data, dict):
            check_size(data, "the SAGE instance")
        if isinstance(data, dict) and "task" in data:
            data = dict(data)
            task = self._pool_item(data.pop("task"))
        return SageInstance(self._pool_item(data), task)

    def _reset_state(self, instance: SageInstance) -> None:
        self.state = _State(plan_item=instance.plan_item)

    def _next_agent(self, agent: str) -> str:
        return self.state.next_agent

    def _horizon_reached(self) -> bool:
        return False

    # ------------------------------------------------------------------ scoring helpers
    def _rf(self, text: str, tags: tuple[str, ...]) -> float:
        cfg = self.config
        return check_format(
            text,
            tags,
            duplicate_credit=cfg.duplicate_credit,
            empty_output_score=cfg.empty_format_score,
        ).score

    def _critic(self, text: str) -> tuple[float, float, float | None, str]:
        """``(normalised score, r_f, raw score, reason)`` of a critic output."""
        rf = self._rf(text, ("score",))
        p = parse_score(text, fallback=False)
        why = p.reason
        if p.value is None and find_tags(text, "score"):
            rf = 0.0
        rule = self.config.critic_norm
        if rule == "linear":
            return mae_norm(p.value), rf, p.value, why
        return sage_norm(p.value, one_is_low=rule == "scale"), rf, p.value, why

    def _parts(
        self, role: str, comps: dict[str, float], weights: str, **reasons: str
    ) -> RewardParts:
        rw = self.config.rewards
        return RewardParts.build(
            role, comps, rw, coefficients=rw.coefficients(weights), reasons=reasons
        )

    def _pending(self, role: str, why: str) -> RewardParts:
        return RewardParts.build(
            role, {}, self.config.rewards, coefficients={}, reasons={"pending": why}
        )

    # ------------------------------------------------------------------ acting
    def _act(self, agent: str, completion: str) -> RewardParts:
        handler = {
            "challenge": self._act_challenger,
            "critic_question": self._act_critic_question,
            "difficulty": self._act_difficulty,
            "plan": self._act_planner,
            "critic_plan": self._act_critic_plan,
            "solve": self._act_solver,
        }[self.state.phase]
        return handler(completion)

    def _act_challenger(self, text: str) -> RewardParts:
        st, cfg, ref = self.state, self.config, self.instance.item
        st.challenger_step = self.num_steps
        st.challenger_rf = self._rf(text, _REQUIRED[ref.kind])
        question = _last_block(text, "question")
        st.last_info = {"phase": "challenge"}
        if question is not None and len(question) > cfg.max_question_chars:
            question, st.challenger_rf = None, 0.0
            st.valid_reason = f"the question is longer than {cfg.max_question_chars} characters"
        elif question is None:
            st.valid_reason = "no usable <question> block"
        if question is None:
            st.s_q = 0.0
            st.last_info.update(question_ok=False, verifier_valid=False, reason=st.valid_reason)
            parts = self._challenger_final()
            self._enter_plan_phase()
            return parts
        if ref.kind == "math":
            answer = _last_block(text, "answer")
            st.valid, st.valid_reason = check_math_reference(answer)
            tests: tuple[TestCase, ...] = ()
            entry = None
        else:
            answer = _last_block(text, "solution")
            tests, why = split_assert_block(_last_block(text, "tests"), cfg.max_tests)
            entry = first_function(code_from_answer(answer), question) if answer else None
            st.valid, st.valid_reason = (
                check_code_reference(
                    answer,
                    tests,
                    question=question,
                    sandbox=self._sandbox,
                    timeout_s=cfg.test_timeout_s,
                )
                if tests
                else (False, why)
            )
            answer = code_from_answer(answer) if answer else None
        st.new_item = PoolItem(
            question,
            kind=ref.kind,
            answer=answer,
            tests=tests,
            entry_point=entry,
            source="challenge_plan_solve",
            origin="generated",
        )
        st.last_info.update(question_ok=True, verifier_valid=st.valid, reason=st.valid_reason)
        st.phase, st.next_agent = "critic_question", "critic"
        return self._pending("challenger", "awarded after the critic (and difficulty samples)")

    def _challenger_final(self) -> RewardParts:
        """The challenger's reward by the table of the module docstring."""
        st = self.state
        s_q = st.s_q or 0.0
        if st.accepted:
            comps = {"quality": s_q, "difficulty": st.r_d or 0.0, "format": st.challenger_rf}
            parts = self._parts("challenger", comps, "challenger")
        elif not st.valid or self.config.below_alpha == "eq5":
            why = f"invalid verifier: {st.valid_reason}" if not st.valid else "s_q below alpha"
            comps = {"quality": s_q, "difficulty": 0.0, "format": st.challenger_rf}
            parts = self._parts("challenger", comps, "challenger", difficulty=f"0: {why}")
        else:
            comps = {"quality": s_q, "format": st.challenger_rf}
            why = f"suppressed: s_q {s_q:.3f} below alpha (Eq. 6)"
            parts = self._parts("challenger", comps, "filtered", difficulty=why)
        st.challenger_reward = parts.reward
        return parts

    def _act_critic_question(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        st.s_q, rf, raw, why = self._critic(text)
        st.eligible = st.valid and st.s_q >= cfg.alpha - _EPS
        st.last_info = {
            "phase": "critic_question",
            "score": raw,
            "s_q": st.s_q,
            "eligible": st.eligible,
        }
        if st.eligible:
            st.phase, st.next_agent = "difficulty", "solver"
        else:
            self.award("challenger", self._challenger_final(), st.challenger_step)
            self._enter_plan_phase()
        return self._parts("critic", {"format": rf}, "critic", format=why)

    def _grade(self, item: PoolItem, text: str) -> tuple[float, float, str]:
        rf = self._rf(text, ("answer",))
        v = verify_answer(
            item,
            _last_block(text, "answer"),
            sandbox=self._sandbox,
            timeout_s=self.config.test_timeout_s,
        )
        return v.score, rf, v.reason

    def _act_difficulty(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        assert st.new_item is not None
        s_gt, rf, why = self._grade(st.new_item, text)
        st.gt_scores.append(s_gt)
        st.last_info = {
            "phase": "difficulty",
            "sample_index": len(st.gt_scores) - 1,
            "s_gt": s_gt,
            "r_f": rf,
        }
        if len(st.gt_scores) >= cfg.num_samples:
            st.r_d = 1.0 - float(np.mean(st.gt_scores))
            st.accepted = True
            self.award("challenger", self._challenger_final(), st.challenger_step)
            self._enter_plan_phase()
        if not cfg.train_difficulty:  # Algorithm 1 line 8: sampled for r_d only
            why_not = "a difficulty sample for the challenger's r_d (SAGE Algorithm 1, line 8)"
            self.mark_untrainable(why_not)
            return RewardParts.build(
                "solver", {}, cfg.rewards, coefficients={}, reasons={"untrained": why_not}
            )
        return self._parts("solver", {"correct": s_gt, "format": rf}, "noplan", correct=why)

    def _enter_plan_phase(self) -> None:
        st, cfg, inst = self.state, self.config, self.instance
        st.plan_item = inst.item if cfg.plan_source == "reference" else inst.plan_item
        if cfg.plan_source == "accepted" and st.eligible and st.new_item is not None:
            st.plan_item = st.new_item
        st.phase, st.next_agent = ("plan", "planner") if cfg.planning else ("solve", "solver")

    def _act_planner(self, text: str) -> RewardParts:
        st = self.state
        st.planner_step = self.num_steps
        st.planner_rf = self._rf(text, ("plan",))
        st.plan = _last_block(text, "plan")
        st.last_info = {"phase": "plan", "plan_ok": st.plan is not None}
        if st.plan is None and self.config.untagged_plan == "critic" and text.strip():
            st.plan = text.strip()  # Eqs. 6-8: the critic scores the plan; r_f counts the tags
            st.last_info["plan_untagged"] = True
        if st.plan is None:
            st.s_p, st.gate = 0.0, False
            st.phase, st.next_agent = "solve", "solver"
            return self._parts(
                "planner",
                {"plan": 0.0, "format": st.planner_rf},
                "planner",
                plan="no usable <plan> block",
            )
        st.plan = clip_text(st.plan, self.config.max_shown_chars)
        st.phase, st.next_agent = "critic_plan", "critic"
        return self._pending("planner", "awarded when the critic scores the plan")

    def _act_critic_plan(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        st.s_p, rf, raw, why = self._critic(text)
        st.gate = st.s_p >= cfg.beta - _EPS
        st.last_info = {"phase": "critic_plan", "score": raw, "s_p": st.s_p, "gate": st.gate}
        planner = self._parts("planner", {"plan": st.s_p, "format": st.planner_rf}, "planner")
        self.award("planner", planner, st.planner_step)
        st.phase, st.next_agent = "solve", "solver"
        return self._parts("critic", {"format": rf}, "critic", format=why)

    def _act_solver(self, text: str) -> RewardParts:
        st, cfg = self.state, self.config
        assert st.plan_item is not None
        st.s_gt, rf, why = self._grade(st.plan_item, text)
        st.last_info = {"phase": "solve", "s_gt": st.s_gt, "plan_shown": st.gate}
        if cfg.planning:
            s_tilde = (st.s_p or 0.0) if st.gate else 0.0
            comps = {"plan": s_tilde, "correct": st.s_gt, "format": rf}
            parts = self._parts("solver", comps, "solver", correct=why)
        else:
            parts = self._parts("solver", {"correct": st.s_gt, "format": rf}, "noplan", correct=why)
        self.success = st.s_gt >= 1.0
        st.phase, st.next_agent = "done", self.possible_agents[0]
        if st.accepted and cfg.add_to_pool and st.new_item is not None:
            meta = {"s_q": st.s_q, "r_d": st.r_d, "reference": self.instance.item.key}
            item = PoolItem(**{**st.new_item.to_dict(), "metadata": meta})
            st.pool_added = self.pool.add(item)
        self.end_episode()
        return parts

    def _step_info(self, agent: str) -> dict[str, Any]:
        info = dict(self.state.last_info)
        if self.state.phase == "done":
            info.update(pool_added=self.state.pool_added, accepted=self.state.accepted)
        return info

    # ------------------------------------------------------------------ prompts
    def _clip(self, text: str) -> str:
        return clip_text(text, self.config.max_shown_chars)

    def _verifier_text(self, item: PoolItem) -> str:
        if item.kind == "math":
            return f"Reference answer: {self._clip(item.answer or '')}"
        return "Tests:\n" + self._clip(assert_block(item.tests) or "(stdin/stdout tests)")

    def _task_text(self, item: PoolItem) -> str:
        text = f"Problem:\n{self._clip(item.question)}"
        if item.kind == "code" and item.entry_point:
            text += f"\n\n(Your program must define the function `{item.entry_point}`.)"
        return text

    def _prompt(self, agent: str) -> str:
        st = self.state
        if agent != st.next_agent or st.phase == "done":
            status = "The round is over." if st.phase == "done" else "It is not your turn yet."
            return f"You are the {agent} in a challenge-plan-solve game. {status}"
        if st.phase == "challenge":
            return self._challenger_prompt()
        if st.phase == "critic_question":
            item = st.new_item
            assert item is not None
            return (
                "You are the Critic. Rate the quality of this newly generated problem from 1 to "
                "10: is it clear, self-contained and solvable, and does its verifier match it?\n\n"
                f"Problem:\n{self._clip(item.question)}\n\n{self._verifier_text(item)}\n\n"
                "Guide: 1-3 ill-posed, unsolvable or mismatched with its verifier; 4-6 solvable "
                "but vague or trivial; 7-8 clear and correct; 9-10 clear, correct and "
                "challenging. Reason inside <think></think>, then give only the number inside "
                "<score></score>."
            )
        if st.phase == "critic_plan":
            assert st.plan_item is not None
            return (
                "You are the Critic. Rate this solution plan from 1 to 10: is the approach "
                "correct, are the steps complete, ordered and concrete enough to follow?\n\n"
                f"{self._task_text(st.plan_item)}\n\nPlan:\n{st.plan}\n\n"
                "Reason inside <think></think>, then give only the number inside <score></score>."
            )
        if st.phase == "plan":
            assert st.plan_item is not None
            return (
                "You are the Planner. Write a short numbered plan that a solver can follow to "
                "solve the problem below: the key steps and the method, not the full solution.\n\n"
                f"{self._task_text(st.plan_item)}\n\nPut the plan inside <plan></plan>."
            )
        item = st.new_item if st.phase == "difficulty" else st.plan_item
        assert item is not None
        plan = ""
        if st.phase == "solve" and st.gate and st.plan:
            plan = f"\n\nA plan you may follow:\n{st.plan}"
        if item.kind == "code":
            fmt = (
                "Write a complete Python program (in a ```python block) inside "
                "<answer></answer>; it will be run against hidden tests."
            )
        else:
            fmt = (
                "Reason step by step, then give only the final answer (a number or expression) "
                "inside <answer></answer>."
            )
        return f"You are the Solver.\n\n{self._task_text(item)}{plan}\n\n{fmt}"

    def _challenger_prompt(self) -> str:
        ref = self.instance.item
        if ref.kind == "math":
            what = (
                "Write a new math problem inspired by the reference but different from it and "
                "harder, with exactly one correct final answer. Put the problem inside "
                "<question></question> and its exact final answer (a number or a short "
                "expression, no words) inside <answer></answer>."
            )
        else:
            what = (
                "Write a new Python programming task inspired by the reference but different "
                "from it and harder. Put the task inside <question></question> (name the "
                "function to implement and its arguments), assert statements that call the "
                "function and check its results inside <tests></tests> (one assert per line), "
                "and a correct reference implementation inside <solution></solution>; the "
                "reference must pass every test."
            )
        return (
            "You are the Challenger. Your problems train a Solver: they must be solvable and "
            "checkable, and you earn more when the Solver fails them.\n\n"
            f"Reference problem:\n{self._clip(ref.question)}\n\n{self._verifier_text(ref)}\n\n"
            + what
        )

    def _render_text(self) -> str:
        st = self.state
        lines = [
            f"challenge_plan_solve  phase={st.phase}  kind={self.instance.item.kind}",
            f"reference: {clip_text(self.instance.item.question, 200)}",
        ]
        if st.plan_item is not None:
            lines.append(f"plan-solve item: {clip_text(st.plan_item.question, 200)}")
        if st.new_item is not None:
            lines.append(f"new question: {clip_text(st.new_item.question, 200)}")
            lines.append(f"verifier valid: {st.valid} ({st.valid_reason})")
        if st.s_q is not None:
            lines.append(f"s_q={st.s_q:.3f}  accepted={st.accepted}  r_d={st.r_d}")
        if st.s_p is not None:
            lines.append(f"s_p={st.s_p:.3f}  plan shown={st.gate}")
        if st.s_gt is not None:
            lines.append(f"s_gt={st.s_gt:.3f}")
        lines.append(f"pool: {len(self.pool)} questions")
        return "\n".join(lines)

    # ------------------------------------------------------------------ oracle
    def oracle(self, agent: str) -> str:
        st, ref = self.state, self.instance.item
        if agent == "challenger":
            if ref.kind == "math":
                return f"<question>{ref.question}</question>\n<answer>{ref.answer}</answer>"
            return (
                f"<question>{ref.question}</question>\n<tests>\n{assert_block(ref.tests)}\n</tests>"
                f"\n<solution>\n```python\n{ref.answer}\n```\n</solution>"
            )
        if agent == "critic":
            if st.phase == "critic_plan":
                return "<think>The steps are sound.</think>\n<score>8</score>"
            good = st.new_item is not None and st.valid
            return (
                f"<think>Scripted check of the verifier.</think>\n<score>{9 if good else 2}</score>"
            )
        if agent == "planner":
            item = st.plan_item or ref
            steps = [ln.strip() for ln in item.solution.splitlines() if ln.strip()]
            steps = [ln for ln in steps if not ln.startswith("####")][:8]
            if not steps:
                steps = [
                    "Restate what is asked and list the given facts.",
                    "Choose the method (formula, equation or algorithm) that connects them.",
                    "Carry out the computation or write the code step by step.",
                    "Check the result against the conditions and examples.",
                ]
            return (
                "<plan>\n" + "\n".join(f"{i + 1}. {s}" for i, s in enumerate(steps)) + "\n</plan>"
            )
        if agent != "solver":
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        item = st.new_item if st.phase == "difficulty" else (st.plan_item or ref)
        if item is None or not item.answer:
            return "<answer>unknown</answer>"
        if item.kind == "code":
            return f"<answer>\n```python\n{item.answer}\n```\n</answer>"
        return f"<answer>{item.answer}</answer>"


def env(**kwargs: Any):
    """The wrapped challenge-plan-solve AEC env
    (``envs.make("challenge_plan_solve", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
