"""A cold start from the settings' own oracles: supervised fine-tuning on oracle turns.

GRPO amplifies what a policy already samples. A small model that never solves an instance gives
it nothing to amplify (``docs/learning.md``), so a run can start from a *cold start*: the policy
fine-tuned on the setting's oracle, turn by turn, on train-split instances only.

* :func:`oracle_examples` plays the oracle (``env.unwrapped.oracle(agent)``) on ``episodes``
  train-split instances and records every role's turns: the exact messages the trained policy
  would see at that turn (the run's system prompt and prefix, the role's demonstrations, the
  env's prompt) and the oracle's completion. A grid tool's oracle is a search program that copies
  the map out of its prompt and computes the answer from it (never the answer as a literal), and
  a planner's oracle adopts the tool's proposal when it solves the instance, so a cold-started
  team computes and uses its teammate's result rather than copying an answer.
* :func:`fine_tune` trains a LoRA adapter on them with TRL's ``SFTTrainer`` (prompt-completion
  examples in the conversational format, so the loss covers the completion only), resumable from
  its checkpoints, with a progress bar, and saves a peft adapter directory plus ``coldstart.json``
  (what made it: setting, options, data hash, hyperparameters, the loss of every logged step).
* :func:`ensure_cold_start` is what ``python -m adapters.train`` calls for ``--init
  cold-start``: the adapter for this model, setting and configuration from the cache
  (``$MAS_CACHE_DIR/coldstart/<env>-<hash>``), made once on first use. ``--init shipped:NAME``
  names one of the cold starts the project ships (``adapters/training/coldstarts/NAME``, each
  with the command that made it) whatever the run's own options.
* :func:`apply_init` merges an adapter (a cold start or any peft adapter directory) into the base
  weights before the trainer adds its own LoRA adapter, so the run's reference policy and its
  "before" evaluation are the cold-started team.

``python -m adapters.sft`` (:mod:`adapters.sft`) is the command line. Its examples are also a
dataset other trainers can use (``--export``: JSON lines in TRL's prompt-completion format, which
``datasets.load_dataset("json", data_files=...)`` reads).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.rollout import derive_seed
from adapters.rollout.envpool import flush_dead_steps
from adapters.training.shipped import CARD, SHIPPED

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.config import TrainConfig

__all__ = [
    "ColdStartConfig",
    "apply_init",
    "cold_start_dir",
    "cold_start_of",
    "ensure_cold_start",
    "fine_tune",
    "oracle_examples",
    "write_examples",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ColdStartConfig:
    """How a cold start is made (``python -m adapters.sft`` takes each field as a flag).

    episodes: train-split oracle episodes played for the examples (every role's turns).
    roles: roles whose turns are examples (``None``: all); ``ROLE=N`` takes that role's turns
        from the first N episodes only (e.g. ``("tool", "planner=8")``: every tool turn, the
        planner's of 8 episodes).
    epochs / lr / batch_size / grad_accum: the fine-tuning schedule (a constant learning rate
        after ``warmup_ratio`` of the steps).
    lora_rank / lora_alpha: the adapter the examples train (merged into the base afterwards,
        so its rank is independent of the RL run's).
    max_length: examples longer than this many tokens are cut (TRL's ``max_length``).
    bf16: bfloat16 autocast (on a CPU only where it has native bfloat16 support).
    seed: instances, adapter initialisation and example order.
    """

    episodes: int = 48
    roles: tuple[str, ...] | None = None
    epochs: float = 3.0
    lr: float = 1e-3
    warmup_ratio: float = 0.05
    batch_size: int = 4
    grad_accum: int = 2
    lora_rank: int = 16
    lora_alpha: float = 32.0
    max_length: int = 1536
    bf16: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.epochs <= 0 or self.lr <= 0:
            raise ValueError("epochs and lr must be positive")
        if self.batch_size < 1 or self.grad_accum < 1 or self.lora_rank < 1:
            raise ValueError("batch_size, grad_accum and lora_rank must be >= 1")
        if self.roles is not None:
            object.__setattr__(self, "roles", tuple(self.roles))
            for entry in self.roles:
                name, sep, n = str(entry).partition("=")
                if not name or (sep and not (n.isdigit() and int(n) >= 1)):
                    raise ValueError(f"roles: {entry!r} is not ROLE or ROLE=N (N >= 1)")

    def role_episodes(self) -> dict[str, int] | None:
        """Role -> how many episodes give that role's examples (``None``: every role, all).

        >>> ColdStartConfig(episodes=48, roles=("tool", "planner=8")).role_episodes()
        {'tool': 48, 'planner': 8}
        """
        if self.roles is None:
            return None
        out = {}
        for entry in self.roles:
            name, _, n = entry.partition("=")
            out[name] = min(int(n), self.episodes) if n else self.episodes
        return out


# ---------------------------------------------------------------------------------------------
# examples


def oracle_examples(
    env_id: str,
    env_config: dict[str, Any],
    episodes: int,
    seed: int,
    *,
    prefix: Sequence[dict[str, str]] = (),
    role_prefix: dict[str, list[dict[str, str]]] | None = None,
    roles: Sequence[str] | dict[str, int] | None = None,
    split: str = "train",
) -> list[dict[str, Any]]:
    """The oracle's turns on ``episodes`` instances of ``split`` (a cold start's examples come
    from the train split only; another split is for measuring, e.g. unseen validation turns).

    Each example is ``{"prompt": [messages], "completion": [{"role": "assistant", ...}],
    "env", "role", "turn", "episode", "seed", "instance_id"}``; ``prompt`` is ``prefix`` (system
    prompt and run prefix), then ``role_prefix[role]`` (demonstrations), then the env's prompt as
    a user message: what the trained policy sees at that turn.

    >>> ex = oracle_examples("plan_path", {"height": 5, "width": 5}, 2, seed=0)
    >>> [e["role"] for e in ex], ex[1]["completion"][0]["content"].startswith("The tool's")
    (['tool', 'planner', 'tool', 'planner'], True)
    """
    import envs

    raw = envs.make(env_id, **env_config).unwrapped
    if roles is None or isinstance(roles, dict):
        wanted = dict(roles) if roles else None
    else:
        wanted = {r: episodes for r in roles}
    out: list[dict[str, Any]] = []
    try:
        for j in range(episodes):
            s = derive_seed(seed, "coldstart", j)
            raw.reset(seed=s, options={"split": split})
            flush_dead_steps(raw)
            while raw.agents:
                agent = raw.agent_selection
                answer = raw.oracle(agent)
                if wanted is None or j < wanted.get(agent, 0):
                    prompt = raw.observe(agent)["prompt"]
                    messages = [dict(m) for m in prefix]
                    messages += [dict(m) for m in (role_prefix or {}).get(agent, [])]
                    messages.append({"role": "user", "content": prompt})
                    out.append(
                        {
                            "prompt": messages,
                            "completion": [{"role": "assistant", "content": answer}],
                            "env": env_id,
                            "role": agent,
                            "turn": int(raw.turn),
                            "episode": j,
                            "seed": s,
                            "instance_id": str(getattr(raw, "instance_id", "") or ""),
                        }
                    )
                raw.step(answer)
                flush_dead_steps(raw)
    finally:
        raw.close()
    return out


def write_examples(examples: Sequence[dict[str, Any]], path: str | Path) -> str:
    """Write ``examples`` as JSON lines (TRL's prompt-completion format plus metadata columns);
    returns the SHA-256 of the file's content."""
    text = "".join(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n" for e in examples)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def examples_hash(examples: Sequence[dict[str, Any]]) -> str:
    text = "".join(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n" for e in examples)
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# fine-tuning


def fine_tune(
    model: Any,
    tokenizer: Any,
    examples: Sequence[dict[str, Any]],
    out: str | Path,
    cfg: ColdStartConfig,
    *,
    chat_template_kwargs: dict[str, Any] | None = None,
    card: dict[str, Any] | None = None,
    max_steps: int = -1,
    progress: bool = True,
    save_steps: int = 20,
    keep_checkpoints: bool = False,
) -> Path:
    """Train a LoRA adapter on ``examples`` with TRL's ``SFTTrainer`` and save it in ``out``
    (peft ``save_pretrained`` plus ``coldstart.json``: ``card``, the hyperparameters and the
    logged losses). Checkpoints go to ``out/checkpoints``; a second call with the same ``out``
    resumes from the last one. ``max_steps > 0`` stops after that many optimizer steps."""
    import torch
    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTTrainer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_dir = out / "checkpoints"
    device = next(model.parameters()).device
    rows = [
        {"prompt": e["prompt"], "completion": e["completion"]}
        | ({"chat_template_kwargs": chat_template_kwargs} if chat_template_kwargs else {})
        for e in examples
    ]
    args = _sft_config(
        cfg,
        ckpt_dir,
        device,
        max_steps=max_steps,
        save_steps=save_steps,
        keep_checkpoints=keep_checkpoints,
        progress=progress,
    )
    model.train()
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=_lora_config(cfg),
    )
    last = get_last_checkpoint(str(ckpt_dir)) if ckpt_dir.is_dir() else None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        trainer.train(resume_from_checkpoint=last)
    trainer.model.save_pretrained(str(out))  # type: ignore[union-attr,operator]
    losses = [
        {"step": int(h["step"]), "loss": float(h["loss"])}
        for h in trainer.state.log_history
        if "loss" in h
    ]
    info = {
        **(card or {}),
        "cold_start": asdict(cfg),
        "examples": len(rows),
        "optimizer_steps": int(trainer.state.global_step),
        "losses": losses,
    }
    (out / CARD).write_text(json.dumps(info, indent=1, sort_keys=True))
    model.eval()
    return out


def _sft_config(
    cfg: ColdStartConfig,
    ckpt_dir: Path,
    device: Any,
    *,
    max_steps: int,
    save_steps: int,
    keep_checkpoints: bool,
    progress: bool,
) -> Any:
    """TRL's ``SFTConfig`` of :func:`fine_tune`: the cold start's hyperparameters, a constant
    learning rate after warm-up, a loss on the completions only, checkpoints in ``ckpt_dir``."""
    from trl import SFTConfig

    from adapters.policies.models import native_bf16

    return SFTConfig(
        output_dir=str(ckpt_dir),
        num_train_epochs=cfg.epochs,
        max_steps=max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.lr,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=cfg.warmup_ratio,  # a float below 1 is a share of the steps
        weight_decay=0.0,
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=None if keep_checkpoints else 1,
        report_to=[],
        use_cpu=getattr(device, "type", str(device)) != "cuda",
        bf16=cfg.bf16 and native_bf16(device),
        max_length=cfg.max_length,
        completion_only_loss=True,
        seed=cfg.seed,
        data_seed=cfg.seed,
        dataloader_num_workers=0,
        # a small model: recomputing activations costs more than it saves
        gradient_checkpointing=False,
        disable_tqdm=not progress,
        dataset_num_proc=None,
    )


def _lora_config(cfg: ColdStartConfig) -> Any:
    """The LoRA adapter :func:`fine_tune` trains: rank and alpha of ``cfg`` on every linear
    layer, no dropout."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=int(cfg.lora_alpha),
        lora_dropout=0.0,
        target_modules="all-linear",
        bias="none",
        task_type="CAUSAL_LM",
    )


# ---------------------------------------------------------------------------------------------
# the cached cold start of a training run, and --init


def _run_view(train_cfg: TrainConfig) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The env options and the prompt prefix a resolved TrainConfig's policies see."""
    from adapters.training.backends import prompt_prefix

    return dict(train_cfg.env_config), prompt_prefix(train_cfg)


def canonical_env_config(env_id: str, env_config: dict[str, Any]) -> dict[str, Any]:
    """``env_config`` without the options that equal the setting's defaults: two runs whose
    instances and prompts are the same have the same cold start, whether or not they spell a
    default out.

    >>> canonical_env_config("sokoban", {"height": 6, "width": 8, "prompt_style": "compact"})
    {'width': 8, 'prompt_style': 'compact'}
    """
    import envs

    if not env_config:
        return {}
    default = envs.make_raw(env_id)
    given = envs.make_raw(env_id, **env_config)
    try:
        return {
            k: v
            for k, v in env_config.items()
            if not hasattr(default.config, k)
            or getattr(given.config, k) != getattr(default.config, k)
        }
    finally:
        default.close()
        given.close()


def cold_start_key(train_cfg: TrainConfig, cfg: ColdStartConfig) -> str:
    """What identifies a cold start: the model, the setting and the options its prompts depend
    on (:func:`canonical_env_config`), the prompt prefix, the chat template arguments and the
    cold start's own config."""
    import envs

    env_config, prefix = _run_view(train_cfg)
    env_id = envs.spec(train_cfg.env).id
    blob = json.dumps(
        {
            "model": train_cfg.policy.model,
            "env": env_id,
            "env_config": canonical_env_config(env_id, env_config),
            "prefix": prefix,
            "chat_template_kwargs": train_cfg.policy.chat_template_kwargs,
            "cold_start": asdict(cfg),
            # 2: instances split by symmetry class (envs.core.splits), so a cold start made
            # under format 1 was trained on other instances of the same seeds
            "format": 2,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cold_start_dir(train_cfg: TrainConfig, cfg: ColdStartConfig | None = None) -> Path:
    """Where the cold start of a (resolved) training config is cached."""
    import envs
    from adapters.policies.models import cache_root

    cfg = cfg or ColdStartConfig()
    env = envs.spec(train_cfg.env).id
    return cache_root() / "coldstart" / f"{env}-{cold_start_key(train_cfg, cfg)}"


def make_cold_start(
    train_cfg: TrainConfig,
    cfg: ColdStartConfig,
    out: str | Path,
    *,
    model: Any = None,
    export: str | Path | None = None,
    max_steps: int = -1,
    progress: bool = True,
) -> Path:
    """Play the oracle, fine-tune, save: the whole cold start of a resolved training config
    into ``out`` (resumable). ``model``: an already loaded ``(model, tokenizer)`` in float32."""
    import envs
    from adapters.policies.models import load_base_model, resolve_device

    env_config, prefix = _run_view(train_cfg)
    examples = oracle_examples(
        train_cfg.env, env_config, cfg.episodes, cfg.seed, prefix=prefix, roles=cfg.role_episodes()
    )
    if export is not None:
        write_examples(examples, export)
    if model is None:
        device = resolve_device(train_cfg.compute.device)
        model = load_base_model(train_cfg.policy.model, device, "float32", cfg.seed)
    base, tokenizer = model
    card = {
        "env": envs.spec(train_cfg.env).id,
        "env_config": env_config,
        "model": train_cfg.policy.model,
        "prompt_prefix": prefix,
        "data_sha256": examples_hash(examples),
        "command": sft_command(str(train_cfg.env), train_cfg.policy.model, env_config, cfg),
    }
    return fine_tune(
        base,
        tokenizer,
        examples,
        out,
        cfg,
        chat_template_kwargs=dict(train_cfg.policy.chat_template_kwargs) or None,
        card=card,
        max_steps=max_steps,
        progress=progress,
    )


def sft_command(env: str, model: str, env_config: dict[str, Any], cfg: ColdStartConfig) -> str:
    """The ``python -m adapters.sft`` command that makes this cold start, every env option and
    every cold-start field spelled out (so a later change of a default does not change what it
    makes).

    >>> cmd = sft_command("sokoban", "smollm2", {"height": 8}, ColdStartConfig(roles=("tool",)))
    >>> cmd.split(" --epochs")[0]
    'python -m adapters.sft --env sokoban --model smollm2 --env-config height=8 --episodes 48 --roles tool'
    """  # noqa: E501
    parts = ["python -m adapters.sft --env", env, "--model", model]
    for k, v in env_config.items():
        parts.append(f"--env-config {k}={v if isinstance(v, str) else json.dumps(v)}")
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple):
            parts.append(f"{flag} {','.join(value)}")
        elif value is not None:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def cold_start_of(train_cfg: TrainConfig) -> ColdStartConfig:
    """The :class:`ColdStartConfig` a training config's ``init`` names: ``cold-start`` (every
    role's turns) or ``cold-start:ROLE,...`` (those roles' turns; ``ROLE=N``: of the first N
    episodes), with the defaults otherwise.

    >>> from adapters.training.config import TrainConfig
    >>> cold_start_of(TrainConfig(init="cold-start:tool")).roles
    ('tool',)
    """
    _, _, roles = str(train_cfg.policy.init).partition(":")
    names = tuple(r.strip() for r in roles.split(",") if r.strip())
    return ColdStartConfig(roles=names or None)


# cold starts the project ships (made by ``python -m adapters.sft``; each directory's
# coldstart.json holds the command, the data's hash and the losses), found by the same key as
# the cache: a run that would make one of these uses it instead (``tests/adapters/
# test_shipped_cold_start.py`` checks that the command reproduces it)
def shipped_cold_start(train_cfg: TrainConfig, cfg: ColdStartConfig) -> Path | None:
    """The shipped cold start made for exactly this configuration, if there is one."""
    import envs

    env = envs.spec(train_cfg.env).id
    path = SHIPPED / f"{env}-{cold_start_key(train_cfg, cfg)}"
    return path if (path / CARD).is_file() else None


def ensure_cold_start(train_cfg: TrainConfig, cfg: ColdStartConfig | None = None) -> Path:
    """The cold start of ``train_cfg``: a shipped one made for exactly this configuration, or
    the cached one (made on first use, under a file lock)."""
    from filelock import FileLock

    cfg = cfg or ColdStartConfig()
    shipped = shipped_cold_start(train_cfg, cfg)
    if shipped is not None:
        return shipped
    where = cold_start_dir(train_cfg, cfg)
    if (where / CARD).is_file():
        return where
    where.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(where) + ".lock"):
        if not (where / CARD).is_file():
            print(
                f"cold start: fine-tuning {train_cfg.policy.model} on {cfg.episodes} "
                f"oracle episodes of {train_cfg.env} (once; cached in {where})",
                flush=True,
            )
            make_cold_start(train_cfg, cfg, where)
    return where


def apply_init(model: Any, path: str | Path) -> Any:
    """``model`` with the peft adapter in ``path`` merged into its weights (the merged module;
    the adapter's weights are added in the model's dtype)."""
    from peft import PeftModel

    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise ValueError(f"--init {path}: not a peft adapter directory (no adapter_config.json)")
    merged = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    merged.eval()
    return merged
