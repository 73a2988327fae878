"""Sokoban rules, deadlock checks and an exact solver (pure functions, no env imports).

Levels use the standard XSB characters: ``#`` wall, `` `` floor, ``.`` goal, ``$`` box, ``*`` box
on a goal, ``@`` player, ``+`` player on a goal. Positions are ``(row, column)`` from the top left;
moves are ``U`` (row - 1), ``D`` (row + 1), ``L`` (column - 1), ``R`` (column + 1). Walking into a
box pushes it one cell; a push is illegal when the cell behind the box is a wall, another box or
off the map, and so is a step into a wall or off the map.

- :class:`Board` parses and validates XSB text and prints it back.
- :func:`play` executes a move list and stops at the first illegal move or when solved.
- :func:`corner_deadlocks` lists boxes off goals squeezed into a corner (two orthogonal walls):
  the static deadlock the AT-GRPO Sokoban planner reward checks.
- :func:`dead_squares` lists the floor cells from which no goal can ever be reached by pushing.
- :func:`solve` finds a solution with the fewest moves (pushes count as moves) by breadth-first
  search over (player cell, box set) with dead squares pruned, under a node budget;
  :func:`solve_bounded` runs it for input from outside (an explicit level): a small budget in
  this process, the rest in a bounded worker process (:mod:`verifiers._bounded`).

>>> b = Board.from_xsb(["#####", "#@$.#", "#####"])
>>> solve(b).moves
'R'
>>> play(b, "RR").executed, play(b, "RR").solved
(1, True)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

__all__ = [
    "MOVES",
    "Board",
    "PlayResult",
    "Solution",
    "box_potential",
    "corner_deadlocks",
    "dead_squares",
    "play",
    "solve",
    "solve_bounded",
]

Pos = tuple[int, int]
MOVES: dict[str, Pos] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_DIR_OF = {v: k for k, v in MOVES.items()}
_XSB = set("# .$*@+")
MAX_SIDE = 40
INLINE_NODES = 50_000
"""States :func:`solve_bounded` stores in the calling process (about 0.05 s of CPU and 5 MB);
a search that needs more is redone in a worker process."""


@dataclass(frozen=True)
class Board:
    """A Sokoban position: the fixed level (walls, goals, size) and the movable part."""

    height: int
    width: int
    walls: frozenset[Pos]
    goals: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    def __deepcopy__(self, memo: dict) -> Board:  # immutable: copies can share it
        return self

    @classmethod
    def from_xsb(cls, rows: Sequence[str]) -> Board:
        """Parse and validate XSB rows (right-padded with spaces to a rectangle).

        Raises ``ValueError`` unless there is exactly one player, as many boxes as goals (at
        least one), only XSB characters, and the player's area (boxes counted as floor) is
        enclosed by walls and holds every box and goal.

        >>> Board.from_xsb(["####", "#@ #", "####"])
        Traceback (most recent call last):
        ...
        ValueError: the level needs at least one box and one goal
        """
        if isinstance(rows, str) or not isinstance(rows, Sequence):
            raise ValueError("a Sokoban map is a list of strings (one per row)")
        if len(rows) > MAX_SIDE:  # (before anything walks the rows)
            raise ValueError(f"maps are limited to {MAX_SIDE}x{MAX_SIDE} cells")
        if not rows or not all(isinstance(r, str) for r in rows):
            raise ValueError("a Sokoban map is a non-empty list of strings (one per row)")
        rows = [r.rstrip("\n") for r in rows]
        height, width = len(rows), max(len(r) for r in rows)
        if width == 0:
            raise ValueError("the map has only empty rows")
        if width > MAX_SIDE:
            raise ValueError(f"maps are limited to {MAX_SIDE}x{MAX_SIDE} cells")
        walls, goals, boxes, players = set(), set(), set(), []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row.ljust(width)):
                if ch not in _XSB:
                    raise ValueError(
                        f"unknown character {ch!r} at row {r}, column {c}; use XSB symbols "
                        "'#', ' ', '.', '$', '*', '@', '+'"
                    )
                if ch == "#":
                    walls.add((r, c))
                if ch in ".*+":
                    goals.add((r, c))
                if ch in "$*":
                    boxes.add((r, c))
                if ch in "@+":
                    players.append((r, c))
        if len(players) != 1:
            raise ValueError(f"the map needs exactly one player ('@' or '+'), found {len(players)}")
        if not boxes or not goals:
            raise ValueError("the level needs at least one box and one goal")
        if len(boxes) != len(goals):
            raise ValueError(f"the level has {len(boxes)} boxes but {len(goals)} goals")
        board = cls(height, width, frozenset(walls), frozenset(goals), frozenset(boxes), players[0])
        area = board.area()
        if any(r in (0, height - 1) or c in (0, width - 1) for r, c in area):
            raise ValueError("the level is not enclosed: the player can reach the map's edge")
        outside = sorted((boxes | goals) - area)
        if outside:
            raise ValueError(f"boxes/goals {outside} lie outside the player's walled area")
        return board

    def area(self) -> frozenset[Pos]:
        """Cells the player could ever stand on: non-wall cells connected to the player."""
        seen, stack = {self.player}, [self.player]
        while stack:
            r, c = stack.pop()
            for dr, dc in MOVES.values():
                n = (r + dr, c + dc)
                if (
                    n not in seen
                    and n not in self.walls
                    and 0 <= n[0] < self.height
                    and 0 <= n[1] < self.width
                ):
                    seen.add(n)
                    stack.append(n)
        return frozenset(seen)

    def to_xsb(self) -> list[str]:
        """XSB rows (trailing spaces kept, so every row has ``width`` characters)."""
        out = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                p = (r, c)
                if p in self.walls:
                    row.append("#")
                elif p == self.player:
                    row.append("+" if p in self.goals else "@")
                elif p in self.boxes:
                    row.append("*" if p in self.goals else "$")
                else:
                    row.append("." if p in self.goals else " ")
            out.append("".join(row))
        return out

    def is_wall(self, p: Pos) -> bool:
        """Walls and everything off the map block movement."""
        return p in self.walls or not (0 <= p[0] < self.height and 0 <= p[1] < self.width)

    @property
    def solved(self) -> bool:
        return self.boxes <= self.goals

    @property
    def boxes_on_goals(self) -> int:
        return len(self.boxes & self.goals)


@dataclass(frozen=True)
class PlayResult:
    board: Board  # the position after the executed moves
    executed: int  # moves actually carried out
    pushes: int  # how many of them pushed a box
    legal: bool  # no illegal move was met
    reason: str = ""  # why execution stopped early ("" when it did not)

    @property
    def solved(self) -> bool:
        return self.board.solved


def play(board: Board, moves: Iterable[str]) -> PlayResult:
    """Execute ``moves`` from ``board``; stop at the first illegal move (not executed) or as soon
    as every box is on a goal (later moves are ignored).

    >>> b = Board.from_xsb(["######", "#@$ .#", "######"])
    >>> r = play(b, "RL")
    >>> r.executed, r.pushes, r.legal, r.board.player, sorted(r.board.boxes)
    (2, 1, True, (1, 1), [(1, 3)])
    >>> play(b, "RRL").executed  # solved after two moves: the rest is ignored
    2
    >>> play(b, "LR").reason
    'move 1 (L) walks into a wall'
    """
    player, boxes = board.player, set(board.boxes)
    executed = pushes = 0
    legal, reason = True, ""
    for i, m in enumerate(moves):
        if boxes <= board.goals:
            break
        dr, dc = MOVES[m]
        nxt = (player[0] + dr, player[1] + dc)
        if board.is_wall(nxt):
            legal, reason = False, f"move {i + 1} ({m}) walks into a wall"
            break
        if nxt in boxes:
            dest = (nxt[0] + dr, nxt[1] + dc)
            if board.is_wall(dest):
                legal, reason = False, f"move {i + 1} ({m}) pushes a box into a wall"
                break
            if dest in boxes:
                legal, reason = False, f"move {i + 1} ({m}) pushes a box into another box"
                break
            boxes.remove(nxt)
            boxes.add(dest)
            pushes += 1
        player = nxt
        executed += 1
    after = replace(board, boxes=frozenset(boxes), player=player)
    return PlayResult(after, executed, pushes, legal, reason)


def box_potential(board: Board) -> int:
    """psi = -(sum over boxes of the Manhattan distance to the nearest goal); 0 when solved.

    >>> box_potential(Board.from_xsb(["######", "#@$ .#", "######"]))
    -2
    """
    return -sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in board.goals) for b in board.boxes)


def corner_deadlocks(board: Board) -> list[Pos]:
    """Boxes not on a goal with a wall (or the map edge) on a vertical side and on a horizontal
    side: such a box can never move again, so the level is lost.

    >>> corner_deadlocks(Board.from_xsb(["#####", "#$ .#", "# @ #", "#####"]))
    [(1, 1)]
    """
    out = []
    for r, c in sorted(board.boxes - board.goals):
        vertical = board.is_wall((r - 1, c)) or board.is_wall((r + 1, c))
        horizontal = board.is_wall((r, c - 1)) or board.is_wall((r, c + 1))
        if vertical and horizontal:
            out.append((r, c))
    return out


def dead_squares(board: Board) -> frozenset[Pos]:
    """Cells of the player's area from which a lone box can reach no goal by pushing.

    A cell is live when a goal is reachable: found by pulling a box backwards from every goal
    (a box at ``x`` can be pushed to ``x + d`` when ``x - d`` and ``x + d`` are not walls).

    >>> sorted(dead_squares(Board.from_xsb(["#####", "#@$.#", "#   #", "#####"])))
    [(1, 1), (2, 1), (2, 2), (2, 3)]
    """
    area = board.area()
    live = set(board.goals)
    stack = list(board.goals)
    while stack:
        r, c = stack.pop()
        for dr, dc in MOVES.values():
            prev = (r - dr, c - dc)  # where the box was before a push in direction (dr, dc)
            behind = (r - 2 * dr, c - 2 * dc)  # where the player stood
            if prev not in live and prev in area and behind in area:
                live.add(prev)
                stack.append(prev)
    return frozenset(area - live)


@dataclass(frozen=True)
class Solution:
    """The outcome of :func:`solve`.

    status: ``"solved"`` (``moves`` is a shortest solution), ``"unsolvable"`` (the whole state
    space was searched) or ``"budget"`` (``max_nodes`` states were stored without an answer;
    from :func:`solve_bounded` also a worker that overran its deadline or memory, with
    ``reason`` saying so).
    """

    status: str
    moves: str | None = None
    nodes: int = 0
    reason: str = ""

    @property
    def length(self) -> int | None:
        return None if self.moves is None else len(self.moves)


def solve(
    board: Board,
    max_nodes: int = 1_000_000,
    max_depth: int | None = None,
    *,
    exact_budget: bool = False,
) -> Solution:
    """A solution with the fewest moves, by breadth-first search over (player, boxes).

    Boxes never enter dead squares (see :func:`dead_squares`) nor complete a 2x2 block of
    walls and boxes that holds a box off its goal (such boxes are frozen forever); states are
    packed into one int (box bitmask over the player's area, then the player's cell). ``max_depth``
    bounds the search (a known upper bound, e.g. from a generator's reverse play); no solution
    within it reads as ``"unsolvable"``. The budget is checked after each breadth-first layer, which
    may store up to about four times the previous layer's states beyond it; ``exact_budget=True``
    stops as soon as more than ``max_nodes`` states are stored (a bound on time and memory).
    Whenever both find an answer ("solved" or "unsolvable") it is the same one.

    >>> solve(Board.from_xsb(["#######", "#@ $ .#", "#######"])).moves
    'RRR'
    >>> solve(Board.from_xsb(["######", "#@$  #", "#   .#", "######"])).status
    'unsolvable'
    """
    if board.solved:
        return Solution("solved", "", 1)
    area = sorted(board.area())
    index = {p: i for i, p in enumerate(area)}
    dead = dead_squares(board)
    if any(b in dead for b in board.boxes - board.goals):
        return Solution("unsolvable", None, 1)
    n = len(area)
    shift = n.bit_length()
    pmask = (1 << shift) - 1
    gmask = sum(1 << index[g] for g in board.goals)
    # The 2x2 blocks around each cell, as masks of their area cells (other cells are walls for
    # good), kept when they hold a non-goal cell: filling such a block with boxes is a deadlock.
    blocks: list[tuple[int, ...]] = []
    for r, c in area:
        masks = []
        for top, left in ((r - 1, c - 1), (r - 1, c), (r, c - 1), (r, c)):
            cells = ((top, left), (top, left + 1), (top + 1, left), (top + 1, left + 1))
            m = sum(1 << index[x] for x in cells if x in index)
            if m & ~gmask:
                masks.append(m)
        blocks.append(tuple(masks))
    # For every cell: (neighbour, its bit, cell behind the neighbour, that cell's bit or 0 when a
    # box must not be pushed there: wall, off the area, dead square; that cell's 2x2 blocks).
    trans: list[list[tuple[int, int, int, tuple[int, ...]]]] = []
    for cell in area:
        out = []
        for dr, dc in MOVES.values():
            nbr = (cell[0] + dr, cell[1] + dc)
            if nbr not in index:
                continue
            behind = (nbr[0] + dr, nbr[1] + dc)
            ok = behind in index and behind not in dead
            rbit = 1 << index[behind] if ok else 0
            out.append((index[nbr], 1 << index[nbr], rbit, blocks[index[behind]] if ok else ()))
        trans.append(out)
    bmask = sum(1 << index[b] for b in board.boxes)
    start = (bmask << shift) | index[board.player]
    parent = {start: -1}
    frontier = [start]
    depth = 0
    goal_key = -1
    while frontier and goal_key < 0:
        if max_depth is not None and depth >= max_depth:
            return Solution("unsolvable", None, len(parent))
        depth += 1
        nxt: list[int] = []
        for key in frontier:
            p = key & pmask
            b = key >> shift
            for q, qbit, rbit, rblocks in trans[p]:
                if b & qbit:
                    if not rbit or b & rbit:
                        continue
                    nb = b ^ qbit ^ rbit
                    nk = (nb << shift) | q
                    if nk in parent:
                        continue
                    if any(nb & m == m for m in rblocks):
                        continue
                    parent[nk] = key
                    if nb == gmask:
                        goal_key = nk
                        break
                else:
                    nk = key - p + q
                    if nk in parent:
                        continue
                    parent[nk] = key
                nxt.append(nk)
            if goal_key >= 0:
                break
            if exact_budget and len(parent) > max_nodes:
                return Solution("budget", None, len(parent))
        if len(parent) > max_nodes and goal_key < 0:
            return Solution("budget", None, len(parent))
        frontier = nxt
    if goal_key < 0:
        return Solution("unsolvable", None, len(parent))
    path: list[tuple[int, int]] = []
    key = goal_key
    while key >= 0:
        path.append(area[key & pmask])
        key = parent[key]
    path.reverse()
    moves = "".join(_DIR_OF[(b[0] - a[0], b[1] - a[1])] for a, b in itertools.pairwise(path))
    return Solution("solved", moves, len(parent))


def solve_bounded(board: Board, max_nodes: int) -> Solution:
    """:func:`solve` for a level from outside (an explicit instance), at a bounded cost to this
    process: up to :data:`INLINE_NODES` states here (``exact_budget``), and when that is not
    enough, the search with ``max_nodes`` in a worker process of :mod:`verifiers._bounded`
    (memory limit, deadline: one that overruns them reads as ``"budget"`` with the ``reason``).
    The answer is the one ``solve(board, max_nodes)`` gives (unless the worker overran); the
    worker's solution is replayed here before it is believed.

    >>> solve_bounded(Board.from_xsb(["#######", "#@ $ .#", "#######"]), 1000).moves
    'RRR'
    """
    here = solve(board, max_nodes=min(max_nodes, INLINE_NODES), exact_budget=True)
    if here.status != "budget":
        return here
    from verifiers import _bounded

    try:
        status, moves, nodes = _bounded.call("sokoban_solve", board.to_xsb(), max_nodes)
    except _bounded.BoundedError as exc:
        return Solution("budget", None, here.nodes, str(exc))
    if status == "solved":
        ok = isinstance(moves, str) and set(moves) <= set(MOVES)
        if not (ok and play(board, moves).solved):
            return Solution("budget", None, here.nodes, "the checking process answered nonsense")
    elif status not in ("unsolvable", "budget"):
        return Solution("budget", None, here.nodes, "the checking process answered nonsense")
    count = nodes if isinstance(nodes, int) else 0
    return Solution(status, moves if status == "solved" else None, count)
