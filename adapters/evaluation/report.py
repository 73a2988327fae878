"""The suite benchmark's report: numbers with 95% intervals, a Markdown table, bar charts.

:func:`summarise` turns the saved chunks of a suite run (:mod:`adapters.evaluation.suite`) into
``results.json``'s content: one row per entry (setting, mode) and policy with every episode's
record and, over episodes, the mean and 95% Student-t interval
(:func:`~adapters.evaluation.stats.mean_interval`) of

* ``success_rate`` - the share of episodes the setting counts as solved;
* ``progress`` - the setting's own progress measure at the end of the episode
  (``env.progress()``, named by ``progress_label``: boxes on goals, distance closed, cells
  solved, tests passed; success itself where the task has no partial progress);
* ``team_reward`` - the final team reward (``None`` for settings whose rewards mix in no team
  reward: MAE, SAGE, CoMAS, MarsRL);
* ``reward_per_role`` - per role, the episode's mean per-step reward of that role (delayed
  awards included); ``return_per_role`` - its sum over the episode;
* ``completion_tokens`` - tokens generated per episode, all roles together (0 for the oracle,
  which writes its answers without a model);
* ``turns`` and ``steps`` per episode;

and ``seconds``, the wall time of the row (its chunks' engine runs added up; no interval).
:func:`markdown` renders the table (``mean ± half-width`` of the interval; the t-interval is
symmetric), the task's measures (success, progress, team reward) before the shaped per-role
rewards, and the wall time per setting; :func:`charts` draws one PNG per setting (a panel per
mode, bars per policy, error bars = the intervals) with matplotlib's Agg canvas.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from adapters.evaluation.stats import Interval, mean_interval

__all__ = ["charts", "fmt_interval", "markdown", "summarise"]


def summarise(
    arguments: Mapping[str, Any],
    entries: Sequence[Mapping[str, Any]],
    policies: Sequence[str],
    chunks: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> dict[str, Any]:
    """``results.json``: ``chunks`` are ``(unit, EvalReport.to_dict())`` pairs of a suite run;
    ``entries`` carry ``setting, mode, options, key, has_team_reward``."""
    rows = []
    for entry in entries:
        for policy in policies:
            mine = [
                (u, r)
                for u, r in chunks
                if (u["setting"], u["mode"], u["policy"])
                == (entry["setting"], entry["mode"], policy)
            ]
            rows.append(_row(entry, policy, mine))
    per_setting: dict[str, dict[str, float]] = {}
    for row in rows:
        times = per_setting.setdefault(row["setting"], {p: 0.0 for p in policies})
        times[row["policy"]] += row["seconds"]
    for times in per_setting.values():
        times["total"] = sum(times[p] for p in policies)
    return {
        "arguments": dict(arguments),
        "policies": list(policies),
        "entries": [dict(e) for e in entries],
        "rows": rows,
        "seconds_per_setting": per_setting,
        "seconds_total": sum(t["total"] for t in per_setting.values()),
    }


def _row(
    entry: Mapping[str, Any],
    policy: str,
    chunks: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> dict[str, Any]:
    episodes = sorted(
        (e for _u, r in chunks for e in r["per_episode"]), key=lambda e: int(e["index"])
    )
    indices = [int(e["index"]) for e in episodes]
    if indices != list(range(len(indices))):  # each episode exactly once, none missing
        raise ValueError(
            f"{entry['key']} / {policy}: the saved chunks hold episodes {indices}, not 0..n-1"
        )
    roles: list[str] = []
    for _u, r in chunks:
        roles.extend(x for x in r["reward_per_agent"] if x not in roles)

    def iv(values: Sequence[float]) -> dict[str, Any] | None:
        return mean_interval(values).to_dict() if values else None

    return {
        "setting": entry["setting"],
        "mode": entry["mode"],
        "options": dict(entry.get("options", {})),
        "policy": policy,
        "policy_name": chunks[0][1]["policies"] if chunks else {},
        "episodes": len(episodes),
        "success_rate": iv([float(e["success"]) for e in episodes]),
        "progress": iv([float(e.get("progress", e["success"])) for e in episodes]),
        "progress_label": str(chunks[0][1].get("progress_label", "solved")) if chunks else "",
        "team_reward": (
            iv([float(e["team"]) for e in episodes]) if entry["has_team_reward"] else None
        ),
        "reward_per_role": {
            role: iv([e["role_reward"][role] for e in episodes if role in e["role_reward"]])
            for role in roles
        },
        "return_per_role": {
            role: iv([float(e["returns"].get(role, 0.0)) for e in episodes]) for role in roles
        },
        "completion_tokens": iv([float(e["completion_tokens"]) for e in episodes]),
        "turns": iv([float(e["turns"]) for e in episodes]),
        "steps": iv([float(e["steps"]) for e in episodes]),
        "seconds": sum(float(r["seconds"]) for _u, r in chunks),
        "chunks": [
            {
                "chunk": u["chunk"],
                "first": u["first"],
                "episodes": u["episodes"],
                "seconds": r["seconds"],
            }
            for u, r in chunks
        ],
        "per_episode": episodes,
    }


def fmt_interval(iv: Mapping[str, Any] | Interval | None, digits: int = 2) -> str:
    """``mean ± half-width`` (``—`` for no value).

    >>> fmt_interval({"mean": 0.5, "low": 0.25, "high": 0.75})
    '0.50 ± 0.25'
    """
    if iv is None:
        return "—"
    d = iv.to_dict() if isinstance(iv, Interval) else iv
    half = (float(d["high"]) - float(d["low"])) / 2
    return f"{float(d['mean']):.{digits}f} ± {half:.{digits}f}"


def markdown(results: Mapping[str, Any], command: str | None = None) -> str:
    """``report.md``: the table of every row and the wall time per setting."""
    args = results["arguments"]
    lines = [f"# Suite benchmark: {args['suite']['name']}", ""]
    if command:
        lines += [f"`{command}`", ""]
    lines += [
        f"{args['episodes']} episodes per setting, mode and policy on `{args['split']}` "
        f"instances (seed {args['seed']}, the same instances for every policy), temperature "
        f"{args['temperature']}, at most {args['max_new_tokens']} new tokens per completion; "
        "each policy plays every role. Cells are the mean over episodes ± the half-width of its "
        "95% Student-t interval. The task's measures come first: success rate, progress (the "
        "setting's own measure at the end of the episode, named in the cell) and the final team "
        "reward (— = the setting has no team reward); reward per role is the shaped mean "
        "per-step reward.",
        "",
        "| setting | mode | policy | episodes | success rate | progress | team reward "
        "| reward per role | completion tokens / episode | wall time (s) |",
        "|---|---|---|---:|---|---|---|---|---|---:|",
    ]
    for row in results["rows"]:
        roles = "<br>".join(
            f"{role} {fmt_interval(iv)}" for role, iv in row["reward_per_role"].items()
        )
        lines.append(
            f"| {row['setting']} | {row['mode']} | {row['policy']} | {row['episodes']} "
            f"| {fmt_interval(row['success_rate'])} | {_progress_cell(row)} "
            f"| {fmt_interval(row['team_reward'])} "
            f"| {roles} | {fmt_interval(row['completion_tokens'], 0)} | {row['seconds']:.1f} |"
        )
    policies = list(results["policies"])
    lines += [
        "",
        "Wall time per setting (s; the episodes' rollouts, both modes, without model loading):",
        "",
        "| setting | " + " | ".join(policies) + " | total |",
        "|---|" + "---:|" * (len(policies) + 1),
    ]
    for setting, times in results["seconds_per_setting"].items():
        cells = " | ".join(f"{times[p]:.1f}" for p in [*policies, "total"])
        lines.append(f"| {setting} | {cells} |")
    sums = [sum(t[p] for t in results["seconds_per_setting"].values()) for p in policies]
    cells = " | ".join(f"{x:.1f}" for x in [*sums, results["seconds_total"]])
    lines.append(f"| all | {cells} |")
    return "\n".join(lines) + "\n"


def _progress_cell(row: Mapping[str, Any]) -> str:
    """The progress measure's interval and name (rows saved before it existed: —)."""
    if row.get("progress") is None:
        return "—"
    return f"{fmt_interval(row['progress'])} ({row.get('progress_label') or 'solved'})"


def charts(results: Mapping[str, Any]) -> dict[str, bytes]:
    """One PNG per setting: a panel per mode, metric groups on the x axis, a bar per policy."""
    from matplotlib.figure import Figure

    by_setting: dict[str, list[Mapping[str, Any]]] = {}
    for row in results["rows"]:
        by_setting.setdefault(row["setting"], []).append(row)
    policies = list(results["policies"])
    out: dict[str, bytes] = {}
    for setting, rows in by_setting.items():
        modes = list(dict.fromkeys(r["mode"] for r in rows))
        fig = Figure(figsize=(5.5 * len(modes), 3.8))
        axes = fig.subplots(1, len(modes), squeeze=False)[0]
        for ax, mode in zip(axes, modes):
            mine = {r["policy"]: r for r in rows if r["mode"] == mode}
            metrics = _metrics(next(iter(mine.values())))
            width = 0.8 / max(1, len(policies))
            for j, policy in enumerate(policies):
                row = mine.get(policy)
                if row is None:
                    continue
                ivs = [get(row) for _label, get in metrics]
                means = [float(v["mean"]) if v else 0.0 for v in ivs]
                errs = [(float(v["high"]) - float(v["low"])) / 2 if v else 0.0 for v in ivs]
                xs = [i + (j - (len(policies) - 1) / 2) * width for i in range(len(metrics))]
                ax.bar(xs, means, width, yerr=errs, capsize=3, label=policy, color=f"C{j}")
            ax.set_xticks(range(len(metrics)), [label for label, _ in metrics], fontsize=8)
            ax.tick_params(axis="x", labelrotation=20)
            n = next(iter(mine.values()))["episodes"]
            ax.set_title(f"{setting} ({mode}), {n} episodes per policy", fontsize=9)
            ax.set_ylabel("mean, 95% interval", fontsize=8)
            ax.axhline(0.0, color="black", linewidth=0.6)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        out[setting] = buf.getvalue()
    return out


def _metrics(row: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(label, row -> interval) for the chart's x axis: success, team reward, each role."""
    out: list[tuple[str, Any]] = [("success", lambda r: r["success_rate"])]
    if row.get("progress") is not None and row.get("progress_label", "solved") != "solved":
        out.append((str(row["progress_label"]), lambda r: r["progress"]))
    if row["team_reward"] is not None:
        out.append(("team reward", lambda r: r["team_reward"]))
    for role in row["reward_per_role"]:
        out.append((role, lambda r, role=role: r["reward_per_role"].get(role)))
    return out
