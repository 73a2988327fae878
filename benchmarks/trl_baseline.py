"""TRL's ``GRPOTrainer`` on a setting's prompts: the baseline of ``train_throughput.py``.

The same model (a fresh copy), the same first-turn prompts (``env_dataset``), the same number of
completions per prompt (K = ``num_generations``), the same completion length, sampling
temperature, LoRA rank/alpha/targets, learning rate and torch threads as our trainer's run.
Each completion is scored by stepping a fresh env of its row (seed) with it, so TRL's reward is
the env's reward of that first step. No KL term (``beta = 0``, as our recipe), one PPO iteration
per generation batch, no checkpoints inside the timed steps.

Timing: a ``TrainerCallback`` takes the wall time of every optimizer step (generation, reward,
loss, backward, optimizer) and TRL's own logs give the completion lengths.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["run_trl"]


def run_trl(
    *,
    env_id: str,
    env_config: dict[str, Any],
    model: Any,
    tokenizer: Any,
    prompts_per_step: int,
    k: int,
    max_new_tokens: int,
    temperature: float,
    lora_rank: int,
    lora_alpha: float,
    lr: float,
    steps: int,
    warmup: int,
    seed: int,
    out_dir: str,
) -> list[dict[str, float]]:
    """Train ``warmup + steps`` GRPO steps with TRL; one row per step (see the module doc)."""
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import envs
    from adapters.integrations.trl import env_dataset
    from adapters.rollout import flush_dead_steps

    dataset = env_dataset(env_id, prompts_per_step * (warmup + steps), seed=seed, **env_config)

    def first_step_reward(prompts: Any, completions: Any, seed: list[int], split: list[str], **_):
        rewards = []
        for text, s, sp in zip(completions, seed, split):
            raw = envs.make(env_id, **env_config).unwrapped
            raw.reset(seed=int(s), options={"split": sp})
            flush_dead_steps(raw)
            agent = raw.agent_selection
            content = text[-1]["content"] if isinstance(text, list) else str(text)
            raw.step(content)
            rewards.append(float(raw.infos[agent]["reward_parts"]["reward"]))
            raw.close()
        return rewards

    rows: list[dict[str, float]] = []

    class Timer(TrainerCallback):
        t0 = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            Timer.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            rows.append(
                {"step": float(state.global_step), "step_s": time.perf_counter() - Timer.t0}
            )

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if rows and logs and "completions/mean_length" in logs:
                rows[-1]["mean_length"] = float(logs["completions/mean_length"])

    args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=prompts_per_step * k,
        num_generations=k,
        max_completion_length=max_new_tokens,
        temperature=temperature,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        learning_rate=lr,
        max_steps=warmup + steps,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=seed,
        shuffle_dataset=False,
    )
    peft_config = LoraConfig(
        r=lora_rank,
        lora_alpha=int(lora_alpha),
        target_modules="all-linear",
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=dataset,
        reward_funcs=first_step_reward,
        peft_config=peft_config,
        callbacks=[Timer()],
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # its per-step dicts would bury the table
    trainer.train()
    batch = prompts_per_step * k
    for i, r in enumerate(rows):
        r["warmup"] = float(i < warmup)
        r["samples"] = float(batch)
        r["gen_tokens"] = r.get("mean_length", 0.0) * batch
    return rows
