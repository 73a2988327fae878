"""The estimator table: a new advantage estimator is one entry of ``ESTIMATORS``.

A toy estimator (the reward minus the batch's mean reward, one value per sample) is registered,
picked by name in the config and on the command line, and trains one step on the tiny model.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from adapters.train import config_from_argv  # noqa: E402
from adapters.training.advantages import ESTIMATORS, Estimator  # noqa: E402
from adapters.training.config import (  # noqa: E402
    ConfigError,
    TrainConfig,
    UpdateConfig,
)
from adapters.training.trainer import Trainer  # noqa: E402

from ..conftest import char_models, tiny_train_config  # noqa: E402


def mean_baseline(items, opts):
    rewards = [it.sample.reward for it in items]
    mean = sum(rewards) / len(rewards)
    return [torch.full((len(it.completion_ids),), r - mean) for it, r in zip(items, rewards)]


TOY = Estimator(
    mean_baseline,
    scope="batch",
    needs_ref=False,
    sampling="parallel",
    summary="reward minus the batch mean (test)",
    kl_reward_error="the toy estimator has no KL reward",
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(ESTIMATORS, "toy", TOY)
    return "toy"


def test_the_table_decides_choices_sampling_reference_and_scope(toy):
    with pytest.raises(ConfigError, match="algorithm"):
        TrainConfig(algorithm="toy-not-registered")
    cfg = TrainConfig(algorithm=toy).resolved(cuda=False)
    assert cfg.rollout.sampling == "parallel" and cfg.sources["sampling"] == "follows algorithm toy"
    cli, _ = config_from_argv(["--algorithm", toy])
    assert cli.update.algorithm == toy
    with pytest.raises(ConfigError, match="no KL reward"):
        TrainConfig(algorithm=toy, kl_reward_coef=0.1).resolved(cuda=False)
    # the reference model: a KL reward needs it only for estimators that read one
    assert not UpdateConfig(algorithm=toy, kl_reward_coef=0.1).needs_ref
    assert UpdateConfig(algorithm="reinforce++", kl_reward_coef=0.1).needs_ref
    assert UpdateConfig(algorithm=toy, kl_loss_coef=0.1).needs_ref
    assert ESTIMATORS["at-grpo"].sampling == "tree" and ESTIMATORS["at-grpo"].scope == "group"


def test_a_registered_estimator_trains_one_step(tmp_path, toy):
    tr = Trainer(
        tiny_train_config(tmp_path, algorithm=toy, candidates=1),
        models=char_models(0),
        log=lambda s: None,
    )
    assert tr.cfg.rollout.sampling == "parallel"
    samples = tr.rollout(1).samples
    rewards = [float(i % 3) for i in range(len(samples))]  # 0, 1, 2, 0, 1, ...
    for s, r in zip(samples, rewards):
        s.reward = r
    mean = sum(rewards) / len(rewards)
    before = {n: p.detach().clone() for n, p in tr.run.models["shared"].model.named_parameters()}
    stats = tr.update(samples, 1)
    # every sample's advantage is the toy's: its reward minus the batch mean
    assert [s.advantage for s in samples] == pytest.approx([r - mean for r in rewards])
    assert stats["optimizer_steps"] == 1 and stats["samples_trained"] == sum(
        1 for r in rewards if r != mean
    )
    after = dict(tr.run.models["shared"].model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)
    tr.close()
