"""Worker process for symbolic math grading (started by :mod:`verifiers._math_pool`).

math-verify parses LaTeX with sympy and bounds its own work with ``signal.alarm``, which only works
in a process's main thread, and some sympy operations (huge integer powers) cannot be interrupted
by a signal at all. So the slow path of :mod:`verifiers.math_answer` runs here, in a separate
process that the parent kills when a grading overruns its deadline.

Protocol (one JSON object per line): after importing math-verify the worker writes
``{"ready": true}``; then for every request ``{"i": id, "p": prediction, "g": gold, "d": delta,
"t": inner_timeout_s}`` it writes ``{"i": id, "c": correct, "r": reason, "pn": ..., "gn": ...,
"m": method}``. A request with ``"o": "form"`` asks how ``g`` reads instead (:func:`read_form`):
``{"i": id, "f": "none" | "rational" | "other", "l": its LaTeX, "r": reason}``. End of input ends
the worker. The protocol stream is a private duplicate of the original stdout; fd 1 and fd 2 point
to /dev/null so library prints and log spam go nowhere.

The pool runs this source after that of ``sandboxes/inside.py`` (``drop_privileges``,
``die_with_parent``), isolated by bubblewrap: given ``$MAS_DROP_UID`` (the host is root), the
worker first switches to that uid for good; it always dies with its parent.
"""

import json
import logging
import os
import sys
from fractions import Fraction

NORM_CHARS = 200
"""Normalised forms are clipped to this many characters."""


_ROUNDOFF = Fraction("1e-9")


def _num_eq(a: Fraction, b: Fraction, delta: Fraction) -> bool:
    """NumEq as ``verifiers.math_answer.num_eq`` reads it (an integer reference needs the
    integer; otherwise a relative tolerance), repeated here: this worker imports no project
    module."""
    if b.denominator == 1:
        return abs(a - b) <= _ROUNDOFF
    return abs(a - b) <= delta * abs(b)


def _wrap(text: str) -> str:
    if any(tok in text for tok in ("\\boxed", "\\fbox", "$", "\\(", "\\[")):
        return text
    return "\\boxed{" + text + "}"


def _numeric_value(expr: object) -> Fraction | None:
    """Exact or 40-digit value of a real, finite numeric sympy expression; else None."""
    import sympy

    if not isinstance(expr, sympy.Expr) or isinstance(expr, sympy.Symbol):
        return None
    if isinstance(expr, sympy.Rational):
        return Fraction(int(expr.p), int(expr.q))
    if not expr.is_number:
        return None
    if isinstance(expr, sympy.Float):
        val = expr
    else:
        val = sympy.N(expr, 40)
    if not isinstance(val, (sympy.Float, sympy.Rational)):
        return None
    if isinstance(val, sympy.Rational):
        return Fraction(int(val.p), int(val.q))
    if not val.is_finite:
        return None
    return Fraction(str(val))


def _short(obj: object) -> str:
    try:
        text = str(obj)
    except Exception:
        return "<unprintable>"
    return text if len(text) <= NORM_CHARS else text[: NORM_CHARS - 1] + "…"


def grade_symbolic(pred: str, gold: str, delta: float, inner_timeout: int) -> dict:
    """Grade one prediction against one gold answer with math-verify + NumEq (in this process)."""
    import math_verify as mv

    gold_parsed = mv.parse(_wrap(gold), parsing_timeout=inner_timeout)
    if not gold_parsed:
        return {"c": False, "r": "could not parse the reference answer", "m": "math_verify"}
    pred_parsed = mv.parse(_wrap(pred), parsing_timeout=inner_timeout)
    out = {"gn": _short(gold_parsed[0]), "m": "math_verify"}
    if not pred_parsed:
        return {**out, "c": False, "r": "could not parse the answer"}
    out["pn"] = _short(pred_parsed[0])
    gval = _numeric_value(gold_parsed[0])
    pval = _numeric_value(pred_parsed[0]) if gval is not None else None
    if gval is not None and pval is not None:
        d = Fraction(repr(float(delta)))
        ok = _num_eq(pval, gval, d)
        # (no math-verify after a numeric mismatch: it would accept 42% for 0.42 and for 42)
        return {**out, "c": ok, "r": "numeric match (NumEq)" if ok else "numeric mismatch (NumEq)"}
    if "%" in pred:  # percentages were resolved by the host; one left here is not a number
        return {**out, "c": False, "r": "a percent sign the grader does not read"}
    ok = mv.verify(gold_parsed, pred_parsed, timeout_seconds=inner_timeout)
    return {**out, "c": bool(ok), "r": "symbolic match" if ok else "symbolic mismatch"}


def read_form(gold: str, inner_timeout: int) -> dict:
    """How math-verify reads ``gold``: not as a mathematical object (``"none"``: math-verify
    falls back to the raw string, which only that very string matches), as a rational number
    (``"rational"``, with its value), or as anything else (``"other"``: an irrational number, an
    expression, a set, an interval, an equation), with the LaTeX of what it read."""
    import math_verify as mv
    import sympy

    parsed = mv.parse(_wrap(gold), parsing_timeout=inner_timeout)
    if not parsed or not isinstance(parsed[0], sympy.Basic):
        return {"f": "none", "r": "math-verify does not read it as a mathematical expression"}
    expr = parsed[0]
    if isinstance(expr, sympy.Expr) and expr.is_number and expr.is_rational:
        value = sympy.nsimplify(expr)
        if isinstance(value, sympy.Rational):
            return {"f": "rational", "l": _short(value), "r": "a rational number"}
    latex = sympy.latex(expr)
    if len(latex) > NORM_CHARS:
        return {"f": "none", "r": "its LaTeX form is too long"}
    return {"f": "other", "l": latex, "r": "ok"}


def _limit_memory(mb: int) -> None:
    try:
        import resource

        limit = mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass


def _isolate() -> None:
    """Drop to ``$MAS_DROP_UID`` (if set) and die with the parent (functions of
    ``sandboxes/inside.py``, which the pool puts before this source)."""
    parent = os.getppid()
    uid = os.environ.pop("MAS_DROP_UID", "")
    if uid:
        globals()["drop_privileges"](int(uid), int(uid))
    if "die_with_parent" in globals():
        globals()["die_with_parent"](parent)


def main() -> None:
    _isolate()
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    logging.disable(logging.CRITICAL)
    _limit_memory(int(os.environ.get("VERIFIERS_MATH_WORKER_MB", "1536")))
    import math_verify  # noqa: F401  (import once, before announcing readiness)

    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        try:
            if req.get("o") == "form":
                res = read_form(req["g"], int(req.get("t", 2)))
            else:
                res = grade_symbolic(req["p"], req["g"], req.get("d", 1e-6), int(req.get("t", 2)))
        except MemoryError:
            res = {"c": False, "r": "grader ran out of memory", "m": "math_verify"}
            res["transient"] = True
        except BaseException as exc:  # a grading must never take the worker down
            res = {"c": False, "r": f"grader error: {type(exc).__name__}", "m": "math_verify"}
            res["transient"] = True
        res["i"] = req.get("i")
        proto.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
