"""Training metrics: a JSONL log (one line per step), TensorBoard scalars and a PNG curve.

``MetricsLogger(run_dir)`` appends ``{"step": s, ...}`` lines to ``run_dir/metrics.jsonl`` and
writes the same scalars to TensorBoard (``run_dir/tensorboard``; ``tensorboard --logdir``).
:func:`plot_metrics` draws ``training_curve.png`` (matplotlib, Agg backend) from the JSONL:
reward per role, success rate and team reward, loss, gradient norm / clip fraction / KL, and the
step time split into generation, env + verifiers and update.

Resume: :meth:`MetricsLogger.truncate` cuts the JSONL back to a byte offset saved in a
checkpoint, and TensorBoard is reopened with ``purge_step`` so events logged after that
checkpoint (by the run that was killed) are discarded.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "NullMetrics", "plot_metrics", "read_jsonl", "truncate_file"]


def truncate_file(path: Path, offset: int) -> None:
    """Cut ``path`` to ``offset`` bytes (creating it empty if missing)."""
    path = Path(path)
    if not path.exists():
        if offset:
            raise RuntimeError(f"{path} is missing but the checkpoint expects {offset} bytes")
        path.touch()
        return
    size = path.stat().st_size
    if size < offset:
        raise RuntimeError(f"{path} has {size} bytes, fewer than the checkpointed {offset}")
    with open(path, "r+b") as fh:
        fh.truncate(offset)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class MetricsLogger:
    """JSONL + TensorBoard sink for per-step metrics (see the module docstring)."""

    def __init__(
        self, run_dir: str | Path, *, tensorboard: bool = True, purge_step: int | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self.path.touch()
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is in the train extra
                pass
            else:
                self._tb = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=purge_step)

    @property
    def offset(self) -> int:
        return self.path.stat().st_size

    def truncate(self, offset: int) -> None:
        truncate_file(self.path, offset)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        record = {"step": int(step), **metrics}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record, sort_keys=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self._tb is not None:
            for key, value in metrics.items():
                if _finite(value):
                    self._tb.add_scalar(key, float(value), int(step))
            self._tb.flush()

    def log_scalars(self, step: int, prefix: str, metrics: Mapping[str, Any]) -> None:
        """TensorBoard only (e.g. evaluation results, which have their own JSON files)."""
        if self._tb is not None:
            for key, value in metrics.items():
                if _finite(value):
                    self._tb.add_scalar(f"{prefix}/{key}", float(value), int(step))
            self._tb.flush()

    def log_eval(self, step: int, tag: str, report: Any) -> None:
        """One line per evaluation in ``eval.jsonl`` (the curve's validation points: mean
        reward and success rate with 95% intervals), and the same scalars in TensorBoard."""
        from adapters.evaluation.stats import mean_interval

        record: dict[str, Any] = {"step": int(step), "tag": tag, "episodes": report.episodes}
        for key, metric in (("reward", "reward"), ("success_rate", "success")):
            values = report.values(metric)
            if values:
                ci = mean_interval(values)
                record.update({key: ci.mean, f"{key}_low": ci.low, f"{key}_high": ci.high})
        with open(self.run_dir / "eval.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")
        self.log_scalars(step, "eval", report.summary())

    def plot(self, png: str | Path | None = None) -> Path | None:
        return plot_metrics(self.path, png or self.run_dir / "training_curve.png")

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and _finite(v):
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def plot_metrics(jsonl: str | Path, png: str | Path) -> Path | None:
    """Draw the training curves of ``jsonl`` into ``png``; None when there is nothing to plot.

    When ``eval.jsonl`` lies beside it, the first panel shows the validation points (mean
    reward and success rate on held-out instances, with 95% intervals) over training steps."""
    rows = read_jsonl(jsonl)
    evals = read_jsonl(Path(jsonl).with_name("eval.jsonl"))
    if not rows and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    keys = set().union(*rows) if rows else set()
    reward_keys = sorted(k for k in keys if k.startswith("reward/"))
    panels: list[tuple[str, list[str]]] = [
        ("validation (held-out instances, 95% intervals)", ["eval"] if evals else []),
        ("reward per step (mean over samples)", reward_keys),
        ("episodes", [k for k in ("success_rate", "team_reward") if k in keys]),
        ("loss", [k for k in ("loss", "pg_loss", "kl_loss") if k in keys]),
        (
            "optimisation",
            [k for k in ("grad_norm", "clip_frac", "approx_kl", "kl") if k in keys],
        ),
        (
            "seconds per step",
            [k for k in ("time/generation", "time/env", "time/update", "time/step") if k in keys],
        ),
    ]
    panels = [(t, ks) for t, ks in panels if ks]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.3 * len(panels)), sharex=True)
    if len(panels) == 1:
        axes = [axes]
    for ax, (title, ks) in zip(axes, panels):
        if ks == ["eval"]:
            _plot_evals(ax, evals)
            ax.set_title(f"{title}, {evals[-1].get('episodes', '?')} episodes", fontsize=9)
            continue
        for k in ks:
            xs, ys = _series(rows, k)
            if xs:
                ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.2, label=k)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1].set_xlabel("training step")
    fig.tight_layout()
    out = Path(png)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)
    return out


def _plot_evals(ax: Any, evals: list[dict[str, Any]]) -> None:
    for key, color in (("reward", "tab:blue"), ("success_rate", "tab:green")):
        pts = [e for e in evals if key in e]
        if not pts:
            continue
        xs = [int(e["step"]) for e in pts]
        ys = [float(e[key]) for e in pts]
        err = [
            [y - float(e[f"{key}_low"]) for y, e in zip(ys, pts)],
            [float(e[f"{key}_high"]) - y for y, e in zip(ys, pts)],
        ]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=color, label=f"val {key}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


@dataclass
class NullMetrics:
    """The metrics logger of ranks other than 0: writes nothing."""

    offset: int = 0
    path: Path = field(default_factory=lambda: Path(os.devnull))

    def log(self, *a: Any, **k: Any) -> None: ...
    def log_scalars(self, *a: Any, **k: Any) -> None: ...
    def log_eval(self, *a: Any, **k: Any) -> None: ...
    def plot(self, *a: Any, **k: Any) -> None: ...
    def truncate(self, *a: Any, **k: Any) -> None: ...
    def close(self) -> None: ...
