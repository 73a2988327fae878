"""The PPO ratio's denominator (``update.old_logprobs``): a pass before the update over the samples
it trains on (``recompute``), or, for a one-step update, the update's own forward (``forward``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from adapters.training import update  # noqa: E402
from adapters.training.logprobs import batch_logprobs  # noqa: E402
from adapters.training.trainer import Trainer  # noqa: E402

from ..conftest import char_models  # noqa: E402
from ..conftest import tiny_train_config as cfg  # noqa: E402


def _step(tmp_path, monkeypatch, old: str) -> tuple[dict, tuple, int, int]:
    """One step of the CPU default's shape (merged copy samples, float32 update for an exact
    comparison): (stats, the adapter weights before and after, samples rolled out, samples the
    pass scored).
    Half of the groups earn equal rewards, so their samples are not trained."""
    scored: list[int] = []

    def counting(model, items, *a, **kw):
        scored.append(len(items))
        return batch_logprobs(model, items, *a, **kw)

    monkeypatch.setattr(update, "batch_logprobs", counting)
    c = cfg(
        tmp_path,
        old,
        generation_model="merged",
        update_precision="float32",
        candidates=4,
        instances_per_step=4,
        lr=5e-2,
        old_logprobs=old,
    )
    tr = Trainer(c, models=char_models(seed=3), log=lambda s: None)
    assert tr.cfg.update.old_logprobs == ("forward" if old == "auto" else old)
    start = [p.detach().clone() for p in tr.run.models["shared"].params]
    result = tr.rollout(1)
    groups = sorted({s.group for s in result.samples})
    for s in result.samples:
        flat = groups.index(s.group) % 2
        s.reward = 0.5 if flat else (sum(map(ord, s.completion)) % 5) / 5
    stats = tr.update(result.samples, 1)
    weights = [p.detach().clone() for p in tr.run.models["shared"].params]
    tr.close()
    return stats, (start, weights), len(result.samples), sum(scored)


def test_the_forward_takes_the_step_a_recomputing_pass_takes(tmp_path, monkeypatch):
    """auto picks ``forward`` for a one-step update: no pass before it, and the same step (same
    samples trained, same weights to float32 rounding) as a pass over the trained samples; the
    pass scores only the samples with a non-zero advantage, not every sample."""
    rec, (start, w_rec), n, scored_rec = _step(tmp_path, monkeypatch, "recompute")
    fwd, (_, w_fwd), n2, scored_fwd = _step(tmp_path, monkeypatch, "auto")
    assert n == n2 and rec["samples_trained"] == fwd["samples_trained"] > 0
    assert scored_fwd == 0  # no pass
    assert scored_rec == rec["samples_trained"] < n  # only the trained samples
    assert rec["optimizer_steps"] == fwd["optimizer_steps"] == 1
    assert fwd["clip_frac"] == 0.0 and fwd["approx_kl"] == 0.0  # the ratio is exactly 1
    moved = sum(float(((a - b) ** 2).sum()) for a, b in zip(w_rec, start)) ** 0.5
    diff = sum(float(((a - b) ** 2).sum()) for a, b in zip(w_rec, w_fwd)) ** 0.5
    assert moved > 1e-2 and diff < 1e-3 * moved, (moved, diff)
