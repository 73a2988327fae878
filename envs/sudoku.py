"""Sudoku: fill the grid so every row, column and box holds each digit once (AT-GRPO A.1.3, A.2.2).

=================  ==========================================================
id                 ``sudoku``
agents             ``tool``, ``planner`` (``mode="single"``: ``planner``, or ``tool`` with
                   ``single_agent="tool"``)
actions            completion text (``str``)
observations       ``{"prompt": str}``
horizon            ``max_turns`` turns (default 4); ends when the grid is solved
render modes       ``human``, ``ansi``, ``rgb_array``
=================  ==========================================================

Each turn the tool agent writes one Python program that prints a proposal; the env runs it in
the sandbox. The planner sees the task, the original puzzle, the current grid, the tool's
program, its output and the history, and answers after a line beginning with ``####``. Its
answer is applied to the current grid; the next turn starts from the result.

A proposal (the tool's printed output or the planner's answer) is JSON in one of two shapes:

- a grid: ``size`` rows of ``size`` ints, ``0`` = blank. It is the proposed new board: every
  non-given cell takes the grid's value, so ``0`` erases an earlier fill.
- fill steps: a non-empty list of ``[row, column, digit]`` with 1-based indices and digits in
  ``1..size``, applied in order; a step may overwrite an earlier fill (that is how mistakes get
  corrected). An empty list is a format failure.

The givens (the digits of the original puzzle) are fixed. An edit that would change or erase a
given is rejected (not applied) while the proposal's other edits still apply; a rejected edit
costs the planner its ``legal`` score and the tool its ``exec`` score. Re-stating a given with
its own digit is harmless. The grid is solved when it equals the puzzle's unique solution, i.e.
it is full, breaks no rule *and keeps the givens* (the reference implementation only checks the
rules, so any valid grid, such as its prompt's example, counted as solved).

Instances: a random full grid (seeded), then cells are blanked in a random order, each blank
kept only while the puzzle stays uniquely solvable (proved by a solution-counting solver,
:mod:`verifiers.sudoku`), until exactly ``blanks`` cells are blank. ``size`` is 4 (2x2 boxes,
the paper's setting), 6 (boxes of 2 rows x 3 columns) or 9 (3x3 boxes); ``blanks`` defaults to
10 / 20 / 45. Splits: a puzzle's split is the hash of its symmetry class, not of the puzzle:
the rotations and reflections that keep boxes boxes (8 with square boxes, 4 with 2 x 3 ones),
each with its digits renamed in order of first appearance, so a relabelled or turned copy of a
training puzzle is never a validation puzzle (row and band swaps are not covered). A val/test
reset generates about ten puzzles; each split has its own generator stream, so ``seed=s`` gives
unrelated puzzles in different splits. Explicit instance:
``reset(options={"instance": {"puzzle": [[...]]}})`` with 0 for blanks (a square 4x4, 6x6
or 9x9 grid whose givens break no rule and that has exactly one solution; anything else raises
``ValueError`` saying why). Its size may differ from ``size``.
Its check costs the host process little whatever the puzzle: the uniqueness search tries up to
20,000 branches in the host process and, when that is not enough, up to 500,000 in a bounded
worker process (:func:`verifiers.sudoku.check_unique_bounded`; every puzzle people solve needs
far fewer). A puzzle still undecided after that (only a crafted one, e.g. without a solution
but with a deep search to show it), or whose check overruns the worker's deadline, is refused:
"too hard to verify".

Rewards (``r = lam * team + (1 - lam) * mask * local``, ``lam = 0.60``; G_k is the grid after
the step, G_{k-1} before it; for the tool's local scores, G_k is the grid its proposal would
produce if adopted, the state itself is unchanged):

- team: 1 if the grid after the turn (the planner's answer) is solved, else 0 (the episode
  terminates when solved); the tool of the turn receives the same value by ``award()`` at the
  planner's step (:mod:`envs.core.toolplanner`; ``tool_team="proposal"``: the grid its own
  proposal would produce).
- planner: fmt 0.15 (the answer after ``####`` parses as a grid or steps, values in range),
  legal 0.55 (A.1.3 read literally: ``1{no row/column/subgrid duplicates in G_k}``; a rejected
  edit of a given is not applied, so it does not make G_k illegal; it costs the tool its
  ``exec``), prog 0.30 (cells blank in G_{k-1} and filled in G_k, divided by size**2).
  ``legal_counts_givens=True``: legal also needs no rejected edit of a given (the stricter
  earlier reading).
- tool: fmt 0.10 (the printed output parses: schema valid, values in range, indices in bounds),
  exec 0.20 (the program exited cleanly within its limits and every edit applied, none touching
  a given), san 0.70 (A.1.3 read literally: "all applied edits satisfy local Sudoku
  constraints": every digit that the proposal writes into a cell (a changed cell) is free of
  duplicates in its row, column and box of G_k; a proposal that applies no edit, such as
  re-printing the grid, satisfies it vacuously: 1). ``san_needs_change=True``: 0 for a proposal
  that changes no cell (the stricter earlier reading).
- mask: 0 only when the sandbox itself failed (tool), else 1.
- mixing: A.1.3's convex form (lam = 0.60) is the default; the main text's Eq. 4 ``r = alpha *
  team + local`` (no mask; alpha = 1 in AT-GRPO 5.1) is ``rewards={"mixing": "additive"}``.

Reward audit: the conditions the rewarded policy controls (whether its output parses, whether
the tool's program exits cleanly) are the grid settings' shared ones,
:mod:`envs.core.toolplanner`: a broken output scores every local component 0. A tool proposal
that applies no edit satisfies san vacuously (A.1.3 read literally; ``san_needs_change`` is the
stricter reading) and the planner's prog counts only newly filled cells. A wrongly formatted
output, or a crash, earns less than an empty proposal (``tests/envs/test_monotonicity.py``).

Version history: v0 (initial); v1 (``legal`` and ``san`` read literally as in A.1.3, the
stricter readings behind ``legal_counts_givens`` and ``san_needs_change``); v2 (the tool's team
term is the turn's value, ``tool_team``); v3 (prompts: rules and role first, then the original
puzzle, history and current grid; placeholder formats; ``prompt_style``; the planner oracle adopts
a solving tool proposal).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from envs.core.base import wrap
from envs.core.config import RewardConfig
from envs.core.registry import roles_of
from envs.core.render import Cell, CellGrid
from envs.core.splits import canonical_form, check_split, dihedral_images
from envs.core.toolplanner import Sim, ToolPlannerConfig, ToolPlannerEnv
from verifiers.extract import Extraction
from verifiers.sudoku import (
    SIZES,
    WORKER_NODES,
    Proposal,
    box_shape,
    check_unique_bounded,
    conflicts,
    default_blanks,
    generate_puzzle,
    max_blanks,
    parse_proposal,
    validate_grid_shape,
)

__all__ = ["SudokuConfig", "SudokuInstance", "SudokuRewards", "env", "raw_env", "grid_text"]

_SPLIT_STREAM = {"train": 0, "val": 1, "test": 2}
_MAX_BASE_TRIES = 1000


@dataclass(frozen=True)
class SudokuRewards(RewardConfig):
    lam: float = 0.60
    planner_fmt: float = 0.15
    planner_legal: float = 0.55
    planner_prog: float = 0.30
    tool_fmt: float = 0.10
    tool_exec: float = 0.20
    tool_san: float = 0.70
    roles: ClassVar[tuple[str, ...]] = ("planner", "tool")


@dataclass(frozen=True)
class SudokuConfig(ToolPlannerConfig):
    """size: 4, 6 or 9. blanks: blank cells per generated puzzle (None: 10 / 20 / 45).
    legal_counts_givens: the planner's ``legal`` also needs no rejected edit of a given (the
    stricter reading; A.1.3 counts only duplicates in G_k). san_needs_change: the tool's ``san``
    is 0 for a proposal that changes no cell (the stricter reading; A.1.3's "all applied edits
    satisfy local constraints" holds vacuously when there is none)."""

    size: int = 4
    blanks: int | None = None
    legal_counts_givens: bool = False
    san_needs_change: bool = False
    rewards: SudokuRewards = field(default_factory=SudokuRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {self.size!r}")
        if self.blanks is not None:
            hi = max_blanks(self.size)
            if isinstance(self.blanks, bool) or not isinstance(self.blanks, int):
                raise ValueError(f"blanks must be an int or None, got {self.blanks!r}")
            if not 1 <= self.blanks <= hi:
                raise ValueError(f"blanks must lie in [1, {hi}] for size {self.size}")

    @property
    def num_blanks(self) -> int:
        return default_blanks(self.size) if self.blanks is None else self.blanks


Grid = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class SudokuInstance:
    """A puzzle (0 = blank) and its unique solution, as tuples of row tuples."""

    puzzle: Grid
    solution: Grid

    @property
    def size(self) -> int:
        return len(self.puzzle)

    def key(self) -> dict[str, Any]:
        return {"puzzle": [list(row) for row in self.puzzle]}


def _first_appearance(grid: Any) -> list[list[int]]:
    """``grid`` with its digits renamed 1, 2, ... in row-major order of first appearance (blanks
    stay 0): one name for all of a puzzle's relabellings.

    >>> _first_appearance([[3, 0], [1, 3]])
    [[1, 0], [2, 1]]
    """
    names: dict[int, int] = {0: 0}
    for row in grid:
        for d in row:
            names.setdefault(int(d), len(names))
    return [[names[int(d)] for d in row] for row in grid]


def grid_text(grid: Any, box: tuple[int, int]) -> str:
    """The grid as text: digits, ``.`` for blanks, ``|`` and ``-`` between boxes.

    >>> print(grid_text([[1, 0, 3, 4], [3, 4, 0, 2], [0, 1, 4, 3], [4, 3, 2, 1]], (2, 2)))
    1 . | 3 4
    3 4 | . 2
    ----+----
    . 1 | 4 3
    4 3 | 2 1
    """
    br, bc = box
    n = len(grid)
    lines = []
    for r, row in enumerate(grid):
        if r and r % br == 0:
            lines.append("-+-".join(["-" * (2 * bc - 1)] * (n // bc)))
        cells = [str(v) if v else "." for v in row]
        lines.append(" | ".join(" ".join(cells[c : c + bc]) for c in range(0, n, bc)))
    return "\n".join(lines)


@dataclass
class _Board:
    grid: list[list[int]]


# The oracle tool's program: a short search (most constrained blank first) over the original
# puzzle, copied verbatim from the prompt's text as the program's last statement (cells filled
# in earlier turns may be wrong, so it never starts from them; the solved grid overwrites them).
# About 340 tokens at 4 x 4 (the former, 630).
_ORACLE_TEMPLATE = """import json
N, BR, BC = {n}, {br}, {bc}
def free(g, r, c):
    a, b = r - r % BR, c - c % BC
    s = set(g[r]) | {{g[i][c] for i in range(N)}}
    s |= {{g[a + i][b + j] for i in range(BR) for j in range(BC)}}
    return [d for d in range(1, N + 1) if d not in s]
def solve(g):
    e = [(len(free(g, r, c)), r, c) for r in range(N) for c in range(N) if not g[r][c]]
    if not e:
        return g
    _, r, c = min(e)
    for d in free(g, r, c):
        g[r][c] = d
        if solve(g):
            return g
    g[r][c] = 0
def read(t):
    rows = [x.replace("|", " ").split() for x in t.splitlines() if "-" not in x]
    return [[0 if x == "." else int(x) for x in row] for row in rows]
PUZZLE = \"\"\"{puzzle}\"\"\"
print(json.dumps(solve(read(PUZZLE))))"""


class raw_env(ToolPlannerEnv):
    """Sudoku environment (see the module docstring)."""

    AGENTS = roles_of("sudoku")

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "sudoku_v0",
        "is_parallelizable": False,
    }
    config_cls = SudokuConfig
    config: SudokuConfig

    # ------------------------------------------------------------------ instances
    def _n(self) -> int:
        return self.instance.size if self.instance is not None else self.config.size

    def _generate_instance(self, rng: np.random.Generator) -> SudokuInstance:
        puzzle, solution = generate_puzzle(rng, self.config.size, self.config.num_blanks)
        return SudokuInstance(_freeze(puzzle), _freeze(solution))

    def _sample_instance(self, split: str, seed: int) -> SudokuInstance:
        """Generate until the puzzle's class (:meth:`_split_key`) falls in ``split``; each
        split draws from its own seed stream."""
        check_split(split)
        for attempt in range(_MAX_BASE_TRIES):
            rng = np.random.default_rng([seed, _SPLIT_STREAM[split], attempt])
            puzzle, solution = generate_puzzle(rng, self.config.size, self.config.num_blanks)
            inst = SudokuInstance(_freeze(puzzle), _freeze(solution))
            if self.split_of_instance(inst) == split:
                return inst
        raise RuntimeError(
            f"no {split} Sudoku found in {_MAX_BASE_TRIES} attempts"
            ": instances are split by symmetry class, and a small configuration may have few "
            "or none in a split; use a larger size or another split"
        )

    def _split_key(self, instance: SudokuInstance) -> dict[str, Any]:
        """The puzzle's cheap symmetry class: its rotations and reflections that keep the boxes
        boxes (all 8 for square boxes, the 4 without a transpose otherwise), each with its
        digits renamed in order of first appearance. Row and band permutations are left out
        (9 x 9 has 1,296 of each)."""
        br, bc = box_shape(len(instance.puzzle))
        return canonical_form(
            {"puzzle": _first_appearance(grid)}
            for grid, _ in dihedral_images(instance.puzzle, transpose=br == bc)
        )

    def _instance_key(self, instance: SudokuInstance) -> dict[str, Any]:
        return instance.key()

    def _instance_from_dict(self, data: Any) -> SudokuInstance:
        if isinstance(data, SudokuInstance):
            data = {"puzzle": data.puzzle, "solution": data.solution}
        if not isinstance(data, dict) or "puzzle" not in data:
            raise ValueError('a Sudoku instance is {"puzzle": [[int, ...], ...]} with 0 for blanks')
        extra = set(data) - {"puzzle", "solution"}
        if extra:
            raise ValueError(f"unknown Sudoku instance keys {sorted(extra)}; use 'puzzle'")
        puzzle = data["puzzle"]
        if isinstance(puzzle, np.ndarray):
            puzzle = puzzle.tolist()
        validate_grid_shape(puzzle)
        puzzle = [[int(v) for v in row] for row in puzzle]
        clashes = conflicts(puzzle)
        if clashes:
            unit, idx, digit = clashes[0]
            raise ValueError(f"the puzzle's givens break the rules: {unit} {idx} has {digit} twice")
        if all(all(row) for row in puzzle):
            raise ValueError("the puzzle has no blank cell (0) to fill")
        check = check_unique_bounded(puzzle)
        if check.status == "none":
            raise ValueError("the puzzle has no solution")
        if check.status == "several":
            raise ValueError("the puzzle has 2+ solutions; a Sudoku must have exactly one")
        if check.status != "unique" or check.solution is None:
            why = f" ({check.reason})" if check.reason else ""
            raise ValueError(
                f"the puzzle is too hard to verify within {WORKER_NODES:,} search nodes{why}; "
                "send one with more givens"
            )
        solution = check.solution
        if data.get("solution") is not None and not _same_grid(data["solution"], solution):
            raise ValueError("the given solution is not the puzzle's unique solution")
        return SudokuInstance(_freeze(puzzle), _freeze(solution))

    def _initial_state(self, instance: SudokuInstance) -> _Board:
        return _Board([list(row) for row in instance.puzzle])

    # ------------------------------------------------------------------ dynamics and rewards
    def _parse_answer(self, text: str) -> Extraction:
        return parse_proposal(text, self._n())

    def _simulate(self, proposal: Proposal) -> Sim:
        givens = self.instance.puzzle
        n = len(givens)
        old = self.state.grid
        new = [row[:] for row in old]
        rejected: list[str] = []
        if proposal.kind == "grid":
            edits = [(r, c, proposal.grid[r][c]) for r in range(n) for c in range(n)]
        else:
            edits = [(r - 1, c - 1, v) for r, c, v in proposal.steps]
        for r, c, v in edits:
            g = givens[r][c]
            if g:
                if v != g:
                    what = f"erase the given {g}" if v == 0 else f"write {v} over the given {g}"
                    rejected.append(f"({r + 1},{c + 1}): {what}")
                continue
            new[r][c] = v
        changed = [(r, c) for r in range(n) for c in range(n) if new[r][c] != old[r][c]]
        newly = sum(1 for r, c in changed if old[r][c] == 0)
        bad_cells = _conflict_cells(new, box_shape(n))
        written_ok = all((r, c) not in bad_cells for r, c in changed if new[r][c])
        info = {
            "changed": len(changed),
            "newly_filled": newly,
            "rejected": len(rejected),
            "consistent": not bad_cells,
            "written_ok": written_ok,
        }
        reason = ""
        if rejected:
            more = f" (+{len(rejected) - 3} more)" if len(rejected) > 3 else ""
            reason = "edits of givens rejected: " + "; ".join(rejected[:3]) + more
        return Sim(_Board(new), ok=not rejected, info=info, reason=reason)

    def _team(self, sim: Sim) -> float:
        return float(self._is_solved(sim.state))

    PROGRESS = "cells solved"

    def progress(self) -> float:
        """The share of the puzzle's blank cells that hold their solution's digit now."""
        puzzle, solution, grid = self.instance.puzzle, self.instance.solution, self.state.grid
        blanks = [(r, c) for r, row in enumerate(puzzle) for c, v in enumerate(row) if v == 0]
        if not blanks:
            return 1.0
        return sum(grid[r][c] == solution[r][c] for r, c in blanks) / len(blanks)

    def _is_solved(self, state: _Board) -> bool:
        return _freeze(state.grid) == self.instance.solution

    def _planner_components(self, sim: Sim | None) -> dict[str, float]:
        if sim is None:
            return {"legal": 0.0, "prog": 0.0}
        n = self._n()
        legal = sim.info["consistent"]
        if self.config.legal_counts_givens:
            legal = legal and sim.info["rejected"] == 0
        return {"legal": float(legal), "prog": sim.info["newly_filled"] / (n * n)}

    def _tool_components(self, sim: Sim | None, ran_ok: bool) -> dict[str, float]:
        if sim is None:
            return {"exec": 0.0, "san": 0.0}
        san = sim.info["written_ok"]
        if self.config.san_needs_change:
            san = san and sim.info["changed"] > 0
        return {"exec": float(ran_ok and sim.ok), "san": float(san)}

    def _format_proposal(self, value: Any) -> str:
        text = value.to_json() if isinstance(value, Proposal) else str(value)
        return text if len(text) <= 1000 else text[:997] + "..."

    # ------------------------------------------------------------------ text
    @property
    def _answer_format(self) -> str:  # type: ignore[override]
        n = self._n()
        return (
            f"JSON, either the whole grid (a list of {n} rows, each a list of {n} digits, 0 for a "
            "cell left blank; it replaces every non-given cell) or a list of fill steps "
            "[[<row>,<column>,<digit>],...] with rows and columns numbered from 1."
        )

    @property
    def _tool_output_format(self) -> str:  # type: ignore[override]
        n = self._n()
        return (
            f"JSON, either the solved grid ({n} rows of {n} digits) or a list of "
            "[<row>,<column>,<digit>] fill steps numbered from 1. The program gets no input: copy "
            "the current grid (its JSON below) into it."
        )

    def _rules_text(self) -> str:
        n = self.instance.size
        br, bc = box_shape(n)
        if self.config.prompt_style == "compact":
            return (
                f"Sudoku {n}x{n}: fill every blank so that each row, column and {br}x{bc} box "
                f"holds 1 to {n} once. Givens are fixed; earlier fills may be overwritten. Rows "
                "and columns are numbered from 1."
            )
        return (
            f"Task: solve a {n}x{n} Sudoku. Put a digit from 1 to {n} in every blank cell so that "
            f"each row, each column and each of the {n} boxes ({br} rows x {bc} columns, marked "
            "by | and -) holds every digit exactly once. The givens (digits of the original "
            "puzzle) are fixed: an answer may not change or erase them. Cells you or your "
            "teammate filled earlier may be overwritten. Rows and columns are numbered 1 to "
            f"{n} from the top left."
        )

    def _instance_text(self) -> str:
        inst = self.instance
        return f"Original puzzle (. = blank, {_blanks(inst.puzzle)} blanks):\n" + grid_text(
            inst.puzzle, box_shape(inst.size)
        )

    def _state_text(self) -> str:
        grid = self.state.grid
        n = len(grid)
        box = box_shape(n)
        blanks = sum(row.count(0) for row in grid)
        clashes = conflicts(grid)
        if clashes:
            shown = "; ".join(f"{u} {i} has {d} twice" for u, i, d in clashes[:6])
            rules = f"rule violations: {shown}" + (" ..." if len(clashes) > 6 else "")
        else:
            rules = "no rule violations"
        return (
            f"Grid ({blanks} blank cells left, {rules}):\n{grid_text(grid, box)}\n"
            f"As JSON (0 = blank): {json.dumps(grid, separators=(',', ':'))}"
        )

    def _render_text(self) -> str:
        return f"turn {self.turn}, success={self.success}\n" + self._state_text()

    def cell_grid(self) -> CellGrid:
        givens = self.instance.puzzle
        grid = self.state.grid
        bad = _conflict_cells(grid, box_shape(len(grid)))
        cells = tuple(
            tuple(
                Cell(
                    background="error" if (r, c) in bad else "floor",
                    glyph=str(v) if v else None,
                    glyph_color="given" if givens[r][c] else "filled",
                )
                for c, v in enumerate(row)
            )
            for r, row in enumerate(grid)
        )
        return CellGrid(cells, boxes=box_shape(len(grid)))

    # ------------------------------------------------------------------ oracle
    def _oracle_answer(self) -> str:
        return json.dumps([list(row) for row in self.instance.solution], separators=(",", ":"))

    def _oracle_code(self) -> str:
        n = self.instance.size
        br, bc = box_shape(n)
        puzzle = grid_text(self.instance.puzzle, (br, bc))
        return _ORACLE_TEMPLATE.format(puzzle=puzzle, n=n, br=br, bc=bc)


def _freeze(grid: Any) -> Grid:
    return tuple(tuple(int(v) for v in row) for row in grid)


def _same_grid(given: Any, grid: list[list[int]]) -> bool:
    """Whether ``given`` (from outside: any shape) is ``grid``, looking at no more of it than
    ``grid`` has."""
    n = len(grid)
    rows = (list, tuple, np.ndarray)
    if not isinstance(given, rows) or len(given) != n:
        return False
    if not all(isinstance(row, rows) and len(row) == n for row in given):
        return False
    try:
        return _freeze(given) == _freeze(grid)
    except (TypeError, ValueError, OverflowError):
        return False


def _blanks(grid: Grid) -> int:
    return sum(row.count(0) for row in grid)


def _conflict_cells(grid: list[list[int]], box: tuple[int, int]) -> set[tuple[int, int]]:
    """Cells whose digit also appears elsewhere in their row, column or box."""
    n = len(grid)
    br, bc = box
    bad: set[tuple[int, int]] = set()
    groups: list[list[tuple[int, int]]] = [[(r, c) for c in range(n)] for r in range(n)]
    groups += [[(r, c) for r in range(n)] for c in range(n)]
    groups += [
        [(r0 + i, c0 + j) for i in range(br) for j in range(bc)]
        for r0 in range(0, n, br)
        for c0 in range(0, n, bc)
    ]
    for cells in groups:
        where: dict[int, list[tuple[int, int]]] = {}
        for r, c in cells:
            v = grid[r][c]
            if v:
                where.setdefault(v, []).append((r, c))
        for spots in where.values():
            if len(spots) > 1:
                bad.update(spots)
    return bad


def env(**kwargs: Any):
    """The wrapped Sudoku AEC env (``envs.make("sudoku", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
