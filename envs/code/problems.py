"""The code setting's problems: the datasets it plays, loading them, explicit instances, and
the trusted code put before a candidate program (the setting's page is :mod:`envs.code`)."""

from __future__ import annotations

import ast
import functools
from typing import Any

from envs.core.explicit import check_size, check_tests
from envs.core.program import ProblemPool
from envs.data.records import CodeProblem
from verifiers.code_tests import TestCase
from verifiers.extract import clip_text
from verifiers.source_checks import INLINE_COMPILE_CHARS, quiet_parse

__all__ = [
    "DATASETS",
    "load_code_problems",
    "prelude_of",
    "problem_from_dict",
    "problem_pool",
    "with_prelude",
]

DATASETS = (
    "humaneval",
    "bundled_stdin",
    "apps",
    "code_contests",
    "livecodebench",
    "mbpp",
    "humaneval+",
    "mbpp+",
    "kodcode",
)


@functools.lru_cache(maxsize=16)
def problem_pool(
    data_key: tuple, dataset: str, data_path, data_split, options: tuple
) -> ProblemPool:
    del data_key
    problems = load_code_problems(dataset, data_path, data_split, dict(options))
    return ProblemPool(problems, dataset)


def load_code_problems(
    dataset: str,
    data_path: str | None = None,
    data_split: str | None = None,
    options: dict[str, Any] | None = None,
) -> list[CodeProblem]:
    """The usable problems (at least one test) of ``dataset`` (see the module docstring)."""
    options = dict(options or {})
    if dataset == "humaneval":
        from envs.data import load_humaneval

        problems = load_humaneval(split_tests=True, path=data_path, **options)
    elif dataset == "bundled_stdin":
        from envs.data.bundled import load_bundled_stdin

        problems = load_bundled_stdin()
    elif dataset in ("humaneval+", "mbpp+"):
        from envs.data.evalplus import load_evalplus

        problems = load_evalplus(dataset, data_path, **options)
    elif dataset in DATASETS:
        import envs.data

        loader = getattr(envs.data, f"load_{dataset}")
        if data_split is not None:
            options["split"] = data_split
        problems = loader(path=data_path, **options)
    else:
        raise ValueError(f"unknown code dataset {dataset!r}; choose one of {DATASETS}")
    return [p for p in problems if p.tests]


def prelude_of(p: CodeProblem) -> str:
    """Code put before a candidate program: the record's prelude plus, for function problems,
    the starter code without the entry point's own definition (imports, helper functions)."""
    parts = [p.prelude.strip()] if p.prelude.strip() else []
    if p.style == "function" and p.starter_code and p.entry_point:
        try:
            tree = quiet_parse(p.starter_code)
        except (SyntaxError, ValueError):
            tree = None
        if tree is not None:
            keep = [
                n
                for n in tree.body
                if not (
                    isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    and n.name == p.entry_point
                )
            ]
            if keep:
                parts.append(ast.unparse(ast.Module(body=keep, type_ignores=[])))
    return "\n".join(parts)


def with_prelude(prelude: str, code: str) -> str:
    return f"{prelude}\n\n{code}" if prelude else code


def problem_from_dict(data: Any) -> CodeProblem:
    if not isinstance(data, dict):
        raise ValueError(
            'a code instance is {"prompt": str, "tests": [...], "style": "stdin"|"function", '
            '"entry_point": str (function style), "solution": str (optional)}'
        )
    known = {
        "prompt",
        "tests",
        "style",
        "entry_point",
        "solution",
        "public_tests",
        "id",
        "starter_code",
    }
    extra = set(data) - known
    if extra:
        raise ValueError(f"unknown code instance keys {sorted(extra)}; known: {sorted(known)}")
    check_size(data, "the code instance")
    for key in ("tests", "public_tests"):
        check_tests(data.get(key), key.replace("_", " "))
    starter = data.get("starter_code", "")
    if isinstance(starter, str) and len(starter) > INLINE_COMPILE_CHARS:
        raise ValueError(
            f"'starter_code' is {len(starter):,} characters; an explicit instance's is at most "
            f"{INLINE_COMPILE_CHARS:,} (the host parses it)"
        )
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("a code instance needs a non-empty 'prompt'")
    style = data.get("style", "stdin")
    if style not in ("stdin", "function"):
        raise ValueError(f"style must be 'stdin' or 'function', got {style!r}")
    entry = data.get("entry_point")
    if style == "function" and (not isinstance(entry, str) or not entry.isidentifier()):
        raise ValueError("a function-style instance needs an 'entry_point' (a function name)")
    solution = data.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise ValueError("'solution' must be a string of Python code")

    def conv(items: Any, what: str) -> tuple[TestCase, ...]:
        if items is None:
            return ()
        if not isinstance(items, list | tuple):
            raise ValueError(f"'{what}' must be a list")
        out = []
        for t in items:
            if isinstance(t, TestCase):
                out.append(t)
            elif isinstance(t, str) and style == "function":
                out.append(TestCase.asserts(t))
            elif isinstance(t, dict) and "kind" in t:
                out.append(TestCase(**t))
            elif isinstance(t, dict) and set(t) <= {"input", "output"} and "output" in t:
                out.append(TestCase.io(str(t.get("input", "")), str(t["output"])))
            else:
                raise ValueError(
                    f"bad test {clip_text(repr(t), 80)}: use a TestCase, its dict, "
                    '{"input": ..., "output": ...} (stdin) or assert code (function)'
                )
            want = "stdio" if style == "stdin" else "assert"
            if out[-1].kind != want:
                raise ValueError(f"a {style}-style instance needs {want} tests")
        return tuple(out)

    return CodeProblem(
        id=str(data.get("id", "")),
        prompt=prompt,
        style=style,
        golden_solution=solution,
        tests=conv(data.get("tests"), "tests"),
        entry_point=entry,
        public_tests=conv(data.get("public_tests"), "public_tests"),
        starter_code=str(data.get("starter_code", "")),
        source="explicit",
    )
