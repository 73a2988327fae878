"""The sections of a training run that the training layer reads (each knob declared once).

:class:`~adapters.training.config.TrainConfig` composes these with the generation section
(:class:`~adapters.policies.base.GenerationConfig`) and the rollout section
(:class:`~adapters.rollout.engine.RolloutConfig`); each knob here is a flag of
``python -m adapters.train`` (``lora_rank`` -> ``--lora-rank``) with its one default and its one
``--help`` line (:func:`~adapters.policies.knobs.knob`). An *auto* knob starts as ``None`` and
is filled by :meth:`TrainConfig.resolved() <adapters.training.config.TrainConfig.resolved>` from
the user, the recipe and setting (:mod:`adapters.training.recipes`), then the default declared
here (its CPU value without a GPU).

=============  ==============================================================================
section        what reads it
=============  ==============================================================================
``policy``     the model, its adapters and which policy plays which role (``run``,
               ``policy_models``, ``backends``, ``coldstart``)
``update``     the advantage estimator and the PPO update (``update``, ``advantages``,
               ``logprobs``)
``schedule``   the loop's size and how rollouts are scheduled (``trainer``, ``schedule``)
``eval``       the evaluation points (``trainer``, :mod:`adapters.evaluation.runner`)
``output``     the run directory: checkpoints, plots, the final export, the progress bar
``compute``    where the work runs: device, backend, threads, env workers, torchrun, vLLM, Ray
=============  ==============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from adapters.policies.base import EVAL_TEMPERATURE
from adapters.policies.graphs import CompileMode
from adapters.policies.knobs import ConfigError, Section, knob
from adapters.training.advantages import ESTIMATORS

__all__ = [
    "BACKENDS",
    "ComputeConfig",
    "EvalConfig",
    "OutputConfig",
    "PolicyConfig",
    "ScheduleConfig",
    "UpdateConfig",
]

BACKENDS = ("transformers", "vllm", "vllm-server")

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "group-mean"]


def at_least(section: Any, bound: int, names: tuple[str, ...]) -> None:
    """Raise :class:`ConfigError` for a set knob of ``names`` below ``bound``."""
    for name in names:
        value = getattr(section, name)
        if value is not None and value < bound:
            raise ConfigError(f"{name} must be >= {bound}, got {value}")


@dataclass(frozen=True)
class PolicyConfig(Section):
    """The model, where it starts, its adapters, and which policy plays which role."""

    model: str = knob(
        "smollm2", "smollm2 (embedded), tiny, a local checkpoint, a hub name, or config:PATH"
    )
    init: str = knob(
        "none",
        "where the policy starts: none (the model as it is) | cold-start[:ROLE,...] (fine-tuned "
        "on the setting's oracle turns of every role, or of the roles named, train split: made "
        "once, then cached; adapters.sft) | shipped:NAME (a cold start the project ships, "
        "adapters/training/coldstarts/NAME) | PATH (a peft adapter directory merged into the "
        "model's weights)",
        auto=True,
        why="suite default: the model as it is",
    )
    dtype: str = knob(
        "auto", "model dtype: auto (bfloat16 for LoRA on CUDA, else float32) | float32 | bfloat16"
    )
    lora_rank: int = knob(0, "LoRA rank; 0 = full fine-tuning", auto=True)
    lora_alpha: float = knob(None, "LoRA alpha (default: 2 x rank)", auto=True, why="2 x lora_rank")
    lora_dropout: float = knob(0.0, "LoRA dropout", auto=True)
    lora_target: str = knob(
        "all-linear", "LoRA target modules: all-linear, or comma-separated module names"
    )
    per_role: bool = knob(False, "one policy per role (default: the recipe's)", auto=True)
    role_policies: dict[str, str] = knob(
        doc=(
            'role -> policy name as JSON, M policies for N roles, e.g. \'{"challenger": "a", '
            '"planner": "a"}\''
        ),
        factory=dict,
    )
    train_roles: list[str] | None = knob(
        None, "roles whose samples are trained, e.g. solver,judge (default: all)"
    )
    per_role_models: Literal["adapters", "models"] = knob(
        "adapters", "per-role policies as LoRA adapters on one base, or separate models"
    )
    chat_template_kwargs: dict[str, Any] = knob(
        doc=(
            "apply_chat_template argument KEY=VALUE (repeatable) or a JSON mapping, e.g. "
            "enable_thinking=false (Qwen3's no-thinking mode, as in the AT-GRPO paper)"
        ),
        factory=dict,
    )

    def __post_init__(self) -> None:
        at_least(self, 0, ("lora_rank",))
        if self.lora_dropout is not None and not 0 <= self.lora_dropout < 1:
            raise ConfigError("lora_dropout must lie in [0, 1)")
        if self.per_role_models not in ("adapters", "models"):
            raise ConfigError("per_role_models must be 'adapters' or 'models'")
        from adapters.training.shipped import shipped_init

        init = self.init or "none"
        try:
            shipped = shipped_init(init)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if (
            shipped is None
            and init != "none"
            and not init.startswith("cold-start")  # else a peft directory
            and not (Path(init) / "adapter_config.json").is_file()
        ):
            raise ConfigError(
                f"init must be none, cold-start[:ROLE,...], shipped:NAME or a peft adapter "
                f"directory; {self.init!r} has no adapter_config.json"
            )
        for role, pid in self.role_policies.items():
            if not isinstance(pid, str) or not pid or "/" in pid:
                raise ConfigError(f"role_policies[{role!r}] must be a policy name without '/'")

    def filled(self, *, cuda: bool = True) -> PolicyConfig:
        rank = self.lora_rank if self.lora_rank is not None else 0
        alpha = self.lora_alpha if self.lora_alpha is not None else float(2 * rank)
        return super(PolicyConfig, replace(self, lora_alpha=alpha)).filled(cuda=cuda)

    @property
    def lora(self) -> bool:
        return (self.lora_rank or 0) > 0


def one_step_update(ppo_epochs: int, ppo_minibatches: int, minibatch_size: int) -> bool:
    """Whether an update with these sizes makes one optimizer step
    (:attr:`UpdateConfig.one_step`)."""
    return ppo_epochs == 1 and ppo_minibatches == 1 and not minibatch_size


def reads_logprobs(algorithm: str, kl_reward_coef: float | None) -> bool:
    """Whether the estimator reads the old and reference log-probs: a KL reward."""
    return (kl_reward_coef or 0.0) > 0 and ESTIMATORS[algorithm].needs_ref


@dataclass(frozen=True)
class UpdateConfig(Section):
    """The advantage estimator and the PPO update."""

    algorithm: str = knob("at-grpo", "a name of advantages.ESTIMATORS", auto=True)
    normalize_std: bool = knob(True, "GRPO: divide by the group std (False = Dr. GRPO)")
    lr: float = knob(1e-4, "learning rate (AdamW)", auto=True)
    weight_decay: float = knob(0.01, "AdamW weight decay", auto=True)
    max_grad_norm: float = knob(1.0, "gradient-norm clip", auto=True)
    ppo_epochs: int = knob(1, "PPO epochs over each step's batch", auto=True)
    ppo_minibatches: int = knob(
        1,
        "optimizer steps per PPO epoch (the batch split evenly)",
        auto=True,
        why="suite default: one optimizer step per batch",
    )
    minibatch_size: int = knob(
        0,
        "samples per optimizer step (0 = use --ppo-minibatches; default: the recipe's)",
        auto=True,
        why="suite default: ppo_minibatches sets the optimizer steps",
    )
    micro_batch_size: int = knob(
        16,
        "sequences per forward/backward (gradient accumulation)",
        auto=True,
        cpu=8,
        why="suite default: sequences per forward/backward",
    )
    micro_batch_tokens: int = knob(
        32768,
        "padded tokens per forward/backward (0 = no limit)",
        auto=True,
        cpu=2048,
        why="suite default: padded tokens per forward/backward",
    )
    clip_eps: float = knob(0.2, "PPO clip range")
    clip_eps_high: float | None = knob(None, "upper PPO clip range (default: clip_eps)")
    loss_agg: LossAgg = knob(
        "token-mean",
        "policy loss averaging: group-mean (AT-GRPO Eq. 3) | token-mean (verl) | "
        "seq-mean-token-mean | seq-mean-token-sum",
        auto=True,
        why="suite default: verl's token mean",
    )
    kl_loss_coef: float = knob(0.0, "weight of the KL loss against the reference model", auto=True)
    kl_loss_type: Literal["k1", "k2", "k3"] = knob("k3", "estimator of the KL loss", auto=True)
    kl_reward_coef: float = knob(
        0.0, "REINFORCE++ token-level KL penalty in the reward (beta)", auto=True
    )
    entropy_coef: float = knob(0.0, "entropy bonus weight (MAE: 0.001)", auto=True)
    mpt_mask_tau: float = knob(
        0.0,
        "drop positive samples' tokens with probability >= tau from the policy gradient while "
        "the entropy is below --mpt-target-entropy (UloRL Eq. 10); 0 = off",
        auto=True,
        why="suite default: no masking of well-mastered tokens",
    )
    mpt_target_entropy: float = knob(
        0.2,
        "target entropy of the well-mastered-token masking (UloRL's sigma)",
        auto=True,
        why="suite default (UloRL's sigma; used when masking is on)",
    )
    gamma: float = knob(1.0, "discount of REINFORCE++ returns", auto=True)
    skip_zero_advantage: bool = knob(
        True,
        "leave samples with all-zero advantages out of the update (without KL loss or entropy "
        "bonus)",
    )
    share_prompt_forward: bool = knob(
        True, "run a prompt shared by a micro-batch's completions once in the training forward"
    )
    update_precision: Literal["auto", "float32", "bfloat16"] = knob(
        "auto",
        "the update's forward and backward passes: auto (bfloat16 autocast over float32 weights "
        "on a CPU that computes bfloat16 natively, else the model's dtype) | float32 | bfloat16",
    )
    old_logprobs: Literal["auto", "rollout", "recompute", "forward"] = knob(
        "auto",
        "log-probs of the PPO ratio's denominator: auto (the sampler's in float32, else the "
        "update's own forward for a one-step update, else recomputed) | rollout (the "
        "sampler's) | recompute (a pass before the update) | forward (the update's forward, "
        "detached; one optimizer step per update only)",
    )
    max_prompt_tokens: int = knob(
        0,
        "samples whose prompt is longer (tokens) are skipped from the update and counted "
        "(samples_prompt_over_limit, as verl's filter_overlong_prompts); 0 = no cap",
        auto=True,
        why="suite default: no prompt cap",
    )
    rollout_is_cap: float = knob(
        2.0, "truncation C of the importance weight of stale tokens (verl's rollout_is_threshold)"
    )

    def __post_init__(self) -> None:
        if self.algorithm is not None and self.algorithm not in ESTIMATORS:
            raise ConfigError(
                f"algorithm must be one of {tuple(ESTIMATORS)}, got {self.algorithm!r}"
            )
        at_least(self, 1, ("ppo_epochs", "ppo_minibatches", "micro_batch_size"))
        at_least(self, 0, ("minibatch_size", "max_prompt_tokens", "micro_batch_tokens"))
        for name in (
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
        if self.clip_eps <= 0 or (self.clip_eps_high is not None and self.clip_eps_high <= 0):
            raise ConfigError("clip_eps (and clip_eps_high) must be > 0")
        if self.lr is not None and self.lr <= 0:
            raise ConfigError("lr must be > 0")
        if self.rollout_is_cap < 1:
            raise ConfigError(f"rollout_is_cap must be >= 1, got {self.rollout_is_cap}")
        known = None not in (self.ppo_epochs, self.ppo_minibatches, self.minibatch_size)
        if self.old_logprobs == "forward" and known and not self.one_step:
            raise ConfigError(
                "old_logprobs forward needs one optimizer step per update (ppo_epochs 1, "
                "ppo_minibatches 1, minibatch_size 0): after the first step the weights are no "
                "longer the samples' old policy; use recompute"
            )
        kl_known = None not in (self.algorithm, self.kl_reward_coef)
        if self.old_logprobs == "forward" and kl_known and self.advantages_read_logprobs:
            raise ConfigError(
                "old_logprobs forward cannot serve a KL reward (kl_reward_coef > 0): the "
                "advantages read the old log-probs before the update; use recompute"
            )

    @property
    def one_step(self) -> bool:
        """One optimizer step per update (one epoch of one mini-batch): every forward of the
        update runs with the weights the samples' old log-probs describe."""
        return one_step_update(self.ppo_epochs, self.ppo_minibatches, self.minibatch_size)

    @property
    def advantages_read_logprobs(self) -> bool:
        """Whether the estimator reads old and reference log-probs (a KL reward)."""
        return reads_logprobs(self.algorithm, self.kl_reward_coef)

    @property
    def needs_ref(self) -> bool:
        """Whether the reference model's log-probs are needed: a KL loss, or a KL reward of an
        estimator that has one (``Estimator.needs_ref``)."""
        return (self.kl_loss_coef or 0.0) > 0 or self.advantages_read_logprobs


@dataclass(frozen=True)
class ScheduleConfig(Section):
    """How long the loop runs and how its rollouts are scheduled (:mod:`.schedule`)."""

    steps: int = knob(6, "training steps", auto=True)
    instances_per_step: int = knob(1, "env instances rolled out per training step", auto=True)
    pipeline: Literal["none", "agent"] = knob(
        "none",
        "none (whole trajectories per step) | agent (MarsRL 3.3: one agent stage of every "
        "in-flight trajectory per step; default on CUDA for the marsrl recipe)",
        auto=True,
        why="suite default: whole trajectories per step",
    )
    segment_tokens: int = knob(
        0,
        "--pipeline agent: decode at most this many tokens per completion per step (0 = off; "
        "default: the recipe's, MarsRL on CUDA 16384)",
        auto=True,
        why="suite default: no segment rollouts",
    )
    max_segments: int = knob(
        0,
        "--pipeline agent: segments a completion may take (0 = off; MarsRL on CUDA 4)",
        auto=True,
        why="suite default: no segment rollouts",
    )
    max_staleness: int = knob(
        0,
        "generation runs ahead of the update by at most N policy versions (0 = synchronous); "
        "the loss then weights tokens by min(pi_old / pi_behaviour, --rollout-is-cap)",
    )

    def __post_init__(self) -> None:
        at_least(self, 0, ("steps", "segment_tokens", "max_segments", "max_staleness"))
        at_least(self, 1, ("instances_per_step",))
        if self.pipeline not in (None, "none", "agent"):
            raise ConfigError(f"pipeline must be 'none' or 'agent', got {self.pipeline!r}")
        given = [v for v in (self.segment_tokens, self.max_segments) if v is not None]
        if any(given) and not (len(given) == 2 and all(given)):  # one alone may only be 0
            raise ConfigError("segment_tokens and max_segments are set together (0 = off)")
        if self.segment_tokens and self.pipeline == "none":
            raise ConfigError("segment rollouts run inside the agent pipeline: --pipeline agent")

    @property
    def off_policy(self) -> bool:
        """Whether samples may come from older policies (asynchronous rollouts, or segments whose
        tokens span several versions): the update then corrects with the behaviour log-probs."""
        return (self.max_staleness or 0) > 0 or (self.segment_tokens or 0) > 0


@dataclass(frozen=True)
class EvalConfig(Section):
    """The evaluation points of a training run."""

    eval_episodes: int = knob(
        64,
        "validation episodes before and after training (0: no evaluation)",
        auto=True,
        cpu=32,
        why=(
            "suite default: validation instances before/after training (fewer without a GPU, "
            "where the batched evaluation's speed-up is not yet established: "
            "benchmarks/eval_throughput.py)"
        ),
    )
    eval_split: str = knob("val", "the split evaluated")
    eval_every: int = knob(0, "0 = only before and after training")
    eval_temperature: float = knob(
        EVAL_TEMPERATURE,
        "evaluation temperature (0: greedy)",
        auto=True,
        why="suite default: greedy validation",
    )
    eval_role_limits: bool = knob(
        False,
        "evaluate each role under the token limit it is trained with (role_sampling's "
        "max_new_tokens) instead of max_new_tokens for every role",
    )
    eval_dataset: list[str] = knob(
        doc="benchmarks to pass over at each evaluation point: NAME or NAME=PATH, comma-separated "
        "(e.g. aime24=aime_2024.jsonl,aime25); needs --eval-episodes > 0",
        factory=list,
    )

    def __post_init__(self) -> None:
        at_least(self, 0, ("eval_episodes", "eval_every"))
        if (self.eval_temperature or 0.0) < 0:
            raise ConfigError("eval_temperature must be >= 0")
        if self.eval_dataset and self.eval_episodes == 0:
            raise ConfigError("eval_dataset runs at the evaluation points: set eval_episodes > 0")


@dataclass(frozen=True)
class OutputConfig(Section):
    """The run directory and what is written to it."""

    output_dir: str | None = knob(
        None, "run directory (checkpoints, logs, plots); default runs/<env>-<algo>-<time>"
    )
    save_every: int = knob(1, "checkpoint every N steps")
    keep_checkpoints: int = knob(2, "checkpoints kept")
    plot_every: int = knob(5, "redraw training_curve.png every N steps (0: only at the end)")
    progress: bool = knob(True, "show a progress bar")
    save_final: bool = knob(True, "export the final policies to <output_dir>/final")

    def __post_init__(self) -> None:
        at_least(self, 1, ("save_every", "keep_checkpoints"))


@dataclass(frozen=True)
class ComputeConfig(Section):
    """Where the work runs: the device and generation backend, threads and env workers, and the
    scale-out (torchrun ranks, vLLM servers, Ray; :mod:`adapters.training.distributed`)."""

    device: str = knob("auto", "auto | cpu | cuda | cuda:N")
    backend: str = knob(
        "transformers",
        "rollout backend: transformers | vllm (needs vllm: scripts/setup_vllm.sh) | vllm-server "
        "(generation on running `vllm serve` processes: --vllm-servers)",
    )
    generation_model: Literal["merged", "train"] = knob(
        "merged",
        "transformers backend: generate from a copy with the LoRA adapter merged, bfloat16 where "
        "the device has it, refreshed after each update (merged) | on the training modules "
        "(train)",
    )
    generation_quant: Literal["auto", "none", "fp16", "int8"] = knob(
        "auto",
        "transformers backend, merged copies: auto: float16-weight decode steps (fp16) where the "
        "copy is float32 on a CPU without native bfloat16, else none | none | fp16 | int8 "
        "(adapters/policies/quantize.py; packed again after each update)",
    )
    compile_decode: CompileMode = knob(
        "off",
        "transformers backend: decode steps compiled over a static KV cache, CUDA graphs on CUDA "
        "(on: inductor's kernels recorded as graphs | cudagraphs: graphs, no inductor | eager, "
        "aot_eager, inductor: that torch.compile backend) | off: the eager loop",
    )
    env_workers: int = knob(2, "threads (or Ray actors) that step the envs")
    threads: int | None = knob(None, "torch CPU threads (None: leave torch's setting)")
    dp_mode: Literal["auto", "ddp", "fsdp", "hsdp"] = knob(
        "auto",
        "data parallelism under torchrun: auto (DDP with LoRA, FSDP2 for full fine-tuning) | ddp "
        "| fsdp | hsdp (FSDP2 sharded within a node, replicated across nodes)",
    )
    dist_timeout_s: float = knob(
        600.0, "seconds a collective may wait for the other ranks before the run fails"
    )
    vllm_servers: list[str] = knob(
        doc=(
            "backend vllm-server: comma-separated base URLs of `vllm serve` replicas (POLICY=URL "
            "for per-role full fine-tuning)"
        ),
        factory=list,
    )
    vllm_sync_dir: str | None = knob(
        None,
        "backend vllm-server: directory the servers can read, for adapters and weights pushed "
        "after each update (default: <output_dir>/vllm-sync)",
    )
    env_pool: Literal["local", "ray"] = knob(
        "local", "where envs step: local (threads) | ray (RayEnvPool actors)"
    )
    ray_address: str | None = knob(
        None, "env_pool ray: ray.init(address=...) of a running cluster, e.g. auto"
    )

    def __post_init__(self) -> None:
        at_least(self, 1, ("env_workers",))
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

    @property
    def cuda(self) -> bool:
        """Whether the run computes on a GPU (``auto``: when torch sees one)."""
        if self.device == "auto":
            try:
                import torch
            except ImportError:  # pragma: no cover
                return False
            return bool(torch.cuda.is_available())
        return str(self.device).startswith("cuda")
