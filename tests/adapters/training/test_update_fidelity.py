"""Optimizer-step fidelity through ``update_policy``: AT-GRPO Eq. 3 (``loss_agg="group-mean"``)
against the token mean, and CoMAS' samples per optimizer step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import adapters.training.update as update  # noqa: E402
from adapters.rollout import Sample  # noqa: E402
from adapters.training.advantages import group_advantages  # noqa: E402
from adapters.training.batch import TrainItem  # noqa: E402
from adapters.training.config import TrainConfig  # noqa: E402
from adapters.training.losses import aggregate_loss, group_mean_weights  # noqa: E402

T = 10  # completion tokens per sample


class _Linear(torch.nn.Module):
    """Per-sample log-prob ``theta[i]`` on each of the sample's tokens (a sample's token ids
    are all ``i``): the gradient of theta[i] is the loss's weight on sample i's tokens."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(n))


class _PM:
    pid = "shared"
    dropout = False

    def __init__(self, n: int) -> None:
        self.model = _Linear(n)
        self.params = list(self.model.parameters())
        self.optimizer = torch.optim.SGD(self.params, lr=1.0)

    def activate(self) -> None:
        pass


def _fake_logprobs(model, prompts, completions, **_kw):
    return torch.stack([model.theta[c[0]].expand(len(c)) for c in completions])


def _item(i: int, group: str, adv: float, prompt: int, length: int = T) -> TrainItem:
    """Sample ``i`` of ``group``: ``length`` tokens, all id ``i`` (see :class:`_Linear`)."""
    s = Sample(
        group=group, instance=0, instance_id="x", branch="0", role="tool", policy_id="shared",
        turn=0, step=0, candidate=i, kept=i == 0, prompt="p", completion="c",
        prompt_ids=[prompt], completion_ids=[i] * length, logprobs=[0.0] * length, reward=0.0,
        reward_parts={}, success=False, done=False,
    )  # fmt: skip
    ids = [i] * length
    return TrainItem(s, [prompt], ids, torch.zeros(length), advantages=torch.full((length,), adv))


def _items(rewards: list[float], groups: list[str]) -> list[TrainItem]:
    """One prompt per group (mini-batches keep a prompt's samples together)."""
    adv = group_advantages(rewards, groups).tolist()
    return [_item(i, g, a, prompt=ord(g)) for i, (g, a) in enumerate(zip(groups, adv))]


def _step(monkeypatch, loss_agg: str, skip: bool, minibatches: int = 1) -> list[float]:
    """The parameter change of one SGD step (lr 1): minus the gradient, per sample."""
    monkeypatch.setattr(update, "completion_logprobs", _fake_logprobs)
    rewards = [1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5]
    groups = ["A"] * 4 + ["B"] * 4
    items = _items(rewards, groups)
    cfg = TrainConfig(
        loss_agg=loss_agg, skip_zero_advantage=skip, ppo_minibatches=minibatches,
        ppo_epochs=1, max_grad_norm=1e9, micro_batch_size=3, entropy_coef=0.0, kl_loss_coef=0.0,
    ).resolved()  # fmt: skip
    pm = _PM(len(items))
    stats = update.update_policy(cfg.update, pm, items, step=0, pad_id=0, seed=cfg.seed)
    assert stats["optimizer_steps"] == (1 if skip else minibatches)  # B skipped: A's step only
    return pm.model.theta.detach().tolist()


def test_at_grpo_eq3_weights_each_sample_a_over_k_times_g(monkeypatch):
    """AT-GRPO Eq. 3, -E_g[1/K sum_c log pi(a_c) A_c]. Group A rewards [1, 0, 0, 0] (A = 1.5,
    -0.5, -0.5, -0.5 with the sample std), group B all equal (A = 0), 10-token completions.
    Eq. 3 weights each A sample's (token-mean) log-prob by A / (G K) = A/8: one SGD step moves
    theta_i by A_i/8. The token mean over the informative samples (skip_zero_advantage, the
    earlier default) moves it by A_i/4: a step twice as large, and one that depends on the
    share of equal-reward groups. group-mean gives the same step with or without skipping."""
    adv = [1.5, -0.5, -0.5, -0.5]
    eq3 = _step(monkeypatch, "group-mean", skip=True)
    assert eq3 == pytest.approx([a / 8 for a in adv] + [0.0] * 4, abs=1e-5)
    assert _step(monkeypatch, "group-mean", skip=False) == pytest.approx(eq3, abs=1e-6)
    old = _step(monkeypatch, "token-mean", skip=True)
    assert old == pytest.approx([a / 4 for a in adv] + [0.0] * 4, abs=1e-5)
    # without skipping the token mean would match Eq. 3 here (equal lengths, equal K)
    assert _step(monkeypatch, "token-mean", skip=False) == pytest.approx(eq3, abs=1e-5)


def test_at_grpo_eq3_minibatches_each_estimate_the_full_step(monkeypatch):
    """With the recipe's two PPO mini-batches (A.2.1: 64 of 128), each optimizer step divides
    its weighted sum by G / 2 (one group per mini-batch here), an estimate of the whole batch's
    Eq. 3: group A's step moves its samples by A/4 = 2 * A/8. Skipping B's zero-advantage
    samples leaves that step unchanged (n and G are counted before skipping)."""
    adv = [1.5, -0.5, -0.5, -0.5]
    two = _step(monkeypatch, "group-mean", skip=False, minibatches=2)
    assert two == pytest.approx([2 * a / 8 for a in adv] + [0.0] * 4, abs=1e-5)
    assert _step(monkeypatch, "group-mean", skip=True, minibatches=2) == pytest.approx(two)


def test_group_mean_weights_and_aggregation():
    w = group_mean_weights(["A"] * 4 + ["B"] * 2)
    assert w == pytest.approx([1 / 8] * 4 + [1 / 4] * 2)  # each group weighs 1/2
    per_token = torch.tensor([[2.0, 4.0], [1.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    got = aggregate_loss(per_token, mask, "group-mean", torch.tensor([0.25, 0.5]))
    assert got.item() == pytest.approx(0.25 * 3 + 0.5 * 1)
    with pytest.raises(ValueError, match="weight"):
        aggregate_loss(per_token, mask, "group-mean")


def test_at_grpo_recipe_defaults_to_eq3_with_the_token_mean_one_option_away():
    cfg = TrainConfig(env="sokoban").resolved(cuda=True)
    assert cfg.update.loss_agg == "group-mean" and "Eq. 3" in cfg.sources["loss_agg"]
    user = TrainConfig(env="sokoban", loss_agg="token-mean").resolved(cuda=True)
    assert user.update.loss_agg == "token-mean" and user.sources["loss_agg"] == "user"
    assert TrainConfig(env="mae").resolved(cuda=True).update.loss_agg == "token-mean"


def test_comas_table_2_training_batch_64_samples_per_optimizer_step(monkeypatch):
    """CoMAS Table 2: macro training batch size 64 (samples per optimizer step). A rollout of
    64 questions x 4 reuses x 24 experiences (solutions, evaluations and scores over the 8
    rounds) shared by the l = 4 agents gives each agent ~1,536 samples, so 1,536 / 64 = 24
    optimizer steps per agent and rollout (it was one, ppo_minibatches = 1)."""
    cfg = TrainConfig(env="comas").resolved(cuda=True)
    assert cfg.update.minibatch_size == 64 and "Table 2" in cfg.sources["minibatch_size"]
    monkeypatch.setattr(update, "completion_logprobs", _fake_logprobs)
    n = 64 * 4 * 24 // 4  # samples of one agent
    items = [_item(i, f"q{i}", 1.0, prompt=i, length=1) for i in range(n)]
    run = TrainConfig(
        minibatch_size=cfg.update.minibatch_size, ppo_epochs=cfg.update.ppo_epochs,
        loss_agg="token-mean", micro_batch_size=64, entropy_coef=0.0, kl_loss_coef=0.0,
    ).resolved()  # fmt: skip
    stats = update.update_policy(run.update, _PM(n), items, step=0, pad_id=0, seed=run.seed)
    assert stats["samples_trained"] == 1536 and stats["optimizer_steps"] == 24
    cpu = TrainConfig(env="comas").resolved(cuda=False)
    assert cpu.update.minibatch_size == 0 and cpu.update.ppo_minibatches == 1
