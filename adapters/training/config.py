"""``TrainConfig``: one typed dataclass describes a training run (CLI flags and/or a YAML file).

Every field is a flag of ``python -m adapters.train`` (``lora_rank`` -> ``--lora-rank``) and a key
of the YAML file given with ``--config run.yaml``; flags override the file, unknown keys are an
error that names the closest valid key. The resolved config (``auto`` values filled in) is saved
as ``config.yaml`` in the output directory, and ``--resume DIR`` reads it back.

Fields left at ``None`` mean *auto*. :meth:`TrainConfig.resolved` fills them once - the recipe
(:mod:`adapters.training.recipes`), then the device defaults and the CPU scale-down - records
where each value came from (``sources``, shown by ``--print-config``) and returns a frozen copy
in which no auto field is ``None``. The fields that may stay ``None`` mean *none*, not *auto*
(``instance``, ``system_prompt``, ``train_roles`` = all roles, ``clip_eps_high`` = ``clip_eps``,
``threads``, ``vllm_sync_dir``, ``ray_address``; ``output_dir`` until the trainer picks one).
Consumers read typed views of the resolved config instead of re-defaulting: the update reads
:class:`UpdateConfig`, the rollout :class:`~adapters.rollout.RolloutConfig`, the trainer's loop
:class:`LoopConfig` (:meth:`TrainConfig.view`). Each field's ``--help`` line is its
``metadata["help"]``, which :mod:`adapters.training.flags` reads.
Algorithms (``--algorithm``) are the names of the estimator table
:data:`adapters.training.advantages.ESTIMATORS`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from adapters.rollout.engine import RolloutConfig
from adapters.rollout.keep import KEEP_RULES
from adapters.training import recipes
from adapters.training.advantages import ESTIMATORS

__all__ = [
    "BACKENDS",
    "ConfigError",
    "LoopConfig",
    "TrainConfig",
    "UpdateConfig",
    "config_from_dict",
    "load_yaml",
]

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
    "minibatch_size",
    "loss_agg",
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
    "max_prompt_tokens",
    "eval_temperature",
    "eval_episodes",
    "lora_rank",
    "lora_alpha",
    "lora_dropout",
    "per_role",
    "demos",
    "init",
    "gen_batch_size",
    "micro_batch_size",
    "micro_batch_tokens",
    "pipeline",
    "segment_tokens",
    "max_segments",
)
# dict fields merged key by key over the recipe's value
MERGED_FIELDS = ("chat_template_kwargs", "role_sampling")


_ROLE_SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_new_tokens", "stop"}


V = TypeVar("V")


class ConfigError(ValueError):
    """A bad configuration value or key (the message says which and why)."""


def opt(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    factory: Any = dataclasses.MISSING,
    compare: bool = True,
) -> Any:
    """A :class:`TrainConfig` field and its one-line ``--help`` text (``metadata["help"]``, which
    :mod:`adapters.training.flags` reads)."""
    meta = {"help": doc}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, compare=compare, metadata=meta)
    return field(default=default, compare=compare, metadata=meta)


@dataclass
class TrainConfig:
    """A training run. ``None`` = auto: filled from the recipe or the device by :meth:`resolved`
    (see :mod:`adapters.training.recipes`), which returns a frozen copy; lists and dicts are
    copied."""

    # ---- the setting and its recipe
    env: str = opt(
        "sokoban",
        "setting id (see envs.list_envs()), or package.module:id for one registered elsewhere",
    )
    recipe: str | None = opt(
        None, "training recipe (default: the setting's paper recipe); see the list below"
    )
    env_config: dict[str, Any] = opt(
        doc="setting option KEY=VALUE (repeatable), e.g. --env-config mode=single", factory=dict
    )
    instance: dict[str, Any] | None = opt(
        None, "explicit instance as JSON for every train/eval episode"
    )
    system_prompt: str | None = opt(None, "system message prepended to every prompt")
    prompt_prefix: list[dict[str, str]] = opt(
        doc="few-shot messages as JSON: [{role, content}, ...]", factory=list
    )
    demos: int | None = opt(
        None, "worked examples per role from the setting's oracle, shown before each prompt"
    )
    # ---- the model and which policy plays which role
    model: str = opt(
        "smollm2", "smollm2 (embedded), tiny, a local checkpoint, a hub name, or config:PATH"
    )
    init: str | None = opt(
        None,
        "where the policy starts: none (the model as it is) | cold-start[:ROLE,...] (fine-tuned "
        "on the setting's oracle turns of every role, or of the roles named, train split: made "
        "once, then cached; adapters.sft) | PATH (a peft adapter directory merged into the "
        "model's weights)",
    )
    dtype: str = opt(
        "auto", "model dtype: auto (bfloat16 for LoRA on CUDA, else float32) | float32 | bfloat16"
    )
    lora_rank: int | None = opt(None, "LoRA rank; 0 = full fine-tuning")
    lora_alpha: float | None = opt(None, "LoRA alpha (default: 2 x rank)")
    lora_dropout: float | None = opt(None, "LoRA dropout")
    lora_target: str = opt(
        "all-linear", "LoRA target modules: all-linear, or comma-separated module names"
    )
    per_role: bool | None = opt(None, "one policy per role (default: the recipe's)")
    role_policies: dict[str, str] = opt(
        doc=(
            'role -> policy name as JSON, M policies for N roles, e.g. \'{"challenger": "a", '
            '"planner": "a"}\''
        ),
        factory=dict,
    )
    train_roles: list[str] | None = opt(
        None, "roles whose samples are trained, e.g. solver,judge (default: all)"
    )
    per_role_models: Literal["adapters", "models"] = opt(
        "adapters", "per-role policies as LoRA adapters on one base, or separate models"
    )
    chat_template_kwargs: dict[str, Any] = opt(
        doc=(
            "apply_chat_template argument KEY=VALUE (repeatable) or a JSON mapping, e.g. "
            "enable_thinking=false (Qwen3's no-thinking mode, as in the AT-GRPO paper)"
        ),
        factory=dict,
    )
    # ---- the algorithm
    algorithm: str | None = opt(None, "a name of advantages.ESTIMATORS")
    sampling: Literal["tree", "parallel"] | None = opt(
        None,
        "tree (K candidates per agent-turn) | parallel (K episodes per instance); default: the "
        "algorithm's",
    )
    candidates: int | None = opt(
        None, "K: candidates per agent-turn (tree) or episodes per instance (parallel)"
    )
    keep: Literal["best", "random", "balanced", "adaptive"] | None = opt(
        None, "tree sampling keep rule: best | random | balanced | adaptive"
    )
    keep_n: int | None = opt(
        None, "tree sampling: candidates that continue per branch (or per instance)"
    )
    keep_scope: Literal["branch", "instance"] | None = opt(
        None, "tree sampling: keep per branch, or per instance across branches (MarsRL)"
    )
    max_branches: int = opt(16, "tree sampling: cap on live branches per instance when keep_n > 1")
    normalize_std: bool = opt(True, "GRPO: divide by the group std (False = Dr. GRPO)")
    instances_per_step: int | None = opt(None, "env instances rolled out per training step")
    steps: int | None = opt(None, "training steps")
    lr: float | None = opt(None, "learning rate (AdamW)")
    weight_decay: float | None = opt(None, "AdamW weight decay")
    max_grad_norm: float | None = opt(None, "gradient-norm clip")
    ppo_epochs: int | None = opt(None, "PPO epochs over each step's batch")
    ppo_minibatches: int | None = opt(
        None, "optimizer steps per PPO epoch (the batch split evenly)"
    )
    minibatch_size: int | None = opt(
        None, "samples per optimizer step (0 = use --ppo-minibatches; default: the recipe's)"
    )
    micro_batch_size: int | None = opt(
        None, "sequences per forward/backward (gradient accumulation)"
    )
    micro_batch_tokens: int | None = opt(None, "padded tokens per forward/backward (0 = no limit)")
    clip_eps: float = opt(0.2, "PPO clip range")
    clip_eps_high: float | None = opt(None, "upper PPO clip range (default: clip_eps)")
    loss_agg: (
        Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "group-mean"] | None
    ) = opt(
        None,
        "policy loss averaging: group-mean (AT-GRPO Eq. 3) | token-mean (verl) | "
        "seq-mean-token-mean | seq-mean-token-sum",
    )
    kl_loss_coef: float | None = opt(None, "weight of the KL loss against the reference model")
    kl_loss_type: Literal["k1", "k2", "k3"] | None = opt(None, "estimator of the KL loss")
    kl_reward_coef: float | None = opt(
        None, "REINFORCE++ token-level KL penalty in the reward (beta)"
    )
    entropy_coef: float | None = opt(None, "entropy bonus weight (MAE: 0.001)")
    mpt_mask_tau: float | None = opt(
        None,
        "drop positive samples' tokens with probability >= tau from the policy gradient while "
        "the entropy is below --mpt-target-entropy (UloRL Eq. 10); 0 = off",
    )
    mpt_target_entropy: float | None = opt(
        None, "target entropy of the well-mastered-token masking (UloRL's sigma)"
    )
    gamma: float | None = opt(None, "discount of REINFORCE++ returns")
    skip_zero_advantage: bool = opt(
        True,
        "leave samples with all-zero advantages out of the update (without KL loss or entropy "
        "bonus)",
    )
    share_prompt_forward: bool = opt(
        True, "run a prompt shared by a micro-batch's completions once in the training forward"
    )
    update_precision: Literal["auto", "float32", "bfloat16"] = opt(
        "auto",
        "the update's forward and backward passes: auto (bfloat16 autocast over float32 weights "
        "on a CPU that computes bfloat16 natively, else the model's dtype) | float32 | bfloat16",
    )
    old_logprobs: Literal["auto", "rollout", "recompute"] = opt(
        "auto",
        "log-probs of the PPO ratio's denominator: auto (the sampler's in float32, else "
        "recomputed) | rollout | recompute",
    )
    # ---- sampling
    temperature: float | None = opt(None, "sampling temperature of training rollouts")
    top_p: float | None = opt(None, "nucleus sampling p")
    top_k: int | None = opt(None, "top-k sampling (-1: off)")
    role_sampling: dict[str, dict[str, Any]] = opt(
        doc='per-role sampling as JSON, e.g. \'{"critic": {"temperature": 0.1}}\'', factory=dict
    )
    max_new_tokens: int | None = opt(None, "tokens per completion")
    max_prompt_tokens: int | None = opt(
        None,
        "samples whose prompt is longer (tokens) are skipped from the update and counted "
        "(samples_prompt_over_limit, as verl's filter_overlong_prompts); 0 = no cap",
    )
    gen_batch_size: int | None = opt(None, "sequences per generate call")
    # ---- rollout scheduling (adapters.training.schedule)
    pipeline: Literal["none", "agent"] | None = opt(
        None,
        "none (whole trajectories per step) | agent (MarsRL 3.3: one agent stage of every "
        "in-flight trajectory per step; default on CUDA for the marsrl recipe)",
    )
    segment_tokens: int | None = opt(
        None,
        "--pipeline agent: decode at most this many tokens per completion per step (0 = off; "
        "default: the recipe's, MarsRL on CUDA 16384)",
    )
    max_segments: int | None = opt(
        None, "--pipeline agent: segments a completion may take (0 = off; MarsRL on CUDA 4)"
    )
    max_staleness: int = opt(
        0,
        "generation runs ahead of the update by at most N policy versions (0 = synchronous); "
        "the loss then weights tokens by min(pi_old / pi_behaviour, --rollout-is-cap)",
    )
    rollout_is_cap: float = opt(
        2.0, "truncation C of the importance weight of stale tokens (verl's rollout_is_threshold)"
    )
    # ---- evaluation
    eval_episodes: int | None = opt(
        None, "validation episodes before and after training (0: no evaluation)"
    )
    eval_split: str = opt("val", "the split evaluated")
    eval_every: int = opt(0, "0 = only before and after training")
    eval_temperature: float | None = opt(None, "evaluation temperature (0: greedy)")
    eval_dataset: list[str] = opt(
        doc="benchmarks to pass over at each evaluation point: NAME or NAME=PATH, comma-separated "
        "(e.g. aime24=aime_2024.jsonl,aime25); needs --eval-episodes > 0",
        factory=list,
    )
    # ---- the run
    seed: int = opt(
        0, "run seed (instances, sampling, LoRA initialisation and minibatch order derive from it)"
    )
    output_dir: str | None = opt(
        None, "run directory (checkpoints, logs, plots); default runs/<env>-<algo>-<time>"
    )
    device: str = opt("auto", "auto | cpu | cuda | cuda:N")
    generation_model: Literal["merged", "train"] = opt(
        "merged",
        "transformers backend: generate from a copy with the LoRA adapter merged, bfloat16 where "
        "the device has it, refreshed after each update (merged) | on the training modules "
        "(train)",
    )
    backend: str = opt(
        "transformers",
        "rollout backend: transformers | vllm (needs vllm: scripts/setup_vllm.sh) | vllm-server "
        "(generation on running `vllm serve` processes: --vllm-servers)",
    )
    save_every: int = opt(1, "checkpoint every N steps")
    keep_checkpoints: int = opt(2, "checkpoints kept")
    plot_every: int = opt(5, "redraw training_curve.png every N steps (0: only at the end)")
    env_workers: int = opt(2, "threads (or Ray actors) that step the envs")
    threads: int | None = opt(None, "torch CPU threads (None: leave torch's setting)")
    progress: bool = opt(True, "show a progress bar")
    save_final: bool = opt(True, "export the final policies to <output_dir>/final")
    # ---- scale-out: torchrun ranks, vLLM servers, Ray (adapters.training.distributed)
    dp_mode: Literal["auto", "ddp", "fsdp", "hsdp"] = opt(
        "auto",
        "data parallelism under torchrun: auto (DDP with LoRA, FSDP2 for full fine-tuning) | ddp "
        "| fsdp | hsdp (FSDP2 sharded within a node, replicated across nodes)",
    )
    dist_timeout_s: float = opt(
        600.0, "seconds a collective may wait for the other ranks before the run fails"
    )
    vllm_servers: list[str] = opt(
        doc=(
            "backend vllm-server: comma-separated base URLs of `vllm serve` replicas (POLICY=URL "
            "for per-role full fine-tuning)"
        ),
        factory=list,
    )
    vllm_sync_dir: str | None = opt(
        None,
        "backend vllm-server: directory the servers can read, for adapters and weights pushed "
        "after each update (default: <output_dir>/vllm-sync)",
    )
    env_pool: Literal["local", "ray"] = opt(
        "local", "where envs step: local (threads) | ray (RayEnvPool actors)"
    )
    ray_address: str | None = opt(
        None, "env_pool ray: ray.init(address=...) of a running cluster, e.g. auto"
    )
    # where each resolved value came from (filled by resolved(); not a setting)
    sources: dict[str, str] = opt(
        doc="where each resolved value came from (filled by resolved(); not a flag)",
        factory=dict,
        compare=False,
    )

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
        if self.algorithm is not None and self.algorithm not in ESTIMATORS:
            raise ConfigError(
                f"algorithm must be one of {tuple(ESTIMATORS)}, got {self.algorithm!r}"
            )
        if self.keep is not None and self.keep not in KEEP_RULES:
            raise ConfigError(f"keep must be one of {KEEP_RULES}, got {self.keep!r}")
        if self.init not in (None, "none") and not str(self.init).startswith("cold-start"):
            adapter = Path(str(self.init)) / "adapter_config.json"
            if not adapter.is_file():
                raise ConfigError(
                    f"init must be none, cold-start[:ROLE,...] or a peft adapter directory; "
                    f"{self.init!r} has no adapter_config.json"
                )
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
        if self.pipeline not in (None, "none", "agent"):
            raise ConfigError(f"pipeline must be 'none' or 'agent', got {self.pipeline!r}")
        for name in ("segment_tokens", "max_segments", "max_staleness"):
            if (getattr(self, name) or 0) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        given = [v for v in (self.segment_tokens, self.max_segments) if v is not None]
        if any(given) and not (len(given) == 2 and all(given)):  # one alone may only be 0
            raise ConfigError("segment_tokens and max_segments are set together (0 = off)")
        if self.segment_tokens and self.pipeline == "none":
            raise ConfigError("segment rollouts run inside the agent pipeline: --pipeline agent")
        if self.rollout_is_cap < 1:
            raise ConfigError(f"rollout_is_cap must be >= 1, got {self.rollout_is_cap}")
        for name, value in positive.items():
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        if self.eval_dataset and self.eval_episodes == 0:
            raise ConfigError("eval_dataset runs at the evaluation points: set eval_episodes > 0")
        for name in (
            "steps",
            "eval_episodes",
            "minibatch_size",
            "max_prompt_tokens",
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
            if c.pipeline is None:  # a run directory written before the field existed
                c.pipeline = "none"
            return c._frozen_copy()
        recipe = c.recipe_obj()
        c.recipe = recipe.name
        src = c.sources

        import envs

        setting = envs.spec(c.env)
        per_setting = setting.train_values
        # the CPU values a setting tunes for the embedded model (its cold start, ...)
        embedded = str(c.model).lower() in recipes.EMBEDDED_MODELS
        cpu_setting = setting.cpu_train_values if embedded and not cuda else {}

        def pick(name: str) -> tuple[Any, str] | None:
            if name in cpu_setting:
                value, why = cpu_setting[name]
                return value, f"setting {setting.id}: {why}"
            if not cuda and name in recipe.cpu:
                value, why = recipe.cpu[name]
                return value, f"recipe {recipe.name}: {why}"
            if name in per_setting:
                value, why = per_setting[name]
                return value, f"setting {setting.id}: {why}"
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
            c.sampling = ESTIMATORS[c.algorithm].sampling
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
        if 0 in (self.segment_tokens, self.max_segments):  # one given as 0: segments off
            c.segment_tokens = c.max_segments = 0
            src["segment_tokens"] = src["max_segments"] = "user (0: off)"
        if c.pipeline == "none" and src.get("segment_tokens") != "user":
            c.segment_tokens = c.max_segments = 0  # segments run inside the agent pipeline only
            src["segment_tokens"] = src["max_segments"] = "off without --pipeline agent"
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
        env_sources: dict[str, tuple[Any, str]] = {}  # the setting's own defaults elsewhere
        if not cuda:
            for k, (v, why) in recipes.cpu_instance_options(c.env).items():
                env_sources[k] = (v, why)
        for key in c.env_config:
            src[f"env_config.{key}"] = "user"
        for key, (value, why) in env_sources.items():
            if key not in c.env_config:
                c.env_config[key] = value
                src[f"env_config.{key}"] = why
        if c.role_policies:
            src["role_policies"] = "user"
        lora = (c.lora_rank or 0) > 0
        if c.lora_alpha is None:
            c.lora_alpha = float(2 * (c.lora_rank or 0))
            src["lora_alpha"] = "2 x lora_rank"
        if c.lora_dropout is None:
            c.lora_dropout = 0.0
            src["lora_dropout"] = "suite default"
        if c.dtype == "auto":
            c.dtype = "bfloat16" if (cuda and lora) else "float32"
            src["dtype"] = "bfloat16 for LoRA on CUDA, else float32"
        if c.update_precision == "auto":
            from adapters.policies.models import native_bf16

            fast = not cuda and c.dtype == "float32" and native_bf16("cpu")
            c.update_precision = "bfloat16" if fast else "float32"
            src["update_precision"] = (
                "bfloat16 autocast on a CPU with native bfloat16 (about 2x the float32 update)"
                if fast
                else "the model's dtype"
            )
        if c.old_logprobs == "auto":
            copy_samples = c.backend == "transformers" and c.generation_model == "merged"
            exact = c.dtype == "float32" and c.update_precision == "float32" and not copy_samples
            c.old_logprobs = "rollout" if exact else "recompute"
            src["old_logprobs"] = (
                "the sampler's in float32, recomputed in lower precision or when a merged "
                "generation copy samples"
            )
        if c.sampling is None:
            c.sampling = ESTIMATORS[c.algorithm or "at-grpo"].sampling
        if c.candidates is not None and c.keep_n is not None and c.keep_n > c.candidates:
            raise ConfigError(f"keep_n ({c.keep_n}) cannot exceed candidates ({c.candidates})")
        reason = ESTIMATORS[c.algorithm or "at-grpo"].kl_reward_error
        if reason and (c.kl_reward_coef or 0.0) > 0:
            raise ConfigError(reason)
        return c._frozen_copy()

    def _frozen_copy(self) -> TrainConfig:
        """Check that every auto value is set, then freeze (the end of :meth:`resolved`)."""
        unset = [name for name in AUTO_FIELDS if getattr(self, name) is None]
        if unset:
            raise ConfigError(f"no recipe or suite default sets {unset} for env {self.env!r}")
        self.check()
        object.__setattr__(self, "_frozen", True)
        return self

    @property
    def is_resolved(self) -> bool:
        """True for the frozen result of :meth:`resolved` (every auto value set)."""
        return bool(self.__dict__.get("_frozen", False))

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen", False):
            raise dataclasses.FrozenInstanceError(
                f"cannot set {name!r}: a resolved TrainConfig is frozen; use .replace({name}=...)"
            )
        object.__setattr__(self, name, value)

    def view(self, cls: type[V], **extra: Any) -> V:
        """A typed view of the resolved config: ``cls`` (a dataclass such as
        :class:`UpdateConfig`, :class:`LoopConfig` or :class:`~adapters.rollout.RolloutConfig`)
        built from the fields of the same name, plus ``extra``."""
        c = self if self.is_resolved else self.resolved()
        names = [f.name for f in fields(cls) if f.name not in extra and hasattr(c, f.name)]  # type: ignore[arg-type]
        return cls(**{name: getattr(c, name) for name in names}, **extra)

    def rollout_config(self, *, prompt_seeds: bool = False) -> RolloutConfig:
        """What the rollout engine reads (``prompt_seeds``: set under torch.distributed)."""
        return self.view(RolloutConfig, prompt_seeds=prompt_seeds)

    def cpu_scale_down(self) -> dict[str, Any]:
        """The resolved values a CPU run took from a CPU scale-down (a recipe's ``cpu`` values,
        the setting's CPU instance options, a device default's CPU value), by field
        (``env_config.KEY`` for an env option). Their sources are the ones that name the CPU; on
        CUDA there are none."""
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


@dataclass(frozen=True)
class UpdateConfig:
    """What the update and the trainable models read of a resolved :class:`TrainConfig`, every
    value set (as the rollout reads :class:`~adapters.rollout.RolloutConfig`); :meth:`of`
    builds it. The defaults are only for building one by hand (tests)."""

    algorithm: str = "at-grpo"
    normalize_std: bool = True
    kl_reward_coef: float = 0.0
    gamma: float = 1.0
    kl_loss_coef: float = 0.0
    kl_loss_type: Literal["k1", "k2", "k3"] = "k3"
    entropy_coef: float = 0.0
    mpt_mask_tau: float = 0.0
    mpt_target_entropy: float = 0.2
    skip_zero_advantage: bool = True
    lr: float = 1e-4
    weight_decay: float = 0.01
    lora_rank: int = 0
    lora_alpha: float = 0.0
    lora_dropout: float = 0.0
    lora_target: str = "all-linear"
    seed: int = 0
    ppo_epochs: int = 1
    ppo_minibatches: int = 1
    minibatch_size: int = 0
    micro_batch_size: int = 8
    micro_batch_tokens: int = 0
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "group-mean"] = (
        "token-mean"
    )
    clip_eps: float = 0.2
    clip_eps_high: float | None = None  # None: the same as clip_eps
    max_grad_norm: float = 1.0
    share_prompt_forward: bool = True
    old_logprobs: Literal["auto", "rollout", "recompute"] = "rollout"
    update_precision: Literal["auto", "float32", "bfloat16"] = "float32"
    max_staleness: int = 0
    segment_tokens: int = 0
    rollout_is_cap: float = 2.0

    @classmethod
    def of(cls, cfg: UpdateConfig | TrainConfig) -> UpdateConfig:
        """The update settings of ``cfg`` (resolved first when it is not)."""
        return cfg if isinstance(cfg, UpdateConfig) else cfg.view(cls)

    @property
    def off_policy(self) -> bool:
        """Whether samples may come from older policies (asynchronous rollouts, or segments whose
        tokens span several versions): the update then corrects with the behaviour log-probs."""
        return self.max_staleness > 0 or self.segment_tokens > 0

    @property
    def needs_ref(self) -> bool:
        """Whether the reference model's log-probs are needed: a KL loss, or a KL reward of an
        estimator that has one (``Estimator.needs_ref``)."""
        kl_reward = self.kl_reward_coef > 0 and ESTIMATORS[self.algorithm].needs_ref
        return self.kl_loss_coef > 0 or kl_reward


@dataclass(frozen=True)
class LoopConfig:
    """What the trainer's loop reads of a resolved :class:`TrainConfig` (every value set)."""

    steps: int
    instances_per_step: int
    demos: int
    eval_episodes: int
    eval_temperature: float
    output_dir: str


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


def strip_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; any other type -> ``(type, False)``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def type_ok(value: Any, tp: Any) -> bool:
    """Whether ``value`` fits the field type ``tp`` (Literals, numbers, str, dict, list)."""
    base, optional = strip_optional(tp)
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
        base, _ = strip_optional(tp)
        if base is float and isinstance(value, str):  # YAML reads 1e-4 as a string
            try:
                value = float(value)
            except ValueError:
                pass
            else:
                setattr(cfg, name, value)
        if not type_ok(value, tp):
            base, _ = strip_optional(tp)
            if typing.get_origin(base) is Literal:
                raise ConfigError(f"{name} must be one of {typing.get_args(base)}, got {value!r}")
            raise ConfigError(f"{name} has the wrong type: {value!r} (expected {tp})")
        if isinstance(value, int) and not isinstance(value, bool):
            base, _ = strip_optional(tp)
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
