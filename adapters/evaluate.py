"""Evaluate policies on a setting: ``python -m adapters.evaluate --env ID --policy SPEC``.

Examples::

    python -m adapters.evaluate --env plan_path --policy oracle --episodes 20
    python -m adapters.evaluate --env sokoban --policy smollm2 --episodes 8 --mode single
    python -m adapters.evaluate --env sudoku --policy tool=oracle --policy planner=smollm2
    python -m adapters.evaluate --env math --policy openai:http://127.0.0.1:8000/v1#qwen3 \\
        --json results.json
    python -m adapters.evaluate --env sokoban --policy runs/my-run/final/shared   # a LoRA adapter

Policy specs: ``oracle`` (the env's scripted correct answer), ``smollm2`` (the embedded model),
``tiny`` (random tiny model, for smoke tests), a local checkpoint directory or a LoRA adapter
directory written by the trainer (``adapter_config.json``; the base is loaded from the path it
names), ``openai:BASE_URL[#MODEL]`` (any OpenAI-compatible server; without ``#MODEL`` the first
model the server lists). ``ROLE=SPEC`` assigns a policy to one role; a spec without ``ROLE=``
serves every role that has no explicit one.

Decoding is greedy by default (``--temperature 0``, the AT-GRPO validation setting), one episode
per instance (parallel sampling with K = 1). Instances come from ``--split`` (default ``val``)
with seeds derived from ``--seed``, so two evaluations with the same seed see the same
instances. The table reports the success rate, the mean final team reward, mean turns and steps,
and per agent the mean per-step reward and the mean episode return; ``--json`` writes the same
numbers plus one record per episode.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adapters.config import derive_seed, parse_key_values, parse_value
from adapters.envpool import EpisodeSpec
from adapters.policies.base import Policy
from adapters.rollout import RolloutConfig, RolloutEngine

__all__ = [
    "EvalReport",
    "evaluate",
    "parse_policy_spec",
    "build_policies",
    "env_roles",
    "create_shared_objects",
    "main",
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, float]:
        """Flat scalars (for logs): success rate, team reward, turns, per-agent rewards."""
        out = {
            "success_rate": self.success_rate,
            "team_reward": self.team_reward,
            "turns": self.mean_turns,
        }
        out.update({f"reward/{a}": v for a, v in self.reward_per_agent.items()})
        return out

    def table(self) -> str:
        pol = ", ".join(f"{r}={p}" for r, p in self.policies.items())
        lines = [
            f"env {self.env}  split {self.split}  episodes {self.episodes}  ({self.seconds:.1f} s)",
            f"policies: {pol}",
            f"  {'success rate':<16}{self.success_rate:>10.3f}",
            f"  {'team reward':<16}{self.team_reward:>10.3f}",
            f"  {'mean turns':<16}{self.mean_turns:>10.2f}",
            f"  {'mean steps':<16}{self.mean_steps:>10.2f}",
            f"  {'agent':<16}{'reward/step':>12}{'return':>10}",
        ]
        for agent in self.reward_per_agent:
            lines.append(
                f"  {agent:<16}{self.reward_per_agent[agent]:>12.3f}"
                f"{self.return_per_agent.get(agent, 0.0):>10.3f}"
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# env helpers


def _raw_env(env_id: str, env_config: Mapping[str, Any]) -> Any:
    import envs

    return envs.make(env_id, **dict(env_config)).unwrapped


def env_roles(env_id: str, env_config: Mapping[str, Any] | None = None) -> list[str]:
    """The setting's agents (roles) in turn order for this config."""
    return list(_raw_env(env_id, env_config or {}).possible_agents)


def create_shared_objects(env_id: str, env_config: Mapping[str, Any] | None = None) -> dict:
    """The setting's run-wide shared objects (``create_shared``), e.g. MAE/SAGE question pools."""
    raw = _raw_env(env_id, env_config or {})
    return dict(type(raw).create_shared(**dict(env_config or {})))


def episode_specs(
    env_id: str,
    n: int,
    *,
    seed: int,
    tag: str,
    env_config: Mapping[str, Any],
    split: str | None = None,
    instance: Any = None,
) -> list[EpisodeSpec]:
    """``n`` specs with seeds derived from ``(seed, tag, i)``; an explicit instance wins."""
    options: dict[str, Any] | None
    if instance is not None:
        options = {"instance": instance}
    else:
        options = {"split": split} if split else None
    return [
        EpisodeSpec(
            env_id, seed=derive_seed(seed, tag, i), config=dict(env_config), options=options
        )
        for i in range(n)
    ]


# ---------------------------------------------------------------------------------------------
# evaluation


def evaluate(
    env_id: str,
    policies: Policy | Mapping[str, Policy],
    *,
    episodes: int = 8,
    env_config: Mapping[str, Any] | None = None,
    role_policy: Mapping[str, str] | None = None,
    split: str = "val",
    seed: int = 0,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    instance: Any = None,
    shared: Mapping[str, Any] | None = None,
    pool: Any = None,
) -> EvalReport:
    """Run ``episodes`` episodes (K = 1) and summarise them.

    ``shared`` are the setting's run-wide objects (question pools); by default fresh ones are
    created, so an evaluation never changes a training run's pools.
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
    )
    rcfg = RolloutConfig(
        candidates=1,
        sampling="parallel",
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
    )
    engine = RolloutEngine(
        env_id, policies, rcfg, env_config=full_cfg, role_policy=role_policy, pool=pool
    )
    t0 = time.perf_counter()
    try:
        result = engine.run(specs, seed=derive_seed(seed, "eval-generation"))
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
        mean_turns=sum(e.turns for e in eps) / n,
        mean_steps=sum(e.steps for e in eps) / n,
        reward_per_agent={
            r: (sum(rewards[r]) / len(rewards[r]) if rewards.get(r) else 0.0) for r in roles
        },
        return_per_agent=returns,
        policies=names,
        seconds=seconds,
        completion_tokens=sum(len(s.completion_ids) for s in result.samples),
        per_episode=[
            {
                "instance_id": e.instance_id,
                "success": e.success,
                "turns": e.turns,
                "steps": e.steps,
                "team": e.final_team,
                "returns": e.returns,
            }
            for e in eps
        ],
    )


def _policy_name(engine: RolloutEngine, role: str) -> str:
    try:
        return str(engine.policies[engine.policy_id_for(role)].name)
    except KeyError:
        return "?"


# ---------------------------------------------------------------------------------------------
# policy specs


def parse_policy_spec(
    spec: str, *, device: str | None = None, dtype: str | None = None, batch_size: int = 16
) -> Policy:
    """Build a policy from a spec string (see the module docstring)."""
    spec = spec.strip()
    if not spec:
        raise ValueError("empty policy spec")
    if spec == "oracle":
        from adapters.oracle import OraclePolicy

        return OraclePolicy()
    if spec.startswith("openai:"):
        from adapters.policies.openai_compat import OpenAIPolicy

        url, _, model = spec[len("openai:") :].partition("#")
        if not url:
            raise ValueError("openai: spec needs a base URL, e.g. openai:http://127.0.0.1:8000/v1")
        if not model:
            probe = OpenAIPolicy(url, model="?")
            listed = [m for m in probe.list_models() if m]
            if not listed:
                raise ValueError(f"{url} lists no models; name one: openai:{url}#MODEL")
            model = listed[0]
        return OpenAIPolicy(url, model=model, name=f"openai:{model}")
    from adapters.models import load_policy_model, tiny_model
    from adapters.policies.transformers_policy import TransformersPolicy

    if spec == "tiny":
        m, tok = tiny_model(device=device)
        return TransformersPolicy(m, tok, device=device, batch_size=batch_size, name="tiny")
    if spec.lower() in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
        m, tok = load_policy_model(None, device=device, dtype=dtype)
        return TransformersPolicy(m, tok, device=device, batch_size=batch_size, name="smollm2")
    path = Path(spec)
    if path.is_dir() and (path / "adapter_config.json").is_file():
        return _adapter_policy(path, device=device, dtype=dtype, batch_size=batch_size)
    if path.exists() or "/" in spec:
        m, tok = load_policy_model(spec, device=device, dtype=dtype)
        return TransformersPolicy(m, tok, device=device, batch_size=batch_size, name=spec)
    raise ValueError(
        f"unknown policy spec {spec!r}: use oracle, smollm2, tiny, a local model or adapter "
        "directory, or openai:BASE_URL[#MODEL]"
    )


def _adapter_policy(path: Path, *, device: Any, dtype: Any, batch_size: int) -> Policy:
    """A LoRA adapter directory (peft ``save_pretrained``) on top of its base model."""
    from peft import PeftModel

    from adapters.models import load_policy_model
    from adapters.policies.transformers_policy import TransformersPolicy

    meta = json.loads((path / "adapter_config.json").read_text())
    base_name = meta.get("base_model_name_or_path") or None
    if base_name and not Path(base_name).exists() and base_name.count("/") != 1:
        base_name = None  # a cache path from another machine: fall back to the embedded model
    model, tok = load_policy_model(base_name, device=device, dtype=dtype or "float32")
    peft_model = PeftModel.from_pretrained(model, str(path))
    merged = peft_model.merge_and_unload()
    return TransformersPolicy(merged, tok, device=device, batch_size=batch_size, name=str(path))


def build_policies(
    specs: Sequence[str],
    roles: Sequence[str],
    *,
    device: str | None = None,
    dtype: str | None = None,
    batch_size: int = 16,
) -> tuple[dict[str, Policy], dict[str, str]]:
    """``(policies, role_policy)`` from ``--policy`` values (``SPEC`` or ``ROLE=SPEC``)."""
    default: str | None = None
    per_role: dict[str, str] = {}
    for raw in specs:
        role, sep, spec = raw.partition("=")
        if sep and not role.startswith("openai:") and "/" not in role:
            if role not in roles:
                raise ValueError(f"unknown role {role!r} in --policy {raw!r}; roles: {list(roles)}")
            per_role[role] = spec
        else:
            if default is not None:
                raise ValueError("more than one --policy without ROLE=; give ROLE=SPEC")
            default = raw
    missing = [r for r in roles if r not in per_role and default is None]
    if missing:
        raise ValueError(f"no policy for role(s) {missing}: add --policy SPEC or ROLE=SPEC")
    built: dict[str, Policy] = {}
    role_policy: dict[str, str] = {}
    for r in roles:
        chosen = per_role.get(r, default)
        assert chosen is not None
        spec = chosen
        if spec not in built:
            built[spec] = parse_policy_spec(spec, device=device, dtype=dtype, batch_size=batch_size)
        role_policy[r] = spec
    return built, role_policy


def _with_prefixes(
    args: argparse.Namespace,
    env_config: dict[str, Any],
    roles: Sequence[str],
    policies: dict[str, Policy],
    role_policy: dict[str, str],
) -> tuple[dict[str, Policy], dict[str, str]]:
    """Wrap policies with the system prompt and per-role oracle demonstrations."""
    from adapters.trainer_models import ManagedPolicy, build_demos

    system = [{"role": "system", "content": args.system_prompt}] if args.system_prompt else []
    demos: dict[str, list[dict[str, str]]] = {}
    if args.demos:
        tok = next((p.tokenizer for p in policies.values() if p.tokenizer is not None), None)
        limit = args.max_new_tokens

        def fits(text: str) -> bool:  # about 4 characters per token without a tokenizer
            return len(tok(text)["input_ids"]) < limit if tok is not None else len(text) < 4 * limit

        shared = create_shared_objects(args.env, env_config)
        demos = build_demos(
            args.env, {**env_config, **shared}, roles, args.demos, args.seed, fits=fits
        )
    out: dict[str, Policy] = {}
    mapping: dict[str, str] = {}
    for role in roles:
        spec = role_policy[role]
        key = f"{spec}/{role}" if role in demos else spec
        if key not in out:
            out[key] = ManagedPolicy(
                policies[spec], prefix=system + demos.get(role, []), name=policies[spec].name
            )
        mapping[role] = key
    return out, mapping


# ---------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adapters.evaluate",
        description="Evaluate policies on a multi-agent setting (greedy, one episode/instance).",
    )
    p.add_argument("--env", required=True, help="setting id (see envs.list_envs())")
    p.add_argument(
        "--policy",
        action="append",
        required=True,
        help="SPEC or ROLE=SPEC (repeatable): oracle | smollm2 | tiny | PATH | "
        "openai:BASE_URL[#MODEL]",
    )
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--split", default="val", choices=("train", "val", "test"))
    p.add_argument("--mode", default=None, help="multi | single (the setting's default: multi)")
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--env-config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--instance", default=None, help="explicit instance as JSON")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--system-prompt", default=None, help="system message for model policies")
    p.add_argument(
        "--demos",
        type=int,
        default=0,
        help="oracle demonstrations per role before each prompt (as the trainer's --demos; "
        "answers longer than --max-new-tokens are left out)",
    )
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: checkpoint's)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", default=None, help="write the report as JSON here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env_config = parse_key_values(args.env_config, "--env-config")
    if args.mode:
        env_config["mode"] = args.mode
    if args.max_turns:
        env_config["max_turns"] = args.max_turns
    instance = parse_value(args.instance) if args.instance else None
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    roles = env_roles(args.env, env_config)
    policies, role_policy = build_policies(
        args.policy, roles, device=args.device, dtype=args.dtype, batch_size=args.batch_size
    )
    if args.system_prompt or args.demos:
        policies, role_policy = _with_prefixes(args, env_config, roles, policies, role_policy)
    report = evaluate(
        args.env,
        policies,
        episodes=args.episodes,
        env_config=env_config,
        role_policy=role_policy,
        split=args.split,
        seed=args.seed,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        instance=instance,
    )
    print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
