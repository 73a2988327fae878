"""``TrainConfig``: one typed dataclass describes a training run (CLI flags and/or a YAML file).

Every field is a flag of ``python -m adapters.train`` (``lora_rank`` -> ``--lora-rank``) and a key
of the YAML file given with ``--config run.yaml``; flags override the file, unknown keys are an
error that names the closest valid key. The resolved config (``auto`` values filled in) is saved
as ``config.yaml`` in the output directory, and ``--resume DIR`` reads it back.

Fields left at ``None`` mean *auto* and are filled by :meth:`TrainConfig.resolved` from the
device; :mod:`adapters.training.recipes` holds the table of those defaults and where each comes
from. Command-line flags are generated from the fields by :mod:`adapters.training.flags`.
Algorithms (``--algorithm``): ``at-grpo`` (tree sampling, agent- and
turn-wise GRPO groups), ``grpo`` (parallel sampling, K episodes per instance), ``reinforce++``
(global whitening, optional token-level KL penalty in the reward: ``kl_reward_coef``),
``tr-reinforce++`` (whitening per role, MAE).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from adapters.rollout.keep import KEEP_RULES
from adapters.training import recipes

__all__ = ["ALGORITHMS", "BACKENDS", "ConfigError", "TrainConfig", "config_from_dict", "load_yaml"]

ALGORITHMS = ("at-grpo", "grpo", "reinforce++", "tr-reinforce++", "tr-reinforce++-token")
BACKENDS = ("transformers", "vllm", "vllm-server")

# fields a recipe (or the device) fills when they are left at None
AUTO_FIELDS = (
    "algorithm",
    "sampling",
    "candidates",
    "keep",
    "keep_n",
    "keep_scope",
    "instances_per_step",
    "steps",
    "lr",
    "weight_decay",
    "max_grad_norm",
    "ppo_epochs",
    "ppo_minibatches",
    "kl_loss_coef",
    "kl_loss_type",
    "kl_reward_coef",
    "entropy_coef",
    "mpt_mask_tau",
    "mpt_target_entropy",
    "gamma",
    "temperature",
    "top_p",
    "top_k",
    "max_new_tokens",
    "eval_temperature",
    "eval_episodes",
    "lora_rank",
    "lora_alpha",
    "lora_dropout",
    "per_role",
    "demos",
    "gen_batch_size",
    "micro_batch_size",
    "micro_batch_tokens",
)
# dict fields merged key by key over the recipe's value
MERGED_FIELDS = ("chat_template_kwargs", "role_sampling")


_ROLE_SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_new_tokens", "stop"}


class ConfigError(ValueError):
    """A bad configuration value or key (the message says which and why)."""


@dataclass
class TrainConfig:
    """A training run. ``None`` = auto: filled from the recipe or the device by :meth:`resolved`
    (see :mod:`adapters.training.recipes`); lists and dicts are copied."""

    # ---- the setting and its recipe
    env: str = "sokoban"
    recipe: str | None = None  # None: the setting's paper recipe (recipes.SETTING_RECIPES)
    env_config: dict[str, Any] = field(default_factory=dict)
    instance: dict[str, Any] | None = None  # explicit instance for every train and eval episode
    system_prompt: str | None = None  # a system message prepended to every prompt
    prompt_prefix: list[dict[str, str]] = field(default_factory=list)  # few-shot messages
    demos: int | None = None  # oracle demonstrations per role (in-context examples)
    # ---- the model and which policy plays which role
    model: str = "smollm2"  # smollm2 | tiny | local path | hub name | config:PATH (random init)
    dtype: str = "auto"
    lora_rank: int | None = None  # 0 = full fine-tuning
    lora_alpha: float | None = None  # None = 2 * rank
    lora_dropout: float | None = None
    lora_target: str = "all-linear"
    per_role: bool | None = None  # one policy per role instead of one shared policy
    role_policies: dict[str, str] = field(default_factory=dict)  # role -> policy id (M of N)
    train_roles: list[str] | None = None  # roles whose samples are trained (None: all)
    per_role_models: Literal["adapters", "models"] = "adapters"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. enable_thinking
    # ---- the algorithm
    algorithm: (
        Literal["at-grpo", "grpo", "reinforce++", "tr-reinforce++", "tr-reinforce++-token"] | None
    ) = None
    sampling: Literal["tree", "parallel"] | None = None
    candidates: int | None = None  # K
    keep: Literal["best", "random", "balanced", "adaptive"] | None = None
    keep_n: int | None = None
    keep_scope: Literal["branch", "instance"] | None = None
    max_branches: int = 16
    normalize_std: bool = True  # GRPO: divide by the group std (False = Dr. GRPO)
    instances_per_step: int | None = None
    steps: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    max_grad_norm: float | None = None
    ppo_epochs: int | None = None
    ppo_minibatches: int | None = None  # optimizer steps per epoch (the batch split evenly)
    minibatch_size: int = 0  # samples per optimizer step; 0 = use ppo_minibatches
    micro_batch_size: int | None = None  # sequences per forward/backward (gradient accumulation)
    micro_batch_tokens: int | None = None  # padded tokens per forward/backward (0 = no limit)
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    kl_loss_coef: float | None = None
    kl_loss_type: Literal["k1", "k2", "k3"] | None = None
    kl_reward_coef: float | None = None  # REINFORCE++ token-level KL penalty beta (CoMAS Eq. 9)
    entropy_coef: float | None = None  # entropy bonus weight (MAE Table 3: 0.001)
    mpt_mask_tau: float | None = None  # mask mastered positive tokens (UloRL Eq. 10); 0 = off
    mpt_target_entropy: float | None = None  # ... only while the entropy is below this
    gamma: float | None = None
    skip_zero_advantage: bool = True
    share_prompt_forward: bool = True
    old_logprobs: Literal["auto", "rollout", "recompute"] = "auto"
    # ---- sampling
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    role_sampling: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-role overrides
    max_new_tokens: int | None = None
    gen_batch_size: int | None = None
    # ---- evaluation
    eval_episodes: int | None = None
    eval_split: str = "val"
    eval_every: int = 0  # 0 = only before and after training
    eval_temperature: float | None = None
    # ---- the run
    seed: int = 0
    output_dir: str | None = None  # None = runs/<env>-<algorithm>-<time>
    device: str = "auto"
    backend: str = "transformers"
    save_every: int = 1
    keep_checkpoints: int = 2
    plot_every: int = 5
    env_workers: int = 2
    threads: int | None = None  # torch CPU threads (None: leave torch's setting)
    progress: bool = True
    save_final: bool = True
    # ---- scale-out: torchrun ranks, vLLM servers, Ray (adapters.training.distributed)
    dp_mode: Literal["auto", "ddp", "fsdp", "hsdp"] = "auto"  # auto: DDP LoRA, FSDP2 full FT
    dist_timeout_s: float = 600.0  # a collective waiting longer fails the run
    vllm_servers: list[str] = field(default_factory=list)  # backend vllm-server: [POLICY=]URL
    vllm_sync_dir: str | None = None  # where adapters/weights for the servers go (shared FS)
    env_pool: Literal["local", "ray"] = "local"
    ray_address: str | None = None  # env_pool ray: ray.init(address=...), e.g. "auto"
    # where each resolved value came from (filled by resolved(); not a setting)
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.env_config = dict(self.env_config or {})
        self.chat_template_kwargs = dict(self.chat_template_kwargs or {})
        self.role_sampling = {str(k): dict(v) for k, v in (self.role_sampling or {}).items()}
        self.role_policies = dict(self.role_policies or {})
        self.train_roles = list(self.train_roles) if self.train_roles is not None else None
        self.prompt_prefix = [dict(m) for m in (self.prompt_prefix or [])]
        self.sources = dict(self.sources or {})
        if isinstance(self.vllm_servers, str):  # "URL,URL" from a flag or a YAML scalar
            self.vllm_servers = [u.strip() for u in self.vllm_servers.split(",") if u.strip()]
        self.vllm_servers = list(self.vllm_servers or [])
        self.check()

    # ------------------------------------------------------------------ validation
    def check(self) -> None:
        """Raise :class:`ConfigError` for values that can never work."""
        _check_types(self)
        if self.algorithm is not None and self.algorithm not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.keep is not None and self.keep not in KEEP_RULES:
            raise ConfigError(f"keep must be one of {KEEP_RULES}, got {self.keep!r}")
        if self.recipe is not None and self.recipe not in recipes.RECIPES:
            close = difflib.get_close_matches(self.recipe, list(recipes.RECIPES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown recipe {self.recipe!r}{hint}; recipes: {', '.join(recipes.RECIPES)}"
            )
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"backend {self.backend!r} is not available; known backends: {BACKENDS}"
            )
        if self.backend == "vllm-server" and not self.vllm_servers:
            raise ConfigError(
                "backend vllm-server needs vllm_servers: the base URLs of running `vllm serve` "
                "processes, e.g. --vllm-servers http://127.0.0.1:8000,http://127.0.0.1:8001"
            )
        if self.dist_timeout_s <= 0:
            raise ConfigError(f"dist_timeout_s must be > 0, got {self.dist_timeout_s}")
        if self.sampling not in (None, "tree", "parallel"):
            raise ConfigError(f"sampling must be 'tree' or 'parallel', got {self.sampling!r}")
        if self.keep_scope not in (None, "branch", "instance"):
            raise ConfigError(f"keep_scope must be 'branch' or 'instance', got {self.keep_scope!r}")
        if self.per_role_models not in ("adapters", "models"):
            raise ConfigError("per_role_models must be 'adapters' or 'models'")
        if self.old_logprobs not in ("auto", "rollout", "recompute"):
            raise ConfigError("old_logprobs must be 'auto', 'rollout' or 'recompute'")
        if self.kl_loss_type not in (None, "k1", "k2", "k3"):
            raise ConfigError("kl_loss_type must be 'k1', 'k2' or 'k3'")
        positive = {
            "candidates": self.candidates,
            "instances_per_step": self.instances_per_step,
            "max_new_tokens": self.max_new_tokens,
            "gen_batch_size": self.gen_batch_size,
            "micro_batch_size": self.micro_batch_size,
            "ppo_epochs": self.ppo_epochs,
            "ppo_minibatches": self.ppo_minibatches,
            "keep_n": self.keep_n,
            "max_branches": self.max_branches,
            "env_workers": self.env_workers,
            "save_every": self.save_every,
            "keep_checkpoints": self.keep_checkpoints,
        }
        for name, value in positive.items():
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        for name in (
            "steps",
            "eval_episodes",
            "minibatch_size",
            "lora_rank",
            "eval_every",
            "demos",
            "micro_batch_tokens",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} must be >= 0, got {value}")
        if (
            self.candidates is not None
            and self.keep_n is not None
            and self.keep_n > self.candidates
        ):
            raise ConfigError(
                f"keep_n ({self.keep_n}) cannot exceed candidates ({self.candidates})"
            )
        for name in (
            "temperature",
            "eval_temperature",
            "kl_loss_coef",
            "kl_reward_coef",
            "entropy_coef",
            "mpt_target_entropy",
            "weight_decay",
        ):
            if (getattr(self, name) or 0.0) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if self.mpt_mask_tau is not None and not 0 <= self.mpt_mask_tau <= 1:
            raise ConfigError("mpt_mask_tau must lie in [0, 1] (0 = off)")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError("top_p must lie in (0, 1]")
        if self.lora_dropout is not None and not 0 <= self.lora_dropout < 1:
            raise ConfigError("lora_dropout must lie in [0, 1)")
        if self.clip_eps <= 0 or (self.clip_eps_high is not None and self.clip_eps_high <= 0):
            raise ConfigError("clip_eps (and clip_eps_high) must be > 0")
        if self.lr is not None and self.lr <= 0:
            raise ConfigError("lr must be > 0")
        for role, params in self.role_sampling.items():
            bad = sorted(set(params) - _ROLE_SAMPLING_KEYS)
            if bad:
                raise ConfigError(
                    f"role_sampling[{role!r}] has unknown key(s) {bad}; allowed: "
                    f"{sorted(_ROLE_SAMPLING_KEYS)}"
                )
        for role, pid in self.role_policies.items():
            if not isinstance(pid, str) or not pid or "/" in pid:
                raise ConfigError(f"role_policies[{role!r}] must be a policy name without '/'")
        for i, m in enumerate(self.prompt_prefix):
            if set(m) != {"role", "content"} or m["role"] not in ("system", "user", "assistant"):
                raise ConfigError(
                    f"prompt_prefix[{i}] must be {{'role': system|user|assistant, 'content': str}}"
                )

    # ------------------------------------------------------------------ auto values
    def recipe_obj(self) -> recipes.Recipe:
        """The recipe this run follows: ``recipe``, or the setting's paper recipe."""
        if self.recipe is not None:
            return recipes.RECIPES[self.recipe]
        try:
            return recipes.recipe_for(self.env)
        except ValueError as exc:  # an unknown env id
            raise ConfigError(str(exc)) from None

    def resolved(self, cuda: bool | None = None) -> TrainConfig:
        """A copy with every auto (``None``) value filled in from the recipe and the device.

        ``sources`` of the copy says where each value came from: ``"user"``, the recipe's
        paper section, its CPU scale-down, or a suite default (see
        :mod:`adapters.training.recipes`)."""
        if cuda is None:
            cuda = _cuda_wanted(self.device)
        c = dataclasses.replace(
            self,
            env_config=dict(self.env_config),
            chat_template_kwargs=dict(self.chat_template_kwargs),
            role_sampling={k: dict(v) for k, v in self.role_sampling.items()},
            role_policies=dict(self.role_policies),
            sources=dict(self.sources),
        )
        if self.sources:  # already resolved (e.g. loaded from a run directory)
            c.check()
            return c
        recipe = c.recipe_obj()
        c.recipe = recipe.name
        src = c.sources

        def pick(name: str) -> tuple[Any, str] | None:
            if not cuda and name in recipe.cpu:
                value, why = recipe.cpu[name]
                return value, f"recipe {recipe.name}: {why}"
            if name in recipe.values:
                value, why = recipe.values[name]
                return value, f"recipe {recipe.name}: {why}"
            if name in recipes.DEVICE_DEFAULTS:
                cpu_v, cuda_v, why = recipes.DEVICE_DEFAULTS[name]
                if cuda or cpu_v == cuda_v:
                    return (cuda_v if cuda else cpu_v), why
                return cpu_v, f"{why} (CPU scale-down; CUDA: {cuda_v!r})"
            return None

        if c.algorithm is not None and c.sampling is None:  # the user changed the algorithm
            c.sampling = "tree" if c.algorithm == "at-grpo" else "parallel"
            src["sampling"] = f"follows algorithm {c.algorithm}"
        for name in AUTO_FIELDS:
            if name in src:
                continue
            if getattr(c, name) is not None:
                src[name] = "user"
                continue
            got = pick(name)
            if got is not None:
                setattr(c, name, copy.deepcopy(got[0]))
                src[name] = got[1]
        for name in MERGED_FIELDS:  # the recipe's keys, then the user's on top
            got = pick(name)
            user = getattr(c, name)
            base = copy.deepcopy(got[0]) if got is not None else {}
            if name == "role_sampling":
                merged = {r: {**base.get(r, {}), **user.get(r, {})} for r in {*base, *user}}
            else:
                merged = {**base, **user}
            setattr(c, name, merged)
            src[name] = "user" if user else (got[1] if got is not None else "suite default")
        env_sources = {
            k: (v, f"recipe {recipe.name}: {why}") for k, (v, why) in recipe.env_config.items()
        }
        if not cuda:
            for k, (v, why) in recipes.cpu_instance_options(c.env).items():
                env_sources[k] = (v, why)
            for k, (v, why) in recipe.cpu_env_config.items():
                env_sources[k] = (v, f"recipe {recipe.name}: {why}")
        for key, (value, why) in env_sources.items():
            if key in c.env_config:
                src[f"env_config.{key}"] = "user"
            else:
                c.env_config[key] = value
                src[f"env_config.{key}"] = why
        if c.role_policies:
            src["role_policies"] = "user"
        lora = (c.lora_rank or 0) > 0
        if c.lora_alpha is None and lora:
            c.lora_alpha = float(2 * (c.lora_rank or 0))
            src["lora_alpha"] = "2 x lora_rank"
        if c.dtype == "auto":
            c.dtype = "bfloat16" if (cuda and lora) else "float32"
            src["dtype"] = "bfloat16 for LoRA on CUDA, else float32"
        if c.old_logprobs == "auto":
            c.old_logprobs = "rollout" if c.dtype == "float32" else "recompute"
            src["old_logprobs"] = "the sampler's in float32, recomputed in lower precision"
        if c.sampling is None:
            c.sampling = "tree" if c.algorithm == "at-grpo" else "parallel"
        if c.candidates is not None and c.keep_n is not None and c.keep_n > c.candidates:
            raise ConfigError(f"keep_n ({c.keep_n}) cannot exceed candidates ({c.candidates})")
        if c.algorithm == "tr-reinforce++" and (c.kl_reward_coef or 0.0) > 0:
            raise ConfigError(
                "tr-reinforce++ gives one advantage per sample (Eq. 1 of MAE/SAGE), which has no "
                "room for a token-level KL reward; use algorithm tr-reinforce++-token with "
                "kl_reward_coef, or kl_loss_coef"
            )
        c.check()
        return c

    def cpu_scale_down(self) -> dict[str, Any]:
        """The resolved values a CPU run took from a CPU scale-down (a recipe's ``cpu`` values,
        the setting's CPU instance options, a device default's CPU value), by field (``env_config.KEY`` for an env
        option). Their sources are the ones that name the CPU; on CUDA there are none."""
        out: dict[str, Any] = {}
        for name, why in self.sources.items():
            if "CPU" in why:
                key = name.removeprefix("env_config.")
                out[name] = self.env_config.get(key) if key != name else getattr(self, name)
        return out

    def sampling_temperature(self, role: str) -> float:
        """The temperature ``role`` samples at during training, for scoring its log-probs
        (greedy decoding, temperature 0, is scored at 1)."""
        t = self.role_sampling.get(role, {}).get("temperature", self.temperature)
        return float(t) if t else 1.0

    def described(self) -> str:
        """The config as YAML with the source of every resolved value as a line comment."""
        import yaml

        lines = []
        for key, value in self.to_dict().items():
            if key == "sources":
                continue
            text = yaml.safe_dump({key: value}, sort_keys=False, width=1000).rstrip("\n")
            why = self.sources.get(key)
            if key == "env_config":
                subs = [
                    f"{k}: {self.sources[f'env_config.{k}']}"
                    for k in value
                    if f"env_config.{k}" in self.sources
                ]
                why = "; ".join(subs) or None
            first, *rest = text.split("\n")
            lines.append(f"{first}  # {why}" if why and not rest else first)
            if rest:
                lines.extend(rest)
                if why:
                    lines[-1 - len(rest)] += f"  # {why}"
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        """Write the config as YAML (with each value's source as a comment once resolved)."""
        import yaml

        text = self.described() if self.sources else yaml.safe_dump(self.to_dict(), sort_keys=False)
        Path(path).write_text(text)

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        return config_from_dict(load_yaml(path))

    def replace(self, **changes: Any) -> TrainConfig:
        return config_from_dict({**self.to_dict(), **changes})


# ---------------------------------------------------------------------------------------------
# helpers


def _cuda_wanted(device: str) -> bool:
    if device == "auto":
        try:
            import torch
        except ImportError:  # pragma: no cover
            return False
        return bool(torch.cuda.is_available())
    return str(device).startswith("cuda")


def field_types() -> dict[str, Any]:
    """Field name -> resolved type annotation."""
    return typing.get_type_hints(TrainConfig)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _type_ok(value: Any, tp: Any) -> bool:
    base, optional = _strip_optional(tp)
    if value is None:
        return optional
    origin = typing.get_origin(base)
    if origin is Literal:
        return value in typing.get_args(base)
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is bool:
        return isinstance(value, bool)
    if base is str:
        return isinstance(value, str)
    if origin is dict or base is dict:
        return isinstance(value, dict)
    if origin is list or base is list:
        return isinstance(value, list)
    return True


def _check_types(cfg: TrainConfig) -> None:
    for name, tp in field_types().items():
        value = getattr(cfg, name)
        base, _ = _strip_optional(tp)
        if base is float and isinstance(value, str):  # YAML reads 1e-4 as a string
            try:
                value = float(value)
            except ValueError:
                pass
            else:
                setattr(cfg, name, value)
        if not _type_ok(value, tp):
            base, _ = _strip_optional(tp)
            if typing.get_origin(base) is Literal:
                raise ConfigError(f"{name} must be one of {typing.get_args(base)}, got {value!r}")
            raise ConfigError(f"{name} has the wrong type: {value!r} (expected {tp})")
        if isinstance(value, int) and not isinstance(value, bool):
            base, _ = _strip_optional(tp)
            if base is float:
                setattr(cfg, name, float(value))


def _unknown_key_error(keys: list[str], where: str) -> ConfigError:
    names = sorted(f.name for f in fields(TrainConfig))
    parts = []
    for k in keys:
        close = difflib.get_close_matches(k.replace("-", "_"), names, n=1)
        parts.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ConfigError(
        f"unknown key(s) in {where}: {', '.join(parts)}. Valid keys: {', '.join(names)}"
    )


def config_from_dict(data: dict[str, Any], where: str = "the configuration") -> TrainConfig:
    """Build a :class:`TrainConfig` from a mapping, with a clear error for unknown keys."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping of field names to values")
    names = {f.name for f in fields(TrainConfig)}
    unknown = [k for k in data if k not in names]
    if unknown:
        raise _unknown_key_error(unknown, where)
    try:
        return TrainConfig(**data)
    except TypeError as exc:  # pragma: no cover - guarded above
        raise ConfigError(str(exc)) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML (or JSON) mapping from ``path``."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    data = yaml.safe_load(p.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p} must contain a mapping of field names to values")
    return data


# Extra spellings of some flags (the issue tracker and papers' scripts use these names).
