"""Plan-Path: reach the goal on a grid with walls (AT-GRPO Appendix A.1.4, A.3).

=================  ==========================================================
id                 ``plan_path``
agents             ``tool``, ``planner`` (``mode="single"``: ``planner``, or ``tool`` with
                   ``single_agent="tool"``)
actions            completion text (``str``)
observations       ``{"prompt": str}``
horizon            ``max_turns`` turns (default 4); ends on reaching the goal
render modes       ``human``, ``ansi``, ``rgb_array``
=================  ==========================================================

Each turn the tool agent writes one Python program that prints an action list such as
``[U,R,D,L]`` (U = row - 1, D = row + 1, L = column - 1, R = column + 1); the env runs it in the
sandbox. The planner sees the task, the current position, the tool's program, its output and the
history, and answers after a line beginning with ``####`` with an action list, which is applied
from the current position. Moves are executed in order; execution stops at the first illegal move
(out of bounds or into a wall) and at the goal.

Instances: a ``height`` x ``width`` grid (default 10 x 10) with walls drawn with probability
``wall_density``; start and goal are distinct free cells with the goal reachable (verified by BFS)
and at least ``min_distance`` shortest-path steps apart. The shortest path length is recorded in
``instance.shortest``. Splits: an instance's split is the hash of its symmetry class (the 8
rotations and reflections of map, start and goal together), so no validation instance is a
turned or mirrored copy of a training one. A tiny configuration has few classes (a 3 x 3 map
without walls, start and goal at least 2 apart, has 8: 6 train, 1 val, 1 test), so a split may
hold few distinct instances or none. Explicit instance:
``reset(options={"instance": {"grid": ["..#", "...", "#.."], "start": [0, 0], "goal": [2, 2]}})``
(``#`` wall, ``.`` free, goal must be reachable). Its sides have the generator's limit, 200
cells (any smaller size is fine), so its check (one breadth-first search over at most 40,000
cells) costs the host process about 0.02 s and 1 MB; a larger grid is refused before its rows
are read.

Rewards (``r = lam * team + (1 - lam) * mask * local``, ``lam = 0.50``; d = Manhattan distance
to the goal, d0 = max(1, initial distance)):

- team: 1 at the goal, else ``max(0, (d_before - d_after) / d0)`` for the turn's moves (the
  planner's answer); the tool of the turn receives the same value by ``award()`` at the
  planner's step (:mod:`envs.core.toolplanner`; ``tool_team="proposal"``: the moves the tool
  proposes, simulated without changing the state).
- planner: fmt 0.20 (answer parses as a list of U/D/L/R), leg 0.40 (every move in bounds and not
  into a wall), sp 0.40 (the list is non-empty and every executed move lies on a shortest path).
- tool: fmt 0.10 (printed output parses as a list of U/D/L/R), exec 0.40 (the program ran, the
  list is non-empty and no move is invalid), shape 0.50 (the potential -d does not decrease).
- mixing: Appendix A.1's convex form above is the default; the main text's Eq. 4 ``r = alpha *
  team + local`` (no mask; alpha = 1 in AT-GRPO 5.1) is ``rewards={"mixing": "additive"}``.

Prompts: the rules and the role's instructions first, then (planner) the tool's program and
output, then the instance, the history and the current map (:mod:`envs.core.toolplanner`);
formats show a placeholder, ``[<move>,<move>,...]``. ``prompt_style="compact"`` shortens the
fixed text and drops the start map, which the current state shows as well.

Oracle: the tool's program is a breadth-first search on the current map (copied out of the
prompt as its last line) that prints a shortest move list; the planner adopts the tool's
proposal when it reaches the goal, else answers a shortest path from the current cell.

Reward audit: the conditions the rewarded policy controls (whether its output parses, whether
the tool's program exits cleanly) are the grid settings' shared ones,
:mod:`envs.core.toolplanner`: a broken output scores every local component 0. An empty tool list
earns no exec (the simulation must advance, A.1.4) and keeps shape (the distance does not grow);
an empty planner answer keeps leg but earns no sp. A wrongly formatted output, or a crash, earns
less than either (``tests/envs/test_monotonicity.py``).

Version history: v0 (initial); v1 (the tool's team term is the turn's value, ``tool_team``); v2
(prompts: shared text first, placeholder formats, ``prompt_style``; compact oracle program; the
planner oracle adopts a solving tool proposal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from envs.core.base import wrap
from envs.core.config import RewardConfig
from envs.core.registry import roles_of
from envs.core.render import Cell, CellGrid
from envs.core.splits import canonical_form, dihedral_images
from envs.core.toolplanner import Sim, ToolPlannerConfig, ToolPlannerEnv
from verifiers.extract import Extraction, parse_move_list

__all__ = [
    "PlanPathConfig",
    "PlanPathInstance",
    "PlanPathRewards",
    "env",
    "raw_env",
    "bfs_distances",
]

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_MAX_SIDE = 200


@dataclass(frozen=True)
class PlanPathRewards(RewardConfig):
    lam: float = 0.50
    planner_fmt: float = 0.20
    planner_leg: float = 0.40
    planner_sp: float = 0.40
    tool_fmt: float = 0.10
    tool_exec: float = 0.40
    tool_shape: float = 0.50
    roles: ClassVar[tuple[str, ...]] = ("planner", "tool")


@dataclass(frozen=True)
class PlanPathConfig(ToolPlannerConfig):
    height: int = 10
    width: int = 10
    wall_density: float = 0.25
    min_distance: int = 4
    rewards: PlanPathRewards = field(default_factory=PlanPathRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (2 <= self.height <= _MAX_SIDE and 2 <= self.width <= _MAX_SIDE):
            raise ValueError(f"height and width must lie in [2, {_MAX_SIDE}]")
        if not 0.0 <= self.wall_density < 0.7:
            raise ValueError("wall_density must lie in [0, 0.7)")
        if self.min_distance < 1:
            raise ValueError("min_distance must be >= 1")


@dataclass(frozen=True)
class PlanPathInstance:
    grid: tuple[str, ...]
    start: tuple[int, int]
    goal: tuple[int, int]
    shortest: int
    dist: tuple[int, ...] = field(default=(), compare=False, repr=False)  # flat BFS map to goal

    def key(self) -> dict[str, Any]:
        return {"grid": list(self.grid), "start": list(self.start), "goal": list(self.goal)}


def _bfs_flat(grid: tuple[str, ...], goal: tuple[int, int]) -> list[int]:
    """Distances to ``goal`` as a flat row-major list (-1 = unreachable or wall)."""
    h, w = len(grid), len(grid[0])
    free = [ch != "#" for row in grid for ch in row]
    dist = [-1] * (h * w)
    start = goal[0] * w + goal[1]
    dist[start] = 0
    frontier = [start]
    d = 0
    while frontier:
        d += 1
        nxt = []
        for i in frontier:
            c = i % w
            for j in (i - w, i + w, i - 1 if c > 0 else -1, i + 1 if c < w - 1 else -1):
                if 0 <= j < h * w and free[j] and dist[j] < 0:
                    dist[j] = d
                    nxt.append(j)
        frontier = nxt
    return dist


def bfs_distances(grid: tuple[str, ...], goal: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Shortest-path distance from every reachable free cell to ``goal`` (4-neighbourhood).

    >>> d = bfs_distances(("..", "#."), (1, 1))
    >>> d[(0, 0)], d[(1, 1)], (1, 0) in d
    (2, 0, False)
    """
    w = len(grid[0])
    return {(i // w, i % w): d for i, d in enumerate(_bfs_flat(grid, goal)) if d >= 0}


def shortest_moves(
    grid: tuple[str, ...], start: tuple[int, int], goal: tuple[int, int]
) -> list[str]:
    """One shortest action list from ``start`` to ``goal`` (``[]`` if unreachable or equal)."""
    dist = bfs_distances(grid, goal)
    if start not in dist:
        return []
    pos, moves = start, []
    while pos != goal:
        for name, (dr, dc) in MOVES.items():
            nxt = (pos[0] + dr, pos[1] + dc)
            if dist.get(nxt, -1) == dist[pos] - 1:
                moves.append(name)
                pos = nxt
                break
    return moves


def _manhattan(a: tuple[int, int], b: tuple[int, int]) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


@dataclass
class _State:
    pos: tuple[int, int]
    trail: list[tuple[int, int]]


# The oracle tool's program: a breadth-first search on the map as one flat string (a newline
# blocks moves across rows), called on the map of the current state copied out of the prompt
# (``@`` you, ``G`` the goal); it prints a shortest move list ([] when the goal is unreachable).
# The map comes last, so the programs of different instances share their first tokens.
_ORACLE_PROGRAM = """from collections import deque


def solve(m):
    w = m.index("\\n") + 1
    path = {m.find("@"): ""}
    queue = deque(path)
    while queue:
        p = queue.popleft()
        if m[p] == "G":
            return path[p]
        for k, d in zip("UDLR", (-w, w, -1, 1)):
            if 0 <= p + d < len(m) and m[p + d] in ".G" and p + d not in path:
                path[p + d] = path[p] + k
                queue.append(p + d)
    return ""


LEVEL = \"\"\"MAP\"\"\"
print("[" + ",".join(solve(LEVEL)) + "]")"""


class raw_env(ToolPlannerEnv):
    """Plan-Path environment (see the module docstring)."""

    AGENTS = roles_of("plan_path")

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "plan_path_v0",
        "is_parallelizable": False,
    }
    config_cls = PlanPathConfig
    config: PlanPathConfig
    _shared_attrs = ("instance",)  # immutable: clones share it
    _answer_format = (
        "a move list [<move>,<move>,...] (each move U = up, D = down, L = left or R = right)."
    )
    _tool_output_format = "the move list [<move>,<move>,...] (each move U, D, L or R)."

    # ------------------------------------------------------------------ instances
    def _generate_instance(self, rng: np.random.Generator) -> PlanPathInstance:
        cfg = self.config
        h, w = cfg.height, cfg.width
        for _ in range(1000):
            walls = rng.random((h, w)) < cfg.wall_density
            free = np.flatnonzero(~walls)
            if len(free) < 2:
                continue
            a, b = rng.choice(free, size=2, replace=False)
            start, goal = (int(a // w), int(a % w)), (int(b // w), int(b % w))
            grid = tuple("".join("#" if x else "." for x in row) for row in walls.tolist())
            dist = _bfs_flat(grid, goal)
            d = dist[start[0] * w + start[1]]
            if d >= cfg.min_distance:
                return PlanPathInstance(grid, start, goal, d, tuple(dist))
        raise RuntimeError(
            "could not generate a Plan-Path instance; lower wall_density/min_distance"
        )

    def _instance_key(self, instance: PlanPathInstance) -> dict[str, Any]:
        return instance.key()

    def _split_key(self, instance: PlanPathInstance) -> dict[str, Any]:
        """The smallest of the instance's 8 rotations and reflections (map, start and goal
        together): all 8 twins share a split. Start and goal exchanged is another instance (its
        answer is another path)."""
        images = dihedral_images(instance.grid, (instance.start, instance.goal))
        return canonical_form(
            {"grid": ["".join(row) for row in grid], "start": list(a), "goal": list(b)}
            for grid, (a, b) in images
        )

    def _instance_from_dict(self, data: Any) -> PlanPathInstance:
        if not isinstance(data, dict) or not {"grid", "start", "goal"} <= set(data):
            raise ValueError(
                'a Plan-Path instance is {"grid": [str], "start": [r, c], "goal": [r, c]}'
            )
        grid = data["grid"]
        if isinstance(grid, (list, tuple)) and len(grid) > _MAX_SIDE:  # before walking the rows
            raise ValueError(f"grid sides must be at most {_MAX_SIDE}")
        if (
            not isinstance(grid, (list, tuple))
            or not grid
            or not all(isinstance(row, str) for row in grid)
            or len({len(row) for row in grid}) != 1
            or not grid[0]
        ):
            raise ValueError("grid must be a non-empty list of equal-length strings")
        if len(grid[0]) > _MAX_SIDE:
            raise ValueError(f"grid sides must be at most {_MAX_SIDE}")
        bad = set("".join(grid)) - {"#", "."}
        if bad:
            raise ValueError(f"grid may contain only '#' and '.', found {sorted(bad)}")
        grid = tuple(grid)
        cells = []
        for name in ("start", "goal"):
            v = data[name]
            if not (
                isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) for x in v)
            ):
                raise ValueError(f"{name} must be [row, col] integers")
            r, c = v
            if not (0 <= r < len(grid) and 0 <= c < len(grid[0])) or grid[r][c] == "#":
                raise ValueError(f"{name} {list(v)} is out of bounds or on a wall")
            cells.append((r, c))
        start, goal = cells
        dist = _bfs_flat(grid, goal)
        d = dist[start[0] * len(grid[0]) + start[1]]
        if d < 0:
            raise ValueError("the goal is not reachable from the start")
        return PlanPathInstance(grid, start, goal, d, tuple(dist))

    def _initial_state(self, instance: PlanPathInstance) -> _State:
        self._d0 = max(1, _manhattan(instance.start, instance.goal))
        return _State(pos=instance.start, trail=[instance.start])

    # ------------------------------------------------------------------ dynamics and rewards
    def _parse_answer(self, text: str) -> Extraction:
        return parse_move_list(text)

    def _simulate(self, moves: list[str]) -> Sim:
        inst = self.instance
        h, w = len(inst.grid), len(inst.grid[0])
        pos = self.state.pos
        trail = list(self.state.trail)
        on_shortest = bool(moves) or pos == inst.goal
        ok, reason, executed = True, "", 0
        for m in moves:
            if pos == inst.goal:
                break
            nr, nc = pos[0] + MOVES[m][0], pos[1] + MOVES[m][1]
            if not (0 <= nr < h and 0 <= nc < w):
                ok, reason = False, f"move {executed + 1} ({m}) leaves the grid"
                break
            if inst.grid[nr][nc] == "#":
                ok, reason = False, f"move {executed + 1} ({m}) walks into a wall"
                break
            dist = inst.dist
            if dist[nr * w + nc] != dist[pos[0] * w + pos[1]] - 1:
                on_shortest = False
            pos = (nr, nc)
            trail.append(pos)
            executed += 1
        info = {
            "executed": executed,
            "legal": ok,
            "on_shortest": on_shortest and ok,
            "moves": len(moves),
        }
        return Sim(_State(pos, trail), ok=ok, info=info, reason=reason)

    def _team(self, sim: Sim) -> float:
        goal = self.instance.goal
        if sim.state.pos == goal:
            return 1.0
        before, after = _manhattan(self.state.pos, goal), _manhattan(sim.state.pos, goal)
        return max(0.0, (before - after) / self._d0)

    PROGRESS = "distance closed"

    def progress(self) -> float:
        """The share of the initial distance to the goal closed so far, ``max(0, 1 - d / d0)``
        (1 at the goal)."""
        if self.state.pos == self.instance.goal:
            return 1.0
        return max(0.0, 1.0 - _manhattan(self.state.pos, self.instance.goal) / self._d0)

    def _is_solved(self, state: _State) -> bool:
        return state.pos == self.instance.goal

    def _planner_components(self, sim: Sim | None) -> dict[str, float]:
        if sim is None:
            return {"leg": 0.0, "sp": 0.0}
        return {"leg": float(sim.info["legal"]), "sp": float(sim.info["on_shortest"])}

    def _tool_components(self, sim: Sim | None, ran_ok: bool) -> dict[str, float]:
        if sim is None:
            return {"exec": 0.0, "shape": 0.0}
        goal = self.instance.goal
        advances = sim.info["moves"] > 0 or self.state.pos == goal
        shape = _manhattan(sim.state.pos, goal) <= _manhattan(self.state.pos, goal)
        return {"exec": float(ran_ok and sim.ok and advances), "shape": float(shape)}

    def _format_proposal(self, value: Any) -> str:
        return "[" + ",".join(value) + "]"

    # ------------------------------------------------------------------ text
    def _rules_text(self) -> str:
        h, w = len(self.instance.grid), len(self.instance.grid[0])
        if self.config.prompt_style == "compact":
            return (
                f"Path planning on a {h}x{w} grid: move from you (@) to the goal G. '#' wall, "
                "'.' free. U = up, D = down, L = left, R = right; a move off the grid or into a "
                "wall is illegal and stops the plan."
            )
        return (
            f"Task: move from the start S to the goal G on a {h}x{w} grid. '#' is a wall, '.' is "
            "free. Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1); rows and "
            "columns are numbered from 0 at the top left. A move off the grid or into a wall is "
            "illegal and stops the plan."
        )

    def _instance_text(self) -> str:
        if self.config.prompt_style == "compact":
            return ""  # the current state shows the same map
        inst = self.instance
        rows = [list(row) for row in inst.grid]
        rows[inst.start[0]][inst.start[1]] = "S"
        rows[inst.goal[0]][inst.goal[1]] = "G"
        return f"Start {list(inst.start)}, goal {list(inst.goal)}.\nMap:\n" + "\n".join(
            "".join(row) for row in rows
        )

    def _map_rows(self) -> tuple[str, ...]:
        inst, pos = self.instance, self.state.pos
        rows = []
        for r, row in enumerate(inst.grid):
            chars = list(row)
            if inst.goal[0] == r:
                chars[inst.goal[1]] = "G"
            if pos[0] == r:
                chars[pos[1]] = "@"
            rows.append("".join(chars))
        return tuple(rows)

    def _state_text(self) -> str:
        inst, pos = self.instance, self.state.pos
        return (
            f"You are at {list(pos)} (@); the goal G is at {list(inst.goal)}; "
            f"Manhattan distance {_manhattan(pos, inst.goal)}.\n" + "\n".join(self._map_rows())
        )

    def _render_text(self) -> str:
        return f"turn {self.turn}, success={self.success}\n" + self._state_text()

    def cell_grid(self) -> CellGrid:
        inst, pos = self.instance, self.state.pos
        trail = set(self.state.trail)
        cells = []
        for r, row in enumerate(inst.grid):
            out = []
            for c, ch in enumerate(row):
                bg = "wall" if ch == "#" else ("path" if (r, c) in trail else "floor")
                cell = Cell(background=bg)
                if (r, c) == inst.goal:
                    cell = Cell(background="goal", glyph="G")
                if (r, c) == pos:
                    cell = Cell(background=cell.background, disc="player")
                out.append(cell)
            cells.append(tuple(out))
        return CellGrid(tuple(cells))

    # ------------------------------------------------------------------ oracle
    def _oracle_answer(self) -> str:
        return (
            "["
            + ",".join(shortest_moves(self.instance.grid, self.state.pos, self.instance.goal))
            + "]"
        )

    def _oracle_code(self) -> str:
        return _ORACLE_PROGRAM.replace("MAP", "\n".join(self._map_rows()))


def env(**kwargs: Any):
    """The wrapped Plan-Path AEC env (``envs.make("plan_path", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
