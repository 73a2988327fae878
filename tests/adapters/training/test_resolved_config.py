"""The resolved run config: every auto value set once, frozen, read through typed views; each
field's ``--help`` text lives on the field."""

from __future__ import annotations

import dataclasses

import pytest

from adapters.train import build_parser
from adapters.training.config import AUTO_FIELDS, LoopConfig, TrainConfig, UpdateConfig


@pytest.mark.parametrize("env", ["sokoban", "propose_solve_judge", "discussion"])
@pytest.mark.parametrize("cuda", [False, True])
def test_resolved_sets_every_auto_value_and_freezes(env, cuda):
    raw = TrainConfig(env=env)
    assert not raw.is_resolved
    c = raw.resolved(cuda=cuda)
    assert c.is_resolved
    assert [n for n in AUTO_FIELDS if getattr(c, n) is None] == []
    assert c.lora_alpha is not None and c.lora_dropout is not None  # also without LoRA
    with pytest.raises(dataclasses.FrozenInstanceError, match="replace"):
        c.steps = 3
    changed = c.replace(steps=3)  # a new config, resolved again on demand
    assert changed.steps == 3 and changed.resolved().steps == 3 and c.resolved() == c


def test_views_read_the_resolved_values():
    c = TrainConfig(env="sokoban").resolved(cuda=False)
    u = UpdateConfig.of(c)
    # the AT-GRPO recipe's CPU scale-down (recipes._CPU_AT_GRPO / _CPU_COMMON)
    assert (u.lr, u.ppo_minibatches, u.lora_rank, u.lora_alpha) == (1e-3, 4, 8, 16.0)
    assert (u.algorithm, u.kl_loss_type, u.max_grad_norm) == ("at-grpo", "k3", 1.0)
    gpu = UpdateConfig.of(TrainConfig(env="sokoban").resolved(cuda=True))
    assert (gpu.lr, gpu.lora_rank, gpu.lora_alpha) == (1e-6, 0, 0.0)  # AT-GRPO A.2.1
    r = c.rollout_config(prompt_seeds=True)
    assert (r.candidates, r.sampling, r.keep, r.max_new_tokens, r.prompt_seeds) == (
        4,
        "tree",
        "best",
        320,
        True,
    )
    loop = c.replace(output_dir="somewhere").view(LoopConfig)
    assert (loop.steps, loop.instances_per_step, loop.demos, loop.eval_episodes) == (6, 4, 0, 64)


def test_every_flag_has_the_help_text_of_its_field():
    helps = {
        a.dest: a.help for a in build_parser()._actions if a.option_strings and a.dest != "help"
    }
    for f in dataclasses.fields(TrainConfig):
        if f.name == "sources":
            continue
        if f.name == "algorithm":  # one summary per estimator of the table
            assert "at-grpo: tree sampling" in helps["algorithm"]
            continue
        assert helps[f.name] == f.metadata["help"] and f.metadata["help"], f.name
    assert helps["lr"] == "learning rate (AdamW)"
