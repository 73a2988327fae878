"""Rewards are monotone in the quality of the work: for every setting, over a corpus of honest
completions (right and wrong, well formed) and their spoiled twins (the same work with a
condition the rewarded policy controls triggered: its format broken, its tags duplicated, its
block left unclosed, its program made to crash, its verifier spoiled), a spoiled twin never
earns more than its honest completion.

The reward compared is the final one of the step (delayed awards included), with every later
step played by the same scripted policy (the env's oracle) for both twins. Each setting's module
page lists the conditions its rewarded policies control; these tests check the shape the issue
asked for: no branch chosen by such a condition pays more than the honest branch."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs
from envs.pools import PoolItem, QuestionPool
from tests.envs.test_challenge_plan_solve import CODE_REF
from tests.envs.test_challenge_plan_solve import REF as MATH_REF

Spoiler = Callable[[str], str]
EXAMPLES = int(os.environ.get("MONOTONICITY_EXAMPLES", "6"))  # per case; more for a deeper search

# ---------------------------------------------------------------- spoilers


def _strip_markup(text: str) -> str:
    """The same content, none of the markup a parser looks for."""
    text = re.sub(r"```[a-z]*", "", text)
    text = re.sub(r"</?[a-z]+>", "", text)
    return text.replace("####", "").replace("\\boxed", "").replace("Verdict:", "")


def _unclose(text: str) -> str:
    """The last closing marker (fence, tag, brace) dropped."""
    for mark in ("```", "</answer>", "</question>", "</score>", "</plan>", "</solution>", "}"):
        k = text.rfind(mark)
        if k >= 0:
            return text[:k] + text[k + len(mark) :]
    return text


def _duplicate_blocks(text: str) -> str:
    """Every tagged block written twice (the same content)."""
    return re.sub(r"(<([a-z]+)>.*?</\2>)", r"\1\1", text, flags=re.S)


def _crash(text: str) -> str:
    """The program (a fenced block) ends by crashing."""
    k = text.rfind("```")
    if k <= 0:
        return text + "\nraise SystemExit(1)"
    return text[:k].rstrip("\n") + "\nraise SystemExit(1)\n" + text[k:]


GENERIC: dict[str, Spoiler] = {
    "empty": lambda t: "",
    "refusal": lambda t: "I will not answer this.",
    "strip_markup": _strip_markup,
    "unclose": _unclose,
    "duplicate_blocks": _duplicate_blocks,
}

# ---------------------------------------------------------------- playing one step


def _follow(raw: Any, agent: str) -> str:
    return raw.oracle(agent)


def step_reward(raw: Any, completion: str, follow: Callable[[Any, str], str] = _follow) -> float:
    """The final reward of the acting agent's step made with ``completion``: its own reward, or
    the last award that settles it while the rest of the episode is played by ``follow``."""
    agent, step = raw.agent_selection, raw.num_steps
    raw.step(completion)
    reward = float((raw.infos[agent].get("reward_parts") or {}).get("reward", 0.0))
    for _ in range(64):
        for award in raw.last_awards:
            if award["agent"] == agent and award["step"] == step:
                reward = float(award["reward_parts"]["reward"])
        if not raw.agents:
            break
        nxt = raw.agent_selection
        raw.step(None if raw.terminations[nxt] or raw.truncations[nxt] else follow(raw, nxt))
    return reward


@dataclass
class Case:
    """A state of a setting (``make()`` returns the raw env there) and the acting role's honest
    completions; ``spoilers`` add the setting's own spoils to the generic ones."""

    name: str
    make: Callable[[], Any]
    honest: list[str]
    spoilers: dict[str, Spoiler] = field(default_factory=dict)
    follow: Callable[[Any, str], str] = _follow

    def reward(self, completion: str) -> float:
        return step_reward(self.make(), completion, self.follow)


def _env(env_id: str, *prefix: str, seed: int = 3, instance: Any = None, **cfg: Any) -> Any:
    spec = envs.spec(env_id)
    raw = envs.make(env_id, **{**spec.cpu_options, **cfg}).unwrapped
    raw.reset(seed=seed, options=None if instance is None else {"instance": instance})
    for text in prefix:
        raw.step(text)
    return raw


def _oracle_then(env_id: str, n: int, **kw: Any) -> Callable[[], Any]:
    """The env after ``n`` oracle steps."""

    def make() -> Any:
        raw = _env(env_id, **kw)
        for _ in range(n):
            raw.step(raw.oracle(raw.agent_selection))
        return raw

    return make


# ---------------------------------------------------------------- the corpus, per setting

CLIP = {
    "prompt": "Write clip(x, lo, hi) that limits x to [lo, hi].",
    "style": "function",
    "entry_point": "clip",
    "solution": "def clip(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    "tests": [
        "assert clip(5, 0, 10) == 5",
        "assert clip(-3, 0, 10) == 0",
        "assert clip(12, 0, 10) == 10",
        "assert clip(0, 0, 10) == 0",
    ],
}
MATH = {"question": "What is 6 * 7?", "answer": "42"}


def _py(code: str) -> str:
    return f"My program:\n```python\n{code}\n```"


def _pool() -> QuestionPool:
    items = [
        PoolItem(f"What is {i} * {i + 1}?", kind="math", answer=str(i * (i + 1))) for i in range(30)
    ]
    return QuestionPool(items, seed_set="monotone")


def _sage(instance: dict) -> Callable[[], Any]:
    return lambda: _env("sage", instance=instance, pool=_pool(), num_samples=1)


def _critic_rates_9(raw: Any, agent: str) -> str:
    """The oracle, except that the critic rates every question 9: the critic is not the
    challenger, and its score must not depend on whether the challenger spoiled its verifier
    (the oracle critic gives an invalid verifier 2)."""
    if agent == "critic" and raw.state.phase == "critic_question":
        return "<score>9</score>"
    return raw.oracle(agent)


_MATH_CHALLENGE = "<question>What is 13 * 17?</question>\n<answer>{}</answer>"
_CODE_CHALLENGE = (
    "<question>Write dbl(x) returning 2 * x.</question>\n<tests>\n{tests}\n</tests>\n"
    "<solution>\n```python\n{code}\n```\n</solution>"
)
_DBL_TESTS = "assert dbl(2) == 4\nassert dbl(0) == 0"
_DBL = "def dbl(x):\n    return 2 * x"

# SAGE's verifier spoils: each makes the challenger's own verifier invalid
SAGE_MATH_SPOILS: dict[str, Spoiler] = {
    f"reference_{k}": (lambda t, v=v: t.replace("</answer>", f"{v}</answer>", 1))
    for k, v in {"prose_word": " dollars", "comma": ",", "plus": " +", "semicolon": ";"}.items()
}
SAGE_CODE_SPOILS: dict[str, Spoiler] = {
    "reference_fails_an_assert": lambda t: t.replace("</tests>", "assert dbl(3) == 7\n</tests>"),
    "tests_name_a_helper": lambda t: t.replace("</tests>", "assert half(4) == 2\n</tests>").replace(
        "```\n</solution>", "def half(x):\n    return x / 2\n```\n</solution>"
    ),
    "random_test": lambda t: t.replace(
        "</tests>", "import random\nassert dbl(random.choice([1])) == 2\n</tests>"
    ),
    "no_solution": lambda t: t[: t.find("<solution>")],
}

CASES = [
    Case(
        "sokoban_tool",
        lambda: _env("sokoban"),
        ["```python\nprint('[U,U,L,D]')\n```", "```python\nprint('[D]')\n```"],
        {"crash": _crash},
    ),
    Case(
        "sokoban_planner",
        _oracle_then("sokoban", 1),
        ["Push it.\n#### [U,U,L,D]", "#### [D]", "#### []"],
    ),
    Case(
        "plan_path_tool",
        lambda: _env("plan_path"),
        ["```python\nprint('[D,D,L,L,L,L]')\n```", "```python\nprint('[U]')\n```"],
        {"crash": _crash},
    ),
    Case("plan_path_planner", _oracle_then("plan_path", 1), ["#### [D,D,L,L,L,L]", "#### [R]"]),
    Case(
        "sudoku_tool",
        lambda: _env("sudoku"),
        [
            "```python\nprint('[[4,1,2,3],[3,2,1,4],[1,3,4,2],[2,4,3,1]]')\n```",
            "```python\nprint('[[1,1,1]]')\n```",
        ],
        {"crash": _crash},
    ),
    Case(
        "sudoku_planner",
        _oracle_then("sudoku", 1),
        ["#### [[4,1,2,3],[3,2,1,4],[1,3,4,2],[2,4,3,1]]", "#### [[1,2,4]]"],
    ),
    Case(
        "code_coder",
        lambda: _env("code", instance=CLIP),
        [_py(CLIP["solution"]), _py("def clip(x, lo, hi):\n    return x")],
        {"crash": _crash},
    ),
    Case(
        "code_tester",
        lambda: _env("code", _py(CLIP["solution"]), instance=CLIP),
        [
            "```python\nassert clip(12, 0, 10) == 10\n```",
            "```python\nassert clip(5, 0, 10) == 5\n```",
        ],
        {
            "second_test": lambda t: t.replace("\n```", "\nassert clip(-1, 0, 10) == 0\n```"),
            "private_name": lambda t: t.replace("clip(", "_clip(", 1),
        },
    ),
    Case(
        "math_reasoner",
        lambda: _env("math", instance=MATH),
        ["6 * 7 = 42, so \\boxed{42}.", "It is \\boxed{41}."],
        {"second_box": lambda t: t + " Or \\boxed{40}."},
    ),
    Case(
        "math_tool",
        lambda: _env("math", "I think \\boxed{41}.", instance=MATH),
        [_py("print(6 * 7)"), _py("print(41)")],
        {"crash": _crash},
    ),
    Case(
        "mae_proposer",
        _oracle_then("mae", 0, pool=_pool()),
        ["<question>What is 9 * 9?</question>"],
    ),
    Case(
        "mae_solver",
        _oracle_then("mae", 6, pool=_pool(), instance={**MATH, "solve": MATH}),
        ["<answer>42</answer>", "<answer>41</answer>"],
    ),
    Case(
        "mae_judge", _oracle_then("mae", 1, pool=_pool()), ["<score>9</score>", "<score>2</score>"]
    ),
    Case(
        "sage_challenger_math",
        _sage(MATH_REF),
        [_MATH_CHALLENGE.format("221"), _MATH_CHALLENGE.format("220")],
        SAGE_MATH_SPOILS,
        _critic_rates_9,
    ),
    Case(
        "sage_challenger_code",
        _sage(CODE_REF),
        [
            _CODE_CHALLENGE.format(tests=_DBL_TESTS, code=_DBL),
            _CODE_CHALLENGE.format(tests="assert dbl(2) == 4", code=_DBL),
        ],
        SAGE_CODE_SPOILS,
        _critic_rates_9,
    ),
    Case(
        "sage_critic",
        lambda: _env(
            "sage", _MATH_CHALLENGE.format("221"), instance=MATH_REF, pool=_pool(), num_samples=1
        ),
        ["<score>8</score>"],
    ),
    Case(
        "sage_planner",
        lambda: _env("sage", "", instance=MATH_REF, pool=_pool(), num_samples=1),
        ["<plan>1. Multiply the numbers.</plan>"],
    ),
    Case(
        "comas_solution",
        lambda: _env("comas", instance=MATH),
        ["So \\boxed{42}.", "So \\boxed{41}."],
    ),
    Case(
        "comas_evaluation",
        _oracle_then("comas", 1, instance=MATH),
        ["The step 6 * 7 = 42 is right."],
    ),
    Case(
        "comas_scoring",
        _oracle_then("comas", 2, instance=MATH),
        ["<score>3</score>", "<score>1</score>"],
    ),
    Case(
        "marsrl_solver",
        lambda: _env("marsrl", instance=MATH),
        ["\\boxed{42}", "\\boxed{41}"],
        {"second_box": lambda t: t + " or \\boxed{43}"},
    ),
    Case(
        "marsrl_verifier",
        lambda: _env("marsrl", "So \\boxed{41}.", instance=MATH),
        ["The product is 42.\nVerdict: incorrect", "Verdict: correct"],
        {"hedge": lambda t: t + "/correct"},
    ),
    Case(
        "marsrl_corrector",
        lambda: _env("marsrl", "So \\boxed{41}.", "Verdict: incorrect", instance=MATH),
        ["Fixed: \\boxed{42}", "Still \\boxed{41}"],
        {"second_box": lambda t: t + " or \\boxed{43}"},
    ),
]


def _setting_of(case: Case) -> str:
    """The registered setting a case audits: the longest id or alias its name starts with."""
    names = [n for n in envs.list_envs(include_aliases=True) if case.name.startswith(n + "_")]
    return envs.spec(max(names, key=len)).id if names else ""


def test_every_setting_has_a_case():
    """The audit's coverage comes from the registry: a registered setting without a case (a new
    one, or one registered outside the repository before the suite runs) fails here by name."""
    covered = {_setting_of(c) for c in CASES}
    missing = sorted(set(envs.list_envs()) - covered)
    assert not missing, f"settings without a reward-audit case here: {missing}"
    assert "" not in covered, [c.name for c in CASES if not _setting_of(c)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_spoiled_twin_never_outscores_the_honest_completion(case: Case, data: Any) -> None:
    honest = data.draw(st.sampled_from(case.honest), label="honest")
    spoilers = {**GENERIC, **case.spoilers}
    names = data.draw(
        st.lists(st.sampled_from(sorted(spoilers)), min_size=1, max_size=2, unique=True),
        label="spoilers",
    )
    spoiled = honest
    for name in names:
        spoiled = spoilers[name](spoiled)
    if spoiled == honest:
        return
    assert case.reward(spoiled) <= case.reward(honest) + 1e-9, (case.name, names, spoiled)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.name.startswith("sage_challenger")], ids=lambda c: c.name
)
def test_every_sage_verifier_spoil_earns_at_most_its_valid_twin(case: Case) -> None:
    """SAGE's own spoils, each on its own and exhaustively: the verifier-dependent term is 0."""
    for honest in case.honest:
        base = case.reward(honest)
        for name, spoil in case.spoilers.items():
            assert case.reward(spoil(honest)) <= base + 1e-9, (name, honest)
