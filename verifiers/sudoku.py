"""Pure Sudoku checks, a counting solver and a unique-puzzle generator.

Grids are ``n x n`` lists of lists of ints with ``0`` for a blank; ``n`` is 4 (2x2 boxes),
6 (boxes of 2 rows x 3 columns) or 9 (3x3 boxes). Internally a grid is a flat list of ``n * n``
ints and a cell's candidates are a bitmask (bit ``d - 1`` set means digit ``d`` is possible).

The solver propagates naked singles after every assignment and branches on the cell with the
fewest candidates; :func:`count_solutions` stops as soon as it has seen ``limit`` solutions, so
``count_solutions(p) == 1`` proves that ``p`` has exactly one solution. A crafted 9x9 puzzle
can make that search long (a second of CPU for one without a solution), so a puzzle from
outside goes to :func:`check_unique_bounded`: the same search under a node budget, a small one
in this process and the rest in a bounded worker process (:mod:`verifiers._bounded`).

:func:`generate_puzzle` draws a full grid and then blanks cells in a random order, keeping a
blank only if the puzzle stays uniquely solvable, until exactly ``blanks`` cells are blank.
Removing the clue of cell ``c`` keeps uniqueness iff no solution of the smaller puzzle has a
digit other than ``solution[c]`` at ``c`` (every other solution would also solve the larger,
unique puzzle), which is one cheap search with ``c``'s solution digit excluded. For 4x4 the
uniqueness test is exact set arithmetic over all 288 full 4x4 grids (enumerated once by the
solver). Everything is a pure function of its arguments and the numpy ``Generator`` passed in.

>>> count_solutions([[0, 0, 3, 4], [0, 0, 0, 0], [3, 0, 0, 0], [4, 0, 0, 0]])  # no solution
0
>>> count_solutions([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [1, 2, 3, 4]])  # many
2
>>> q = [[0, 0, 3, 1], [0, 0, 4, 0], [0, 1, 0, 3], [0, 0, 1, 0]]
>>> count_solutions(q), solve(q)
(1, [[2, 4, 3, 1], [1, 3, 4, 2], [4, 1, 2, 3], [3, 2, 1, 4]])
>>> valid_but_ignores_givens = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
>>> (
...     is_solution(q, solve(q)),
...     is_consistent(valid_but_ignores_givens),
...     is_solution(q, valid_but_ignores_givens),
... )
(True, True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from verifiers.extract import Extraction, parse_json_value

__all__ = [
    "SIZES",
    "box_shape",
    "default_blanks",
    "max_blanks",
    "count_solutions",
    "solve",
    "Uniqueness",
    "check_unique",
    "check_unique_bounded",
    "conflicts",
    "is_consistent",
    "is_solution",
    "random_full_grid",
    "generate_puzzle",
    "relabel",
    "validate_grid_shape",
    "Proposal",
    "parse_proposal",
]

SIZES = (4, 6, 9)
_BOX = {4: (2, 2), 6: (2, 3), 9: (3, 3)}
_DEFAULT_BLANKS = {4: 10, 6: 20, 9: 45}
# Upper bounds on blanks: the fewest clues of a unique puzzle is 4 (4x4), 8 (6x6), 17 (9x9);
# random removal reaches these only rarely, so the caps leave room (see generate_puzzle).
_MAX_BLANKS = {4: 12, 6: 26, 9: 58}


def box_shape(n: int) -> tuple[int, int]:
    """(rows, columns) of a box for an ``n x n`` Sudoku.

    >>> box_shape(4), box_shape(6), box_shape(9)
    ((2, 2), (2, 3), (3, 3))
    """
    if n not in _BOX:
        raise ValueError(f"unsupported Sudoku size {n!r}; supported sizes: {SIZES}")
    return _BOX[n]


def default_blanks(n: int) -> int:
    """The default number of blank cells for size ``n`` (4: 10, 6: 20, 9: 45)."""
    box_shape(n)
    return _DEFAULT_BLANKS[n]


def max_blanks(n: int) -> int:
    """The largest ``blanks`` :func:`generate_puzzle` accepts for size ``n``."""
    box_shape(n)
    return _MAX_BLANKS[n]


class _Geometry:
    """Constant tables of one grid size: units, peers, popcounts."""

    def __init__(self, n: int) -> None:
        br, bc = box_shape(n)
        self.n = n
        self.cells = n * n
        self.full = (1 << n) - 1
        rows = [tuple(r * n + c for c in range(n)) for r in range(n)]
        cols = [tuple(r * n + c for r in range(n)) for c in range(n)]
        boxes = [
            tuple((r0 + dr) * n + c0 + dc for dr in range(br) for dc in range(bc))
            for r0 in range(0, n, br)
            for c0 in range(0, n, bc)
        ]
        self.units: tuple[tuple[int, ...], ...] = tuple(rows + cols + boxes)
        self.peers: tuple[tuple[int, ...], ...] = tuple(
            tuple(sorted({p for u in self.units if i in u for p in u} - {i}))
            for i in range(self.cells)
        )
        self.popcount = [bin(m).count("1") for m in range(1 << n)]


@cache
def _geometry(n: int) -> _Geometry:
    return _Geometry(n)


# ---------------------------------------------------------------------- solver core
def _propagate(cand: list[int], queue: list[int], peers: Sequence[Sequence[int]]) -> bool:
    """Eliminate the digits of the singleton cells in ``queue`` from their peers (naked singles,
    transitively). False on a contradiction (some cell has no candidate left)."""
    while queue:
        i = queue.pop()
        b = cand[i]
        for p in peers[i]:
            c = cand[p]
            if c & b:
                c ^= b
                if not c:
                    return False
                cand[p] = c
                if not c & (c - 1):
                    queue.append(p)
    return True


def _initial(flat: Sequence[int], geo: _Geometry) -> list[int] | None:
    """Candidates after placing the givens of ``flat`` (None if the givens clash)."""
    cand = [geo.full] * geo.cells
    queue = []
    for i, v in enumerate(flat):
        if v:
            b = 1 << (v - 1)
            if not cand[i] & b:
                return None
            cand[i] = b
            queue.append(i)
    if not _propagate(cand, queue, geo.peers):
        return None
    return cand


def _branch_cell(cand: list[int], geo: _Geometry) -> int:
    """The undecided cell with the fewest candidates (-1 when every cell is decided)."""
    best, best_k = -1, 99
    pc = geo.popcount
    for i, c in enumerate(cand):
        if c & (c - 1):
            k = pc[c]
            if k < best_k:
                best, best_k = i, k
                if k == 2:
                    break
    return best


def _count(cand: list[int], geo: _Geometry, limit: int, found: list[list[int]] | None) -> int:
    i = _branch_cell(cand, geo)
    if i < 0:
        if found is not None:
            found.append(cand)
        return 1
    total = 0
    c = cand[i]
    while c:
        b = c & -c
        c ^= b
        nxt = cand[:]
        nxt[i] = b
        if _propagate(nxt, [i], geo.peers):
            total += _count(nxt, geo, limit - total, found)
            if total >= limit:
                break
    return total


class _OutOfNodes(Exception):
    pass


def _count_within(
    cand: list[int], geo: _Geometry, limit: int, found: list[list[int]], nodes: list[int]
) -> int:
    """:func:`_count` (same order, same solutions) that spends one of ``nodes[0]`` per branch
    tried and raises ``_OutOfNodes`` when none is left."""
    i = _branch_cell(cand, geo)
    if i < 0:
        found.append(cand)
        return 1
    total = 0
    c = cand[i]
    while c:
        b = c & -c
        c ^= b
        nodes[0] -= 1
        if nodes[0] < 0:
            raise _OutOfNodes
        nxt = cand[:]
        nxt[i] = b
        if _propagate(nxt, [i], geo.peers):
            total += _count_within(nxt, geo, limit - total, found, nodes)
            if total >= limit:
                break
    return total


def _digits(cand: list[int]) -> list[int]:
    return [b.bit_length() for b in cand]


# ---------------------------------------------------------------------- public checks
def validate_grid_shape(grid: Any, *, allow_blank: bool = True) -> int:
    """Return ``n`` if ``grid`` is an ``n x n`` list of int rows with values in ``[0, n]``
    (``[1, n]`` when ``allow_blank`` is False) and ``n`` a supported size; else ``ValueError``.

    >>> validate_grid_shape([[1, 0, 0, 0]] * 4)
    4
    >>> validate_grid_shape([[1, 2], [2, 1]])
    Traceback (most recent call last):
    ...
    ValueError: unsupported Sudoku size 2 (the grid has 2 rows); supported sizes: (4, 6, 9)
    """
    if not isinstance(grid, (list, tuple)) or not grid:
        raise ValueError("a Sudoku grid must be a non-empty list of rows")
    n = len(grid)
    if n not in _BOX:
        raise ValueError(
            f"unsupported Sudoku size {n} (the grid has {n} rows); supported sizes: {SIZES}"
        )
    lo = 0 if allow_blank else 1
    for r, row in enumerate(grid):
        if not isinstance(row, (list, tuple)) or len(row) != n:
            raise ValueError(f"row {r + 1} must be a list of {n} ints (the grid must be square)")
        for c, v in enumerate(row):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"cell ({r + 1}, {c + 1}) is {v!r}, not an int")
            if not lo <= v <= n:
                raise ValueError(f"cell ({r + 1}, {c + 1}) is {v}, outside [{lo}, {n}]")
    return n


def _flat(grid: Sequence[Sequence[int]]) -> list[int]:
    return [int(v) for row in grid for v in row]


def _rows(flat: Sequence[int], n: int) -> list[list[int]]:
    return [list(flat[r * n : (r + 1) * n]) for r in range(n)]


def count_solutions(grid: Sequence[Sequence[int]], limit: int = 2) -> int:
    """The number of solutions of ``grid`` (0 = blank), counting stops at ``limit``."""
    n = validate_grid_shape(grid)
    geo = _geometry(n)
    cand = _initial(_flat(grid), geo)
    if cand is None or limit < 1:
        return 0
    return _count(cand, geo, limit, None)


def solve(grid: Sequence[Sequence[int]]) -> list[list[int]] | None:
    """One solution of ``grid`` (the first in the solver's deterministic order), or None."""
    n = validate_grid_shape(grid)
    geo = _geometry(n)
    cand = _initial(_flat(grid), geo)
    if cand is None:
        return None
    found: list[list[int]] = []
    _count(cand, geo, 1, found)
    return _rows(_digits(found[0]), n) if found else None


INLINE_NODES = 20_000
"""Branches :func:`check_unique_bounded` tries in the calling process (under 0.1 s of CPU); a
search that needs more is redone in a worker process."""
WORKER_NODES = 500_000
"""Branches the worker may try (about 2 s of CPU; the hardest puzzles people solve need
thousands at most)."""


@dataclass(frozen=True)
class Uniqueness:
    """The outcome of :func:`check_unique`: ``status`` is ``"unique"`` (``solution`` is the
    only one), ``"none"``, ``"several"`` or ``"budget"`` (``nodes`` branches were tried without
    an answer; from :func:`check_unique_bounded` also a worker that overran its deadline or
    memory, with ``reason`` saying so)."""

    status: str
    solution: list[list[int]] | None = None
    nodes: int = 0
    reason: str = ""


def check_unique(grid: Sequence[Sequence[int]], max_nodes: int = WORKER_NODES) -> Uniqueness:
    """Whether ``grid`` has exactly one solution, and which (the one :func:`solve` gives), in
    one search that tries at most ``max_nodes`` branches.

    >>> check_unique([[0, 0, 3, 1], [0, 0, 4, 0], [0, 1, 0, 3], [0, 0, 1, 0]]).status
    'unique'
    >>> check_unique([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [1, 2, 3, 4]]).status
    'several'
    >>> check_unique([[0] * 9 for _ in range(9)], max_nodes=10).status
    'budget'
    """
    n = validate_grid_shape(grid)
    geo = _geometry(n)
    cand = _initial(_flat(grid), geo)
    if cand is None:
        return Uniqueness("none")
    found: list[list[int]] = []
    nodes = [int(max_nodes)]
    try:
        count = _count_within(cand, geo, 2, found, nodes)
    except _OutOfNodes:
        return Uniqueness("budget", None, int(max_nodes))
    used = int(max_nodes) - nodes[0]
    if count == 0:
        return Uniqueness("none", None, used)
    if count > 1:
        return Uniqueness("several", None, used)
    return Uniqueness("unique", _rows(_digits(found[0]), n), used)


def check_unique_bounded(grid: Sequence[Sequence[int]]) -> Uniqueness:
    """:func:`check_unique` for a puzzle from outside (an explicit instance), at a bounded cost
    to this process: :data:`INLINE_NODES` branches here, then :data:`WORKER_NODES` in a worker
    process of :mod:`verifiers._bounded` (memory limit, deadline: one that overruns them reads
    as ``"budget"`` with the ``reason``). A solution from the worker is checked here before it
    is believed.

    >>> check_unique_bounded([[0, 0, 3, 1], [0, 0, 4, 0], [0, 1, 0, 3], [0, 0, 1, 0]]).solution
    [[2, 4, 3, 1], [1, 3, 4, 2], [4, 1, 2, 3], [3, 2, 1, 4]]
    """
    here = check_unique(grid, max_nodes=INLINE_NODES)
    if here.status != "budget":
        return here
    from verifiers import _bounded

    puzzle = [[int(v) for v in row] for row in grid]
    try:
        status, solution, nodes = _bounded.call("sudoku_unique", puzzle, WORKER_NODES)
    except _bounded.BoundedError as exc:
        return Uniqueness("budget", None, here.nodes, str(exc))
    if status == "unique":
        try:
            validate_grid_shape(solution, allow_blank=False)
            ok = is_solution(puzzle, solution)
        except (ValueError, TypeError):
            ok = False
        if not ok:
            return Uniqueness("budget", None, here.nodes, "the checking process answered nonsense")
        return Uniqueness("unique", solution, nodes if isinstance(nodes, int) else 0)
    if status not in ("none", "several", "budget"):
        return Uniqueness("budget", None, here.nodes, "the checking process answered nonsense")
    return Uniqueness(status, None, nodes if isinstance(nodes, int) else 0)


def conflicts(grid: Sequence[Sequence[int]]) -> list[tuple[str, int, int]]:
    """Every duplicated digit as ``(unit, index, digit)`` with unit ``"row"``, ``"column"`` or
    ``"box"`` and 1-based ``index`` (boxes numbered row-major). Blanks never conflict.

    >>> conflicts([[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    [('row', 1, 1), ('box', 1, 1)]
    """
    n = len(grid)
    geo = _geometry(n)
    flat = _flat(grid)
    out = []
    names = ("row",) * n + ("column",) * n + ("box",) * n
    for k, unit in enumerate(geo.units):
        seen = 0
        dup = 0
        for i in unit:
            v = flat[i]
            if v:
                b = 1 << (v - 1)
                if seen & b:
                    dup |= b
                seen |= b
        while dup:
            b = dup & -dup
            dup ^= b
            out.append((names[k], k % n + 1, b.bit_length()))
    return out


def is_consistent(grid: Sequence[Sequence[int]]) -> bool:
    """True when no row, column or box holds a digit twice (blanks allowed)."""
    return not conflicts(grid)


def is_solution(puzzle: Sequence[Sequence[int]], grid: Sequence[Sequence[int]]) -> bool:
    """True iff ``grid`` is full, breaks no rule and keeps every given of ``puzzle``.

    A valid Sudoku that ignores the givens is *not* a solution:

    >>> is_solution(
    ...     [[1, 0, 0, 0]] + [[0] * 4] * 3,
    ...     [[2, 1, 4, 3], [4, 3, 2, 1], [1, 2, 3, 4], [3, 4, 1, 2]],
    ... )
    False
    """
    n = len(puzzle)
    if len(grid) != n or any(len(row) != n for row in grid):
        return False
    for prow, grow in zip(puzzle, grid):
        for p, g in zip(prow, grow):
            if not 1 <= g <= n or (p and p != g):
                return False
    return is_consistent(grid)


# ---------------------------------------------------------------------- generation
@cache
def _all_grids_4() -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """All 288 full 4x4 grids and, per (cell, digit), the bitset of grids holding that digit."""
    geo = _geometry(4)
    found: list[list[int]] = []
    _count([geo.full] * 16, geo, 10**6, found)
    grids = tuple(tuple(_digits(c)) for c in found)
    masks = [[0] * 5 for _ in range(16)]
    for g, grid in enumerate(grids):
        for i, v in enumerate(grid):
            masks[i][v] |= 1 << g
    return grids, tuple(tuple(m) for m in masks)


def random_full_grid(rng: np.random.Generator, n: int) -> list[list[int]]:
    """A random valid full ``n x n`` grid drawn with ``rng``."""
    return _rows(_random_full_flat(rng, n), n)


def _random_full_flat(rng: np.random.Generator, n: int) -> list[int]:
    if n == 4:
        grids, _ = _all_grids_4()
        return list(grids[int(rng.integers(len(grids)))])
    geo = _geometry(n)
    # One random digit order per cell: the search tries digits in that order.
    orders = np.argsort(rng.random((geo.cells, n)), axis=1, kind="stable").tolist()
    cand = [geo.full] * geo.cells
    out = _fill(cand, geo, orders)
    assert out is not None  # an empty grid always has a solution
    return _digits(out)


def _fill(cand: list[int], geo: _Geometry, orders: list[list[int]]) -> list[int] | None:
    i = _branch_cell(cand, geo)
    if i < 0:
        return cand
    c = cand[i]
    for d in orders[i]:
        b = 1 << d
        if c & b:
            nxt = cand[:]
            nxt[i] = b
            if _propagate(nxt, [i], geo.peers):
                out = _fill(nxt, geo, orders)
                if out is not None:
                    return out
    return None


def _still_unique(flat: list[int], solution: list[int], cell: int, geo: _Geometry) -> bool:
    """Is ``flat`` (``cell`` already blanked) still uniquely solvable? ``solution`` solves it."""
    b = 1 << (solution[cell] - 1)
    # Cheap sufficient test: the givens among the cell's peers already force its digit.
    seen = 0
    for p in geo.peers[cell]:
        v = flat[p]
        if v:
            seen |= 1 << (v - 1)
    if seen | b == geo.full:
        return True
    cand = _initial(flat, geo)
    if cand is None:  # impossible: ``solution`` solves ``flat``
        return False
    rest = cand[cell] & ~b
    if not rest:
        return True
    cand[cell] = rest
    if not rest & (rest - 1) and not _propagate(cand, [cell], geo.peers):
        return True
    return _count(cand, geo, 1, None) == 0


def generate_puzzle(
    rng: np.random.Generator, n: int, blanks: int | None = None, max_tries: int = 1000
) -> tuple[list[list[int]], list[list[int]]]:
    """A ``(puzzle, solution)`` pair: an ``n x n`` puzzle with exactly ``blanks`` blank cells
    (default :func:`default_blanks`) and exactly one solution.

    If a removal pass ends with fewer blanks (every further removal would allow a second
    solution), a new pass starts from a new full grid; after ``max_tries`` passes it raises
    ``RuntimeError`` (only for ``blanks`` close to :func:`max_blanks`).
    """
    geo = _geometry(n)
    if blanks is None:
        blanks = _DEFAULT_BLANKS[n]
    if not 0 <= blanks <= _MAX_BLANKS[n]:
        raise ValueError(f"blanks must lie in [0, {_MAX_BLANKS[n]}] for size {n}, got {blanks}")
    for _ in range(max_tries):
        solution = _random_full_flat(rng, n)
        order = rng.permutation(geo.cells).tolist()
        if n == 4:
            flat = _remove_4(solution, order, blanks)
        else:
            flat = _remove(solution, order, blanks, geo)
        if flat is not None:
            return _rows(flat, n), _rows(solution, n)
    raise RuntimeError(
        f"no {n}x{n} puzzle with {blanks} blanks found in {max_tries} tries; use fewer blanks"
    )


def _remove(solution: list[int], order: list[int], blanks: int, geo: _Geometry) -> list[int] | None:
    flat = list(solution)
    removed = 0
    for left, cell in enumerate(order):
        if removed == blanks:
            break
        if blanks - removed > geo.cells - left:
            return None
        flat[cell] = 0
        if _still_unique(flat, solution, cell, geo):
            removed += 1
        else:
            flat[cell] = solution[cell]
    return flat if removed == blanks else None


def _remove_4(solution: list[int], order: list[int], blanks: int) -> list[int] | None:
    _, masks = _all_grids_4()
    flat = list(solution)
    removed = 0
    for left, cell in enumerate(order):
        if removed == blanks:
            break
        if blanks - removed > 16 - left:
            return None
        flat[cell] = 0
        alive = -1
        for i, v in enumerate(flat):
            if v:
                alive &= masks[i][v]
        if alive & (alive - 1):  # two or more full grids agree with the givens
            flat[cell] = solution[cell]
        else:
            removed += 1
    return flat if removed == blanks else None


def relabel(grid: Sequence[Sequence[int]], perm: Sequence[int]) -> list[list[int]]:
    """``grid`` with digit ``d`` replaced by ``perm[d - 1]`` (blanks stay 0); ``perm`` is a
    permutation of ``1..n``. Relabelling keeps validity and the number of solutions.

    >>> relabel([[1, 0], [2, 1]], [2, 1])
    [[2, 0], [1, 2]]
    """
    table = [0, *perm]
    return [[table[v] for v in row] for row in grid]


# ---------------------------------------------------------------------- answers
@dataclass(frozen=True)
class Proposal:
    """A parsed answer: a whole grid (``kind == "grid"``, 0 = blank) or fill steps
    (``kind == "steps"``, 1-based ``(row, column, digit)`` triples)."""

    kind: str
    grid: tuple[tuple[int, ...], ...] = ()
    steps: tuple[tuple[int, int, int], ...] = ()

    def to_json(self) -> str:
        rows = self.grid if self.kind == "grid" else self.steps
        return "[" + ",".join("[" + ",".join(map(str, r)) + "]" for r in rows) + "]"


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_proposal(text: object, n: int) -> Extraction:
    """Parse a Sudoku answer for an ``n x n`` puzzle from ``text`` (the first JSON array in it).

    Two shapes are accepted: a grid (``n`` rows of ``n`` ints in ``[0, n]``, 0 = blank) or a
    non-empty list of ``[row, column, digit]`` steps with every entry in ``[1, n]``. Anything
    else fails with the reason.

    >>> parse_proposal("[[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,0]]", 4).value.kind
    'grid'
    >>> parse_proposal("fill: [[1, 3, 2], [4, 1, 3]]", 4).value.steps
    ((1, 3, 2), (4, 1, 3))
    >>> parse_proposal("[[1, 5, 2]]", 4).reason
    'step 1 [1, 5, 2]: column 5 is not an int in 1..4'
    >>> parse_proposal("[]", 4).reason
    'empty list: give a grid or at least one [row, column, digit] step'
    """
    parsed = parse_json_value(text)
    if not parsed.ok:
        return parsed
    value = parsed.value
    if not isinstance(value, list):
        return Extraction(None, "expected a JSON list (a grid or [row, column, digit] steps)")
    if not value:
        return Extraction(None, "empty list: give a grid or at least one [row, column, digit] step")
    if not all(isinstance(item, list) for item in value):
        return Extraction(
            None, f"expected a list of lists: a grid of {n} rows or [row, column, digit] steps"
        )
    if len(value) == n and all(len(row) == n for row in value):
        for r, row in enumerate(value):
            for c, v in enumerate(row):
                if not _is_int(v) or not 0 <= v <= n:
                    return Extraction(
                        None, f"grid cell ({r + 1}, {c + 1}) is {_short(v)}, not an int in 0..{n}"
                    )
        return Extraction(Proposal("grid", grid=tuple(tuple(row) for row in value)))
    if all(len(item) == 3 for item in value):
        steps = []
        for k, item in enumerate(value):
            for name, v in zip(("row", "column", "digit"), item):
                if not _is_int(v) or not 1 <= v <= n:
                    return Extraction(
                        None,
                        f"step {k + 1} {_short(item)}: {name} {_short(v)} is not an int in 1..{n}",
                    )
            steps.append((item[0], item[1], item[2]))
        return Extraction(Proposal("steps", steps=tuple(steps)))
    return Extraction(
        None,
        f"expected a grid of {n} rows of {n} digits or a list of [row, column, digit] steps; "
        f"got {len(value)} items of lengths {sorted({len(item) for item in value})[:5]}",
    )


def _short(v: object, limit: int = 40) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."
