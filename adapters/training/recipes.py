"""Training recipes: each paper's training configuration, with the section every value comes from.

A :class:`Recipe` is plain data: ``TrainConfig`` field -> ``(value, source)``, and a CPU
scale-down of those fields (``cpu``). A recipe sets no setting option: the setting's own config
defaults, which its page ties to the paper (the horizon T = 4 of AT-GRPO's settings, MAE's
N = 5, CoMAS's l, n, kappa, MarsRL's five agent steps), and its spec's CPU options
(``cpu_train_options``, :mod:`envs.core.registry`) are the one place those values live, so a
setting added later keeps its own values under any recipe. Every setting trains with
its paper's recipe by default (the ``recipe`` of its spec, :mod:`envs.core.registry`; AT-GRPO's
when it names none); ``--recipe NAME`` picks another one.
:meth:`TrainConfig.resolved() <adapters.training.config.TrainConfig.resolved>` fills each field
the user left unset (``None``) from the first of these that sets it (the layers of
:func:`adapters.training.config.layers`, here from the top):

1. the setting's own CPU values for the embedded model (its spec's ``cpu_train_values``, only
   without CUDA: the grid settings' cold start and sizes),
2. the recipe's CPU scale-down (only without CUDA),
3. the setting's own values under any recipe (its spec's ``train_values``: AT-GRPO's prompt
   length for math and code),
4. the recipe,
5. the knob's own default, declared once in its section (engineering values that no paper
   fixes: batch sizes for generation and the update, evaluation size, demonstrations; a knob may
   declare a smaller CPU value),

and records where each value came from (``TrainConfig.sources``; ``config.yaml`` in the run
directory carries it as a comment on every line). Values the user sets always win; a recipe or
setting sets only auto knobs and the merged mappings (``chat_template_kwargs``,
``role_sampling``), which the user's keys extend.

The CPU scale-down keeps each paper's *protocol* (algorithm, sampling, keep rule, horizon, the
number of rounds or agent steps, reward) and shrinks its *size* so that a run fits a 2-core
machine with the embedded 135M model: LoRA instead of full fine-tuning, fewer instances and
steps, shorter completions, fewer candidates where the protocol allows (MarsRL still keeps 2 of
them, CoMAS runs the paper's own l = 2 ablation).

Where a paper is silent the choice is marked "(paper silent)" in its source; where a value could
not be read from the paper's text it says so.

>>> RECIPES["marsrl"].values["keep"]
('adaptive', 'MarsRL §3.4: adaptive sampling, the best of the three strategies (Fig. 4)')
>>> recipe_for("sokoban").name, recipe_for("mae").name
('at-grpo', 'mae')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.policies.base import EVAL_TEMPERATURE
from adapters.policies.knobs import declared_default
from adapters.training.advantages import ESTIMATORS
from adapters.training.sections import UpdateConfig

__all__ = [
    "RECIPES",
    "Recipe",
    "describe_recipes",
    "recipe_for",
]

Sourced = tuple[Any, str]


@dataclass(frozen=True)
class Recipe:
    """One paper's training configuration (see the module docstring)."""

    name: str
    paper: str
    summary: str
    values: Mapping[str, Sourced]
    cpu: Mapping[str, Sourced] = field(default_factory=dict)

    def __post_init__(self) -> None:
        algorithm = self.values.get("algorithm", (None, ""))[0]
        if algorithm is not None and algorithm not in ESTIMATORS:
            raise ValueError(
                f"recipe {self.name!r}: algorithm {algorithm!r} is not in advantages.ESTIMATORS"
            )


# CPU scale-down shared by every recipe: the embedded 135M model with a LoRA adapter
_CPU_COMMON: dict[str, Sourced] = {
    "lora_rank": (8, "CPU scale-down: LoRA rank 8 instead of full fine-tuning"),
    "lora_dropout": (0.0, "CPU scale-down"),
    "lr": (declared_default(UpdateConfig, "lr"), "CPU scale-down: a LoRA learning rate"),
    "steps": (6, "CPU scale-down"),
    "instances_per_step": (1, "CPU scale-down"),
    "ppo_minibatches": (1, "CPU scale-down: one optimizer step per batch"),
    "max_new_tokens": (48, "CPU scale-down"),
}

# AT-GRPO's grid settings on CPU: six steps must move the greedy policy, so a larger LoRA step and
# four PPO mini-batches per batch (four optimizer steps for one rollout; the clipped ratio keeps
# the later mini-batches near the sampling policy). With them the six-step default raises the
# greedy validation reward of Sokoban and Plan-Path significantly (benchmarks/learning.py).
_CPU_AT_GRPO: dict[str, Sourced] = {
    **_CPU_COMMON,
    "lr": (1e-3, "CPU scale-down: a LoRA step large enough for a six-step run"),
    "ppo_minibatches": (4, "CPU scale-down: four optimizer steps per batch (PPO mini-batches)"),
    "loss_agg": (
        "token-mean",
        "CPU scale-down: the token mean over informative samples, the step size the six-step "
        "CPU runs were tuned with (Eq. 3's group mean on CUDA)",
    ),
}

_AT_GRPO_VALUES: dict[str, Sourced] = {
    "algorithm": ("at-grpo", "AT-GRPO Alg. 1"),
    "sampling": ("tree", "AT-GRPO §4.1 and Alg. 1: tree-structured sampling"),
    "candidates": (4, "AT-GRPO §5.1: K = 4"),
    "keep": ("best", "AT-GRPO §4.1: the highest-reward candidate is executed"),
    "keep_n": (1, "AT-GRPO §4.1"),
    "keep_scope": ("branch", "AT-GRPO Alg. 1 (one executed branch per environment)"),
    "temperature": (1.0, "AT-GRPO A.2.1: T_sample = 1.0"),
    "top_p": (1.0, "AT-GRPO A.2.1"),
    "top_k": (-1, "AT-GRPO A.2.1"),
    "eval_temperature": (0.0, "AT-GRPO A.2.1: validation is deterministic"),
    "lr": (1e-6, "AT-GRPO A.2.1"),
    "weight_decay": (0.01, "AT-GRPO A.2.1"),
    "max_grad_norm": (1.0, "AT-GRPO A.2.1"),
    "entropy_coef": (0.0, "AT-GRPO A.2.1: entropy_coeff = 0"),
    "kl_loss_coef": (0.0, "AT-GRPO A.2.1 lists no KL term (paper silent)"),
    "kl_reward_coef": (0.0, "AT-GRPO A.2.1 lists no KL term (paper silent)"),
    "gamma": (1.0, "AT-GRPO A.2.1"),
    "steps": (150, "AT-GRPO A.2.1"),
    "instances_per_step": (128, "AT-GRPO A.2.1: global batch size 128"),
    "ppo_minibatches": (2, "AT-GRPO A.2.1: PPO mini-batch 64 of a batch of 128"),
    "ppo_epochs": (1, "verl's default (paper silent)"),
    "loss_agg": (
        "group-mean",
        "AT-GRPO Eq. 3: 1/K per sample within its group, groups averaged (token-mean: verl's "
        "token mean, the authors' code)",
    ),
    "max_new_tokens": (4096, "AT-GRPO A.2.1: maximum response length 4096"),
    "max_prompt_tokens": (16384, "AT-GRPO A.2.1: maximum prompt length 16384 (symbolic tasks)"),
    "lora_rank": (0, "AT-GRPO A.2.1: full fine-tuning with Adam"),
    "per_role": (False, "AT-GRPO §5.1 (d): role-sharing policy; (e) is --per-role"),
    "chat_template_kwargs": ({"enable_thinking": False}, "AT-GRPO §5.1: Qwen3 no-thinking mode"),
}

RECIPES: dict[str, Recipe] = {
    "at-grpo": Recipe(
        name="at-grpo",
        paper="AT-GRPO (Stronger Together)",
        summary="tree sampling K=4, greedy keep, agent- and turn-wise GRPO groups, T=4, "
        "role-sharing policy",
        values=_AT_GRPO_VALUES,
        cpu={**_CPU_AT_GRPO},
    ),
    "at-grpo-per-role": Recipe(
        name="at-grpo-per-role",
        paper="AT-GRPO (Stronger Together)",
        summary="as at-grpo with role-specialized policies (one LoRA adapter or model per role)",
        values={
            **_AT_GRPO_VALUES,
            "per_role": (True, "AT-GRPO §5.1 (e): role-specialized policies"),
        },
        cpu={**_CPU_AT_GRPO},
    ),
    "mae": Recipe(
        name="mae",
        paper="Multi-Agent Evolve",
        summary="Task-Relative REINFORCE++, 1 rollout, entropy 0.001, one shared backbone",
        values={
            "algorithm": ("tr-reinforce++", "MAE §3 and Table 3"),
            "sampling": ("parallel", "MAE Table 3: N Rollout 1 (no candidate groups)"),
            "candidates": (1, "MAE Table 3: N Rollout 1"),
            "temperature": (1.0, "MAE Table 3: actor rollout temperature 1.0"),
            "top_p": (1.0, "MAE Table 3: actor rollout top-p 1.0"),
            "top_k": (-1, "MAE Table 3 (no top-k)"),
            "eval_temperature": (EVAL_TEMPERATURE, "greedy validation (paper silent)"),
            "lr": (1e-6, "MAE Table 3 lists a learning rate whose value is missing from the text"),
            "weight_decay": (0.01, "AdamW (MAE Table 3), weight decay not stated (paper silent)"),
            "max_grad_norm": (1.0, "MAE Table 3: grad clip 1.0"),
            "entropy_coef": (0.001, "MAE Table 3: entropy coefficient 0.001"),
            "kl_loss_coef": (0.0, "MAE Table 3: KL loss False"),
            "kl_reward_coef": (0.0, "MAE Table 3: KL reward False"),
            "gamma": (1.0, "REINFORCE++ outcome reward (paper silent)"),
            "ppo_epochs": (1, "MAE Table 3: PPO epochs 1"),
            "ppo_minibatches": (1, "MAE Table 3 (one update per batch; paper silent)"),
            "steps": (300, "MAE Table 3: training steps 300"),
            "instances_per_step": (128, "MAE Table 3: train batch size 128"),
            "max_new_tokens": (8192, "MAE Table 3: max response length 8192"),
            "max_prompt_tokens": (8192, "MAE Table 3: max prompt length 8192"),
            "lora_rank": (0, "full fine-tuning (paper silent for RL)"),
            "per_role": (False, "MAE §4: one LLM backbone plays all three roles"),
        },
        cpu={
            **_CPU_COMMON,
            "instances_per_step": (
                4,
                "CPU scale-down: 4 questions, so each role's baseline has more than one sample",
            ),
        },
    ),
    "sage": Recipe(
        name="sage",
        paper="SAGE",
        summary="Task-Relative REINFORCE++, temperature 0.6 (critic 0.1), LoRA r128",
        values={
            "algorithm": ("tr-reinforce++", "SAGE §3 Eq. 1 and Table 4"),
            "sampling": ("parallel", "SAGE Alg. 1: one trajectory per step"),
            "candidates": (1, "SAGE Alg. 1"),
            "temperature": (0.6, "SAGE Table 4: challenger, planner and solver temperature 0.6"),
            "role_sampling": (
                {"critic": {"temperature": 0.1}},
                "SAGE Table 4: critic temperature 0.1",
            ),
            "top_p": (1.0, "paper silent"),
            "top_k": (-1, "paper silent"),
            "eval_temperature": (EVAL_TEMPERATURE, "greedy validation (paper silent)"),
            "lr": (3e-6, "SAGE §5 and Table 4: learning rate 3e-6"),
            "weight_decay": (0.01, "paper silent"),
            "max_grad_norm": (1.0, "paper silent"),
            "entropy_coef": (0.0, "paper silent"),
            "kl_loss_coef": (0.0, "SAGE Table 4: KL regularization disabled"),
            "kl_reward_coef": (0.0, "SAGE Table 4: KL regularization disabled"),
            "gamma": (1.0, "REINFORCE++ outcome reward (paper silent)"),
            "ppo_epochs": (1, "paper silent"),
            "ppo_minibatches": (1, "paper silent"),
            "steps": (200, "SAGE Table 4: training steps 200"),
            "instances_per_step": (128, "SAGE Table 4: batch size 128"),
            "max_new_tokens": (8192, "SAGE Table 4: maximum response length 8192"),
            "max_prompt_tokens": (8192, "SAGE Table 4: maximum prompt length 8192"),
            "lora_rank": (128, "SAGE §5 and Table 4: LoRA rank 128"),
            "lora_alpha": (256.0, "SAGE Table 4: LoRA alpha 256"),
            "lora_dropout": (
                0.05,
                "SAGE Table 4 prints 0.95, read as a typo for 0.05 (the usual LoRA dropout; "
                "0.95 would zero 95% of the adapter's inputs); --lora-dropout 0.95 for the print",
            ),
            "per_role": (False, "SAGE §4: four agents from one shared backbone"),
        },
        cpu={**_CPU_COMMON, "instances_per_step": (4, "CPU scale-down: 4 per-role samples")},
    ),
    "comas": Recipe(
        name="comas",
        paper="CoMAS",
        summary="REINFORCE++ without KL, l=4 separately trained agents, 8 solution rounds",
        values={
            "algorithm": ("reinforce++", "CoMAS §3.3 Eqs. 9-10"),
            "sampling": ("parallel", "CoMAS §3.3: interaction rollouts, no per-prompt groups"),
            "candidates": (4, "CoMAS Table 2: number of prompt reuse 4"),
            "temperature": (1.0, "CoMAS Table 2: training temperature 1.0"),
            "top_p": (1.0, "paper silent"),
            "top_k": (-1, "paper silent"),
            "eval_temperature": (0.7, "CoMAS Table 2: evaluation temperature 0.7"),
            "lr": (1e-6, "CoMAS Table 2: learning rate 1e-6"),
            "weight_decay": (0.0, "CoMAS Table 2: weight decay 0.0"),
            "max_grad_norm": (1.0, "CoMAS Table 2: gradient norm 1.0"),
            "entropy_coef": (0.0, "paper silent"),
            "kl_loss_coef": (0.0, "CoMAS Eq. 9 puts the KL in the reward"),
            "kl_reward_coef": (0.0, "CoMAS Table 2: weight of KL penalty 0.0"),
            "gamma": (1.0, "CoMAS Table 2: discount factor 1.0"),
            "ppo_epochs": (1, "CoMAS Table 2: training epochs 1"),
            "ppo_minibatches": (1, "unused: minibatch_size sets the optimizer steps"),
            "minibatch_size": (
                64,
                "CoMAS Table 2: macro training batch size 64, samples per optimizer step (the "
                "train_batch_size of OpenRLHF, which MARTI builds on): 64 questions x 4 reuses "
                "give ~24 steps per agent and rollout",
            ),
            "steps": (150, "paper silent"),
            "instances_per_step": (64, "CoMAS Table 2: macro rollout batch size 64"),
            "max_new_tokens": (4096, "CoMAS Table 2: token limit for responses 4096"),
            "max_prompt_tokens": (28672, "CoMAS Table 2: token limit for prompts 28672"),
            "lora_rank": (0, "full fine-tuning with DeepSpeed (CoMAS Table 2)"),
            "per_role": (True, "CoMAS §3.1 and Table 2: l = 4 separately trained agents"),
        },
        cpu={
            **_CPU_COMMON,
            "candidates": (2, "CPU scale-down: 2 rollouts per question"),
            "minibatch_size": (0, "CPU scale-down: one optimizer step per batch"),
        },
    ),
    "marsrl": Recipe(
        name="marsrl",
        paper="MarsRL",
        summary="grouped agentic rollouts: group size 8, adaptive selection of 2 outputs of "
        "the previous agent, GRPO with KL, temperature 0.85",
        values={
            "algorithm": ("at-grpo", "MarsRL §2.2 and §3.3: GRPO groups per shared input"),
            "sampling": ("tree", "MarsRL §3.3: grouped agentic rollouts"),
            "candidates": (8, "MarsRL §3.3 and §4: group size 8"),
            "keep": (
                "adaptive",
                "MarsRL §3.4: adaptive sampling, the best of the three strategies (Fig. 4)",
            ),
            "keep_n": (2, "MarsRL §3.3: each agent selects two outputs of the preceding agent"),
            "keep_scope": (
                "instance",
                "MarsRL §3.3: two outputs of the preceding agent in all (1, 2, 2, 2, 2 groups)",
            ),
            "temperature": (0.85, "MarsRL §4: sampling temperature 0.85"),
            "top_p": (1.0, "MarsRL §4 (value not legible in the text)"),
            "top_k": (-1, "MarsRL §4 (value not legible in the text)"),
            "eval_temperature": (0.6, "MarsRL §4 evaluation: temperature 0.6"),
            "lr": (1e-6, "MarsRL §4: constant learning rate (value not legible in the text)"),
            "weight_decay": (0.01, "AdamW (MarsRL §4), weight decay not stated"),
            "max_grad_norm": (1.0, "paper silent"),
            "entropy_coef": (0.0, "paper silent"),
            "mpt_mask_tau": (
                0.99,
                "MarsRL §2.3 masks well-mastered positive tokens as UloRL does: UloRL "
                "hyperparameter settings, tau = 0.99",
            ),
            "mpt_target_entropy": (0.2, "UloRL hyperparameter settings: target entropy 0.2"),
            "kl_loss_coef": (0.001, "MarsRL Eq. 2 keeps a KL term; beta not stated: verl's 0.001"),
            "kl_loss_type": ("k3", "verl's low_var_kl for the KL loss (paper silent)"),
            "kl_reward_coef": (0.0, "MarsRL Eq. 2: KL in the loss, not the reward"),
            "gamma": (1.0, "GRPO outcome reward"),
            "ppo_epochs": (1, "paper silent"),
            "ppo_minibatches": (1, "paper silent"),
            "steps": (150, "paper silent"),
            "instances_per_step": (128, "MarsRL §4: prompt batch size 128"),
            "max_new_tokens": (65536, "MarsRL §4: 64k response tokens (4 segments of 16k)"),
            "max_prompt_tokens": (32768, "MarsRL §4: maximum input length 32k"),
            "lora_rank": (0, "full fine-tuning (MarsRL §4)"),
            "per_role": (False, "MarsRL §4: all agents share the same model and hyperparameters"),
            "pipeline": ("agent", "MarsRL §3.3: agentic pipeline parallelism"),
            "segment_tokens": (
                16384,
                "MarsRL §4: 64k response tokens in at most 4 segments of 16k (UloRL's segment "
                "rollout, §2.3)",
            ),
            "max_segments": (4, "MarsRL §4: at most 4 segments"),
        },
        cpu={
            **_CPU_COMMON,
            "candidates": (4, "CPU scale-down: group size 4 (still keeps 2)"),
            "pipeline": ("none", "CPU scale-down: whole trajectories per step"),
            "segment_tokens": (0, "CPU scale-down: no segments (they need the agent pipeline)"),
            "max_segments": (0, "CPU scale-down: no segments"),
        },
    ),
}

# the model names the CPU setting values (the specs' ``cpu_train_values``) are tuned for: the
# embedded SmolLM2-135M-Instruct
EMBEDDED_MODELS = ("smollm2", "smollm2-135m", "smollm2-135m-instruct")


def recipe_for(env_id: str) -> Recipe:
    """The default recipe of a setting (its id, alias or ``module:id``): its spec's ``recipe``,
    AT-GRPO's for a setting whose paper has none."""
    import envs

    entry = envs.spec(env_id)
    name = entry.recipe or "at-grpo"
    if name not in RECIPES:
        raise ValueError(
            f"setting {entry.id!r} names an unknown recipe {name!r}; recipes: {', '.join(RECIPES)}"
        )
    return RECIPES[name]


def describe_recipes() -> str:
    """One line per recipe and the settings that train with it by default (for ``--help``)."""
    lines = []
    import envs

    for name, r in RECIPES.items():
        users = [e for e in envs.list_envs() if recipe_for(e).name == name]
        default = f" [default for {', '.join(users)}]" if users else ""
        lines.append(f"{name} ({r.paper}): {r.summary}{default}")
    return "\n".join(lines)
