"""Sokoban: verified generation, exact solver, hand-computed rewards (AT-GRPO A.1.5), explicit
instances, oracle and garbage policies, rendering."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

import envs
from envs.core.render import COLORS
from envs.core.rewards import mix
from envs.sokoban import SokobanInstance, generate_level, symmetric_variants
from tests.envs.contract import GARBAGE, oracle_policy, play
from verifiers.sokoban import Board, corner_deadlocks, dead_squares, solve
from verifiers.sokoban import play as play_moves

# L1: player (2,2), box (2,3), goal (2,5); solution RR.
L1 = ["#######", "#     #", "# @$ .#", "#     #", "#######"]
# L2: box (2,1), goal (3,1), player (3,2); solution UULD. "L,U" pushes the box into corner (1,1).
L2 = ["#####", "#   #", "#$  #", "#.@ #", "#   #", "#####"]
# L3: two boxes side by side, (3,2) and (3,3); goals (3,4), (3,5); player (3,1).
L3 = ["#######", "#     #", "#     #", "#@$$..#", "#     #", "#     #", "#######"]


def _env(level, mode="multi", **cfg):
    env = envs.make("sokoban", mode=mode, **cfg)
    env.reset(options={"instance": {"map": level}})
    return env


def _parts(env, agent):
    return env.infos[agent]["reward_parts"]


def tool_code(moves: str) -> str:
    return f"```python\nprint('{moves}')\n```"


def _reference_bfs(board: Board) -> int | None:
    """Plain breadth-first search over (player, boxes), no pruning: the optimal move count."""
    start = (board.player, board.boxes)
    dist = {start: 0}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        pos, boxes = state
        if boxes <= board.goals:
            return dist[state]
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            nxt = (pos[0] + dr, pos[1] + dc)
            if nxt in board.walls:
                continue
            nb = boxes
            if nxt in boxes:
                dest = (nxt[0] + dr, nxt[1] + dc)
                if dest in board.walls or dest in boxes:
                    continue
                nb = (boxes - {nxt}) | {dest}
            if (nxt, nb) not in dist:
                dist[(nxt, nb)] = dist[state] + 1
                queue.append((nxt, nb))
    return None


# ---------------------------------------------------------------------- generation and solver
def test_500_generated_levels_are_verified_and_replay_to_success():
    count = 0
    for boxes in (1, 2, 3):
        env = envs.make("sokoban", mode="single", num_boxes=boxes)
        for seed in range(167 if boxes < 3 else 166):
            split = ("train", "val", "test")[seed % 3]
            env.reset(seed=1000 * boxes + seed, options={"split": split})
            inst = env.unwrapped.instance
            board = Board.from_xsb(inst.map)
            assert len(board.boxes) == boxes and len(inst.map) == 6
            assert board.boxes_on_goals == 0  # boxes_start_off_goals (default)
            assert not corner_deadlocks(board)
            assert not (board.boxes - board.goals) & dead_squares(board)
            sol = solve(board)
            assert sol.length == inst.optimal_moves == len(inst.solution) >= 3
            if seed % 4 == 0:  # an independent search without pruning agrees on the optimum
                assert _reference_bfs(board) == inst.optimal_moves
            assert play_moves(board, inst.solution).pushes == inst.solution_pushes
            env.step("#### [" + ",".join(inst.solution) + "]")
            assert env.infos["planner"]["success"] and env.terminations["planner"]
            count += 1
    assert count == 500


def test_solver_matches_plain_search_on_random_boards():
    """Random rooms with boxes, goals and player anywhere (mostly unsolvable): the pruned solver
    and a plain search agree on solvability and on the optimal length."""
    rng = np.random.default_rng(1)
    statuses = set()
    for _ in range(300):
        boxes = int(rng.integers(1, 4))
        rows = [list("######")] + [list("#    #") for _ in range(4)] + [list("######")]
        cells = [(r, c) for r in range(1, 5) for c in range(1, 5)]
        order = rng.permutation(len(cells)).tolist()
        walls = int(rng.integers(0, 4))
        for j in order[:walls]:
            rows[cells[j][0]][cells[j][1]] = "#"
        free = [cells[j] for j in order[walls:]]
        for j, ch in zip(range(2 * boxes + 1), "$" * boxes + "." * boxes + "@"):
            rows[free[j][0]][free[j][1]] = ch
        try:
            board = Board.from_xsb(["".join(r) for r in rows])
        except ValueError:  # the player was walled off from a box or goal
            continue
        sol = solve(board)
        assert sol.length == _reference_bfs(board)
        if sol.moves is not None:
            assert play_moves(board, sol.moves).solved
        statuses.add(sol.status)
    assert statuses == {"solved", "unsolvable"}


@pytest.mark.parametrize(("height", "width", "boxes"), [(8, 8, 2), (10, 10, 3), (7, 10, 1)])
def test_other_sizes_generate(height, width, boxes):
    raw = envs.make("sokoban", height=height, width=width, num_boxes=boxes).unwrapped
    for seed in range(5):
        inst = raw.sample_instance("val", seed)
        board = Board.from_xsb(inst.map)
        assert (board.height, board.width, len(board.boxes)) == (height, width, boxes)
        assert play_moves(board, inst.solution).solved


def test_symmetric_variants_keep_optimal_length():
    rng = np.random.default_rng(7)
    inst = None
    while inst is None:
        inst = generate_level(rng, num_boxes=2)
    variants = symmetric_variants(inst)
    assert 1 <= len(variants) <= 8 and variants[0] == inst
    for v in variants:
        board = Board.from_xsb(v.map)
        assert play_moves(board, v.solution).solved
        assert solve(board).length == inst.optimal_moves


def test_val_and_test_resets_use_the_split_of_the_symmetry_class():
    raw = envs.make("sokoban").unwrapped
    from envs.core.splits import split_of, stable_hash

    for split in ("train", "val", "test"):
        for seed in range(20):
            inst = raw.sample_instance(split, seed)
            assert split_of(stable_hash(raw._split_key(inst))) == split
            assert all(raw.split_of_instance(v) == split for v in symmetric_variants(inst))
    assert raw.sample_instance("val", 3) == raw.sample_instance("val", 3)


def test_solver_and_deadlock_helpers():
    board = Board.from_xsb(L2)
    assert solve(board).moves == "UULD"
    assert (1, 1) in dead_squares(board) and (2, 1) not in dead_squares(board)
    after = play_moves(board, "LU").board
    assert corner_deadlocks(after) == [(1, 1)]
    assert solve(after).status == "unsolvable"
    # A box against one wall is not a corner deadlock (though the square is dead).
    side = play_moves(Board.from_xsb(L1), "DRU").board
    assert side.boxes == {(1, 3)} and corner_deadlocks(side) == []
    assert solve(side).status == "unsolvable"
    assert solve(Board.from_xsb(L3), max_nodes=50).status == "budget"


# ---------------------------------------------------------------------- rewards
def test_planner_legal_push_and_success():
    env = _env(L1)
    env.step("")
    env.step("Push once.\n#### [R]")
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 1.0, "dlk": 1.0}
    assert p["team"] == 0.0 and p["reward"] == pytest.approx(0.6)
    assert env.unwrapped.state.board.boxes == {(2, 4)}
    env.step("")
    env.step("#### [R, L, L]")  # solved after R: the rest is ignored
    p = _parts(env, "planner")
    assert p["team"] == 1.0 and p["reward"] == pytest.approx(1.0)
    assert env.infos["planner"]["success"] and all(env.terminations.values())
    assert env.unwrapped.state.board.player == (2, 4)


def test_planner_wall_collision_keeps_executed_prefix():
    env = _env(L1, mode="single")
    env.step("#### [U, U, R]")  # U legal, second U into the wall: stop
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 0.0, "dlk": 1.0}
    assert p["reward"] == pytest.approx(0.6 * 0.55)
    assert "wall" in p["reasons"]["apply"]
    assert env.unwrapped.state.board.player == (1, 2)
    # A box pushed against a single wall is no corner deadlock.
    env.step("#### [R, D]")  # player (1,3) then D pushes the box from (2,3) to (3,3)
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 1.0, "dlk": 1.0}
    assert env.unwrapped.state.board.boxes == {(3, 3)}


def test_planner_corner_deadlock_and_illegal_push():
    env = _env(L2, mode="single")
    env.step("#### [L, U]")  # legal push of the box into corner (1,1), off its goal
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 1.0, "dlk": 0.0}
    assert p["team"] == 0.0 and p["reward"] == pytest.approx(0.6 * 0.55)
    env = _env(L2, mode="single")
    env.step("#### [L, U, U]")  # the second push hits the wall: illegal, box stays in corner
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 0.0, "dlk": 0.0}
    assert p["reward"] == pytest.approx(0.6 * 0.10)
    assert "pushes a box into a wall" in p["reasons"]["apply"]
    env = _env(L3, mode="single")
    env.step("#### [R]")  # pushes a box into the other box: nothing executed
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 0.0, "dlk": 1.0}
    assert "another box" in p["reasons"]["apply"]
    assert env.unwrapped.state.board.player == (3, 1)


def test_planner_format_failures_and_empty_list():
    env = _env(L1, mode="single")
    env.step("I would push right")
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 0.0, "leg": 0.0, "dlk": 0.0} and p["reward"] == 0.0
    assert p["reasons"]["fmt"]
    env.step("#### [R, X]")
    assert _parts(env, "planner")["components"]["fmt"] == 0.0
    env.step("#### []")  # parses, but doing nothing is not a legal step
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 0.0, "dlk": 0.0}
    assert p["reward"] == pytest.approx(0.6 * 0.1)


def test_team_reward_is_box_ratio():
    env = _env(L3, mode="single")
    env.step("#### [U,R,D,R]")  # D pushes box (3,2) down, R pushes box (3,3) onto goal (3,4)
    board = env.unwrapped.state.board
    p = _parts(env, "planner")
    assert board.boxes == {(4, 2), (3, 4)} and not env.infos["planner"]["success"]
    assert p["components"] == {"fmt": 1.0, "leg": 1.0, "dlk": 1.0}
    assert p["team"] == 0.5 and p["reward"] == pytest.approx(0.4 * 0.5 + 0.6)
    assert p["reward"] == pytest.approx(mix(p["team"], p["local"], p["mask"], lam=0.4))


def test_tool_rewards_hand_computed():
    env = _env(L1, tool_team="proposal")  # the team term of the tool's own proposal
    env.step(tool_code("[R]"))  # psi -2 -> -1; simulated team 0
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "pot": 1.0}
    assert p["team"] == 0.0 and p["reward"] == pytest.approx(0.6)
    assert env.unwrapped.state.board.boxes == {(2, 3)}  # the tool never changes the state
    assert env.infos["tool"]["tool_proposal"] == "[R]"
    env.step("#### [L]")
    env.step(tool_code("[R,R,R,R]"))  # from (2,1): R, then two pushes solve it
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "pot": 1.0}
    assert p["team"] == 1.0 and p["reward"] == pytest.approx(1.0)
    assert not env.infos["tool"]["success"]


def test_tool_potential_decrease_and_collisions():
    env = _env(L1)
    env.step(tool_code("[U,R,R,D,L]"))  # pushes the box away from its goal: psi -2 -> -3
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "pot": 0.0}
    assert p["reward"] == pytest.approx(0.6 * 0.4)
    env.step("")
    env.step(tool_code("[U,U]"))  # wall collision: exec 0, psi unchanged
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 0.0, "pot": 1.0}
    assert p["reward"] == pytest.approx(0.6 * 0.7)
    assert "wall" in p["reasons"]["exec"]
    env.step("")
    env.step(tool_code("[]"))  # an empty list collides with nothing: exec 1 (A.1.5)
    assert _parts(env, "tool")["components"] == {"fmt": 1.0, "exec": 1.0, "pot": 1.0}
    env.step("")
    env = _env(L3)
    env.step(tool_code("[R]"))  # box into box
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 0.0, "pot": 1.0}
    assert "another box" in p["reasons"]["exec"]


def test_tool_crash_and_bad_output():
    env = _env(L1)
    env.step("```python\nraise ValueError('boom')\n```")
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 0.0, "exec": 0.0, "pot": 0.0}
    assert "ValueError" in p["reasons"]["exec"] and p["reward"] == 0.0
    env.step("#### [L]")
    env.step("```python\nprint('push right')\n```")
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 0.0, "exec": 0.0, "pot": 0.0}
    assert "printed output" in p["reasons"]["fmt"]


def test_tool_alone_applies_its_proposal_as_the_turn_answer():
    # AT-GRPO Table 3's "tool agent in SA": mode="single", single_agent="tool"
    env = _env(L1, mode="single", single_agent="tool")
    assert env.possible_agents == ["tool"] and env.unwrapped.award_lookahead() == 0
    # pushes the box away from its goal (psi -2 -> -3: pot 0); team 0, known at once
    env.step(tool_code("[U,R,R,D,L]"))
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "pot": 0.0}
    assert p["team"] == 0.0 and "team" not in p["reasons"]
    board = env.unwrapped.state.board
    assert board.player == (2, 3) and board.boxes == {(2, 2)}  # the proposal was applied
    assert env.unwrapped.turn == 1 and env.infos["tool"]["tool_proposal"] == "[U,R,R,D,L]"
    env.step("no code at all")  # a format failure leaves the state as it was
    p = _parts(env, "tool")
    assert p["components"]["fmt"] == 0.0 and env.unwrapped.state.board.player == (2, 3)
    prompt = env.observe("tool")["prompt"]
    assert "tool proposal: [U,R,R,D,L]" in prompt and "planner answer" not in prompt
    env.step(tool_code("[U,L,L,D,R,R,R]"))  # around the box, then three pushes solve it
    p = _parts(env, "tool")
    assert p["team"] == 1.0 and p["reward"] == pytest.approx(1.0)
    assert env.infos["tool"]["success"] and env.terminations["tool"]
    with pytest.raises(ValueError, match="single_agent"):
        envs.make("sokoban", mode="single", single_agent="critic")


def test_rewards_override():
    env = envs.make("sokoban", mode="single", rewards={"lam": 0.0})
    env.reset(options={"instance": {"map": L1}})
    env.step("#### [R,R]")
    assert _parts(env, "planner")["reward"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sum to 1"):
        envs.make("sokoban", rewards={"planner_fmt": 0.5})


# ---------------------------------------------------------------------- explicit instances
def test_explicit_instance_is_solved_and_recorded():
    env = _env(L2)
    inst = env.unwrapped.instance
    assert inst == SokobanInstance(tuple(L2), 4, "UULD", 1)
    ragged = ["#####", "#@$.#", "#####", ""]
    env.reset(options={"instance": {"map": ragged[:3]}})
    assert env.unwrapped.instance.optimal_moves == 1
    env.reset(options={"instance": {"map": ["  #####", "  #@$.#", "  #####"]}})  # outside space
    assert env.unwrapped.instance.optimal_moves == 1


def test_explicit_instance_over_budget_is_refused():
    """A level the solver cannot settle within its budget would have an unknown solvability and
    optimum: it is refused, saying so (it used to be accepted with ``optimal_moves = None``)."""
    big = ["############"] + ["#          #"] * 10 + ["############"]
    rows = [list(r) for r in big]
    for r, c in ((2, 2), (2, 5), (3, 8)):
        rows[r][c] = "$"
    for r, c in ((9, 9), (9, 3), (8, 6)):
        rows[r][c] = "."
    rows[5][5] = "@"
    env = envs.make("sokoban", mode="single", solver_max_nodes=1000)
    with pytest.raises(ValueError, match="too hard to verify within 1,000 solver nodes"):
        env.reset(options={"instance": {"map": ["".join(r) for r in rows]}})


def test_explicit_instance_limits_are_the_generators():
    """16 x 16 cells and 4 boxes at most, as generated levels (the map parser's own limit is
    40 x 40)."""
    wide = ["#" * 17, "#@$" + " " * 12 + ".#", "#" * 17]
    with pytest.raises(ValueError, match="limited to 16x16 cells"):
        envs.make("sokoban").reset(options={"instance": {"map": wide}})
    five = ["#" * 13, "#@" + "$ " * 5 + " #", "#" + " " * 11 + "#", "#" + ". " * 5 + " #", "#" * 13]
    with pytest.raises(ValueError, match="at most 4 boxes"):
        envs.make("sokoban").reset(options={"instance": {"map": five}})


@pytest.mark.parametrize(
    ("level", "message"),
    [
        (["#####", "#@$.#", "#@  #", "#####"], "exactly one player"),
        (["#####", "# $.#", "#####"], "exactly one player"),
        (["#####", "#@$.#", "# $ #", "#####"], "2 boxes but 1 goals"),
        (["####", "#@ #", "####"], "at least one box"),
        (["#####", "#@$x#", "#####"], "unknown character"),
        (["#####", "#@$. ", "#####"], "not enclosed"),
        (["#####", "#@*.#", "#####"], "2 goals"),
        (["#####", "#@*##", "#####"], "already solved"),
        (["#####", "#@ ##", "#  $#", "#. ##", "#####"], "corner deadlock"),
        (["######", "#@$  #", "#   .#", "######"], "no solution"),
        (["#" * 41, "#@$.#"], "40x40"),
        ([], "non-empty"),
        ("#@$.#", "list of strings"),
    ],
)
def test_explicit_instance_errors(level, message):
    env = envs.make("sokoban")
    with pytest.raises(ValueError, match=message):
        env.reset(options={"instance": {"map": level}})


def test_explicit_instance_schema_errors():
    env = envs.make("sokoban")
    for bad in ("#@$.#", {"grid": L1}, {"map": L1, "extra": 1}):
        with pytest.raises(ValueError, match="Sokoban instance is"):
            env.reset(options={"instance": bad})
    for cfg, message in [
        ({"num_boxes": 0}, "num_boxes"),
        ({"height": 30}, "height"),
        ({"min_optimal_moves": 9, "max_optimal_moves": 3}, "min_optimal_moves"),
    ]:
        with pytest.raises(ValueError, match=message):
            envs.make("sokoban", **cfg)


# ---------------------------------------------------------------------- policies and render
@pytest.mark.parametrize("mode", ["multi", "single"])
def test_oracle_solves_200_val_and_garbage_none(mode):
    env = envs.make("sokoban", mode=mode)
    results = [play(env, oracle_policy, seed=s, options={"split": "val"}) for s in range(200)]
    assert all(r["success"] for r in results)
    assert all(r["steps"] <= len(env.possible_agents) for r in results)  # solved in turn one
    garbage = [g for g in GARBAGE if "U" not in g]
    for s in range(60):
        out = play(
            env, lambda e, a, s=s: garbage[s % len(garbage)], seed=s, options={"split": "val"}
        )
        assert not out["success"]


def test_oracle_tool_program_reports_unsolvable_position():
    env = _env(L2)
    env.step("")
    env.step("#### [L, U]")  # corner deadlock: no solution remains
    env.step(env.unwrapped.oracle("tool"))
    assert env.infos["tool"]["tool_output"].strip() == "[]"
    assert env.unwrapped.oracle("planner").endswith("#### []")


def test_prompts_show_map_coordinates_and_history():
    env = _env(L1)
    prompt = env.observe("tool")["prompt"]
    assert "# @$ .#" in prompt and "[2, 2]" in prompt and "[[2, 3]]" in prompt
    assert "[[2, 5]]" in prompt and "```python" in prompt
    env.step(tool_code("[R]"))
    prompt = env.observe("planner")["prompt"]
    assert "print('[R]')" in prompt and "Parsed proposal: [R]" in prompt and "####" in prompt
    env.step("#### [R]")
    assert "planner answer: [R]" in env.observe("tool")["prompt"]


def test_render_ansi_and_rgb():
    env = envs.make("sokoban", render_mode="ansi")
    env.reset(options={"instance": {"map": L1}})
    assert env.render().splitlines()[1:] == L1
    env = envs.make("sokoban", render_mode="rgb_array")
    env.reset(options={"instance": {"map": L2}})
    img = env.render()
    assert img.shape == (6 * 32 + 1, 5 * 32 + 1, 3) and img.dtype == np.uint8
    colours = {tuple(int(x) for x in c) for c in img.reshape(-1, 3)}
    for name in ("player", "goal", "wall", "box", "floor"):
        assert COLORS[name] in colours, name


def test_boxes_may_start_on_goals_when_allowed():
    raw = envs.make("sokoban", num_boxes=3, boxes_start_off_goals=False).unwrapped
    on_goals = [
        Board.from_xsb(raw.sample_instance("train", s).map).boxes_on_goals for s in range(40)
    ]
    assert max(on_goals) > 0 and all(k < 3 for k in on_goals)


def test_a15_tool_exec_is_no_illegal_push_no_collision():
    """A.1.5: s_exec = 1{no illegal push; no wall/box collision}; nothing asks the list to be
    non-empty. Hand case ``#@$ . #``: a tool printing ``[]`` earns fmt 1, exec 1, pot 1 (psi
    unchanged), local 1.0; the planner then answers ``[]`` too, the state stays unsolved, team
    0: 0.4 * 0 + 0.6 * 1.0 = 0.60 (0.6 * 0.7 = 0.42 when exec required a non-empty list)."""
    env = _env(["#######", "#@$ . #", "#######"])
    env.step(tool_code("[]"))
    env.step("#### []")
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "pot": 1.0}
    assert p["team"] == 0.0 and p["reward"] == pytest.approx(0.60)


HAND = ["#######", "#@$ . #", "#######"]  # the hand case: [R,R] solves it


def test_a15_team_term_is_one_value_per_turn():
    """A.1.5: r^team_k is one value per turn k, the state after the turn (after the planner's
    answer). The tool prints [R,R] (it would solve the level) and the planner answers [] : the
    tool's step returns team 0 (pending), the planner's step awards it the turn's team 0, so
    0.4 * 0 + 0.6 * (0.1 + 0.3 + 0.6) = 0.60. With tool_team="proposal" (the earlier reading)
    it earned 0.4 * 1 + 0.6 * 1.0 = 1.00."""
    env = _env(HAND)
    assert env.unwrapped.award_lookahead() == 1
    env.step(tool_code("[R,R]"))
    p = _parts(env, "tool")
    assert p["team"] == 0.0 and "pending" in p["reasons"]["team"]
    assert p["reward"] == pytest.approx(0.60)
    env.step("#### []")
    (award,) = env.unwrapped.last_awards
    assert award["agent"] == "tool" and award["step"] == 0
    assert award["reward_parts"]["team"] == 0.0
    assert award["reward_parts"]["reward"] == pytest.approx(0.60)
    assert _parts(env, "tool")["for_step"] == 0
    assert env.unwrapped._cumulative_rewards["tool"] == pytest.approx(0.60)
    old = _env(HAND, tool_team="proposal")
    assert old.unwrapped.award_lookahead() == 0
    old.step(tool_code("[R,R]"))
    assert _parts(old, "tool")["reward"] == pytest.approx(1.00)
    # the planner solves it after an idle tool: both agents of the turn get team 1
    env = _env(HAND)
    env.step(tool_code("[]"))
    env.step("#### [R,R]")
    assert env.unwrapped.last_awards[0]["reward_parts"]["reward"] == pytest.approx(1.0)
    assert _parts(env, "planner")["team"] == 1.0
    with pytest.raises(ValueError, match="tool_team"):
        envs.make("sokoban", tool_team="mine")
