"""Multi-agent LLM settings as PettingZoo AEC environments.

>>> import envs
>>> "sokoban" in envs.list_envs()
True

``envs.make(id, **config)`` returns a wrapped AEC env; ``env.unwrapped`` is the raw env with
``clone()`` and ``oracle(agent)``. See each setting module's docstring for its agents, rewards and
options. ``envs.spec(id)`` holds what the trainer and the evaluation need to know about a setting
without building it (:mod:`envs.core.registry`); ``envs.make("package.module:id")`` imports a
module that registers a setting of its own first. That import is for ids a person gives (a flag,
a call); an id read from data goes through ``envs.registered_spec(id)``, which imports nothing and
refuses a module that is not loaded yet, and a config read from data through
``envs.check_env_config(id, config)``.
"""

from typing import Any

from envs.core.registry import (
    MODES,
    EnvSpec,
    ModuleNotLoadedError,
    check_env_config,
    list_envs,
    make,
    make_raw,
    register,
    registered_spec,
    roles_of,
    spec,
)

__all__ = [
    "MODES",
    "EnvSpec",
    "ModuleNotLoadedError",
    "check_env_config",
    "list_envs",
    "make",
    "make_raw",
    "register",
    "registered_spec",
    "roles_of",
    "spec",
]

_AT_GRPO_MODES = MODES  # AT-GRPO compares one agent with the team (§5.1)
_GRID_NOTE = (
    "a team started from the setting's oracle (the cold start, --init) that reads unseen "
    "instances, beside the no-op, constant, oracle and open-loop references, and whether a few "
    "AT-GRPO steps change it (measured runs: docs/learning.md#the-other-settings-on-a-cpu)"
)
_SOKOBAN_NOTE = (
    "a team started from the shipped oracle cold start (--init) on levels larger than those it "
    "was made on, and what the AT-GRPO steps add on unseen levels beside the no-op, constant, "
    "oracle and open-loop references (measured: "
    "docs/learning.md#the-default-run-under-symmetry-class-splits)"
)
# on a CPU, the prompts' fixed text (rules, role, format) is shortened: prefill of the text every
# prompt shares is most of a CPU run's generation time
_COMPACT = {"prompt_style": ("compact", "CPU: compact prompts (the fixed instructions shortened)")}

# The CPU runs of the grid settings where a team learns on a CPU (docs/learning.md): a cold
# start teaches the tool to compute the answer from the instance (a search program that reads
# the map), and reinforcement learning then teaches the planner to adopt its teammate's result,
# which is what AT-GRPO's team training is about. Embedded model only; ahead of recipe values.
_CPU_GRID_TRAINING: dict[str, tuple[Any, str]] = {
    "init": (
        "cold-start:tool,planner=8",
        "CPU: a cold start on the oracle's turns (train split), so that RL starts from a team "
        "that sometimes succeeds (docs/learning.md#the-cold-start-the-oracles-turns-as-a-first-"
        "fine-tune)",
    ),
    "eval_episodes": (64, "CPU: 64 distinct validation instances before and after training"),
    "instances_per_step": (
        4,
        "CPU: 4 instances per step",
    ),
    "max_new_tokens": (320, "CPU: the oracle tool's search program fits"),
    "role_sampling": (
        {"planner": {"max_new_tokens": 64}},
        "CPU: a planner answer (#### and a move list) fits 64 tokens",
    ),
}
_SMALL_STEP: dict[str, tuple[Any, str]] = {
    "lr": (3e-4, "CPU: a smaller step, so the tool's program format survives the first update"),
    "ppo_minibatches": (1, "CPU: one optimizer step per batch (a smaller step)"),
}


def _shipped_cpu_training(name: str, made_on: str) -> dict[str, tuple[Any, str]]:
    """The grid CPU values, starting from the shipped cold start ``name``, with the smaller step."""
    why = (
        f"CPU: the shipped cold start (oracle episodes on {made_on}; its coldstart.json has the "
        "command), so that RL starts from a team that sometimes succeeds"
    )
    return {**_CPU_GRID_TRAINING, "init": (f"shipped:{name}", why), **_SMALL_STEP}


# Sokoban on a CPU: levels larger than the cold start's 6 x 6 (which it nearly always solves), so
# that AT-GRPO has something to add; a smaller step than the AT-GRPO CPU scale-down's, whose four
# PPO mini-batches broke the tool's program format in one step at this size (docs/learning.md)
_SOKOBAN_CPU_SIDE = (8, "CPU: 8 x 8 levels, where the cold start often fails")
_SOKOBAN_CPU_OPTIONS = {**_COMPACT, "height": _SOKOBAN_CPU_SIDE, "width": _SOKOBAN_CPU_SIDE}
_SOKOBAN_CPU_TRAINING = _shipped_cpu_training("sokoban-1d163a04c8a6e2bf", "6 x 6 levels")
# Plan-Path on a CPU, the same way: maps larger than the shipped cold start's 10 x 10 (of which it
# solves 60 of 64 unseen ones, benchmarks/results/learning/plan_path/; 14 x 14 chosen on the test
# split, where it solved 9 of 16), and Sokoban's smaller step (its programs are as long)
_PLAN_PATH_CPU_SIDE = (14, "CPU: 14 x 14 maps, where the cold start (made on 10 x 10) often fails")
_PLAN_PATH_CPU_OPTIONS = {**_COMPACT, "height": _PLAN_PATH_CPU_SIDE, "width": _PLAN_PATH_CPU_SIDE}
_PLAN_PATH_CPU_TRAINING = _shipped_cpu_training("plan_path-413c9f3d84456da8", "10 x 10 maps")
# Sudoku on a CPU: the paper's 4 x 4 puzzles, where the shipped cold start (made on 4 x 4 training
# puzzles) solved 11 of 16 test puzzles, mostly failing where the planner does not adopt its
# teammate's solved grid; the oracle's program is about 340 tokens there, so 384 new tokens
_SUDOKU_CPU_TRAINING = {
    **_shipped_cpu_training("sudoku-f44143fabf72d84e", "4 x 4 puzzles"),
    "max_new_tokens": (384, "CPU: the oracle tool's search program (about 340 tokens) fits"),
}
# AT-GRPO A.2.1 fixes the prompt length of its math and code runs
_LONG_PROMPTS = {
    "max_prompt_tokens": (8192, "AT-GRPO A.2.1: maximum prompt length 8192 (math and code)")
}
register(
    "sudoku",
    "envs.sudoku:env",
    roles=("tool", "planner"),
    sandbox_roles=("tool",),  # the tool's program
    description="Sudoku, tool + planner (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the tool's team term is the turn's value, paid at the planner's step
    cpu_options={"size": 4},
    cpu_train_options=_COMPACT,
    cpu_train_values=_SUDOKU_CPU_TRAINING,
    cpu_note=_GRID_NOTE,
)
register(
    "sokoban",
    "envs.sokoban:env",
    roles=("tool", "planner"),
    sandbox_roles=("tool",),  # the tool's program
    description="Sokoban, tool + planner (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the tool's team term is the turn's value, paid at the planner's step
    cpu_options={"height": 6, "width": 6, "num_boxes": 1},
    cpu_train_options=_SOKOBAN_CPU_OPTIONS,
    cpu_train_values=_SOKOBAN_CPU_TRAINING,
    cpu_note=_SOKOBAN_NOTE,
)
register(
    "plan_path",
    "envs.plan_path:env",
    roles=("tool", "planner"),
    sandbox_roles=("tool",),  # the tool's program
    description="grid path planning, tool + planner (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the tool's team term is the turn's value, paid at the planner's step
    cpu_options={"height": 6, "width": 6, "min_distance": 3},
    cpu_train_options=_PLAN_PATH_CPU_OPTIONS,
    cpu_train_values=_PLAN_PATH_CPU_TRAINING,
    cpu_note=_GRID_NOTE,
)
register(
    "code",
    "envs.code:env",
    roles=("coder", "tester"),
    sandbox_roles=("coder", "tester"),  # the program against the tests, the golden program
    description="code generation, coder + tester (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    answer_kind="program",
    train_values=_LONG_PROMPTS,
    problem_loader="envs.code:load_code_problems",
    cpu_note=(
        "the pipeline only: no HumanEval program fits the CPU run's completion budget "
        "(docs/learning.md#the-other-settings-on-a-cpu); the task needs a GPU and the paper's "
        "completion length"
    ),
)


def _arithmetic(max_digits: int) -> dict[str, Any]:
    """reasoning-gym ``basic_arithmetic`` options: two terms of at most ``max_digits`` digits,
    +, - or x, no parentheses or negation ("Calculate 37 * 56.")."""
    return {
        "min_terms": 2,
        "max_terms": 2,
        "max_digits": max_digits,
        "operators": ["+", "-", "*"],
        "allow_negation": False,
        "allow_parentheses": False,
    }


def _cpu_train(options: dict[str, Any], why: str) -> dict[str, tuple[Any, str]]:
    return {k: (v, f"CPU: {why}") for k, v in options.items()}


def _cpu_sizes(options: dict[str, Any], why: str) -> dict[str, Any]:
    """The same CPU sizes for evaluation (``cpu_options``) and training (with the reason)."""
    return {"cpu_options": options, "cpu_train_options": _cpu_train(options, why)}


# on a CPU, math is arithmetic short enough that an answer fits the CPU run's completion budget
_SMALL_ARITHMETIC = {"generators": ["basic_arithmetic"], "generator_options": _arithmetic(2)}
register(
    "math",
    "envs.math:env",
    roles=("reasoner", "tool"),
    sandbox_roles=("tool",),  # the tool's program
    description="math QA, reasoner + tool (AT-GRPO)",
    modes=_AT_GRPO_MODES,
    recipe="at-grpo",
    team_reward=True,
    award_lookahead=1,  # the reasoner's team reward comes with the tool's agreeing step
    train_values=_LONG_PROMPTS,
    cpu_note=(
        "the reward beyond format on arithmetic that fits the CPU budget: the tool's correctness, "
        "which a short run improves on unseen problems, and the team reward, which needs the "
        "reasoner to state the tool's value and which no measured run taught (docs/learning.md). "
        "Not multi-step reasoning, whose word problems need hundreds of tokens"
    ),
    **_cpu_sizes(
        _SMALL_ARITHMETIC, "two-term arithmetic (+, -, x; up to two digits), so that an answer fits"
    ),
)
# on a CPU, MarsRL's solver has no tool: one-digit terms, which the untrained model sometimes
# gets right
_ONE_DIGIT_ARITHMETIC = {"dataset": "basic_arithmetic", "dataset_options": _arithmetic(1)}
_UNMEASURED_NOTE = (
    "the pipeline (rollouts, the paper's rewards, updates); what the untrained team earns "
    "beyond format at the CPU completion budget is not measured"
)
register(
    "propose_solve_judge",
    "envs.propose_solve_judge:env",
    roles=("proposer", "solver", "judge"),
    sandbox_roles=("judge",),  # the oracle judge runs a code question's tests
    aliases=("mae",),
    description="proposer + solver + judge (Multi-Agent Evolve)",
    recipe="mae",
    delayed_rewards=True,  # the proposer's and solver's rewards arrive by award()
    **_cpu_sizes({"num_answers": 2}, "difficulty from 2 solver answers (MAE: N = 5)"),
    cpu_note=_UNMEASURED_NOTE,
)
register(
    "challenge_plan_solve",
    "envs.challenge_plan_solve:env",
    roles=("challenger", "planner", "solver", "critic"),
    sandbox_roles=("challenger", "solver"),  # code questions: reference, answers
    aliases=("sage",),
    description="challenger + planner + solver + critic (SAGE)",
    recipe="sage",
    delayed_rewards=True,  # the challenger's and planner's rewards arrive by award()
    **_cpu_sizes({"num_samples": 2}, "r_d from N_s = 2 solver samples (SAGE's default 4)"),
    cpu_note=_UNMEASURED_NOTE,
)
register(
    "discussion",
    "envs.discussion:env",
    roles=("agent_0", "agent_1", "agent_2", "agent_3"),  # num_agents = 4 by default
    aliases=("comas",),
    description="multi-agent discussion: solve, evaluate, score (CoMAS)",
    recipe="comas",
    delayed_rewards=True,  # solution and evaluation rewards arrive by award() after scoring
    **_cpu_sizes({"num_agents": 2}, "the paper's own l = 2 ablation (CoMAS 4.1.1), m = 2 l rounds"),
    cpu_note=_UNMEASURED_NOTE,
)
register(
    "solver_verifier_corrector",
    "envs.solver_verifier_corrector:env",
    roles=("solver", "verifier", "corrector"),
    aliases=("marsrl",),
    description="solver + verifier + corrector (MarsRL)",
    recipe="marsrl",
    evaluation_options="envs.solver_verifier_corrector:EVALUATION_CONFIG",
    cpu_note=(
        "the solver's correctness on one-digit arithmetic, which the untrained model sometimes "
        "has; at the CPU budget the verifier and corrector rarely write a verdict, and the paper's "
        "long-reasoning gains need a GPU and far more tokens (docs/learning.md)"
    ),
    **_cpu_sizes(
        _ONE_DIGIT_ARITHMETIC,
        "two-term arithmetic (+, -, x; one digit), so that a solution fits and is sometimes right",
    ),
)
