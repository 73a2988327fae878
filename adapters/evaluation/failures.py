"""What a team still gets wrong: a failure breakdown per role, computed from evaluation records.

Reading a few hundred transcripts to say why a team fails is what every reader of a result ends
up doing; this module does that reading for the tool + planner settings (Sokoban, Plan-Path,
Sudoku: :class:`~envs.core.toolplanner.ToolPlannerEnv`). It replays each record
(:func:`~adapters.evaluation.replay.play`: a fresh env, the recorded completions, the tool's
programs run again in the sandbox) and sorts every turn of every role into one class:

tool turn
    ``solves`` (its program prints a plan that solves the position it was given),
    ``cut off at the limit`` (the code block never closes: the completion ran into the token
    limit), ``no code block`` (none, or several), ``does not compile`` (a ``SyntaxError`` /
    ``IndentationError``), ``crashes or times out`` (any other failed run),
    ``map miscopied`` (it runs and what it prints does not solve the position, and it pastes the
    position's map with a row dropped, repeated or changed: at least half of the map's rows are
    in the program, the whole map is not; Sokoban and Plan-Path, whose tools paste the map),
    ``wrong or partial plan`` (it runs, but what it prints does not parse, is illegal, or does
    not solve the position).
planner turn
    ``solves``, ``does not adopt a solving proposal`` (the tool's plan this turn solved the
    position, the planner's answer does not), ``no answer`` (no ``####`` line that parses),
    ``wrong or partial answer`` (anything else).

Each failed episode also gets one primary cause: ``planner does not adopt a solving proposal``
if that happened in any of its turns, else its tool's most frequent failing class (ties in the
order above), else ``other``. :func:`breakdown` counts them for several reports on the same
instances (before and after training, a table's rows) and :func:`format_breakdown` prints the
table; ``python -m adapters.view RUN_DIR --failures`` prints it for a run, a suite or a report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TOOL_CLASSES",
    "PLANNER_CLASSES",
    "EPISODE_CAUSES",
    "EpisodeFailures",
    "classified",
    "classify_record",
    "miscopies_map",
    "breakdown",
    "format_breakdown",
]

TOOL_CLASSES = (
    "solves",
    "cut off at the limit",
    "no code block",
    "does not compile",
    "crashes or times out",
    "map miscopied",
    "wrong or partial plan",
)
PLANNER_CLASSES = (
    "solves",
    "does not adopt a solving proposal",
    "no answer",
    "wrong or partial answer",
)
EPISODE_CAUSES = (
    "planner does not adopt a solving proposal",
    *(f"tool: {c}" for c in TOOL_CLASSES[1:]),
    "other",
)
_COMPILE_ERRORS = ("SyntaxError", "IndentationError", "TabError")


@dataclass
class EpisodeFailures:
    """The classes of one episode's turns, per role, and its primary cause (``None`` when it
    succeeded)."""

    success: bool
    turns: dict[str, list[str]] = field(default_factory=dict)
    cause: str | None = None


def miscopies_map(code: str, rows: Sequence[str]) -> bool:
    """Whether ``code`` pastes the map ``rows`` with a row dropped, repeated or changed: at least
    half of the rows are in it, the whole map (rows joined by newlines) is not.

    >>> rows = ["#####", "#@.G#", "#...#", "#####"]
    >>> miscopies_map("LEVEL = '" + "\\n".join(rows[:2] + rows[3:]) + "'", rows)
    True
    >>> miscopies_map("LEVEL = '" + "\\n".join(rows) + "'", rows)
    False
    >>> miscopies_map("print('[L]')", rows)
    False
    """
    if not rows or "\n".join(rows) in code:
        return False
    return 2 * sum(row in code for row in rows) >= len(rows)


def _tool_class(raw: Any) -> tuple[str, bool]:
    """The class of the tool turn just played, and whether its plan solves the position."""
    rec = raw._current
    error = rec.tool_error or ""
    if rec.tool_code is None:
        return (
            "cut off at the limit" if error == "unclosed code block" else "no code block"
        ), False
    code = rec.tool_code
    wrong = "map miscopied" if miscopies_map(code, raw._map_rows()) else "wrong or partial plan"
    if rec.tool_proposal is None:
        if error.startswith("the program crashed: ") and any(e in error for e in _COMPILE_ERRORS):
            return "does not compile", False
        if error.startswith("printed output: ") or not error:
            return wrong, False
        return "crashes or times out", False
    parsed = raw._parse_answer(rec.tool_output or "")
    if not parsed.ok:
        return wrong, False
    sim = raw._simulate(parsed.value)
    solves = bool(sim.ok and raw._is_solved(sim.state))
    return ("solves" if solves else wrong), solves


def classified(env_id: str, env_config: Mapping[str, Any] | None = None) -> bool:
    """Whether the setting's turns have classes here (a tool + planner setting)."""
    import envs
    from envs.core.toolplanner import ToolPlannerEnv

    env = envs.make(env_id, **dict(env_config or {}))
    try:
        return isinstance(env.unwrapped, ToolPlannerEnv)
    finally:
        env.close()


def classify_record(record: Mapping[str, Any]) -> EpisodeFailures:
    """Replay one record and classify its turns (module docstring). ``ValueError`` for a record
    of a setting without a tool and a planner."""
    from adapters.evaluation.replay import play
    from envs.core.toolplanner import ToolPlannerEnv

    entries = list(record["transcript"])
    turns: dict[str, list[str]] = {"tool": [], "planner": []}
    solving_proposal = [False]

    def before(raw: Any, agent: str, i: int) -> None:
        if not isinstance(raw, ToolPlannerEnv):
            setting = record.get("env")
            raise ValueError(
                f"failure classes are defined for the tool + planner settings, not {setting!r}"
            )

    def after(raw: Any, agent: str, i: int) -> None:
        if agent == "tool":
            cls, solving_proposal[0] = _tool_class(raw)
            turns["tool"].append(cls)
            return
        if raw.success:
            cls = "solves"
        elif solving_proposal[0]:
            cls = "does not adopt a solving proposal"
        elif raw.history and raw.history[-1].answer is None:
            cls = "no answer"
        else:
            cls = "wrong or partial answer"
        solving_proposal[0] = False
        turns["planner"].append(cls)

    _rewards, raw, _team = play(
        record,
        lambda agent, k, i: str(entries[i]["completion"]),
        stop_after=len(entries),
        before_step=before,
        after_step=after,
    )
    success = bool(raw.success)
    out = EpisodeFailures(success, {r: t for r, t in turns.items() if t})
    if not success:
        out.cause = _primary_cause(turns)
    return out


def _primary_cause(turns: Mapping[str, Sequence[str]]) -> str:
    if "does not adopt a solving proposal" in turns.get("planner", ()):
        return "planner does not adopt a solving proposal"
    failing = Counter(c for c in turns.get("tool", ()) if c != "solves")
    if not failing:
        return "other"
    top = max(failing.values())
    return "tool: " + next(c for c in TOOL_CLASSES if failing.get(c) == top)


def breakdown(reports: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per report label: ``episodes``, ``failed``, ``causes`` (failed episodes per primary
    cause) and ``turns`` (per role, turns per class), each a plain dict of counts."""
    out: dict[str, dict[str, Any]] = {}
    for label, report in reports.items():
        causes: Counter[str] = Counter()
        per_role: dict[str, Counter[str]] = {"tool": Counter(), "planner": Counter()}
        episodes = list(report.get("per_episode", []))
        failed = 0
        for rec in episodes:
            ep = classify_record(rec)
            for role, classes in ep.turns.items():
                per_role.setdefault(role, Counter()).update(classes)
            if ep.cause is not None:
                failed += 1
                causes[ep.cause] += 1
        out[label] = {
            "episodes": len(episodes),
            "failed": failed,
            "causes": {c: causes[c] for c in EPISODE_CAUSES if causes[c]},
            "turns": {r: {c: n for c, n in cnt.items() if n} for r, cnt in per_role.items()},
        }
    return out


def format_breakdown(table: Mapping[str, Mapping[str, Any]]) -> str:
    """The breakdown as a fixed-width text table: one column per report."""
    labels = list(table)
    width = max([44, *(len(c) + 4 for c in EPISODE_CAUSES)])
    col = max([14, *(len(lab) + 2 for lab in labels)])
    head = "".ljust(width) + "".join(f"{lab:>{col}}" for lab in labels)
    failed = [f"{table[lab]['failed']} / {table[lab]['episodes']}" for lab in labels]
    lines = [
        head,
        "failed episodes, by primary cause".ljust(width) + "".join(f"{x:>{col}}" for x in failed),
    ]
    for cause in EPISODE_CAUSES:
        counts = [table[lab]["causes"].get(cause, 0) for lab in labels]
        if any(counts):
            lines.append(f"  {cause}".ljust(width) + "".join(f"{n:>{col}}" for n in counts))
    for role, classes in (("tool", TOOL_CLASSES), ("planner", PLANNER_CLASSES)):
        totals = [sum(table[lab]["turns"].get(role, {}).values()) for lab in labels]
        lines.append(f"{role} turns".ljust(width) + "".join(f"{n:>{col}}" for n in totals))
        for cls in classes:
            counts = [table[lab]["turns"].get(role, {}).get(cls, 0) for lab in labels]
            if any(counts):
                lines.append(f"  {cls}".ljust(width) + "".join(f"{n:>{col}}" for n in counts))
    return "\n".join(lines)
