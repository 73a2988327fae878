"""The episode viewer: every recorded episode, step by step, as one self-contained HTML page.

``python -m adapters.view PATH`` (:mod:`adapters.view`) and :func:`write_viewer` read

* a training run directory: ``eval_before.json``, ``eval_stepNNNNNN.json``, ``eval_after.json``,
  the scripted references of ``eval_references.json`` and ``eval_open_loop.json``;
* a suite's ``results.json`` (or its directory): one evaluation per setting, mode and policy;
* an evaluation report written by ``python -m adapters.evaluate --env ... --json FILE``,

and write one HTML file (``episodes.html`` beside a run's or suite's JSON, ``FILE.html`` beside
a report) that needs no server and no network. Training runs, suites and ``--json``
evaluations write it by default.

**What the page shows.** A summary row per evaluation (success rate, the setting's progress
measure, final team reward, shaped reward); then every episode: its outcome, and per step the
acting role, the prompt the env showed it (folded), the completion, the reward with every
component, weight and reason and the team / local mixing, delayed awards (which step paid the
final reward of which), whether the step was a training sample, the progress measure after the
step, and for the grid settings (Sokoban, Plan-Path, Sudoku) the board before and after the move.
Filters select a setting, an evaluation, an outcome and a role. The compare view puts the
episodes of two evaluations on the same instance side by side (by default before and after
training), marks the steps whose completions differ, and filters the instances whose outcome
improved or worsened.

**Where the boards come from.** Each record is replayed (:func:`~adapters.evaluation.replay.
replay`: a fresh env reset with the record's seed and options, stepped with its completions),
and the viewer reads each step's prompt, reward parts, awards, progress and board
(:meth:`~envs.core.base.TurnBasedEnv.cell_grid`) from the env itself; nothing is parsed out of
prompt text. A record whose replay pays other rewards than it recorded (a setting changed since)
is shown with that warning; one that cannot be replayed (``replay=False``, or the setting needs
what is not there, such as a sandbox) is shown from the record alone, with the reason. Replaying
re-runs the programs of the settings that run code, so the pages that training runs, suites and
evaluations write by themselves stop replaying after :data:`AUTO_BUDGET_S` seconds (the rest is
shown as recorded, and says so); ``python -m adapters.view`` replays everything.

**Completions are untrusted.** What a policy wrote is data, never markup: the page's script puts
every string into the document as text (``textContent``), never as HTML, and never makes a link,
image or other URL out of it; the episode data travel gzip-compressed and base64-encoded, so no
completion can close a tag of the page; and a Content-Security-Policy lets only the page's own
script and style (by their hashes) run, so even a mistake in the script could not make an injected
script live. ``tests/adapters/evaluation/test_viewer.py`` loads pages of hostile completions in a
real headless Chromium.

**Size.** The data are one gzip stream (prompts repeat most of their text from step to step),
about 6 KB per Sokoban episode of 8 steps before base64; the numbers for a 64-episode run are on
the README's viewer section.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from adapters.evaluation.replay import replay

__all__ = [
    "AUTO_BUDGET_S",
    "Source",
    "find_sources",
    "page_data",
    "render_page",
    "viewer_path",
    "write_viewer",
]

PAGE_NAME = "episodes.html"
_RUN_ORDER = ("before", "after")


@dataclass(frozen=True)
class Source:
    """One evaluation shown on the page: its label and its report (an ``EvalReport`` dict)."""

    label: str
    report: Mapping[str, Any]


# a gzip-compressed report expands to at most this much (a planted archive cannot fill memory)
MAX_REPORT_BYTES = 512 * 1024 * 1024


def _read_json(path: Path) -> Any:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read(MAX_REPORT_BYTES + 1)
            if len(raw) > MAX_REPORT_BYTES:
                raise ValueError(f"expands past {MAX_REPORT_BYTES >> 20} MiB")
            return json.loads(raw)
        return json.loads(path.read_text())
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None


def _table_sources(table_dir: Path) -> list[Source]:
    """The reports of a directory of them (a benchmark table's rows: ``ROW.json`` or
    ``ROW.json.gz``, one evaluation each), labelled by file name, in name order."""
    out = []
    for f in sorted(table_dir.iterdir()):
        name = f.name.removesuffix(".gz")
        if f.is_file() and name.endswith(".json"):
            data = _read_json(f)
            if _is_report(data):
                out.append(Source(name.removesuffix(".json"), data))
    return out


def _is_report(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("per_episode"), list)


def _run_sources(run_dir: Path) -> list[Source]:
    out: list[Source] = []
    evals = {p.stem[len("eval_") :]: p for p in run_dir.glob("eval_*.json")}
    steps = sorted(k for k in evals if k.startswith("step"))
    for tag in ["before", *steps, "after", "open_loop"]:
        data = _read_json(evals[tag]) if tag in evals else None
        if data is not None and _is_report(data):
            label = f"step {tag[4:].lstrip('0') or '0'}" if tag.startswith("step") else tag
            out.append(Source(label.replace("_", " "), data))
        if tag == "after" and "references" in evals:
            refs = _read_json(evals["references"])
            if isinstance(refs, dict):
                out += [Source(str(name), rep) for name, rep in refs.items() if _is_report(rep)]
    return out


def _suite_sources(results: Mapping[str, Any]) -> list[Source]:
    out = []
    for row in results.get("rows", []):
        rep = {
            "env": row["setting"],
            "progress_label": row.get("progress_label", "solved"),
            "policies": row.get("policy_name", {}),
            "per_episode": row.get("per_episode", []),
        }
        out.append(Source(str(row["policy"]), rep))
    return out


def find_sources(path: str | Path) -> tuple[str, list[Source]]:
    """``(kind, sources)`` of a training run directory, a suite's ``results.json`` (or its
    directory), a directory of evaluation reports (a benchmark table's rows) or one report;
    ``kind`` is ``"training run"``, ``"suite"``, ``"table"`` or ``"evaluation"``. Raises
    ``ValueError`` for anything else."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p} does not exist")
    if p.is_dir():
        if (p / "results.json").is_file():
            return "suite", _suite_sources(_read_json(p / "results.json"))
        sources = _run_sources(p)
        if sources:
            return "training run", sources
        sources = _table_sources(p)
        if sources:
            return "table", sources
        raise ValueError(
            f"{p} holds no evaluation records (a training run's eval_*.json, a suite's "
            "results.json or evaluation reports NAME.json / NAME.json.gz)"
        )
    data = _read_json(p)
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        return "suite", _suite_sources(data)
    if _is_report(data):
        return "evaluation", [Source(_policies_label(data), data)]
    if isinstance(data, dict) and data and all(_is_report(v) for v in data.values()):
        return "evaluation", [Source(str(k), v) for k, v in data.items()]
    raise ValueError(
        f"{p} is not an evaluation report (python -m adapters.evaluate --json), a suite's "
        "results.json or a training run directory"
    )


def _policies_label(report: Mapping[str, Any]) -> str:
    pol = report.get("policies") or {}
    names = set(pol.values())
    if len(names) == 1:
        return str(next(iter(names)))
    return ", ".join(f"{r}={p}" for r, p in pol.items()) or "evaluation"


def viewer_path(path: str | Path) -> Path:
    """Where the page of ``path`` goes by default: ``episodes.html`` beside a run's or suite's
    JSON, ``NAME.html`` beside a report ``NAME.json``."""
    p = Path(path)
    if p.is_dir():
        return p / PAGE_NAME
    if p.name == "results.json" or p.name.startswith("eval_"):
        return p.with_name(PAGE_NAME)
    return p.with_suffix(".html")


# --------------------------------------------------------------------------------------------
# one episode


class _Palette:
    """Distinct cells of every board on the page; a board is a list of indices into it."""

    def __init__(self) -> None:
        self.cells: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}

    def board(self, grid: Any) -> dict[str, Any]:
        d = grid.to_dict()
        idx = []
        for row in d["cells"]:
            for cell in row:
                key = json.dumps(cell, sort_keys=True)
                if key not in self._index:
                    self._index[key] = len(self.cells)
                    self.cells.append(cell)
                idx.append(self._index[key])
        h = len(d["cells"])
        return {"h": h, "w": len(d["cells"][0]) if h else 0, "boxes": d["boxes"], "cells": idx}


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def episode_view(record: Mapping[str, Any], palette: _Palette, *, replay_it: bool = True) -> dict:
    """One episode for the page: its outcome and its steps, replayed when possible (module
    docstring)."""
    transcript = list(record.get("transcript") or [])
    steps: list[dict[str, Any]] = [
        {
            "role": str(t.get("role", "?")),
            "turn": t.get("turn"),
            "step": t.get("step", i),
            "prompt": t.get("prompt"),
            "completion": str(t.get("completion", "")),
            "reward": _num(t.get("reward")),
        }
        for i, t in enumerate(transcript)
    ]
    out: dict[str, Any] = {
        "index": record.get("index"),
        "instance_id": str(record.get("instance_id", "")),
        "success": bool(record.get("success")),
        "progress": _num(record.get("progress", record.get("success"))),
        "team": _num(record.get("team")),
        "reward": _num(record.get("reward")),
        "turns": record.get("turns"),
        "returns": {str(k): _num(v) for k, v in (record.get("returns") or {}).items()},
        "steps": steps,
        "grids": None,
        "note": "",
    }
    if not replay_it:
        out["note"] = "not replayed (--no-replay): prompts and rewards as recorded, no boards"
        return out
    if "env" not in record or "reset_seed" not in record:
        out["note"] = "not replayed: the record has no env and reset seed"
        return out
    grids: list[dict[str, Any]] = []
    seen: dict[int, dict[str, Any]] = {}

    def board(raw: Any) -> None:
        grid = raw.cell_grid() if hasattr(raw, "cell_grid") else None
        if grid is not None:
            grids.append(palette.board(grid))

    def before(raw: Any, agent: str, i: int) -> None:
        if i == 0:
            board(raw)
        seen[i] = {"prompt": raw.observe(agent)["prompt"]}

    def after(raw: Any, agent: str, i: int) -> None:
        info = raw.infos.get(agent, {})
        parts = info.get("reward_parts") or {}
        seen[i].update(
            parts=parts,
            success=bool(raw.success),
            progress=_num(raw.progress()),
            untrainable=info.get("untrainable_reason") if info.get("trainable") is False else None,
            awards=[
                {
                    "agent": a["agent"],
                    "for_step": a["step"],
                    "reward": _num(a["reward_parts"].get("reward")),
                    "parts": a["reward_parts"],
                }
                for a in getattr(raw, "last_awards", [])
            ],
        )
        board(raw)

    try:
        replayed = replay(record, before_step=before, after_step=after)
    except Exception as exc:  # a record this code cannot replay: show it as recorded
        out["note"] = f"not replayed ({type(exc).__name__}: {str(exc)[:300]})"
        return out
    by_env_step = {s["step"]: i for i, s in enumerate(steps)}
    for i, s in enumerate(steps):
        got = seen.get(i, {})
        if s["prompt"] is None:
            s["prompt"] = got.get("prompt")
        for key in ("parts", "success", "progress", "untrainable", "awards"):
            s[key] = got.get(key)
        s["replayed"] = replayed[i] if i < len(replayed) else None
        for award in got.get("awards") or []:  # the step it rewards shows the final parts
            j = by_env_step.get(award["for_step"])
            if j is not None:
                steps[j]["final_parts"] = award["parts"]
                steps[j]["awarded_at"] = s["step"]
    for s in steps:
        if "final_parts" in s:
            s["provisional_parts"], s["parts"] = s["parts"], s.pop("final_parts")
    off = [
        f"step {s['step']}: recorded {s['reward']:.4g}, replayed {s['replayed']:.4g}"
        for s in steps
        if s["reward"] is not None
        and s["replayed"] is not None
        and abs(s["reward"] - s["replayed"]) > 1e-9
    ]
    if off:
        out["note"] = (
            "the replay pays other rewards than the record (did the setting change since it was "
            "recorded?): " + "; ".join(off[:4]) + (" ..." if len(off) > 4 else "")
        )
    out["grids"] = grids or None
    return out


# --------------------------------------------------------------------------------------------
# the page


def page_data(
    path: str | Path, *, replay_records: bool = True, budget_s: float | None = None
) -> dict[str, Any]:
    """Everything the page shows, as JSON (see the module docstring). Replaying stops after
    ``budget_s`` seconds (``None``: no limit); the remaining episodes are shown as recorded."""
    kind, sources = find_sources(path)
    palette = _Palette()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    runs: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    for rid, src in enumerate(sources):
        rep = src.report
        records = list(rep.get("per_episode") or [])
        setting = str(rep.get("env") or (records[0].get("env") if records else "?"))
        mode = str((records[0].get("env_config") or {}).get("mode", "multi")) if records else ""
        runs.append(
            {
                "id": rid,
                "label": src.label,
                "setting": setting,
                "mode": mode,
                "progress_label": str(rep.get("progress_label", "solved")),
                "policies": {str(k): str(v) for k, v in (rep.get("policies") or {}).items()},
                "episodes": len(records),
            }
        )
        for rec in records:
            late = deadline is not None and time.monotonic() > deadline
            ep = episode_view(rec, palette, replay_it=replay_records and not late)
            if replay_records and late:
                ep["note"] = (
                    f"not replayed: the page's replay budget ({budget_s:g} s) ran out; "
                    "python -m adapters.view replays every episode"
                )
            ep["run"] = rid
            episodes.append(ep)
    where = Path(path).resolve()
    return {
        "title": f"{kind}: {where.parent.name if where.name == 'results.json' else where.name}",
        "kind": kind,
        "runs": runs,
        "compare": _default_pairs(runs),
        "palette": palette.cells,
        "episodes": episodes,
    }


def _default_pairs(runs: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Pairs of evaluations of the same setting and mode to compare: before -> after first."""
    by_label = {r["label"]: r["id"] for r in runs}
    pairs = []
    if all(k in by_label for k in _RUN_ORDER):
        pairs.append([by_label["before"], by_label["after"]])
    for a in runs:
        for b in runs:
            same = (a["setting"], a["mode"]) == (b["setting"], b["mode"])
            if a["id"] < b["id"] and same and [a["id"], b["id"]] not in pairs:
                pairs.append([a["id"], b["id"]])
    return pairs


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None`` (JSON has no NaN).

    >>> _finite({"a": [1.0, float("nan")], "b": float("inf")})
    {'a': [1.0, None], 'b': None}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _asset(name: str) -> str:
    return resources.files("adapters.evaluation").joinpath(name).read_text(encoding="utf-8")


def _colour_css() -> str:
    from envs.core.render import COLORS

    lines = []
    for name, (r, g, b) in COLORS.items():
        rgb = f"rgb({r},{g},{b})"
        lines.append(f".bg-{name}{{background-color:{rgb}}}")
        lines.append(f".mk-{name},.dc-{name},.sw-{name}{{background-color:{rgb}}}")
        lines.append(f".gl-{name}{{color:{rgb}}}")
    return "\n".join(lines)


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_page(data: Mapping[str, Any]) -> str:
    """The HTML page of :func:`page_data`'s ``data``: the page's script and style inline (allowed
    by hash in its Content-Security-Policy), the data gzip-compressed and base64-encoded."""
    script = _asset("viewer.js")
    style = _asset("viewer.css") + "\n" + _colour_css()
    payload = base64.b64encode(
        gzip.compress(json.dumps(_finite(data), separators=(",", ":")).encode(), mtime=0)
    ).decode()
    csp = (
        f"default-src 'none'; script-src {_csp_hash(script)}; style-src {_csp_hash(style)}; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )
    title = json.dumps(str(data.get("title", "episodes")))[1:-1]
    title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        "<noscript>This page draws the episodes with its own script; allow it to run.</noscript>\n"
        '<main id="app"><p id="loading">loading the episodes...</p></main>\n'
        f'<script id="data" type="application/octet-stream">{payload}</script>\n'
        f"<script>{script}</script>\n</body></html>\n"
    )


# what a training run, a suite or an evaluation spends at most on replaying for its page (the
# settings that run programs replay them: a code run's page could otherwise take minutes)
AUTO_BUDGET_S = 120.0


def write_viewer(
    path: str | Path,
    out: str | Path | None = None,
    *,
    replay_records: bool = True,
    budget_s: float | None = None,
) -> tuple[Path, int]:
    """Write the page of ``path`` (a run directory, a suite's results or a report) to ``out``
    (default :func:`viewer_path`); returns the file and the number of episodes on it.
    ``budget_s`` bounds the time spent replaying (:func:`page_data`)."""
    data = page_data(path, replay_records=replay_records, budget_s=budget_s)
    target = Path(out) if out is not None else viewer_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(render_page(data), encoding="utf-8")
    tmp.replace(target)
    return target, len(data["episodes"])
