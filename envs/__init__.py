"""Multi-agent LLM settings as PettingZoo AEC environments.

>>> import envs
>>> "sokoban" in envs.list_envs()
True

``envs.make(id, **config)`` returns a wrapped AEC env; ``env.unwrapped`` is the raw env with
``clone()`` and ``oracle(agent)``. See each setting module's docstring for its agents, rewards and
options.
"""

from envs.core.registry import list_envs, make, make_raw, register, spec

__all__ = ["list_envs", "make", "make_raw", "register", "spec"]

register("sudoku", "envs.sudoku:env", description="Sudoku, tool + planner (AT-GRPO)")
register("sokoban", "envs.sokoban:env", description="Sokoban, tool + planner (AT-GRPO)")
register(
    "plan_path", "envs.plan_path:env", description="grid path planning, tool + planner (AT-GRPO)"
)
register("code", "envs.code:env", description="code generation, coder + tester (AT-GRPO)")
register("math", "envs.math:env", description="math QA, reasoner + tool (AT-GRPO)")
register(
    "propose_solve_judge",
    "envs.propose_solve_judge:env",
    aliases=("mae",),
    description="proposer + solver + judge (Multi-Agent Evolve)",
)
register(
    "challenge_plan_solve",
    "envs.challenge_plan_solve:env",
    aliases=("sage",),
    description="challenger + planner + solver + critic (SAGE)",
)
register(
    "discussion",
    "envs.discussion:env",
    aliases=("comas",),
    description="multi-agent discussion: solve, evaluate, score (CoMAS)",
)
register(
    "solver_verifier_corrector",
    "envs.solver_verifier_corrector:env",
    aliases=("marsrl",),
    description="solver + verifier + corrector (MarsRL)",
)
