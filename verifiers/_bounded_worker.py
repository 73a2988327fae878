"""The worker process of :mod:`verifiers._bounded` (not imported by the host).

Reads JSON lines ``{"i": id, "f": name, "a": [args]}`` on stdin and answers each with
``{"i": id, "ok": true, "r": result}`` or ``{"i": id, "ok": false, "e": message}`` on stdout. It
runs under an address-space limit (``RLIMIT_AS``) and exits when stdin closes (its host is
gone). The functions are the full-budget versions of host-side checks; see ``FUNCTIONS``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any


def _compile(source: str, filename: str) -> list:
    from verifiers.source_checks import _compile_local

    c = _compile_local(source, filename)
    return [c.ok, c.reason]


def _plan(code: str, entry_point: str | None, prelude: str) -> dict:
    from verifiers.assert_plans import plan_summary, plan_test

    return plan_summary(plan_test(code, entry_point, prelude, inline=False))


def _verdict(code: str, entry_point: str | None, prelude: str, records: list) -> list:
    from verifiers.assert_plans import plan_test, result_of_record, static_verdict

    plan = plan_test(code, entry_point, prelude, inline=False)
    out = static_verdict(plan, [result_of_record(r) for r in records], inline=False)
    return [out.passed, out.status, out.reason]


def _parse_asserts(code: str, entry_point: str, max_tests: int) -> list:
    from verifiers.written_tests import _parse_assert_code

    tests, problem = _parse_assert_code(code, entry_point, max_tests)
    return [[[t.code, t.name] for t in tests], problem]


def _sokoban_solve(rows: list[str], max_nodes: int) -> list:
    from verifiers.sokoban import Board, solve

    sol = solve(Board.from_xsb(rows), max_nodes=int(max_nodes))
    return [sol.status, sol.moves, sol.nodes]


def _sudoku_unique(puzzle: list[list[int]], max_nodes: int) -> list:
    from verifiers.sudoku import check_unique

    out = check_unique(puzzle, max_nodes=int(max_nodes))
    return [out.status, out.solution, out.nodes]


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "compile": _compile,
    "plan": _plan,
    "verdict": _verdict,
    "parse_asserts": _parse_asserts,
    "sokoban_solve": _sokoban_solve,
    "sudoku_unique": _sudoku_unique,
}


def _limit_memory(mb: int) -> None:
    import resource

    limit = mb << 20
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(memory_mb: int = 768) -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    _limit_memory(memory_mb)
    import verifiers._bounded
    import verifiers.assert_plans  # (imported once, before the first request)

    verifiers._bounded.IN_WORKER = True
    verifiers._bounded.LOCAL.update(FUNCTIONS)
    proto.write(json.dumps({"ready": True}) + "\n")

    for line in sys.stdin:
        try:
            req = json.loads(line)
            result: Any = FUNCTIONS[req["f"]](*req["a"])
            answer = {"i": req.get("i"), "ok": True, "r": result}
        except MemoryError:
            answer = {"i": req.get("i"), "ok": False, "e": "out of memory"}
        except Exception as exc:  # a request must never take the worker down
            answer = {"i": req.get("i"), "ok": False, "e": f"{type(exc).__name__}: {exc}"}
        proto.write(json.dumps(answer) + "\n")
