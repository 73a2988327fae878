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

ALGORITHMS = ("at-grpo", "grpo", "reinforce++", "tr-reinforce++")
BACKENDS = ("transformers", "vllm", "vllm-server")


class ConfigError(ValueError):
    """A bad configuration value or key (the message says which and why)."""


@dataclass
class TrainConfig:
    """A training run. ``None`` = auto (see the module docstring); lists/dicts are copied."""

    # ---- the setting
    env: str = "sokoban"
    env_config: dict[str, Any] = field(default_factory=dict)
    instance: dict[str, Any] | None = None  # explicit instance for every train and eval episode
    system_prompt: str | None = None  # a system message prepended to every prompt
    prompt_prefix: list[dict[str, str]] = field(default_factory=list)  # few-shot messages
    demos: int | None = None  # oracle demonstrations per role (in-context examples)
    # ---- the model
    model: str = "smollm2"  # smollm2 | tiny | local path | hub name | config:PATH (random init)
    dtype: str = "auto"
    lora_rank: int = 8  # 0 = full fine-tuning
    lora_alpha: float | None = None  # None = 2 * rank
    lora_dropout: float = 0.0
    lora_target: str = "all-linear"
    per_role: bool = False  # one policy per role instead of one shared policy
    per_role_models: Literal["adapters", "models"] = "adapters"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. enable_thinking
    # ---- the algorithm
    algorithm: Literal["at-grpo", "grpo", "reinforce++", "tr-reinforce++"] = "at-grpo"
    sampling: Literal["tree", "parallel"] | None = None  # None: tree for at-grpo, else parallel
    candidates: int | None = None  # K
    keep: Literal["best", "random", "balanced", "adaptive"] = "best"
    keep_n: int = 1
    max_branches: int = 16
    normalize_std: bool = True  # GRPO: divide by the group std (False = Dr. GRPO)
    instances_per_step: int | None = None
    steps: int | None = None
    lr: float | None = None
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    ppo_epochs: int = 1
    minibatch_size: int = 0  # samples per optimizer step; 0 = the whole batch
    micro_batch_size: int | None = None  # sequences per forward/backward (gradient accumulation)
    micro_batch_tokens: int | None = None  # padded tokens per forward/backward (0 = no limit)
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    kl_loss_coef: float = 0.0
    kl_loss_type: Literal["k1", "k2", "k3"] = "k3"
    kl_reward_coef: float = 0.0  # REINFORCE++ token-level KL penalty beta (CoMAS Eq. 9)
    gamma: float = 1.0
    skip_zero_advantage: bool = True
    share_prompt_forward: bool = True
    old_logprobs: Literal["auto", "rollout", "recompute"] = "auto"
    # ---- sampling
    temperature: float | None = None
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int | None = None
    gen_batch_size: int | None = None
    # ---- evaluation
    eval_episodes: int | None = None
    eval_split: str = "val"
    eval_every: int = 0  # 0 = only before and after training
    eval_temperature: float = 0.0
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

    def __post_init__(self) -> None:
        self.env_config = dict(self.env_config or {})
        self.chat_template_kwargs = dict(self.chat_template_kwargs or {})
        self.prompt_prefix = [dict(m) for m in (self.prompt_prefix or [])]
        if isinstance(self.vllm_servers, str):  # "URL,URL" from a flag or a YAML scalar
            self.vllm_servers = [u.strip() for u in self.vllm_servers.split(",") if u.strip()]
        self.vllm_servers = list(self.vllm_servers or [])
        self.check()

    # ------------------------------------------------------------------ validation
    def check(self) -> None:
        """Raise :class:`ConfigError` for values that can never work."""
        _check_types(self)
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.keep not in KEEP_RULES:
            raise ConfigError(f"keep must be one of {KEEP_RULES}, got {self.keep!r}")
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
        if self.per_role_models not in ("adapters", "models"):
            raise ConfigError("per_role_models must be 'adapters' or 'models'")
        if self.old_logprobs not in ("auto", "rollout", "recompute"):
            raise ConfigError("old_logprobs must be 'auto', 'rollout' or 'recompute'")
        if self.kl_loss_type not in ("k1", "k2", "k3"):
            raise ConfigError("kl_loss_type must be 'k1', 'k2' or 'k3'")
        positive = {
            "candidates": self.candidates,
            "instances_per_step": self.instances_per_step,
            "max_new_tokens": self.max_new_tokens,
            "gen_batch_size": self.gen_batch_size,
            "micro_batch_size": self.micro_batch_size,
            "ppo_epochs": self.ppo_epochs,
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
        if self.candidates is not None and self.keep_n > self.candidates:
            raise ConfigError(
                f"keep_n ({self.keep_n}) cannot exceed candidates ({self.candidates})"
            )
        for name in ("temperature", "eval_temperature", "kl_loss_coef", "kl_reward_coef"):
            if (getattr(self, name) or 0.0) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p must lie in (0, 1]")
        if self.clip_eps <= 0 or (self.clip_eps_high is not None and self.clip_eps_high <= 0):
            raise ConfigError("clip_eps (and clip_eps_high) must be > 0")
        if self.lr is not None and self.lr <= 0:
            raise ConfigError("lr must be > 0")
        for i, m in enumerate(self.prompt_prefix):
            if set(m) != {"role", "content"} or m["role"] not in ("system", "user", "assistant"):
                raise ConfigError(
                    f"prompt_prefix[{i}] must be {{'role': system|user|assistant, 'content': str}}"
                )

    # ------------------------------------------------------------------ auto values
    def resolved(self, cuda: bool | None = None) -> TrainConfig:
        """A copy with every auto (``None``) value filled in for the device."""
        if cuda is None:
            cuda = _cuda_wanted(self.device)
        c = dataclasses.replace(
            self,
            env_config=dict(self.env_config),
            chat_template_kwargs=dict(self.chat_template_kwargs),
        )
        lora = c.lora_rank > 0

        if c.sampling is None:
            c.sampling = "tree" if c.algorithm == "at-grpo" else "parallel"
        for name, (cpu_value, cuda_value) in recipes.DEVICE_DEFAULTS.items():
            if getattr(c, name) is None:
                setattr(c, name, cuda_value if cuda else cpu_value)
        if c.lr is None:
            c.lr = 1e-4 if lora else 1e-6
        if c.lora_alpha is None and lora:
            c.lora_alpha = float(2 * c.lora_rank)
        if c.dtype == "auto":
            c.dtype = "bfloat16" if (cuda and lora) else "float32"
        if c.old_logprobs == "auto":
            c.old_logprobs = "rollout" if c.dtype == "float32" else "recompute"
        for key, (cpu_value, cuda_value) in recipes.DEVICE_ENV_DEFAULTS.items():
            value = cuda_value if cuda else cpu_value
            if value is not None:
                c.env_config.setdefault(key, value)
        if c.candidates is not None and c.keep_n > c.candidates:
            raise ConfigError(f"keep_n ({c.keep_n}) cannot exceed candidates ({c.candidates})")
        c.check()
        return c

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        import yaml

        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

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
