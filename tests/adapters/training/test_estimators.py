"""Advantages, losses, KL terms and log-probs on small hand-computed tensors."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from adapters.training.advantages import (  # noqa: E402
    group_advantages,
    reinforce_pp_advantages,
    reinforce_pp_returns,
    task_relative_reinforce_pp_advantages,
    task_relative_token_whitened_advantages,
)
from adapters.training.logprobs import sequence_logprobs  # noqa: E402
from adapters.training.losses import aggregate_loss, kl_loss, ppo_clip_loss, token_kl  # noqa: E402
from adapters.training.masking import masked_whiten  # noqa: E402


def close(t, expected, tol=1e-5):
    return torch.allclose(t.double(), torch.tensor(expected, dtype=torch.float64), atol=tol)


# ------------------------------------------------------------------------------------------
# GRPO / AT-GRPO


def test_group_advantages_sample_std_paper_eq1():
    # rewards 1,0,1,0: mean 0.5; sample std sqrt((4 * 0.25) / 3) = 0.57735
    # -> +-0.5/0.57735 = +-0.8660
    adv = group_advantages([1.0, 0.0, 1.0, 0.0], ["q"] * 4, eps=0.0)
    assert close(adv, [0.8660254, -0.8660254, 0.8660254, -0.8660254])
    # population std 0.5 -> +-1
    adv = group_advantages([1.0, 0.0, 1.0, 0.0], ["q"] * 4, unbiased=False, eps=0.0)
    assert close(adv, [1.0, -1.0, 1.0, -1.0])


def test_group_advantages_several_groups_singletons_and_ties():
    # group a: 1,2,3 -> mean 2, sample std 1 -> -1,0,1; group b is a singleton -> 0;
    # group c has equal rewards -> 0
    rewards = [1.0, 2.0, 3.0, 5.0, 7.0, 7.0]
    keys = [
        (0, "tool", 1),
        (0, "tool", 1),
        (0, "tool", 1),
        (0, "planner", 1),
        (1, "tool", 1),
        (1, "tool", 1),
    ]
    assert close(group_advantages(rewards, keys, eps=0.0), [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    # Dr.GRPO: mean baseline only
    assert close(
        group_advantages(rewards, keys, normalize_std=False), [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    )
    assert close(group_advantages([2.0, 0.0], ["g", "g"], normalize_std=False), [1.0, -1.0])


def test_group_advantages_interleaved_keys_and_tensor_input():
    adv = group_advantages(torch.tensor([0.0, 10.0, 1.0, 20.0]), ["a", "b", "a", "b"], eps=0.0)
    # a: 0,1 -> mean .5, sample std .7071 -> -.7071,.7071 ; b: 10,20 -> same after scaling
    assert close(adv, [-0.7071068, -0.7071068, 0.7071068, 0.7071068])


def test_group_advantages_bad_input():
    with pytest.raises(ValueError, match="group ids"):
        group_advantages([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(torch.zeros(2, 2), ["a", "b"])


# ------------------------------------------------------------------------------------------
# KL


def test_token_kl_estimators():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])
    assert close(token_kl(logp, ref, "k1"), [0.5, -1.0])
    assert close(token_kl(logp, ref, "k2"), [0.125, 0.5])
    # k3 = exp(ref - logp) - (ref - logp) - 1: exp(-0.5) + 0.5 - 1 = 0.1065307; e - 2 = 0.7182818
    assert close(token_kl(logp, ref, "k3"), [0.1065307, 0.7182818])
    with pytest.raises(ValueError):
        token_kl(logp, ref, "k9")  # type: ignore[arg-type]


def test_kl_loss_is_a_masked_token_mean():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, 9.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # valid k3 values: 0.1065307, 0.7182818, 0 -> mean 0.2749375
    assert kl_loss(logp, ref, mask).item() == pytest.approx(0.2749375, abs=1e-6)
    assert kl_loss(logp, ref, mask, "k1").item() == pytest.approx((0.5 - 1.0 + 0.0) / 3, abs=1e-6)


# ------------------------------------------------------------------------------------------
# REINFORCE++


def _rpp_inputs():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    ref = torch.zeros(2, 4)
    # k1 per token: seq 0 -> 0.2, -0.1, 0.3 (pad 5.0 must be ignored); seq 1 -> 0.5, 0.0
    logp = torch.tensor([[0.2, -0.1, 0.3, 5.0], [0.5, 0.0, 7.0, 7.0]])
    return [1.0, 0.0], mask, logp, ref


def test_reinforce_pp_returns_with_kl_penalty():
    rewards, mask, logp, ref = _rpp_inputs()
    # beta 0.1: token rewards seq0 = -0.02, 0.01, -0.03 + 1 = 0.97 ; seq1 = -0.05, 0.0 (+0)
    # returns-to-go (gamma 1): seq0 0.96, 0.98, 0.97 ; seq1 -0.05, 0.0
    ret = reinforce_pp_returns(rewards, mask, logp, ref, beta=0.1)
    assert close(ret, [[0.96, 0.98, 0.97, 0.0], [-0.05, 0.0, 0.0, 0.0]])
    # gamma 0.5: seq0 G2 = 0.97, G1 = 0.01 + 0.485 = 0.495, G0 = -0.02 + 0.2475 = 0.2275
    ret = reinforce_pp_returns(rewards, mask, logp, ref, beta=0.1, gamma=0.5)
    assert close(ret[0], [0.2275, 0.495, 0.97, 0.0])
    # without KL each valid token carries the sequence reward
    assert close(reinforce_pp_returns(rewards, mask), [[1, 1, 1, 0], [0, 0, 0, 0]])
    with pytest.raises(ValueError, match="needs logprobs"):
        reinforce_pp_returns(rewards, mask, beta=0.1)


def test_reinforce_pp_advantages_global_whitening():
    rewards, mask, logp, ref = _rpp_inputs()
    adv = reinforce_pp_advantages(rewards, mask, logp, ref, beta=0.1, eps=0.0)
    # valid returns 0.96, 0.98, 0.97, -0.05, 0.0: mean 0.572, population var 0.237896,
    # std 0.4877458 -> (x - 0.572) / 0.4877458
    expected = [[0.7954963, 0.8365012, 0.8159988, 0.0], [-1.2752544, -1.1727419, 0.0, 0.0]]
    assert close(adv, expected)
    valid = adv[mask.bool()]
    assert valid.mean().abs() < 1e-6 and (valid.pow(2).mean() - 1).abs() < 1e-5


def test_task_relative_reinforce_pp_normalises_per_role():
    """MAE §3 / SAGE Eq. 1: A = (r - mu_role) / (sigma_role + eps), one value per sample."""
    rewards = [1.0, 0.0, 0.2, 0.6]
    roles = ["proposer", "proposer", "solver", "solver"]
    adv = task_relative_reinforce_pp_advantages(rewards, roles, eps=0.0)
    # proposer 1, 0: mean .5 std .5 -> +-1 ; solver .2, .6: mean .4 std .2 -> -+1
    assert close(adv, [1, -1, -1, 1])
    # one global baseline instead (REINFORCE++): tokens 1,1,0,0,.2,.2,.6,.6 -> mean .45,
    # var (2*.3025 + 2*.2025 + 2*.0625 + 2*.0225) / 8 = .1475
    mask = torch.ones(4, 2, dtype=torch.long)
    glob = reinforce_pp_advantages(rewards, mask, eps=0.0)
    assert glob[0, 0].item() == pytest.approx((1 - 0.45) / math.sqrt(0.1475), abs=1e-5)
    # a role with one sample, or with equal rewards, has no baseline to beat: 0
    assert close(task_relative_reinforce_pp_advantages([3.0, 1.0, 1.0], ["a", "b", "b"]), [0, 0, 0])


def test_task_relative_is_per_sample_not_per_token():
    """Rewards 1 and 0 on completions of 1 and 3 tokens: Eq. 1 gives +1 and -1 per sample
    (every token of the sample carries it); whitening over tokens gives +1.73 / -0.58."""
    adv = task_relative_reinforce_pp_advantages([1.0, 0.0], ["p", "p"], eps=0.0)
    assert close(adv, [1.0, -1.0])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    token = task_relative_token_whitened_advantages([1.0, 0.0], mask, ["p", "p"], eps=0.0)
    # tokens 1,0,0,0 -> mean .25, std sqrt(.1875) = .4330 -> 1.7320508 and -0.5773503
    assert close(token, [[1.7320508, 0, 0], [-0.5773503, -0.5773503, -0.5773503]])


def test_masked_whiten_ignores_padding_and_handles_constants():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    m = torch.tensor([[1, 1, 0]])
    assert close(masked_whiten(x, m, eps=0.0), [[-1.0, 1.0, 0.0]])
    assert close(masked_whiten(torch.ones(1, 3), torch.ones(1, 3)), [[0.0, 0.0, 0.0]])


@pytest.mark.parametrize("value", [0.1, 0.3, 0.7, 1 / 3, 0.55])
@pytest.mark.parametrize("n", [3, 7, 12, 37])
def test_equal_rewards_give_zero_advantages_despite_float_rounding(value, n):
    """A mean of n equal float32 values need not equal them; dividing that rounding by the
    std it makes gave advantages of order 1 with random signs (0.86 for 3 rewards of 0.7):
    every estimator must give exactly 0 to rewards that are all equal."""
    rewards = [value] * n
    mask = torch.ones(n, 5)
    for adv in (
        group_advantages(rewards, ["g"] * n),
        group_advantages(rewards, ["g"] * n, normalize_std=False),
        reinforce_pp_advantages(rewards, mask),
        reinforce_pp_advantages(rewards, mask, group_ids=["g"] * n),
        task_relative_reinforce_pp_advantages(rewards, ["r"] * n),
        task_relative_token_whitened_advantages(rewards, mask, ["r"] * n),
        masked_whiten(torch.full((n, 5), value), mask),
    ):
        assert adv.abs().max().item() == 0.0
    # a real difference is still whitened, in a group of its own beside an equal one
    adv = group_advantages([value] * 3 + [0.0, 1.0], ["a"] * 3 + ["b"] * 2, unbiased=False)
    assert adv[:3].abs().max() == 0 and adv[3:].tolist() == pytest.approx([-1.0, 1.0], abs=1e-5)


# ------------------------------------------------------------------------------------------
# PPO


def _ppo_inputs():
    ratios = torch.tensor([[1.5, 0.5, 1.1, 0.5, 9.0]])
    old = torch.full((1, 5), -1.0)
    logp = (old + ratios.log()).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])  # the last token (ratio 9) is padding
    return logp, old, adv, mask


def test_ppo_clip_loss_hand_computed():
    logp, old, adv, mask = _ppo_inputs()
    loss, stats = ppo_clip_loss(logp, old, adv, mask, clip_eps=0.2)
    # per token max(-A r, -A clip(r, .8, 1.2)):
    #   r 1.5, A +1: max(-1.5, -1.2) = -1.2 (clipped)   r 0.5, A +1: max(-0.5, -0.8) = -0.5
    #   r 1.1, A -1: max(1.1, 1.1) = 1.1              r 0.5, A -1: max(0.5, 0.8) = 0.8 (clipped)
    # token mean over 4 valid tokens: (-1.2 - 0.5 + 1.1 + 0.8) / 4 = 0.05
    assert loss.item() == pytest.approx(0.05, abs=1e-6)
    assert stats["clip_frac"].item() == pytest.approx(0.5)
    # approx KL = mean((r - 1) - log r) = (0.0945349 + 0.1931472 + 0.0046898 + 0.1931472) / 4
    assert stats["approx_kl"].item() == pytest.approx(0.1213798, abs=1e-6)
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 1.1 + 0.5) / 4, abs=1e-6)
    loss.backward()
    # clipped tokens get no gradient; others d/dlogp (-A r) / 4 = -A r / 4
    assert close(logp.grad, [[0.0, -0.125, 0.275, 0.0, 0.0]])


def test_ppo_asymmetric_clip_and_sequence_advantages():
    logp, old, _, mask = _ppo_inputs()
    adv_seq = torch.tensor([1.0])  # one advantage per sequence, broadcast
    loss, _ = ppo_clip_loss(logp, old, adv_seq, mask, clip_eps=0.2, clip_eps_high=0.28)
    # A = +1 everywhere: max(-r, -clip(r, .8, 1.28)): -1.28, -0.5, -1.1, -0.5 -> mean -0.845
    assert loss.item() == pytest.approx(-0.845, abs=1e-6)


def test_loss_aggregation_modes():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert aggregate_loss(per_token, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate_loss(per_token, mask, "seq-mean-token-mean").item() == pytest.approx(
        (2 + 4) / 2
    )
    assert aggregate_loss(per_token, mask, "seq-mean-token-sum").item() == pytest.approx(
        (6 + 4) / 2
    )
    with pytest.raises(ValueError):
        aggregate_loss(per_token, mask, "mean")  # type: ignore[arg-type]


def test_on_policy_ppo_gradient_equals_policy_gradient():
    """With old = current log-probs (ratio 1), the gradient is AT-GRPO Eq. 3's -A grad log pi."""
    logp = torch.tensor([[-0.3, -1.2], [-0.7, -2.0]], requires_grad=True)
    adv = torch.tensor([0.5, -2.0])
    mask = torch.ones(2, 2)
    loss, stats = ppo_clip_loss(logp, logp.detach(), adv, mask)
    loss.backward()
    assert close(logp.grad, [[-0.125, -0.125], [0.5, 0.5]])
    assert stats["clip_frac"].item() == 0.0 and stats["approx_kl"].item() == 0.0


# ------------------------------------------------------------------------------------------
# sequence_logprobs


def test_chunked_logprob_gradients_match_autograd():
    from adapters.training.logprobs import ChunkedLogprob

    gen = torch.Generator().manual_seed(0)
    h = torch.randn(7, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(11, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, generator=gen, requires_grad=True)
    t = torch.randint(0, 11, (7,), generator=gen)
    assert torch.autograd.gradcheck(
        lambda h, w, b: ChunkedLogprob.apply(h, w, b, t, 0.5, 3), (h, w, b)
    )
    out = ChunkedLogprob.apply(h, w, b, t, 0.5, 3)
    ref = torch.log_softmax((h @ w.T + b) * 0.5, -1).gather(-1, t[:, None]).squeeze(-1)
    assert torch.allclose(out, ref)


def test_sequence_logprobs_matches_full_logits_and_padding(char_model):
    model, _ = char_model
    ids = torch.tensor([[0, 0, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    attn = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    comp = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]])
    lp = sequence_logprobs(model, ids, attn, comp, temperature=0.7, chunk_size=2)
    # reference: the unpadded sequence through the model's own forward
    logits = model(input_ids=torch.tensor([[7, 8, 9, 10]])).logits[0] / 0.7
    ref = torch.log_softmax(logits, -1)
    assert torch.allclose(lp[0, 4:], torch.stack([ref[1, 9], ref[2, 10]]), atol=1e-5)
    assert (lp[comp == 0] == 0).all()
    # right padding gives the same numbers
    ids_r = torch.tensor([[7, 8, 9, 10, 0, 0]])
    lp_r = sequence_logprobs(
        model,
        ids_r,
        torch.tensor([[1, 1, 1, 1, 0, 0]]),
        torch.tensor([[0, 0, 1, 1, 0, 0]]),
        temperature=0.7,
    )
    assert torch.allclose(lp_r[0, 2:4], lp[0, 4:], atol=1e-5)


def test_sequence_logprobs_gradients_match_the_naive_computation(char_model):
    model, _ = char_model
    ids = torch.tensor([[5, 20, 30, 40, 50], [6, 21, 31, 41, 51]])
    attn = torch.ones_like(ids)
    comp = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
    params = [p for p in model.parameters() if p.requires_grad]

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in params]

    fast = sequence_logprobs(model, ids, attn, comp, chunk_size=3)
    g_fast = grads((fast * comp).sum())
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    naive = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    g_naive = grads((naive * comp[:, 1:]).sum())
    assert torch.allclose(fast[:, 1:], naive * comp[:, 1:], atol=1e-5)
    for a, b in zip(g_fast, g_naive):
        assert torch.allclose(a, b, atol=1e-5)
    model.zero_grad()


def test_sequence_logprobs_rejects_bad_masks(char_model):
    model, _ = char_model
    ids = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="first token"):
        sequence_logprobs(model, ids, torch.ones_like(ids), torch.ones_like(ids))
    with pytest.raises(ValueError, match="same shape"):
        sequence_logprobs(model, ids, torch.ones(1, 2), torch.zeros_like(ids))
