"""Sokoban: push every box onto a goal (AT-GRPO Appendix A.1.5, workflow of A.2.2 / A.3).

=================  ==========================================================
id                 ``sokoban``
agents             ``tool``, ``planner`` (``mode="single"``: ``planner``, or ``tool`` with
                   ``single_agent="tool"``)
actions            completion text (``str``)
observations       ``{"prompt": str}``
horizon            ``max_turns`` turns (default 4); ends when every box is on a goal
render modes       ``human``, ``ansi`` (XSB text), ``rgb_array``
=================  ==========================================================

Each turn the tool agent writes one Python program that prints an action list such as
``[U,R,D,L]`` (U = row - 1, D = row + 1, L = column - 1, R = column + 1); the env runs it in the
sandbox. The planner sees the task, the current map, the tool's program, its output and the
history, and answers after a line beginning with ``####`` with an action list, which is played
from the current position. Walking into a box pushes it; moves run in order and execution stops
at the first illegal move (into a wall, or a push whose box would hit a wall or another box) and
as soon as every box is on a goal.

Instances: a ``height`` x ``width`` map (default 6 x 6, outer wall included) with ``num_boxes``
boxes (default 2). Generation plays the puzzle backwards: a random room (inner walls on up to
``wall_fraction`` of the interior, kept connected), boxes on random goals, then random reverse
walks in which the player pulls boxes off their goals; the walk that scatters the boxes most is
kept (by default every box must have left the goals: ``boxes_start_off_goals``). The exact solver
(:func:`verifiers.sokoban.solve`: breadth-first over player cell and box set, dead squares and
frozen 2x2 blocks pruned) then finds a shortest solution; a level is kept when its length lies in
``[min_optimal_moves, max_optimal_moves]`` and was found within ``solver_max_nodes`` stored
states. ``instance.optimal_moves`` is that length (pushes count as moves), ``instance.solution``
one such solution and ``instance.solution_pushes`` its number of pushes. No level starts with a
box off its goal in a dead square. 6 x 6 levels need 6 / 8 / 10 moves on average with 1 / 2 / 3
boxes.

Splits: a level's split is the hash of its symmetry class (its smallest image under the 8
rotations and reflections), so no validation level is a turned or mirrored copy of a training
or cold-start level. A reset generates until the class falls in the requested split (about ten
levels for val/test) and returns a random image of it; the generator's distribution is itself
symmetric, so each split remains a sample of it.

Explicit instance: ``reset(options={"instance": {"map": ["#####", "#@$.#", "#####"]}})`` in XSB
(``#`` wall, space floor, ``.`` goal, ``$`` box, ``*`` box on goal, ``@`` player, ``+`` player on
goal; rows are right-padded with spaces). It must have one player, as many boxes as goals, be
enclosed by walls and be solvable (``ValueError`` otherwise), and it has the generator's limits:
at most 16 x 16 cells and 4 boxes. Its check costs the host process little whatever the level:
the exact solver stores up to 50,000 states in the host process and, when that is not enough,
redoes the search with the full ``solver_max_nodes`` in a bounded worker process
(:func:`verifiers.sokoban.solve_bounded`; its answer is the one the solver gives with that
budget). A level whose search runs out of ``solver_max_nodes`` (or overruns the worker's
deadline or memory) is refused as too hard to verify: its solvability and
``instance.optimal_moves`` would be unknown. During an episode the planner oracle answers ``[]``
for positions it cannot solve within the budget.

Rewards (``r = lam * team + (1 - lam) * mask * local``, ``lam = 0.40``; B = number of boxes;
psi = -(sum over boxes of the Manhattan distance to the nearest goal)):

- team: 1 when every box is on a goal, else (boxes on goals) / B, for the position after the
  turn (the planner's moves); the tool of the turn receives the same value by ``award()`` at the
  planner's step (:mod:`envs.core.toolplanner`; ``tool_team="proposal"``: the position its own
  proposed moves would produce, simulated without changing the state).
- planner: fmt 0.10 (the answer parses as a list of U/D/L/R), leg 0.45 (the list is non-empty
  and every move is legal), dlk 0.45 (the list is non-empty and afterwards no box off a goal sits
  in a corner, i.e. against a vertical and a horizontal wall).
- tool: fmt 0.10 (printed output parses as a list of U/D/L/R), exec 0.30 (the program ran and
  the list has no illegal push and no wall/box collision: A.1.5's ``1{no illegal push, no
  collision}``, so an empty list, which collides with nothing, earns it), pot 0.60 (psi does
  not decrease).
- mixing: Appendix A.1's convex form above is the default; the main text's Eq. 4 ``r = alpha *
  team + local`` (no mask; alpha = 1 in AT-GRPO 5.1) is ``rewards={"mixing": "additive"}``.

An empty planner answer earns neither leg nor dlk: doing nothing is not a legal step. The tool's
exec is literal (A.1.5 asks no progress of it, unlike Plan-Path's "simulation advances", A.1.4):
a tool printing ``[]`` on the hand case ``#@$ . #`` earns ``0.6 * (0.1 + 0.3 + 0.6) = 0.60``
before the team term (0.42 when exec also required a non-empty list).

Prompts: the rules and the role's instructions come first (the same text for every level),
then, for the planner, the tool's program and output, then the history and the current map
(:mod:`envs.core.toolplanner`). Answer formats show a placeholder, ``[<move>,<move>,...]``, never
a move list a policy could copy for credit. ``prompt_style="compact"`` shortens the rules and
instructions (same content; the CPU training recipe uses it).

Oracle (``env.unwrapped.oracle(agent)``): the tool's program (``oracle_tool="search"``) is a
breadth-first search over (player, boxes) on the map as one flat string, called on the current
map copied out of the prompt as its last line; it prints a shortest move list (``[]`` when none
exists; fine for the default sizes, large many-box levels may exceed the sandbox time limit).
The planner adopts the tool's proposal when it solves the level from the current position and
otherwise answers ``#### [..]`` with a shortest solution found by :func:`verifiers.sokoban.solve`.

Reward audit: the conditions the rewarded policy controls (whether its output parses, whether
the tool's program exits cleanly) are the grid settings' shared ones,
:mod:`envs.core.toolplanner`: a broken output scores every local component 0. One condition pays
for doing nothing: an empty tool list satisfies exec (it collides with nothing) and pot (psi
does not decrease), as A.1.5 defines them (0.60 before the team term, see above); the planner
gets nothing for an empty answer, and the team term for an unchanged position. A wrongly
formatted output, or a crash, earns less than that empty list
(``tests/envs/test_monotonicity.py``).

Version history: v0 (initial); v1 (the tool's exec no longer requires a non-empty list; its team
term is the turn's value, ``tool_team``); v2 (prompts: shared text first, placeholder formats,
``prompt_style``; compact oracle program; the planner oracle adopts a solving tool proposal).
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
from verifiers.sokoban import (
    Board,
    box_potential,
    corner_deadlocks,
    dead_squares,
    play,
    solve,
    solve_bounded,
)

__all__ = [
    "SokobanConfig",
    "SokobanInstance",
    "SokobanRewards",
    "env",
    "raw_env",
    "generate_level",
    "symmetric_variants",
]

_MIN_SIDE, _MAX_SIDE = 5, 16
_MAX_BOXES = 4
_REVERSE_WALKS = 4  # reverse walks tried per room; the most scattering one is kept
_PULL_PROB = 0.8
_MAX_ATTEMPTS = 10_000


@dataclass(frozen=True)
class SokobanRewards(RewardConfig):
    lam: float = 0.40
    planner_fmt: float = 0.10
    planner_leg: float = 0.45
    planner_dlk: float = 0.45
    tool_fmt: float = 0.10
    tool_exec: float = 0.30
    tool_pot: float = 0.60
    roles: ClassVar[tuple[str, ...]] = ("planner", "tool")


@dataclass(frozen=True)
class SokobanConfig(ToolPlannerConfig):
    """height / width: generated map size including the outer wall (5-16; paper: 6 x 6).
    num_boxes: boxes per generated level (1-4; default 2).
    wall_fraction: at most this share of the interior becomes inner walls.
    min_optimal_moves / max_optimal_moves: accepted range of the optimal solution length.
    solver_max_nodes: search budget (stored states) of the exact solver, for generation (levels
    over budget are redrawn), explicit levels (refused over budget) and the planner oracle.
    boxes_start_off_goals: generated levels start with every box off the goals (else at least
    one box is off)."""

    height: int = 6
    width: int = 6
    num_boxes: int = 2
    wall_fraction: float = 0.2
    min_optimal_moves: int = 3
    max_optimal_moves: int = 50
    solver_max_nodes: int = 300_000
    boxes_start_off_goals: bool = True
    rewards: SokobanRewards = field(default_factory=SokobanRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("height", "width"):
            v = getattr(self, name)
            if not isinstance(v, int) or not _MIN_SIDE <= v <= _MAX_SIDE:
                raise ValueError(f"{name} must be an int in [{_MIN_SIDE}, {_MAX_SIDE}], got {v!r}")
        if not isinstance(self.num_boxes, int) or not 1 <= self.num_boxes <= _MAX_BOXES:
            raise ValueError(f"num_boxes must be an int in [1, {_MAX_BOXES}]")
        if not 0.0 <= self.wall_fraction <= 0.5:
            raise ValueError("wall_fraction must lie in [0, 0.5]")
        if not 1 <= self.min_optimal_moves <= self.max_optimal_moves:
            raise ValueError("need 1 <= min_optimal_moves <= max_optimal_moves")
        if self.solver_max_nodes < 1000:
            raise ValueError("solver_max_nodes must be >= 1000")


@dataclass(frozen=True)
class SokobanInstance:
    """A level: XSB rows plus what the exact solver found (``None``: budget ran out)."""

    map: tuple[str, ...]
    optimal_moves: int | None
    solution: str | None
    solution_pushes: int | None

    def key(self) -> dict[str, Any]:
        return {"map": list(self.map)}


# ---------------------------------------------------------------------- generation
def _room(rng: np.random.Generator, h: int, w: int, wall_fraction: float) -> bytearray | None:
    """Walls as a flat bytearray: the border, random inner walls, and every floor cell outside
    the connected part that contains a random floor cell."""
    interior = [r * w + c for r in range(1, h - 1) for c in range(1, w - 1)]
    wall = bytearray([1]) * (h * w)
    for i in interior:
        wall[i] = 0
    k = int(rng.integers(0, int(wall_fraction * len(interior)) + 1))
    if k:
        for i in rng.choice(len(interior), k, replace=False).tolist():
            wall[interior[i]] = 1
    floor = [i for i in interior if not wall[i]]
    if not floor:
        return None
    start = floor[int(rng.integers(len(floor)))]
    seen, stack = {start}, [start]
    while stack:
        x = stack.pop()
        for o in (-w, w, -1, 1):
            y = x + o
            if not wall[y] and y not in seen:
                seen.add(y)
                stack.append(y)
    for i in floor:
        if i not in seen:
            wall[i] = 1
    return wall


def generate_level(
    rng: np.random.Generator,
    height: int = 6,
    width: int = 6,
    num_boxes: int = 2,
    wall_fraction: float = 0.2,
    min_moves: int = 3,
    max_moves: int = 50,
    max_nodes: int = 300_000,
    all_off_goals: bool = True,
) -> SokobanInstance | None:
    """One attempt at a verified level (``None`` when this draw is rejected).

    >>> inst = None
    >>> rng = np.random.default_rng(0)
    >>> while inst is None:
    ...     inst = generate_level(rng)
    >>> len(inst.map), inst.optimal_moves == len(inst.solution) >= 3
    (6, True)
    """
    h, w = height, width
    wall = _room(rng, h, w, wall_fraction)
    if wall is None:
        return None
    floor = [i for i in range(h * w) if not wall[i]]
    if len(floor) < num_boxes + 2:
        return None
    pick = rng.choice(len(floor), num_boxes + 1, replace=False).tolist()
    goals = {floor[i] for i in pick[:num_boxes]}
    goal_rc = [(g // w, g % w) for g in goals]
    start = floor[pick[num_boxes]]
    offsets = (-w, w, -1, 1)
    best: tuple[int, int, set[int], int] | None = None
    for _ in range(_REVERSE_WALKS):
        p, boxes = start, set(goals)
        n = int(rng.integers(10 * max(h, w), 20 * max(h, w) + 1))
        dirs = rng.integers(0, 4, size=n).tolist()
        pulls = (rng.random(n) < _PULL_PROB).tolist()
        steps = 0
        for d, pull in zip(dirs, pulls):
            o = offsets[d]
            q = p + o
            if wall[q] or q in boxes:
                continue
            b = p - o
            if pull and b in boxes:
                boxes.remove(b)
                boxes.add(p)
            p = q
            steps += 1
        off = boxes - goals
        spread = sum(min(abs(x // w - r) + abs(x % w - c) for r, c in goal_rc) for x in boxes)
        score = spread + 2 * len(off)
        enough = len(off) == num_boxes if all_off_goals else bool(off)
        if enough and (best is None or score > best[0]):
            best = (score, p, boxes, steps)
    if best is None:
        return None
    _, p, boxes, steps = best
    rows = []
    for r in range(h):
        row = []
        for c in range(w):
            i = r * w + c
            if wall[i]:
                row.append("#")
            elif i == p:
                row.append("+" if i in goals else "@")
            elif i in boxes:
                row.append("*" if i in goals else "$")
            else:
                row.append("." if i in goals else " ")
        rows.append("".join(row))
    board = Board.from_xsb(rows)
    dead = dead_squares(board)
    if any(b in dead for b in board.boxes - board.goals):  # cannot happen by pulling; kept safe
        return None
    sol = solve(board, max_nodes=max_nodes, max_depth=min(steps, max_moves))
    if sol.moves is None or not min_moves <= len(sol.moves) <= max_moves:
        return None
    pushes = play(board, sol.moves).pushes
    return SokobanInstance(tuple(rows), len(sol.moves), sol.moves, pushes)


_TRANSPOSE = str.maketrans("UDLR", "LRUD")
_FLIP_ROWS = str.maketrans("UD", "DU")
_FLIP_COLS = str.maketrans("LR", "RL")


def symmetric_variants(inst: SokobanInstance) -> list[SokobanInstance]:
    """The distinct images of ``inst`` under the symmetries of its rectangle (8 for a square,
    4 otherwise), with the solution mapped along; the first one is ``inst`` itself.

    >>> inst = SokobanInstance(("#####", "#@$.#", "#####"), 1, "R", 1)
    >>> [v.map[1] + " " + v.solution for v in symmetric_variants(inst)]
    ['#@$.# R', '#.$@# L']
    """
    square = len(inst.map) == len(inst.map[0])
    ops = [t for t in range(8) if square or not t & 1]  # dihedral_images' order
    out, seen = [], set()
    for t, (grid, _) in zip(ops, dihedral_images(inst.map, transpose=square)):
        sol = inst.solution
        if sol is not None:
            for bit, table in ((1, _TRANSPOSE), (2, _FLIP_ROWS), (4, _FLIP_COLS)):
                sol = sol.translate(table) if t & bit else sol
        key = tuple("".join(row) for row in grid)
        if key not in seen:
            seen.add(key)
            out.append(SokobanInstance(key, inst.optimal_moves, sol, inst.solution_pushes))
    return out


# ---------------------------------------------------------------------- the environment
@dataclass(frozen=True)
class _State:
    board: Board
    moves: int = 0  # moves executed so far in the episode
    pushes: int = 0

    def __deepcopy__(self, memo: dict) -> _State:  # immutable: clones can share it
        return self


# The oracle tool's program: a breadth-first search over (player, boxes) on the map as one flat
# string (a newline is a wall between rows), called on the current map copied out of the prompt.
# It prints a shortest move list, or [] when no solution exists. The map comes last, so the
# programs of different levels share their first ~240 tokens (and so do the planner prompts that
# quote them: their common prefix is prefilled once per batch).
_ORACLE_PROGRAM = """from collections import deque


def solve(m):
    w = m.index("\\n") + 1
    start = (max(m.find("@"), m.find("+")), frozenset(i for i, x in enumerate(m) if x in "$*"))
    seen, queue = {start}, deque([(start, "")])
    while queue:
        (p, b), path = queue.popleft()
        if all(m[i] in ".*+" for i in b):
            return path
        for k, d in zip("UDLR", (-w, w, -1, 1)):
            q, t = p + d, p + 2 * d
            s = (q, b - {q} | {t} if q in b else b)
            if m[q] != "#" and s not in seen and not (q in b and (m[t] == "#" or t in b)):
                seen.add(s)
                queue.append((s, path + k))
    return ""


LEVEL = \"\"\"MAP\"\"\"
print("[" + ",".join(solve(LEVEL)) + "]")"""


class raw_env(ToolPlannerEnv):
    """Sokoban environment (see the module docstring)."""

    AGENTS = roles_of("sokoban")

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "sokoban_v0",
        "is_parallelizable": False,
    }
    config_cls = SokobanConfig
    config: SokobanConfig
    _answer_format = (
        "a move list [<move>,<move>,...] (each move U = up, D = down, L = left or R = right), "
        "played from the current position."
    )
    _tool_output_format = (
        "the move list [<move>,<move>,...] (each move U, D, L or R), played from the current "
        "position."
    )

    # ------------------------------------------------------------------ instances
    def _generate_instance(self, rng: np.random.Generator) -> SokobanInstance:
        cfg = self.config
        for _ in range(1000):
            inst = generate_level(
                rng,
                cfg.height,
                cfg.width,
                cfg.num_boxes,
                cfg.wall_fraction,
                cfg.min_optimal_moves,
                cfg.max_optimal_moves,
                cfg.solver_max_nodes,
                cfg.boxes_start_off_goals,
            )
            if inst is not None:
                return inst
        raise RuntimeError(
            "could not generate a Sokoban level in 1000 tries; lower min_optimal_moves or "
            "num_boxes, or raise max_optimal_moves / solver_max_nodes"
        )

    def _sample_instance(self, split: str, seed: int) -> SokobanInstance:
        """The base rule (generate until the level falls in ``split``), returning one of the
        level's symmetric images at random: the generator is symmetric, so this keeps its
        distribution, and the split is that of the level's whole symmetry class
        (:meth:`_split_key`), so a val/test level takes about ten generations."""
        for attempt in range(_MAX_ATTEMPTS):
            rng = np.random.default_rng([seed, attempt])
            inst = self._generate_instance(rng)
            if self.split_of_instance(inst) == split:
                variants = symmetric_variants(inst)
                return variants[int(rng.integers(len(variants)))]
        raise RuntimeError(
            f"no {split} instance found in {_MAX_ATTEMPTS} attempts"
            ": instances are split by symmetry class, and a small configuration may have few "
            "or none in a split; use a larger size or another split"
        )

    def _split_key(self, instance: SokobanInstance) -> dict[str, Any]:
        """The smallest of the level's 8 rotations and reflections: twins share a split."""
        return canonical_form(
            {"map": ["".join(row) for row in grid]} for grid, _ in dihedral_images(instance.map)
        )

    def _instance_key(self, instance: SokobanInstance) -> dict[str, Any]:
        return instance.key()

    def _instance_from_dict(self, data: Any) -> SokobanInstance:
        if isinstance(data, SokobanInstance):
            data = data.key()
        if not isinstance(data, dict) or set(data) != {"map"}:
            raise ValueError(
                'a Sokoban instance is {"map": [str, ...]} in XSB characters, e.g. '
                '{"map": ["#####", "#@$.#", "#####"]}'
            )
        board = Board.from_xsb(data["map"])
        if board.height > _MAX_SIDE or board.width > _MAX_SIDE:
            raise ValueError(
                f"explicit levels are limited to {_MAX_SIDE}x{_MAX_SIDE} cells (as generated "
                f"ones), got {board.height}x{board.width}"
            )
        if len(board.boxes) > _MAX_BOXES:
            raise ValueError(
                f"explicit levels have at most {_MAX_BOXES} boxes (as generated ones), got "
                f"{len(board.boxes)}"
            )
        if board.solved:
            raise ValueError("the level is already solved: every box is on a goal")
        stuck = corner_deadlocks(board)
        if stuck:
            raise ValueError(f"the level starts in a corner deadlock (boxes at {stuck})")
        budget = self.config.solver_max_nodes
        sol = solve_bounded(board, max_nodes=budget)
        if sol.status == "unsolvable":
            raise ValueError("the level has no solution")
        if sol.moves is None:  # never accepted unverified: solvability and optimum unknown
            why = f" ({sol.reason})" if sol.reason else ""
            raise ValueError(
                f"the level is too hard to verify within {budget:,} solver nodes{why}; "
                "send a smaller level"
            )
        rows = tuple(board.to_xsb())
        return SokobanInstance(rows, len(sol.moves), sol.moves, play(board, sol.moves).pushes)

    def _initial_state(self, instance: SokobanInstance) -> _State:
        board = Board.from_xsb(instance.map)
        self._solutions: dict[Board, str | None] = {board: instance.solution}
        return _State(board)

    # ------------------------------------------------------------------ dynamics and rewards
    def _noop_sim(self) -> Sim:
        return Sim(state=self.state, ok=True, info={"noop": True})

    def _parse_answer(self, text: str) -> Extraction:
        return parse_move_list(text)

    def _simulate(self, moves: list[str]) -> Sim:
        st = self.state
        res = play(st.board, moves)
        info = {
            "moves": len(moves),
            "executed": res.executed,
            "pushes": res.pushes,
            "legal": res.legal,
            "corner_deadlocks": corner_deadlocks(res.board),
        }
        new = _State(res.board, st.moves + res.executed, st.pushes + res.pushes)
        return Sim(new, ok=res.legal, info=info, reason=res.reason)

    def _team(self, sim: Sim) -> float:
        board = sim.state.board
        return 1.0 if board.solved else board.boxes_on_goals / len(board.boxes)

    PROGRESS = "boxes on goals"

    def progress(self) -> float:
        """The share of boxes on goals in the current position (1 when solved)."""
        board = self.state.board
        return 1.0 if board.solved else board.boxes_on_goals / len(board.boxes)

    def _is_solved(self, state: _State) -> bool:
        return state.board.solved

    def _planner_components(self, sim: Sim | None) -> dict[str, float]:
        if sim is None:
            return {"leg": 0.0, "dlk": 0.0}
        moved = sim.info["moves"] > 0
        return {
            "leg": float(moved and sim.info["legal"]),
            "dlk": float(moved and not sim.info["corner_deadlocks"]),
        }

    def _tool_components(self, sim: Sim | None, ran_ok: bool) -> dict[str, float]:
        if sim is None:
            return {"exec": 0.0, "pot": 0.0}
        pot = box_potential(sim.state.board) >= box_potential(self.state.board)
        return {"exec": float(ran_ok and sim.info["legal"]), "pot": float(pot)}

    def _format_proposal(self, value: Any) -> str:
        return "[" + ",".join(value) + "]"

    # ------------------------------------------------------------------ text
    def _rules_text(self) -> str:
        board = self.state.board
        n = len(board.boxes)
        boxes = f"{n} box{'es' if n > 1 else ''}"
        if self.config.prompt_style == "compact":
            return (
                f"Sokoban on a {board.height}x{board.width} map: push all {boxes} onto the goals. "
                "'#' wall, ' ' floor, '.' goal, '$' box, '*' box on a goal, '@' you, '+' you on a "
                "goal. U = up, D = down, L = left, R = right. Walking into a box pushes it; you "
                "cannot pull, push two boxes or push into a wall."
            )
        return (
            f"Task: solve a Sokoban puzzle on a {board.height}x{board.width} map: push all "
            f"{boxes} onto the goals.\n"
            "Symbols: '#' wall, ' ' floor, '.' goal, '$' box, '*' box on a goal, '@' you, "
            "'+' you standing on a goal. Rows and columns are numbered from 0 at the top left.\n"
            "Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1). Walking into a box "
            "pushes it one cell further in the same direction. You cannot pull a box, push two "
            "boxes at once, or push a box into a wall; such a move, or walking into a wall, is "
            "illegal and your list stops there. Moves after the last box reaches a goal are "
            "ignored. A box that is not on a goal and is pushed into a corner can never move "
            "again, so the puzzle is lost."
        )

    def _map_rows(self) -> tuple[str, ...]:
        return tuple(self.state.board.to_xsb())

    def _state_text(self) -> str:
        board = self.state.board
        boxes = sorted(board.boxes)
        return (
            "\n".join(self._map_rows())
            + f"\nYou (@) are at {list(board.player)}. Boxes at {[list(b) for b in boxes]} "
            f"({board.boxes_on_goals} of {len(boxes)} on goals). "
            f"Goals at {[list(g) for g in sorted(board.goals)]}."
        )

    def _render_text(self) -> str:
        board = self.state.board
        return (
            f"turn {self.turn}, moves {self.state.moves}, pushes {self.state.pushes}, "
            f"boxes on goals {board.boxes_on_goals}/{len(board.boxes)}, success={self.success}\n"
            + "\n".join(board.to_xsb())
        )

    def cell_grid(self) -> CellGrid:
        board = self.state.board
        area = board.area()
        cells = []
        for r in range(board.height):
            row = []
            for c in range(board.width):
                p = (r, c)
                if p in board.walls:
                    row.append(Cell(background="wall"))
                    continue
                bg = "goal" if p in board.goals else ("floor" if p in area else "white")
                marker = None
                if p in board.boxes:
                    marker = "box_on_goal" if p in board.goals else "box"
                disc = "player" if p == board.player else None
                row.append(Cell(background=bg, marker=marker, disc=disc))
            cells.append(tuple(row))
        return CellGrid(tuple(cells))

    # ------------------------------------------------------------------ oracle
    def solution_from_current(self) -> str | None:
        """A shortest solution from the current position (``None``: unsolvable, or the solver's
        budget ran out)."""
        board = self.state.board
        if board not in self._solutions:
            if len(self._solutions) > 64:
                self._solutions.clear()
            self._solutions[board] = solve(board, max_nodes=self.config.solver_max_nodes).moves
        return self._solutions[board]

    def _oracle_answer(self) -> str:
        return "[" + ",".join(self.solution_from_current() or "") + "]"

    def _oracle_code(self) -> str:
        return _ORACLE_PROGRAM.replace("MAP", "\n".join(self._map_rows()))


def env(**kwargs: Any):
    """The wrapped Sokoban AEC env (``envs.make("sokoban", **kwargs)``)."""
    return wrap(raw_env(**kwargs))
