"""Evaluation: greedy episodes on held-out instances, summarised as an :class:`EvalReport`.

:func:`evaluate` plays one episode per instance (parallel sampling with K = 1; greedy by
default, the AT-GRPO validation setting) on instances of ``split`` (default ``val``) with seeds
derived from ``seed``, so two evaluations with the same seed see the same instances: the
trainer's before/after comparison (:func:`compare_reports`) is paired instance by instance. The
report holds the task's measures first: the success rate, the setting's own progress measure at
the end of the episode (``env.progress()``: boxes on goals, distance closed, cells solved, tests
passed) and the mean final team reward; then the shaped mean per-step reward, mean turns and
steps, and per agent the mean per-step reward and the mean episode return, plus one record per
episode (its index, instance, success, progress, turns, steps, team reward, mean reward, per-role
returns and mean per-step rewards, completion tokens) with what replays it: env id and config, reset
seed and options, and every step's role and completion (:mod:`adapters.evaluation.replay`).
``first`` evaluates episodes ``first ..`` of a longer evaluation (the same instances as in one run
of it), which is how :mod:`adapters.evaluation.suite` runs a benchmark in resumable chunks.
:func:`with_prompt_prefixes` wraps policies with a system prompt and per-role oracle
demonstrations, as the trainer does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from adapters.evaluation.replay import reproduction, transcript
from adapters.evaluation.stats import paired_difference
from adapters.policies.base import EVAL_TEMPERATURE, MAX_NEW_TOKENS, GenerationConfig, Policy
from adapters.policies.wrappers import ManagedPolicy
from adapters.rollout import (
    Episode,
    EpisodeSpec,
    RolloutConfig,
    RolloutEngine,
    RolloutProgress,
    Sample,
    create_shared_objects,
    derive_seed,
    env_roles,
    episode_specs,
    oracle_demos,
    progress_measure,
)

__all__ = [
    "EvalReport",
    "compare_reports",
    "episode_values",
    "evaluate",
    "generation_kind",
    "role_token_limits",
    "task_measures",
    "with_prompt_prefixes",
]


@dataclass
class EvalReport:
    """The result of :func:`evaluate`."""

    env: str
    split: str
    episodes: int
    success_rate: float
    team_reward: float
    mean_turns: float
    mean_steps: float
    reward_per_agent: dict[str, float]
    return_per_agent: dict[str, float]
    policies: dict[str, str]
    seconds: float
    completion_tokens: int = 0
    per_episode: list[dict[str, Any]] = field(default_factory=list)
    progress: float = 0.0  # mean of the setting's own progress measure at the episodes' ends
    progress_label: str = "solved"  # what it measures (the env's PROGRESS)
    # each role's new-token limit (empty in records made before it was recorded: every role
    # then had the evaluation's max_new_tokens)
    token_limits: dict[str, int] = field(default_factory=dict)
    # each model role's generation weights, e.g. "float32 + fp16" (adapters.policies.quantize);
    # empty for scripted policies and in records made before it was recorded
    generation: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def values(self, metric: str) -> list[float]:
        """One value per episode: ``reward`` (the episode's mean per-step reward over all
        agents), ``success`` (0/1), ``progress`` (the setting's progress measure at the end) or
        ``team`` (final team reward)."""
        return [float(e[metric]) for e in self.per_episode]

    @property
    def mean_reward(self) -> float:
        """Mean over episodes of the episode's mean per-step reward."""
        xs = self.values("reward")
        return sum(xs) / len(xs) if xs else 0.0

    def summary(self) -> dict[str, float]:
        """Flat scalars (for logs): success rate, progress, team reward, shaped reward, turns,
        per-agent rewards."""
        out = {
            "success_rate": self.success_rate,
            "progress": self.progress,
            "team_reward": self.team_reward,
            "reward": self.mean_reward,
            "turns": self.mean_turns,
        }
        out.update({f"reward/{a}": v for a, v in self.reward_per_agent.items()})
        return out

    def table(self) -> str:
        pol = ", ".join(f"{r}={p}" for r, p in self.policies.items())
        lines = [
            f"env {self.env}  split {self.split}  episodes {self.episodes}  ({self.seconds:.1f} s)",
            f"policies: {pol}",
            f"  {'success rate':<22}{self.success_rate:>10.3f}",
            f"  {self.progress_label:<22}{self.progress:>10.3f}",
            f"  {'team reward (final)':<22}{self.team_reward:>10.3f}",
            f"  {'mean reward (shaped)':<22}{self.mean_reward:>10.3f}",
            f"  {'mean turns':<22}{self.mean_turns:>10.2f}",
            f"  {'mean steps':<22}{self.mean_steps:>10.2f}",
            f"  {'agent':<16}{'reward/step':>12}{'return':>10}",
        ]
        for agent in self.reward_per_agent:
            lines.append(
                f"  {agent:<16}{self.reward_per_agent[agent]:>12.3f}"
                f"{self.return_per_agent.get(agent, 0.0):>10.3f}"
            )
        return "\n".join(lines)


def evaluate(
    env_id: str,
    policies: Policy | Mapping[str, Policy],
    *,
    episodes: int = 8,
    env_config: Mapping[str, Any] | None = None,
    role_policy: Mapping[str, str] | None = None,
    split: str = "val",
    seed: int = 0,
    temperature: float = EVAL_TEMPERATURE,
    top_p: float = 1.0,
    max_new_tokens: int = MAX_NEW_TOKENS,
    role_max_new_tokens: Mapping[str, int] | None = None,
    instance: Any = None,
    shared: Mapping[str, Any] | None = None,
    pool: Any = None,
    first: int = 0,
    on_episode: Callable[[Episode], None] | None = None,
    batch_size: int | None = None,
    on_wave: Callable[[int, int], None] | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
) -> EvalReport:
    """Run ``episodes`` episodes (K = 1) and summarise them.

    ``shared`` are the setting's run-wide objects (question pools); by default fresh ones are
    created, so an evaluation never changes a training run's pools. ``first`` numbers the
    episodes from ``first`` on (their instances are those episodes of a longer evaluation with the
    same seed). ``on_episode`` is called as each episode finishes, ``on_wave(wave, live)`` after
    each generation wave, ``on_progress`` after the reset and each wave with the agent steps
    taken and left (progress bars: :mod:`adapters.rollout.progress`). ``role_max_new_tokens``
    gives some roles a smaller token limit than ``max_new_tokens`` (the limits a training run's
    ``role_sampling`` sets, so that a role is evaluated as it is trained:
    :func:`role_token_limits`).

    The episodes are played together: at every wave the prompts of all live episodes go to each
    policy in one ``generate`` call, decoded in batches of up to ``batch_size`` sequences
    (default: all of them) inside the policies' :meth:`~adapters.policies.base.Policy.
    evaluation_scope`, where a model backend also keeps the KV cache of the prompt prefixes
    (system message, demonstrations, task preamble) from one wave to the next.
    """
    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    cfg = dict(env_config or {})
    if shared is None:
        shared = create_shared_objects(env_id, cfg)
    full_cfg = {**cfg, **dict(shared)}
    specs = episode_specs(
        env_id,
        episodes,
        seed=seed,
        tag="eval",
        env_config=full_cfg,
        split=split,
        instance=instance,
        start=first,
        distinct=True,  # n episodes are n different instances (a small split can repeat levels)
    )
    limits = dict(role_max_new_tokens or {})
    setting_roles = env_roles(env_id, full_cfg)
    unknown = sorted(set(limits) - set(setting_roles))
    if unknown:
        raise ValueError(f"role token limits for {unknown}: {env_id} has the roles {setting_roles}")
    rcfg = RolloutConfig(candidates=1, sampling="parallel")
    gen = GenerationConfig(
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        role_sampling={role: {"max_new_tokens": int(n)} for role, n in limits.items()},
    )
    engine = RolloutEngine(
        env_id,
        policies,
        rcfg,
        generation=gen,
        env_config=full_cfg,
        role_policy=role_policy,
        pool=pool,
    )
    gen_seed = derive_seed(seed, "eval-generation", *([first] if first else []))
    t0 = time.perf_counter()
    try:
        with contextlib.ExitStack() as scopes:
            for p in {id(p): p for p in engine.policies.values()}.values():
                scopes.enter_context(p.evaluation_scope(batch_size or episodes))
            result = engine.run(
                specs,
                seed=gen_seed,
                on_episode=on_episode,
                on_wave=on_wave,
                on_progress=on_progress,
            )
    finally:
        engine.close()
    seconds = time.perf_counter() - t0
    eps = result.episodes
    n = max(1, len(eps))
    rewards: dict[str, list[float]] = {}
    for s in result.samples:
        rewards.setdefault(s.role, []).append(s.reward)
    roles = env_roles(env_id, cfg)
    for r in rewards:
        if r not in roles:
            roles.append(r)
    returns = {r: sum(e.returns.get(r, 0.0) for e in eps) / n for r in roles}
    names = {r: _policy_name(engine, r) for r in roles}
    return EvalReport(
        env=env_id,
        split="instance" if instance is not None else split,
        episodes=len(eps),
        success_rate=sum(e.success for e in eps) / n,
        team_reward=sum(e.final_team for e in eps) / n,
        progress=sum(e.progress for e in eps) / n,
        progress_label=progress_measure(env_id, cfg),
        mean_turns=sum(e.turns for e in eps) / n,
        mean_steps=sum(e.steps for e in eps) / n,
        reward_per_agent={
            r: (sum(rewards[r]) / len(rewards[r]) if rewards.get(r) else 0.0) for r in roles
        },
        return_per_agent=returns,
        policies=names,
        seconds=seconds,
        completion_tokens=sum(_completion_tokens(s) for s in result.samples),
        token_limits={r: int(limits.get(r, max_new_tokens)) for r in roles},
        generation={r: g for r in roles if (g := _generation_kind(engine, r))},
        per_episode=[
            _episode_record(e, first, result.samples, specs[e.instance], list(shared)) for e in eps
        ],
    )


def role_token_limits(
    generation: GenerationConfig, env_id: str, env_config: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """The per-role token limits a run's ``role_sampling`` sets, for the roles ``env_id`` has in
    this config: what :func:`evaluate`'s ``role_max_new_tokens`` takes to evaluate each role as
    it is trained (``eval_role_limits``)."""
    roles = set(env_roles(env_id, env_config))
    return {
        role: int(params["max_new_tokens"])
        for role, params in generation.role_sampling.items()
        if role in roles and params.get("max_new_tokens")
    }


def _episode_record(
    e: Episode, first: int, samples: list[Sample], spec: EpisodeSpec, shared: list[str]
) -> dict[str, Any]:
    """One episode's numbers and what replays it (K = 1: the samples of instance ``e.instance``
    are its steps; :mod:`adapters.evaluation.replay`)."""
    own = [s for s in samples if s.instance == e.instance and s.branch == e.branch]
    by_role: dict[str, list[float]] = {}
    for s in own:
        by_role.setdefault(s.role, []).append(s.reward)
    return {
        "index": first + e.instance,
        "instance_id": e.instance_id,
        "success": e.success,
        "turns": e.turns,
        "steps": e.steps,
        "team": e.final_team,
        "progress": e.progress,
        "reward": sum(e.returns.values()) / max(e.steps, 1),
        "returns": e.returns,
        "role_reward": {r: sum(xs) / len(xs) for r, xs in by_role.items()},
        "completion_tokens": sum(_completion_tokens(s) for s in own),
        **reproduction(spec, shared),
        "transcript": transcript(own),
    }


def _completion_tokens(s: Sample) -> int:
    """Tokens of a completion: its ids, or its log-probs (an HTTP server that sends no ids)."""
    return len(s.completion_ids) or len(s.logprobs)


def _policy_name(engine: RolloutEngine, role: str) -> str:
    try:
        return str(engine.policies[engine.policy_id_for(role)].name)
    except KeyError:
        return "?"


def generation_kind(policy: Any) -> str:
    """``"DTYPE"`` or ``"DTYPE + fp16|int8"`` (:mod:`adapters.policies.quantize`) of the local
    model ``policy`` generates with (wrappers unwrapped), ``""`` for a policy without one
    (scripted, a server)."""
    for _ in range(8):  # ManagedPolicy and other wrappers keep the wrapped policy in .inner
        if not hasattr(policy, "inner"):
            break
        policy = policy.inner
    model = getattr(policy, "model", None)
    if model is None or not hasattr(model, "parameters"):
        return ""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    packed = getattr(policy, "quantize", "none")
    return dtype if packed in ("none", None) else f"{dtype} + {packed}"


def _generation_kind(engine: RolloutEngine, role: str) -> str:
    try:
        return generation_kind(engine.policies[engine.policy_id_for(role)])
    except KeyError:
        return ""


def with_prompt_prefixes(
    env_id: str,
    env_config: Mapping[str, Any],
    policies: Mapping[str, Policy],
    role_policy: Mapping[str, str],
    *,
    system_prompt: str | None = None,
    demos: int = 0,
    max_new_tokens: int = MAX_NEW_TOKENS,
    seed: int = 0,
) -> tuple[dict[str, Policy], dict[str, str]]:
    """Wrap policies with a system prompt and ``demos`` oracle demonstrations per role.

    Returns ``(policies, role_policy)`` for :func:`evaluate`. A demonstration whose answer is
    longer than ``max_new_tokens`` (the policy could never write it) is left out.
    """
    roles = list(role_policy)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    demo_msgs: dict[str, list[dict[str, str]]] = {}
    if demos:
        tok = next((p.tokenizer for p in policies.values() if p.tokenizer is not None), None)

        def fits(text: str) -> bool:  # about 4 characters per token without a tokenizer
            if tok is None:
                return len(text) < 4 * max_new_tokens
            return len(tok(text)["input_ids"]) < max_new_tokens

        shared = create_shared_objects(env_id, env_config)
        demo_msgs = oracle_demos(env_id, {**env_config, **shared}, roles, demos, seed, fits=fits)
    out: dict[str, Policy] = {}
    mapping: dict[str, str] = {}
    for role in roles:
        spec = role_policy[role]
        key = f"{spec}/{role}" if role in demo_msgs else spec
        if key not in out:
            out[key] = ManagedPolicy(
                policies[spec], prefix=system + demo_msgs.get(role, []), name=policies[spec].name
            )
        mapping[role] = key
    return out, mapping


def compare_reports(
    before: EvalReport | Mapping[str, Any],
    after: EvalReport | Mapping[str, Any],
    confidence: float = 0.95,
    references: Mapping[str, EvalReport | Mapping[str, Any]] | None = None,
) -> str:
    """The before -> after table of two evaluations of the same instances, paired per instance.

    The task's measures lead: success rate, the setting's progress measure at the end (boxes on
    goals, distance closed, cells solved, tests passed) and the final team reward; the shaped
    mean per-step reward comes after them, then each role's. Each row has the mean before and
    after, the mean difference with its confidence interval and the p-value
    (:func:`~adapters.evaluation.stats.paired_difference`). ``references`` (name -> report on the
    same instances, :mod:`adapters.evaluation.references`) add their means and the paired
    difference ``after - reference`` of the task measures."""
    b = before.to_dict() if isinstance(before, EvalReport) else dict(before)
    a = after.to_dict() if isinstance(after, EvalReport) else dict(after)
    refs = {
        k: (r.to_dict() if isinstance(r, EvalReport) else dict(r))
        for k, r in (references or {}).items()
    }
    ids_a = [e["instance_id"] for e in a["per_episode"]]
    for other in [b, *refs.values()]:
        if [e["instance_id"] for e in other["per_episode"]] != ids_a:
            raise ValueError("the evaluations did not play the same instances in the same order")
    pct = f"{round(confidence * 100)}%"
    rows = task_measures(a)
    lines = [
        f"before -> after training, {len(ids_a)} {a['split']} instances never trained on "
        f"(same seeds), paired per instance:",
        f"  {'metric':<22}{'before':>8}{'after':>8}{'diff':>8}   {pct} interval        p",
    ]
    starred = False
    for label, key in rows:
        d = paired_difference(episode_values(b, key), episode_values(a, key), confidence)
        mark = " *" if d.excludes_zero else ""
        starred = starred or d.excludes_zero
        lines.append(
            f"  {label:<22}{d.mean_before:>8.3f}{d.mean_after:>8.3f}{d.mean_diff:>+8.3f}"
            f"   [{d.low:+.3f}, {d.high:+.3f}]  {d.p_value:.3g}{mark}"
        )
    for role, v in a["reward_per_agent"].items():
        x = b["reward_per_agent"].get(role, 0.0)
        lines.append(f"  {'reward/' + role:<22}{x:>8.3f}{v:>8.3f}{v - x:>+8.3f}   (per step)")
    lines.append(
        "  * the interval excludes zero"
        if starred
        else "  no interval excludes zero: no significant change"
    )
    if refs:
        lines += [
            f"reference policies on the same instances (mean; after - reference, paired, {pct} "
            "interval):",
            f"  {'policy':<14}" + "".join(f"{label:>30}" for label, _ in rows),
        ]
        for name, ref in [("after", a), *refs.items()]:
            cells = []
            for _label, key in rows:
                mean = sum(episode_values(ref, key)) / max(1, len(ref["per_episode"]))
                if ref is a:
                    cells.append(f"{mean:>30.3f}")
                    continue
                d = paired_difference(episode_values(ref, key), episode_values(a, key), confidence)
                mark = "*" if d.excludes_zero else " "
                cells.append(
                    f"{mean:>8.3f} ({d.mean_diff:+.3f} [{d.low:+.3f},{d.high:+.3f}]){mark}"
                )
            lines.append(f"  {name:<14}" + "".join(f"{c:>30}" for c in cells))
    return "\n".join(lines)


def task_measures(report: Mapping[str, Any], shaped: bool = True) -> list[tuple[str, str]]:
    """(label, per-episode key) of the measures a comparison shows, the task's first: success,
    the setting's progress measure (unless it is success itself), the final team reward and,
    with ``shaped``, the mean shaped per-step reward."""
    rows = [("success rate", "success")]
    label = str(report.get("progress_label", "solved"))
    if label != "solved":  # "solved" progress is success itself
        rows.append((label, "progress"))
    rows.append(("team reward (final)", "team"))
    if shaped:
        rows.append(("mean reward (shaped)", "reward"))
    return rows


def episode_values(report: Mapping[str, Any], key: str) -> list[float]:
    """One measure of a report's ``per_episode`` records, in episode order (missing: 0)."""
    return [float(e.get(key, 0.0)) for e in report["per_episode"]]
