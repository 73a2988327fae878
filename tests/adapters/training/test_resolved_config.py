"""The resolved run config: every auto knob set once, frozen, read by section; each knob's
``--help`` text lives on the knob, in its section."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from adapters.train import build_parser
from adapters.training.config import ConfigError, TrainConfig, config_from_dict, knob_fields


@pytest.mark.parametrize("env", ["sokoban", "propose_solve_judge", "discussion"])
@pytest.mark.parametrize("cuda", [False, True])
def test_resolved_sets_every_auto_value_and_freezes(env, cuda):
    raw = TrainConfig(env=env)
    assert not raw.is_resolved
    c = raw.resolved(cuda=cuda)
    assert c.is_resolved
    assert c.unresolved() == []
    assert c.policy.lora_alpha is not None and c.policy.lora_dropout is not None  # no LoRA too
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.schedule.steps = 3  # type: ignore[misc]
    changed = c.replace(steps=3)  # a new config, resolved again on demand
    assert changed.schedule.steps == 3 and changed.resolved().schedule.steps == 3
    assert c.resolved() == c


def test_sections_read_the_resolved_values():
    c = TrainConfig(env="plan_path").resolved(cuda=False)
    u, p = c.update, c.policy
    # the AT-GRPO recipe's CPU scale-down (recipes._CPU_AT_GRPO / _CPU_COMMON), with the
    # setting's smaller step (its spec's cpu_train_values)
    assert (u.lr, u.ppo_minibatches, p.lora_rank, p.lora_alpha) == (3e-4, 1, 8, 16.0)
    assert c.sources["lr"].startswith("setting plan_path: CPU: a smaller step")
    assert (u.algorithm, u.kl_loss_type, u.max_grad_norm) == ("at-grpo", "k3", 1.0)
    gpu = TrainConfig(env="plan_path").resolved(cuda=True)
    assert (gpu.update.lr, gpu.policy.lora_rank, gpu.policy.lora_alpha) == (1e-6, 0, 0.0)
    r, g = c.rollout, c.generation
    assert (r.candidates, r.sampling, r.keep, g.max_new_tokens) == (4, "tree", "best", 320)
    s, e = c.schedule, c.eval
    assert (s.steps, s.instances_per_step, c.demos, e.eval_episodes) == (6, 4, 0, 64)


def test_a_knob_is_declared_once_and_every_section_is_filled_from_it():
    c = TrainConfig(env="sokoban", lr=3e-4, candidates=2)
    assert (c.update.lr, c.rollout.candidates) == (3e-4, 2)  # each name goes to its section
    assert c.get("lr") == 3e-4 and c.flat()["candidates"] == 2
    names = TrainConfig.knob_names()
    assert len(names) == len(set(names))  # unique across sections: one flag, one flat key each


def test_every_flag_has_the_help_text_of_its_field():
    helps = {
        a.dest: a.help for a in build_parser()._actions if a.option_strings and a.dest != "help"
    }
    for f in knob_fields().values():
        if f.name == "algorithm":  # one summary per estimator of the table
            assert "at-grpo: tree sampling" in helps["algorithm"]
            continue
        assert helps[f.name] == f.metadata["help"] and f.metadata["help"], f.name
    assert helps["lr"] == "learning rate (AdamW)"


def test_config_files_by_section_and_old_flat_ones_load_to_the_same_run(tmp_path):
    c = TrainConfig(env="sudoku", lr=3e-4, candidates=2).resolved(cuda=False)
    c.save(tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    assert "\nupdate:\n" in text and "\n  lr: 0.0003  # user\n" in text  # by section, sourced
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the format a run writes loads without a note
        again = TrainConfig.load(tmp_path / "config.yaml")
    assert again == c  # the values (their sources are the comments)
    flat = tmp_path / "old.yaml"  # the format before sections
    flat.write_text("env: sudoku\nlr: 3.0e-4\ncandidates: 2\n")
    with pytest.warns(FutureWarning, match="without their sections"):
        old = TrainConfig.load(flat)
    assert old.resolved(cuda=False) == c
    with pytest.raises(ConfigError, match="did you mean 'lr'"):
        config_from_dict({"update": {"lrr": 1e-3}})
