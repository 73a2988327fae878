"""The code setting's prompts: the problem, the history of earlier turns (programs, tests and
what the programs did on them), and each role's instructions and answer format (the setting's
page is :mod:`envs.code`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envs.code.options import CodeConfig
from envs.core.program import fence, indent
from envs.data.records import CodeProblem
from verifiers.code_tests import TestCase
from verifiers.extract import clip_text

__all__ = ["Turn", "describe", "history_text", "problem_text", "prompt_text", "show_test"]


@dataclass
class Turn:
    """One turn of an episode: what the coder and the tester answered and what came of it."""

    turn: int
    code: str | None = None  # the coder's code as written (without the prelude)
    code_error: str | None = None
    public: tuple = ()  # (test, result) pairs on the public examples (single mode)
    tests: tuple[TestCase, ...] = ()
    tests_error: str | None = None
    results: tuple = ()  # results of the program on the tester's tests
    agreed: bool = False


def problem_text(p: CodeProblem) -> str:
    """The problem statement both roles see."""
    if p.style == "stdin":
        return (
            "Problem:\n" + fence(p.prompt.strip(), 12_000, "") + "\n\nThe program reads its input "
            "from standard input (input() or sys.stdin) and prints the answer to standard output."
        )
    entry = p.entry_point
    starter = p.starter_code.strip()
    if starter and starter == p.prompt.strip():  # HumanEval: the prompt is the starter code
        return (
            f"Problem: implement the Python function `{entry}` specified below (the imports "
            f"and helper definitions shown are available to your code):\n{fence(starter, 12_000)}"
        )
    text = f"Problem:\n{fence(p.prompt.strip(), 12_000, '')}\n\nImplement it as the Python "
    if starter:
        return text + f"function `{entry}`. Starter code:\n{fence(starter, 12_000)}"
    return text + f"function `{entry}`."


def history_text(history: list[Turn], cfg: CodeConfig) -> str:
    """The earlier turns both roles see (the last ``history_turns``)."""
    recs = history[-cfg.history_turns :] if cfg.history_turns else []
    if not recs:
        return ""
    single = cfg.mode == "single"
    lines = ["History of earlier turns (oldest first):"]
    for r in recs:
        lines.append(f"Turn {r.turn + 1}:")
        who = "Your" if single else "The coder's"
        lines.append(indent(f"{who} program:\n{fence(r.code, 3000)}"))
        if r.code_error:
            lines.append(indent(f"Problem with the program: {r.code_error}"))
        if single:
            for k, (t, res) in enumerate(r.public):
                lines.append(indent(f"Example {k + 1}: " + describe(t, res)))
            continue
        if not r.tests:
            lines.append(indent(f"The tester gave no usable test ({r.tests_error})."))
            continue
        if r.tests_error:
            lines.append(indent(f"Problem with the tests: {r.tests_error}"))
        for k, t in enumerate(r.tests):
            res = r.results[k] if k < len(r.results) else None
            lines.append(
                indent(f"Test {k + 1}:\n" + indent(show_test(t)) + "\n" + indent(describe(t, res)))
            )
    return "\n".join(lines)


def prompt_text(agent: str, p: CodeProblem, cfg: CodeConfig, history: list[Turn]) -> str:
    """The prompt of ``agent`` (``coder`` or ``tester``) for problem ``p`` after ``history``."""
    parts = [problem_text(p)]
    hist = history_text(history, cfg)
    if hist:
        parts.append(hist)
    if agent == "coder":
        if p.style == "stdin":
            rules = (
                "Read all input with input() or sys.stdin and print only the answer; do not "
                "hard-code example inputs or print prompts."
            )
        else:
            rules = (
                f"Write the complete definition of `{p.entry_point}` (with any imports it needs)."
                " Do not read input or print; tests call the function directly."
            )
        if not hist:
            role = "You are the coder. Write a Python 3 program that solves the problem. " + rules
        elif cfg.mode == "single":
            role = (
                "You are the coder. Improve your program using the history: fix anything that "
                "did not compile or crashed, and check your logic against the examples. "
                + rules
                + " The episode ends when you submit the same program as in your "
                "previous turn."
            )
        else:
            role = (
                "You are the coder. Use the history to refine your program. If it crashed, fix "
                "the bug first. If it ran but its output differed from the tester's expected "
                "output, decide whether the test is right: if so, fix your program; if the "
                "test is wrong, keep your logic. " + rules
            )
        return "\n\n".join(
            [
                *parts,
                role
                + (
                    " Think step by step, then give the final program in a ```python code block "
                    "(the last python block of your answer is the one that runs)."
                ),
            ]
        )
    n = cfg.max_tester_tests
    count = "exactly one test case" if n == 1 else f"at most {n} test cases"
    if p.style == "stdin":
        fmt = (
            "Answer in this format (each part in its own fenced block):\n"
            "**Test Input:**\n```\n<the exact standard input>\n```\n"
            "**Test Output:**\n```\n<the exact expected output>\n```\n"
            f"Give {count} (one such pair per test case)."
        )
    else:
        fmt = (
            f"Give {count} as assert statements that call `{p.entry_point}` directly, e.g. "
            f"`assert {p.entry_point}(...) == <expected>` (one assert per test case), in one "
            "```python code block (other statements may only be imports, assignments and "
            f"helper definitions; do not define `{p.entry_point}` yourself)."
        )
    if not hist:
        role = (
            "You are the tester. Write a new, high-quality test case for this problem: choose "
            "an input, then work out carefully what a correct solution must output for it."
        )
    else:
        role = (
            "You are the tester. Study the history: decide whether your previous test was "
            "right (watch for misreadings of the problem). If it was wrong or unclear, correct "
            "it; otherwise write a test that exposes the remaining bugs of the program."
        )
    return "\n\n".join([*parts, role + " " + fmt])


def show_test(t: TestCase) -> str:
    if t.kind == "stdio":
        return (
            f"input:\n{fence(t.stdin.rstrip(), 1500, '')}\n"
            f"expected output:\n{fence(t.expected_stdout, 1500, '')}"
        )
    return fence(t.code, 1500)


def describe(t: TestCase, res: Any) -> str:
    if res is None:
        return "not run (no compiling program)"
    if res.passed:
        return "passed"
    if res.status == "wrong_answer" and t.kind == "stdio":
        return f"wrong answer; the program printed:\n{fence(res.actual or '', 1500, '')}"
    return clip_text(f"{res.status.replace('_', ' ')}: {res.reason}", 600)
