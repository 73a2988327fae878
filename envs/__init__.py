"""Multi-agent LLM settings as PettingZoo AEC environments.

>>> import envs
>>> "sokoban" in envs.list_envs()
True

``envs.make(id, **config)`` returns a wrapped AEC env; ``env.unwrapped`` is the raw env with
``clone()`` and ``oracle(agent)``. See each setting module's docstring for its agents, rewards and
options. ``envs.spec(id)`` holds what the trainer and the evaluation need to know about a setting
without building it (:mod:`envs.core.registry`); ``envs.make("package.module:id")`` imports a
module that registers a setting of its own first.
"""

from envs.core.registry import MODES, EnvSpec, list_envs, make, make_raw, register, spec

__all__ = ["MODES", "EnvSpec", "list_envs", "make", "make_raw", "register", "spec"]

_AT_GRPO_MODES = MODES  # AT-GRPO compares one agent with the team (§5.1)
# on a CPU, the tool's demonstration is a one-line program instead of a search
_ONE_LINE_TOOL = {"oracle_tool": ("answer", "CPU: the tool's demonstration is a one-line program")}

register(
    "sudoku",
    "envs.sudoku:env",
    description="Sudoku, tool + planner (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the tool's team term is the turn's value, paid at the planner's step
    cpu_options={"size": 4},
    cpu_train_options=_ONE_LINE_TOOL,
)
register(
    "sokoban",
    "envs.sokoban:env",
    description="Sokoban, tool + planner (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the tool's team term is the turn's value, paid at the planner's step
    cpu_options={"height": 6, "width": 6, "num_boxes": 1},
    cpu_train_options=_ONE_LINE_TOOL,
)
register(
    "plan_path",
    "envs.plan_path:env",
    description="grid path planning, tool + planner (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the tool's team term is the turn's value, paid at the planner's step
    cpu_options={"height": 6, "width": 6, "min_distance": 3},
    cpu_train_options=_ONE_LINE_TOOL,
)
register(
    "code",
    "envs.code:env",
    description="code generation, coder + tester (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
)
register(
    "math",
    "envs.math:env",
    description="math QA, reasoner + tool (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the reasoner's team reward comes with the tool's agreeing step
)
# The CPU sizes of MAE, SAGE and CoMAS are their training recipes' CPU scale-down
# (adapters/training/recipes.py, cpu_env_config; tests/adapters/test_suite.py checks they agree).
register(
    "propose_solve_judge",
    "envs.propose_solve_judge:env",
    aliases=("mae",),
    description="proposer + solver + judge (Multi-Agent Evolve)",
    recipe="mae",
    delayed_rewards=True,  # the proposer's and solver's rewards arrive by award()
    cpu_options={"num_answers": 2},
)
register(
    "challenge_plan_solve",
    "envs.challenge_plan_solve:env",
    aliases=("sage",),
    description="challenger + planner + solver + critic (SAGE)",
    recipe="sage",
    delayed_rewards=True,  # the challenger's and planner's rewards arrive by award()
    cpu_options={"num_samples": 2},
)
register(
    "discussion",
    "envs.discussion:env",
    aliases=("comas",),
    description="multi-agent discussion: solve, evaluate, score (CoMAS)",
    recipe="comas",
    delayed_rewards=True,  # solution and evaluation rewards arrive by award() after scoring
    cpu_options={"num_agents": 2},
)
register(
    "solver_verifier_corrector",
    "envs.solver_verifier_corrector:env",
    aliases=("marsrl",),
    description="solver + verifier + corrector (MarsRL)",
    recipe="marsrl",
)
