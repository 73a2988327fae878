"""Training metrics: a JSONL log (one line per step), TensorBoard scalars and a PNG curve.

``MetricsLogger(run_dir)`` appends ``{"step": s, ...}`` lines to ``run_dir/metrics.jsonl`` and
writes the same scalars to TensorBoard (``run_dir/tensorboard``; ``tensorboard --logdir``).
Each evaluation adds a line to ``eval.jsonl``: the task measures (success rate, the setting's
progress measure, final team reward) and the shaped reward, each with its 95% interval.
:func:`plot_metrics` draws ``training_curve.png`` (matplotlib, Agg backend): first the task
measures on held-out instances with their intervals, then the shaped reward there, then what the
training rollouts saw (success rate and team reward, reward per role), loss, gradient norm / clip
fraction / KL, and the step time split into generation, env + verifiers and update. Series that
coincide stay visible (each has its own marker and line style, and interval bars are drawn side by
side), and the step axis has integer ticks.

Resume: :meth:`MetricsLogger.truncate` cuts the JSONL back to a byte offset saved in a
checkpoint, and TensorBoard is reopened with ``purge_step`` so events logged after that
checkpoint (by the run that was killed) are discarded.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MetricsLogger",
    "NullMetrics",
    "curve_figure",
    "plot_metrics",
    "read_jsonl",
    "truncate_file",
]


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
        """One line per evaluation in ``eval.jsonl`` (the curve's validation points: success
        rate, progress measure, final team reward and shaped reward, each with its 95%
        interval), and the same scalars in TensorBoard."""
        from adapters.evaluation.stats import mean_interval

        record: dict[str, Any] = {
            "step": int(step),
            "tag": tag,
            "episodes": report.episodes,
            "progress_label": report.progress_label,
        }
        for key, metric in EVAL_SERIES:
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


# eval.jsonl keys and the per-episode values they summarise, the task's measures first
EVAL_SERIES = (
    ("success_rate", "success"),
    ("progress", "progress"),
    ("team_reward", "team"),
    ("reward", "reward"),
)
_STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", (0, (5, 1))), ("P", "-"))


def _style(j: int) -> dict[str, Any]:
    """The ``j``-th series' marker, line style and fill: equal series stay told apart."""
    marker, line = _STYLES[j % len(_STYLES)]
    return {"marker": marker, "linestyle": line, "fillstyle": "none" if j else "full"}


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

    When ``eval.jsonl`` lies beside it, the first panels show the validation points (the task
    measures, then the shaped reward, on held-out instances with 95% intervals)."""
    rows = read_jsonl(jsonl)
    evals = read_jsonl(Path(jsonl).with_name("eval.jsonl"))
    if not rows and not evals:
        return None
    import matplotlib.pyplot as plt

    fig = curve_figure(rows, evals)
    out = Path(png)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)
    return out


def curve_figure(rows: list[dict[str, Any]], evals: list[dict[str, Any]]) -> Any:
    """The matplotlib figure of :func:`plot_metrics` (one panel per group of series, from
    ``metrics.jsonl`` rows and ``eval.jsonl`` lines)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    keys = set().union(*rows) if rows else set()
    reward_keys = sorted(k for k in keys if k.startswith("reward/"))
    label = str(evals[-1].get("progress_label", "progress")) if evals else "progress"
    task = [k for k in ("success_rate", "progress", "team_reward") if any(k in e for e in evals)]
    if label == "solved" and "progress" in task:  # "solved" progress is success itself
        task.remove("progress")
    panels: list[tuple[str, list[str]]] = [
        ("validation: task measures (held-out instances, 95% intervals)", task),
        ("validation: shaped reward (mean per step, 95% intervals)", ["reward"] if evals else []),
        ("training rollouts: episodes", [k for k in ("success_rate", "team_reward") if k in keys]),
        ("training rollouts: reward per step (mean over samples)", reward_keys),
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
    for i, (ax, (title, ks)) in enumerate(zip(axes, panels)):
        if title.startswith("validation"):
            names = {"progress": label}
            _plot_evals(ax, evals, ks, names)
            title = f"{title}, {evals[-1].get('episodes', '?')} episodes"
        else:
            for j, k in enumerate(ks):
                xs, ys = _series(rows, k)
                if xs:
                    ax.plot(xs, ys, markersize=3.5, linewidth=1.2, label=k, **_style(j))
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if i == len(panels) - 1:
            ax.set_xlabel("training step")
    fig.tight_layout()
    return fig


def _plot_evals(
    ax: Any, evals: list[dict[str, Any]], keys: list[str], names: dict[str, str]
) -> None:
    """Validation points with interval bars; series drawn side by side (a small offset on the
    step axis) with their own markers, so that equal values do not hide each other."""
    steps = sorted({int(e["step"]) for e in evals})
    gap = min((b - a for a, b in itertools.pairwise(steps)), default=1) or 1
    width = 0.06 * gap
    for j, key in enumerate(keys):
        pts = [e for e in evals if key in e]
        if not pts:
            continue
        shift = (j - (len(keys) - 1) / 2) * width
        xs = [int(e["step"]) + shift for e in pts]
        ys = [float(e[key]) for e in pts]
        err = [
            [y - float(e.get(f"{key}_low", y)) for y, e in zip(ys, pts)],
            [float(e.get(f"{key}_high", y)) - y for y, e in zip(ys, pts)],
        ]
        ax.errorbar(xs, ys, yerr=err, capsize=3, label=names.get(key, key), **_style(j))


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
