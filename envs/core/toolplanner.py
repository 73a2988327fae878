"""The tool + planner workflow shared by the grid puzzles (AT-GRPO Appendix A.2.2 and A.3).

Each turn the **tool** agent answers with one Python code block; the env runs it in the sandbox
and parses its printed output as a proposal (an action list, a grid, fill steps...). The
**planner** then sees the task, the current state, the tool's code, its execution output, the
parsed proposal and the history of earlier turns, and gives its final answer after a line that
begins with ``####``. The planner's answer is applied to the state; the next turn starts from
the new state. In ``mode="single"`` one agent acts alone: the planner (``single_agent="planner"``,
the default: AT-GRPO's single-agent baseline, a plan from the prompt), or the tool
(``single_agent="tool"``: AT-GRPO Table 3's "tool agent in SA", whose program's printed proposal
is applied as the turn's answer and earns the turn's team value at once).

Prompt layout: the rules, then the role's instructions and answer format (identical for every
instance of a role), then for the planner the tool's program and output, then the instance,
the history and the current state. A batch of one role's prompts thus shares a long prefix whose
KV cache a backend computes once; the oracle's programs keep their instance data (the map) on
their last line, so planner prompts quoting them share most of the program too. Answer formats
show placeholders (``[<move>,<move>,...]``), never a value that could be copied for credit.
``prompt_style="compact"`` (:class:`~envs.core.config.EnvConfig`) shortens the fixed text.

Rewards follow Appendix A.1: ``r = lam * team + (1 - lam) * mask * local``. ``r^team_k`` is one
value per turn k (A.1.3-A.1.5: "at turn k"): the setting's team reward of the state after the
turn, i.e. after the planner's answer is applied, and both agents of the turn receive it. The
tool acts first and cannot know it, so (``tool_team="turn"``, the default) its step returns team
0 (reason ``team``: pending) and its complete reward arrives by ``award()`` in the planner's step
of the same turn, exactly as the math reasoner's team reward arrives with the tool's step
(:mod:`envs.math`, A.1.1). ``award_lookahead() = 1`` tells the rollout engine to replay the
planner's K completions of the kept branch on every unkept tool candidate
(``RolloutEngine._award_siblings``); the tool never changes the state, so all K tool candidates
of a turn get that turn's team value and differ by their local scores only. Hand case (Sokoban
A.1.5, ``#@$ . #``): a tool printing ``[R,R]`` (which would solve it) followed by a planner
answering ``#### []`` earns ``0.4 * 0 + 0.6 * 1.0 = 0.60``. ``tool_team="proposal"`` keeps the
earlier reading: the tool's team term is that of the state its own proposal would produce
(simulated on a copy), known at once, so K tool candidates can differ in team reward (1.00 in
the hand case). The mask is 1 whenever the components could be computed; it is 0 only when the
sandbox itself failed (an infrastructure error, not the agent's fault).

Reward audit, for every grid setting: the conditions the rewarded policy controls are whether
its output parses (the tool's printed proposal, the planner's ``####`` answer) and whether the
tool's program exits cleanly. A failed parse scores every local component 0 (the hooks receive
``sim=None``) and leaves the state unchanged; a crash costs exec and leaves no proposal. So no
branch chosen by a broken output pays more than a well-formed one. The mask is 0 only when the
sandbox itself failed, and it removes the local term, never adds to it. What a well-formed
proposal or answer is worth (including an empty one) is each setting's component definition,
listed on its page.

A setting supplies the puzzle logic through these hooks:

- ``_parse_answer(text) -> Extraction``: parse a proposal from the tool's stdout or the planner's
  answer;
- ``_simulate(proposal) -> Sim``: apply a proposal to a copy of ``self.state``;
- ``_team(sim) -> float``; ``_is_solved(state) -> bool``;
- ``_tool_components(sim, ran_ok) / _planner_components(sim)``: the local component scores
  other than ``fmt`` (which the base sets: 1 when the proposal parsed);
- ``_rules_text()``, ``_instance_text()``, ``_state_text()``, ``_answer_format``,
  ``_tool_output_format`` (prompt pieces; formats show placeholders such as ``[<move>,...]``,
  never a value that could be copied as an answer);
- ``_oracle_code()`` and ``_oracle_answer()`` for the scripted oracle.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from envs.core.base import TurnBasedEnv
from envs.core.config import EnvConfig
from envs.core.rewards import RewardParts
from verifiers.extract import Extraction, clip_text, extract_after_marker, extract_code_block

__all__ = ["ToolPlannerConfig", "ToolPlannerEnv", "Sim", "TurnRecord"]


@dataclass(frozen=True)
class ToolPlannerConfig(EnvConfig):
    """Options of the tool + planner settings (on top of :class:`EnvConfig`).

    tool_wall_s / tool_memory_mb / tool_max_output_bytes: sandbox limits for the tool's program.
    history_turns: how many past turns the prompts show (older ones are summarised away).
    oracle_tool: the scripted oracle's tool program: ``"search"`` (default) is a compact search
        that copies the current state out of the prompt into the program and computes the answer
        from it (what a cold start teaches: a tool that reads the instance); ``"answer"`` is one
        line that prints the solution as a literal (an answer key: a policy imitating it learns
        to copy, never to compute). Both are correct tool answers with the same reward. Rewards
        and prompts do not depend on it.
    single_agent: the role that acts in ``mode="single"``: ``"planner"`` (default) or ``"tool"``
        (its printed proposal is the answer; ignored in ``mode="multi"``).
    tool_team: the tool's team term: ``"turn"`` (default; A.1.3-A.1.5: the team value of the
        state after the turn, paid by ``award()`` at the planner's step) or ``"proposal"`` (the
        team value of the state the tool's own proposal would produce, known at its step).
    """

    tool_wall_s: float = 5.0
    tool_memory_mb: int = 512
    tool_max_output_bytes: int = 65_536
    history_turns: int = 4
    oracle_tool: str = "search"
    single_agent: str = "planner"
    tool_team: str = "turn"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.oracle_tool not in ("search", "answer"):
            raise ValueError(f"oracle_tool must be 'search' or 'answer', got {self.oracle_tool!r}")
        if self.single_agent not in ("planner", "tool"):
            raise ValueError(f"single_agent must be 'planner' or 'tool', got {self.single_agent!r}")
        if self.tool_team not in ("turn", "proposal"):
            raise ValueError(f"tool_team must be 'turn' or 'proposal', got {self.tool_team!r}")


@dataclass
class Sim:
    """The result of applying a proposal to a copy of the state."""

    state: Any
    ok: bool = True  # every part of the proposal could be applied
    info: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


@dataclass
class TurnRecord:
    turn: int
    tool_code: str | None = None
    tool_output: str | None = None
    tool_proposal: str | None = None
    tool_error: str | None = None
    answer: str | None = None
    answer_error: str | None = None
    state_after: str | None = None


_FAIL = Extraction(None, "")


class ToolPlannerEnv(TurnBasedEnv):
    """Base of Sudoku, Sokoban and Plan-Path (see module docstring)."""

    SINGLE_AGENTS: ClassVar[tuple[str, ...]] = ("planner",)
    config_cls: ClassVar[type[EnvConfig]] = ToolPlannerConfig
    config: ToolPlannerConfig
    _answer_format: ClassVar[str] = ""
    _tool_output_format: ClassVar[str] = ""

    def _single_agents(self) -> tuple[str, ...]:
        return (self.config.single_agent,)

    # ------------------------------------------------------------------ hooks
    def _parse_answer(self, text: str) -> Extraction:
        raise NotImplementedError

    def _simulate(self, proposal: Any) -> Sim:
        raise NotImplementedError

    def _team(self, sim: Sim) -> float:
        raise NotImplementedError

    def _is_solved(self, state: Any) -> bool:
        raise NotImplementedError

    def _tool_components(self, sim: Sim | None, ran_ok: bool) -> dict[str, float]:
        """Tool scores other than ``fmt`` (set by the base: the printed output parsed).
        ``sim`` is ``None`` when there was no usable proposal; ``ran_ok`` says the program
        exited cleanly within its limits."""
        raise NotImplementedError

    def _planner_components(self, sim: Sim | None) -> dict[str, float]:
        """Planner scores other than ``fmt`` (set by the base: the answer parsed);
        ``sim`` is ``None`` when the answer did not parse."""
        raise NotImplementedError

    def _rules_text(self) -> str:
        """The task and its rules: the same for every instance of a configuration (so prompts
        that start with it share their prefix). ``self.config.prompt_style`` picks the full or
        the compact wording."""
        raise NotImplementedError

    def _instance_text(self) -> str:
        """Instance context shown before the current state (e.g. the original puzzle); ``""``
        when the state says it all."""
        return ""

    def _state_text(self) -> str:
        raise NotImplementedError

    def _map_rows(self) -> tuple[str, ...]:
        """The current position's map, row by row, as the state text shows it: what a tool
        program that pastes the position carries (the oracle's does). ``()`` for a setting whose
        state has no such map; the failure breakdown then cannot tell a miscopied map apart."""
        return ()

    def _initial_state(self, instance: Any) -> Any:
        raise NotImplementedError

    def _oracle_answer(self) -> str:
        raise NotImplementedError

    def _oracle_code(self) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ episode state
    def _reset_state(self, instance: Any) -> None:
        self.state = self._initial_state(instance)
        self.history: list[TurnRecord] = []
        self._current = TurnRecord(turn=0)
        # the tool's step of the current turn, kept for its team award: (step, parts)
        self._tool_step: tuple[int, RewardParts] | None = None

    def _noop_sim(self) -> Sim:
        return Sim(state=copy.deepcopy(self.state), ok=True, info={"noop": True})

    # ------------------------------------------------------------------ acting
    def _act(self, agent: str, completion: str) -> RewardParts:
        if agent == "tool":
            return self._act_tool(completion)
        return self._act_planner(completion)

    def _run_tool(self, code: str) -> Any:
        import sandboxes

        cfg = self.config
        limits = sandboxes.Limits(
            wall_s=cfg.tool_wall_s,
            cpu_s=cfg.tool_wall_s,
            memory_mb=cfg.tool_memory_mb,
            max_output_bytes=cfg.tool_max_output_bytes,
        )
        return self.sandbox.run(code, limits=limits)

    def _act_tool(self, completion: str) -> RewardParts:
        rec = self._current
        reasons: dict[str, str] = {}
        mask = 1.0
        block = extract_code_block(completion)
        parsed = _FAIL
        ran_ok = False
        if not block.ok:
            reasons["fmt"] = block.reason
            rec.tool_code, rec.tool_output, rec.tool_error = None, None, block.reason
        else:
            rec.tool_code = block.value
            result = self._run_tool(block.value)
            rec.tool_output = clip_text(result.stdout, 2000)
            infra_error = getattr(result, "error", None)
            if infra_error:
                mask = 0.0
                reasons["exec"] = f"sandbox failure: {infra_error}"
            elif result.timed_out:
                reasons["exec"] = "the program timed out"
            elif result.memory_exceeded:
                reasons["exec"] = "the program exceeded its memory limit"
            elif result.exit_code != 0:
                tail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.exit_code}"]
                reasons["exec"] = "the program crashed: " + clip_text(tail[0], 300)
            else:
                ran_ok = True
            parsed = self._parse_answer(result.stdout) if ran_ok else _FAIL
            if ran_ok and not parsed.ok:
                reasons["fmt"] = "printed output: " + parsed.reason
            rec.tool_error = reasons.get("exec") or reasons.get("fmt")
        rec.tool_proposal = self._format_proposal(parsed.value) if parsed.ok else None
        sim = self._simulate(parsed.value) if parsed.ok else self._noop_sim()
        if parsed.ok and not sim.ok and sim.reason:
            reasons.setdefault("exec", sim.reason)
        comps = self._tool_components(sim if parsed.ok else None, ran_ok)
        comps["fmt"] = float(parsed.ok)
        alone = self.config.mode == "single"
        if alone or self.config.tool_team == "proposal":
            team = self._team(sim)
        else:
            team = 0.0
            reasons["team"] = "pending: the team value of the state after the planner's answer"
        parts = RewardParts.build(
            "tool", comps, self.config.rewards, team=team, mask=mask, reasons=reasons
        )
        if alone:  # the tool's proposal is the turn's answer
            self._end_turn(sim)
        else:
            self._tool_step = (self.num_steps, parts)
        return parts

    def _act_planner(self, completion: str) -> RewardParts:
        rec = self._current
        reasons: dict[str, str] = {}
        answer = extract_after_marker(completion)
        parsed = self._parse_answer(answer.value) if answer.ok else answer
        if not parsed.ok:
            reasons["fmt"] = parsed.reason
        rec.answer = clip_text(answer.value, 1000) if answer.ok else None
        rec.answer_error = reasons.get("fmt")
        sim = self._simulate(parsed.value) if parsed.ok else self._noop_sim()
        if parsed.ok and not sim.ok and sim.reason:
            reasons["apply"] = sim.reason
            rec.answer_error = sim.reason
        comps = self._planner_components(sim if parsed.ok else None)
        comps["fmt"] = float(parsed.ok)
        team = self._team(sim)
        self._award_tool(team)
        self._end_turn(sim)
        return RewardParts.build("planner", comps, self.config.rewards, team=team, reasons=reasons)

    def _end_turn(self, sim: Sim) -> None:
        """The turn's answer (simulated in ``sim``) applied: the new state, success, history."""
        rec = self._current
        self.state = sim.state
        rec.state_after = self._state_text()
        if self._is_solved(self.state):
            self.success = True
            self.end_episode()
        self.history.append(rec)
        self._current = TurnRecord(turn=self.turn + 1)

    def award_lookahead(self) -> int:
        """1 when the tool's team term arrives with the planner's step (``tool_team="turn"``
        in multi mode), else 0."""
        return 1 if self.config.mode == "multi" and self.config.tool_team == "turn" else 0

    def _award_tool(self, team: float) -> None:
        """A.1.3-A.1.5: the tool of this turn earns the turn's team value (the state after the
        planner's answer). Its step returned team 0 with a pending reason; its complete reward
        comes by ``award()`` now."""
        pending, self._tool_step = self._tool_step, None
        if self.config.tool_team != "turn" or pending is None:
            return
        step, parts = pending
        reasons = {k: v for k, v in parts.reasons.items() if k != "team"}
        reasons["team"] = "the team value of the state after this turn's planner answer (A.1)"
        self.award("tool", dataclasses.replace(parts, team=team, reasons=reasons), step)

    def _format_proposal(self, value: Any) -> str:
        return clip_text(str(value), 1000)

    def _step_info(self, agent: str) -> dict[str, Any]:
        closes_turn = agent == "planner" or self.config.mode == "single"
        rec = self.history[-1] if closes_turn and self.history else self._current
        if agent == "tool":
            return {"tool_output": rec.tool_output, "tool_proposal": rec.tool_proposal}
        return {"answer": rec.answer}

    # ------------------------------------------------------------------ prompts
    def _history_text(self) -> str:
        recs = self.history[-self.config.history_turns :]
        if not recs:
            return ""
        lines = ["History of earlier turns (oldest first):"]
        for r in recs:
            lines.append(f"- Turn {r.turn + 1}:")
            if "tool" in self.possible_agents:
                lines.append(
                    f"  tool proposal: {r.tool_proposal or '(none: ' + str(r.tool_error) + ')'}"
                )
            if "planner" in self.possible_agents:
                lines.append(f"  planner answer: {r.answer or '(none)'}")
                if r.answer_error:
                    lines.append(f"  problem: {r.answer_error}")
            if r.state_after:
                lines.append("  state afterwards:\n" + _indent(r.state_after, 4))
        return "\n".join(lines)

    def _role_text(self, agent: str) -> str:
        """What the acting role must do and the format of its answer (full or compact)."""
        cfg = self.config
        compact = cfg.prompt_style == "compact"
        if agent == "tool":
            if compact:
                return (
                    "You are the tool agent. Reply with ONE ```python code block whose program "
                    f"(no input, {cfg.tool_wall_s:g} s limit) computes the answer from the state "
                    f"below and prints only {self._tool_output_format}"
                )
            return (
                "You are the tool agent. Write a Python program that computes the answer, in "
                "exactly ONE ```python code block. The program runs without network access, with "
                f"a {cfg.tool_wall_s:g} s time limit; whatever it prints is parsed as your "
                f"proposal, so print only the proposal: {self._tool_output_format}"
            )
        if cfg.mode == "multi":
            if compact:
                return (
                    "You are the planner. Check the tool agent's proposal (below) against the "
                    "state; adopt it if it is right, else correct it. End with a line #### "
                    f"followed by {self._answer_format}"
                )
            role = (
                "You are the planner. Check the tool agent's proposal (shown below) against the "
                "rules and the current state; adopt it if it is right, otherwise correct it or "
                "give your own."
            )
        elif compact:
            return f"You are the planner. End with a line #### followed by {self._answer_format}"
        else:
            role = "You are the planner. Reason step by step about the current state."
        return (
            role + " Keep your reasoning short. End with a line that begins with #### followed by "
            f"your final answer: {self._answer_format}"
        )

    def _prompt(self, agent: str) -> str:
        """Shared text first: the rules, then the role's instructions and answer format (the same
        for every instance of the role); for the planner the tool's program and result come next
        (programs that share their first lines, such as the oracle's, whose instance data comes
        last, keep the prefix shared), then the instance, the history and the current state. The
        prompts of one role in a batch thus share a long prefix whose KV cache is computed once
        (:mod:`adapters.policies.transformers_policy`)."""
        parts = [self._rules_text(), self._role_text(agent)]
        if agent != "tool" and self.config.mode == "multi":
            rec = self._current
            parts.append(
                "\n".join(
                    [
                        "The tool agent's program:",
                        f"```python\n{clip_text(rec.tool_code, 4000)}\n```"
                        if rec.tool_code
                        else "(no code)",
                        "Its printed output:",
                        rec.tool_output.strip() if rec.tool_output else "(nothing)",
                        "Parsed proposal: "
                        + (rec.tool_proposal or "(unusable: " + str(rec.tool_error) + ")"),
                    ]
                )
            )
        instance = self._instance_text()
        if instance:
            parts.append(instance)
        hist = self._history_text()
        if hist:
            parts.append(hist)
        parts.append("Current state:\n" + self._state_text())
        return "\n\n".join(parts)

    # ------------------------------------------------------------------ oracle
    def oracle(self, agent: str) -> str:
        """A correct completion for ``agent``. The tool's is a program that computes the answer
        from the state it copies out of its prompt (``oracle_tool="search"``) or one line that
        prints it (``"answer"``); the planner adopts the tool's proposal when it solves the
        puzzle from the current state and gives the solver's answer otherwise, so a policy
        fine-tuned on oracle turns learns to use its teammate's result."""
        if agent == "tool":
            if self.config.oracle_tool == "answer":
                return f"```python\nprint({self._oracle_answer()!r})\n```"
            return "```python\n" + self._oracle_code() + "\n```"
        if self.config.mode != "multi":
            return "Solving from the current state.\n#### " + self._oracle_answer()
        adopted = self._solving_proposal()
        if adopted is not None:
            return "The tool's proposal solves it.\n#### " + adopted
        return (
            "The tool's proposal does not solve it; my own answer:\n#### " + self._oracle_answer()
        )

    def _solving_proposal(self) -> str | None:
        """The tool's proposal of this turn when playing it solves the puzzle, else ``None``."""
        text = self._current.tool_proposal
        if not text:
            return None
        parsed = self._parse_answer(text)
        if not parsed.ok:
            return None
        sim = self._simulate(parsed.value)
        return text if sim.ok and self._is_solved(sim.state) else None


def _indent(text: str, n: int) -> str:
    pad = " " * n
    return "\n".join(pad + line for line in text.splitlines())
