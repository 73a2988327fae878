"""A bounded evaluator, on the host, for the assert tests of a program under test.

:mod:`verifiers.code_tests` decides an assert test (``assert f(3) == 9``,
``assert abs(f(1.33) - 0.33) < 1e-6``, a HumanEval ``check`` function with a loop, a JSON call
test) on the host: only the calls of the program's functions (``f(3)``) run in the sandbox, and
their results come back as plain data (:mod:`sandboxes.plain`). This module evaluates everything
else of the test, here, over those values: the expected values, the comparisons, ``abs``,
``sorted``, ``math.isclose``, loops over literal ranges. The program never sees an expected value
and never takes part in a comparison.

It understands a small, safe subset of Python (:class:`Evaluator`; what it may call is in
:mod:`verifiers.safe_builtins`): assignments, ``if``,
``for`` (with ``break`` / ``continue``), ``assert``, imports of ``math``, ``json`` and
``string``; literals, arithmetic, comparisons, boolean logic, subscripts, comprehensions,
f-strings, a list of pure built-in functions and methods. Anything else raises
:class:`Unsupported`, and the test is then run as a whole in a sandbox job of its own that does
not contain the program (see :mod:`verifiers.assert_plans`). A name the test uses without
defining it is a function of the program (:class:`Remote`): calling it is a *call* handed to
``remote``.

Everything is bounded: evaluation steps (``MAX_STEPS``), work (``MAX_WORK``: every operand and
result is charged by its size, so scanning a big list in a loop costs what it does, not one
node; numbers by their magnitude: a 14-character ``Decimal('4E+400000')`` is an integer of
400,001 digits to ``int()`` and is charged, and its conversion refused, as one; see
:mod:`verifiers.safe_builtins`), nesting (``MAX_DEPTH``), sizes of what the evaluator builds
(``MAX_ITEMS`` items, ``MAX_INT_BITS`` bits of an integer, format widths, three-argument ``pow``);
exceeding a bound raises :class:`TooExpensive` (an :class:`Unsupported`). In the host process an
evaluation runs under a much smaller budget (``inline=True``: ``INLINE_STEPS`` / ``INLINE_WORK``);
past it, :class:`OverInline` tells the caller (:mod:`verifiers.assert_plans`) to redo it in a
bounded worker process (:mod:`verifiers._bounded`), so the host never spends much on one test.

>>> ev = Evaluator(lambda path, args, kwargs: 9 if args == (3,) else 0)
>>> import ast
>>> ev.run(ast.parse("x = 3\\nassert f(x) == x * x"))
>>> ev.calls
[(('f',), (3,), {})]
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verifiers.safe_builtins import (
    _BINOPS,
    _BUILTIN_FUNCS,
    _BUILTINS,
    _CMPOPS,
    _GUARDED,
    _METHODS,
    _MODULES,
    _UNARY,
    MAX_ITEMS,
    TooExpensive,
    Unsupported,
    _BoundMethod,
    _check_size,
    _consuming,
    _is_module_func,
    _Module,
    _size,
    _too,
    call_work,
    check_format_spec,
    check_format_value,
    holds_decimal,
    work,
)

__all__ = [
    "MAX_STEPS",
    "Unsupported",
    "TooExpensive",
    "AssertFailed",
    "Remote",
    "PENDING",
    "Evaluator",
    "OverInline",
    "INLINE_STEPS",
    "INLINE_WORK",
    "max_depth",
]

MAX_STEPS = 20_000
"""Evaluation steps (expression nodes and statements) of one test."""
MAX_WORK = 5_000_000
"""Work of one test, in element steps (:func:`verifiers.safe_builtins.work`): every operand and
result of an operator, comparison or call is charged by its size, so a test's cost is bounded by
what it touches, not by how many syntax nodes it has (a ``MAX_ITEMS`` list scanned in a loop of
``MAX_STEPS`` iterations would be two billion comparisons)."""
MAX_DEPTH = 60
"""Deepest syntax tree the evaluator walks (it recurses)."""
INLINE_STEPS = 4_000
INLINE_WORK = 200_000
"""The budget of an evaluation in the host process (``inline=True``): past it the evaluator
raises :class:`OverInline` and the caller redoes the evaluation in a bounded worker process
(:mod:`verifiers._bounded`) with the full ``MAX_STEPS`` / ``MAX_WORK``."""


class OverInline(BaseException):
    """The in-process budget ran out: evaluate in the bounded worker instead. A BaseException
    so that no ``except Exception`` of the evaluator or the test's own logic swallows it."""


class AssertFailed(Exception):
    """An ``assert`` of the test is false; ``node`` is the statement, ``shown`` what the
    program's calls returned in it."""

    def __init__(self, node: ast.Assert, shown: list[str]) -> None:
        super().__init__("assertion failed")
        self.node = node
        self.shown = shown


@dataclass(frozen=True)
class Remote:
    """A function of the program under test (``path``: ``("f",)``, ``("Solution", "()",
    "twoSum")``); only calls of it are evaluated, by the sandbox."""

    path: tuple[str, ...]


class _Pending:
    """The unknown result of a call while its calls are being discovered."""

    def __repr__(self) -> str:
        return "PENDING"


PENDING: Any = _Pending()


def max_depth(tree: ast.AST, limit: int = MAX_DEPTH) -> int:
    """Depth of a syntax tree, counted without recursion (stops once past ``limit``).

    >>> max_depth(ast.parse("x = -(-(-1))"))
    6
    """
    best = 0
    stack = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        if d > best:
            best = d
            if best > limit:
                return best
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return best


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# the evaluator
# ----------------------------------------------------------------------------------------------


class Evaluator:
    """Evaluates a test's statements; a call of a :class:`Remote` goes to ``remote(path, args,
    kwargs)``, which returns the program's result (or :data:`PENDING` while calls are being
    discovered) or raises.

    ``discover=True``: results are :data:`PENDING` and every operation on one gives
    :data:`PENDING`; an ``assert`` on a pending value is skipped, a branch or loop that depends
    on one must not contain calls of the program (else :class:`Unsupported`). ``calls`` lists
    the calls made, in order.
    """

    def __init__(
        self,
        remote: Callable[[tuple[str, ...], tuple, dict], Any],
        *,
        discover: bool = False,
        bound: dict[str, Any] | None = None,
        inline: bool = False,
    ) -> None:
        self.remote = remote
        self.inline = inline
        self.max_steps = INLINE_STEPS if inline else MAX_STEPS
        self.max_work = INLINE_WORK if inline else MAX_WORK
        self.discover = discover
        self.env: dict[str, Any] = dict(bound or {})
        self.calls: list[tuple[tuple[str, ...], tuple, dict]] = []
        self.steps = 0
        self.work = 0
        self.shown: list[str] = []
        self.decimals = False  # a result held a Decimal: integers are charged quadratically

    # -- statements ----------------------------------------------------------------------------
    def run(self, module: ast.Module, *, checked: bool = False) -> None:
        """Run the statements (``checked``: the tree's depth was checked already)."""
        if not checked and max_depth(module) > MAX_DEPTH:
            raise TooExpensive("the test is nested too deeply")
        self._block(module.body)

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            if self.inline:
                raise OverInline()
            raise TooExpensive(f"the test takes more than {MAX_STEPS} evaluation steps")

    def _charge(self, *values: Any) -> None:
        """Charge the work of touching ``values`` (see ``MAX_WORK``)."""
        for v in values:
            self.work += work(v, self.max_work - self.work, self.decimals)
        self._over_work()

    def _over_work(self) -> None:
        if self.work > self.max_work:
            if self.inline:
                raise OverInline()
            raise TooExpensive(f"the test does more than {MAX_WORK} steps of work")

    def _block(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self._stmt(s)

    def _stmt(self, s: ast.stmt) -> None:
        self._tick()
        if isinstance(s, ast.Assert):
            self.shown = []
            value = self._expr(s.test)
            if value is PENDING:
                return
            if not self._truth(value):
                raise AssertFailed(s, self.shown)
        elif isinstance(s, ast.Assign):
            value = self._expr(s.value)
            for t in s.targets:
                self._assign(t, value)
        elif isinstance(s, ast.AnnAssign) and s.value is not None and s.simple:
            self._assign(s.target, self._expr(s.value))
        elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            old = self._name(s.target.id)
            self._assign(s.target, self._binop(type(s.op), old, self._expr(s.value)))
        elif isinstance(s, ast.Expr):
            self._expr(s.value)
        elif isinstance(s, ast.Import | ast.ImportFrom):
            self._import(s)
        elif isinstance(s, ast.If):
            test = self._expr(s.test)
            if test is PENDING:
                self._skip_pending(s)
            else:
                self._block(s.body if self._truth(test) else s.orelse)
        elif isinstance(s, ast.For) and not s.type_comment:
            self._for(s)
        elif isinstance(s, ast.Pass):
            return
        elif isinstance(s, ast.Break):
            raise _Break()
        elif isinstance(s, ast.Continue):
            raise _Continue()
        else:
            raise Unsupported(f"a {type(s).__name__} statement")

    def message(self, node: ast.Assert) -> str:
        """The text of a failed assert's message ("" when it has none or it cannot be
        evaluated here)."""
        if node.msg is None:
            return ""
        try:
            text = str(self._value(node.msg))
        except Exception:
            return ""
        return text if len(text) <= 300 else text[:299] + "…"

    def _skip_pending(self, node: ast.AST) -> None:
        """A branch or loop decided by a pending value: fine while it calls nothing remote."""
        if not self.discover:  # pragma: no cover - values are never pending then
            raise Unsupported("an undecided branch")
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and self._is_remote_callee(n.func):
                raise Unsupported("a call of the program under a branch that depends on a result")

    def _is_remote_callee(self, f: ast.expr) -> bool:
        while isinstance(f, ast.Attribute | ast.Call):
            f = f.value if isinstance(f, ast.Attribute) else f.func
        if not isinstance(f, ast.Name):
            return True  # unknown: count it
        value = self.env.get(f.id, _BUILTINS.get(f.id, _MODULES.get(f.id, Remote((f.id,)))))
        return isinstance(value, Remote)

    def _for(self, s: ast.For) -> None:
        seq = self._expr(s.iter)
        if seq is PENDING:
            self._skip_pending(s)
            return
        if isinstance(seq, range) and len(seq) > MAX_ITEMS:
            raise TooExpensive("a loop too long")
        self._charge(seq)
        broke = False
        for item in seq:
            self._tick()
            self._assign(s.target, item)
            try:
                self._block(s.body)
            except _Break:
                broke = True
                break
            except _Continue:
                continue
        if not broke:
            self._block(s.orelse)

    def _import(self, s: ast.Import | ast.ImportFrom) -> None:
        if isinstance(s, ast.Import):
            for a in s.names:
                if a.name not in _MODULES:
                    raise Unsupported(f"import {a.name}")
                self.env[a.asname or a.name] = _Module(a.name)
            return
        if s.module not in _MODULES or s.level:
            raise Unsupported(f"from {s.module} import")
        for a in s.names:
            if a.name not in _MODULES[s.module]:
                raise Unsupported(f"from {s.module} import {a.name}")
            self.env[a.asname or a.name] = _MODULES[s.module][a.name]

    def _assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            return
        if isinstance(target, ast.Tuple | ast.List):
            if value is PENDING:
                for t in target.elts:
                    self._assign(t, PENDING)
                return
            items = list(value) if _size(value) <= MAX_ITEMS else _too("unpacking")
            if len(items) != len(target.elts) or any(
                isinstance(t, ast.Starred) for t in target.elts
            ):
                raise Unsupported("this unpacking")
            for t, v in zip(target.elts, items):
                self._assign(t, v)
            return
        raise Unsupported(f"assignment to a {type(target).__name__}")

    # -- expressions ---------------------------------------------------------------------------
    def _truth(self, value: Any) -> bool:
        return bool(value)

    def _name(self, name: str) -> Any:
        if name in self.env:
            return self.env[name]
        if name in _BUILTINS:
            return _BUILTINS[name]
        return Remote((name,))

    def _expr(self, e: ast.expr) -> Any:
        self._tick()
        if isinstance(e, ast.List | ast.Tuple | ast.Set | ast.Dict):
            code = _literal_code(e)
            if code is not None:  # a display of constants only: built at C speed, fresh
                return eval(code, {"__builtins__": {}})
        method = getattr(self, "_e_" + type(e).__name__, None)
        if method is None:
            raise Unsupported(f"a {type(e).__name__} expression")
        value = method(e)
        if isinstance(value, Remote) and not isinstance(e, ast.Name | ast.Attribute):
            raise Unsupported("a function of the program used as a value")
        return value

    def _value(self, e: ast.expr) -> Any:
        v = self._expr(e)
        if isinstance(v, Remote | _Module):
            raise Unsupported("a function or module used as a value")
        return v

    def _e_Constant(self, e: ast.Constant) -> Any:
        return e.value

    def _e_Name(self, e: ast.Name) -> Any:
        return self._name(e.id)

    def _items(self, elts: list[ast.expr]) -> list[Any] | Any:
        out: list[Any] = []
        pending = False
        for x in elts:
            if isinstance(x, ast.Starred):
                v = self._value(x.value)
                if v is PENDING:
                    pending = True
                    continue
                out.extend(_consuming(list)(v))
            else:
                v = self._value(x)
                pending = pending or v is PENDING
                out.append(v)
        return PENDING if pending else _check_size(out)

    def _e_List(self, e: ast.List) -> Any:
        return self._items(e.elts)

    def _e_Tuple(self, e: ast.Tuple) -> Any:
        items = self._items(e.elts)
        return items if items is PENDING else tuple(items)

    def _e_Set(self, e: ast.Set) -> Any:
        items = self._items(e.elts)
        return items if items is PENDING else set(items)

    def _e_Dict(self, e: ast.Dict) -> Any:
        if any(k is None for k in e.keys):
            raise Unsupported("** in a dict display")
        keys = self._items([k for k in e.keys if k is not None])
        values = self._items(e.values)
        if keys is PENDING or values is PENDING:
            return PENDING
        return dict(zip(keys, values))

    def _e_UnaryOp(self, e: ast.UnaryOp) -> Any:
        v = self._value(e.operand)
        if v is PENDING:
            return PENDING
        if isinstance(e.op, ast.Not):
            return not self._truth(v)
        return _check_size(_UNARY[type(e.op)](v))

    def _binop(self, op: type, a: Any, b: Any) -> Any:
        if a is PENDING or b is PENDING:
            return PENDING
        fn = _BINOPS.get(op)
        if fn is None:
            raise Unsupported("this operator")
        self._charge(a, b)
        if op in (ast.Mult, ast.FloorDiv, ast.Mod) and type(a) is int and type(b) is int:
            self._charge_limbs(work(a) * work(b) // 8)
        out = _check_size(fn(a, b))
        self._charge(out)
        if op is ast.Pow and type(out) is int:
            self._charge_limbs(work(out) ** 2 // 8)
        return out

    def _charge_limbs(self, n: int) -> None:
        self.work += n
        self._over_work()

    def _e_BinOp(self, e: ast.BinOp) -> Any:
        return self._binop(type(e.op), self._value(e.left), self._value(e.right))

    def _e_BoolOp(self, e: ast.BoolOp) -> Any:
        is_and = isinstance(e.op, ast.And)
        result: Any = None
        pending = False
        for x in e.values:
            if pending:  # discovery only: find the calls of the other operands
                self._quietly(x)
                continue
            result = self._value(x)
            if result is PENDING:
                pending = True
            elif self._truth(result) != is_and:
                return result
        return PENDING if pending else result

    def _quietly(self, x: ast.expr) -> None:
        try:
            self._value(x)
        except TooExpensive:
            raise
        except Unsupported:
            raise
        except Exception:
            pass

    def _e_Compare(self, e: ast.Compare) -> Any:
        left = self._value(e.left)
        result: Any = True
        for op, right_node in zip(e.ops, e.comparators):
            right = self._value(right_node)
            if left is PENDING or right is PENDING:
                result = PENDING
            elif result is not PENDING and not self._compare(op, left, right):
                return False
            left = right
        return result

    def _compare(self, op: ast.cmpop, left: Any, right: Any) -> Any:
        self._charge(left, right)
        return _CMPOPS[type(op)](left, right)

    def _e_IfExp(self, e: ast.IfExp) -> Any:
        test = self._value(e.test)
        if test is PENDING:
            self._quietly(e.body)
            self._quietly(e.orelse)
            return PENDING
        return self._value(e.body if self._truth(test) else e.orelse)

    def _e_Subscript(self, e: ast.Subscript) -> Any:
        v = self._value(e.value)
        if isinstance(e.slice, ast.Slice):
            parts = [
                None if p is None else self._value(p)
                for p in (e.slice.lower, e.slice.upper, e.slice.step)
            ]
            if v is PENDING or _pending(parts):
                return PENDING
            out = v[slice(*parts)]
            self._charge(out)
            return out
        k = self._value(e.slice)
        if v is PENDING or k is PENDING:
            return PENDING
        self._charge(k)
        return v[k]

    def _comprehension(
        self, node: ast.expr, gens: list[ast.comprehension], emit: Callable[[], Any]
    ) -> Any:
        """Run the generators of a comprehension, calling ``emit`` for each item; its
        variables do not leak. PENDING if an iterable or condition is pending."""
        saved = dict(self.env)
        try:
            return self._gen(node, gens, 0, emit)
        finally:
            self.env = saved

    def _gen(
        self, node: ast.expr, gens: list[ast.comprehension], k: int, emit: Callable[[], Any]
    ) -> Any:
        if k == len(gens):
            return emit()
        g = gens[k]
        if g.is_async:
            raise Unsupported("async comprehensions")
        seq = self._value(g.iter)
        if seq is PENDING:
            self._skip_pending(node)
            return PENDING
        self._charge(seq)
        pending = False
        for item in _consuming(list)(seq):
            self._tick()
            self._assign(g.target, item)
            tests = [self._value(c) for c in g.ifs]
            if any(t is PENDING for t in tests):
                self._skip_pending(node)
                pending = True
                continue
            if all(self._truth(t) for t in tests) and self._gen(node, gens, k + 1, emit) is PENDING:
                pending = True
        return PENDING if pending else None

    def _collect(self, e: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> Any:
        out: list[Any] = []

        def emit() -> Any:
            v = self._value(e.elt)
            if v is PENDING:
                return PENDING
            out.append(v)
            if len(out) > MAX_ITEMS:
                raise TooExpensive(f"a comprehension of more than {MAX_ITEMS} items")
            return None

        return PENDING if self._comprehension(e, e.generators, emit) is PENDING else out

    def _e_ListComp(self, e: ast.ListComp) -> Any:
        return self._collect(e)

    def _e_GeneratorExp(self, e: ast.GeneratorExp) -> Any:
        return self._collect(e)

    def _e_SetComp(self, e: ast.SetComp) -> Any:
        items = self._collect(e)
        return items if items is PENDING else set(items)

    def _e_DictComp(self, e: ast.DictComp) -> Any:
        out: dict[Any, Any] = {}

        def emit() -> Any:
            k, v = self._value(e.key), self._value(e.value)
            if k is PENDING or v is PENDING:
                return PENDING
            out[k] = v
            if len(out) > MAX_ITEMS:
                raise TooExpensive(f"a comprehension of more than {MAX_ITEMS} items")
            return None

        return PENDING if self._comprehension(e, e.generators, emit) is PENDING else out

    def _e_JoinedStr(self, e: ast.JoinedStr) -> Any:
        parts = []
        for v in e.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                x = self._value(v.value)
                spec = self._value(v.format_spec) if v.format_spec is not None else ""
                if x is PENDING or spec is PENDING:
                    return PENDING
                self._charge(x)
                check_format_value(x, str(spec))
                if v.conversion == ord("r"):
                    x = repr(x)
                elif v.conversion == ord("s"):
                    x = str(x)
                parts.append(_check_size(format(x, check_format_spec(str(spec)))))
            else:
                raise Unsupported("this f-string")
        return _check_size("".join(parts))

    def _e_Attribute(self, e: ast.Attribute) -> Any:
        # Solution().method: a method of a fresh instance of the program's class
        if isinstance(e.value, ast.Call) and not e.value.args and not e.value.keywords:
            inner = self._expr(e.value.func)
            if isinstance(inner, Remote):
                return Remote((*inner.path, "()", e.attr))
        base = self._expr(e.value)
        if isinstance(base, Remote):
            return Remote((*base.path, e.attr))
        if isinstance(base, _Module):
            if e.attr not in _MODULES[base.name]:
                raise Unsupported(f"{base.name}.{e.attr}")
            return _MODULES[base.name][e.attr]
        if base is PENDING:
            return PENDING
        if e.attr in _METHODS.get(type(base), ()):
            return _BoundMethod(base, e.attr)
        raise Unsupported(f"the attribute .{e.attr}")

    def _e_Call(self, e: ast.Call) -> Any:
        func = self._expr(e.func)
        args: list[Any] = []
        for a in e.args:
            if isinstance(a, ast.Starred):
                v = self._value(a.value)
                if v is PENDING:
                    args.append(PENDING)
                else:
                    args.extend(_consuming(list)(v))
            else:
                args.append(self._value(a))
        kwargs: dict[str, Any] = {}
        for k in e.keywords:
            if k.arg is None:
                raise Unsupported("** arguments")
            kwargs[k.arg] = self._value(k.value)
        if isinstance(func, Remote):
            if _pending(args) or _pending(kwargs.values()):
                raise Unsupported("a call of the program whose arguments depend on a result")
            self.calls.append((func.path, tuple(args), kwargs))
            value = self.remote(func.path, tuple(args), kwargs)
            if value is not PENDING:
                self.shown.append(_show(value))
                self.decimals = self.decimals or holds_decimal(value)
            return value
        if func is PENDING or _pending(args) or _pending(kwargs.values()):
            return PENDING
        self._charge(*args, *kwargs.values())
        self._charge_limbs(call_work(func, args))
        if isinstance(func, _BoundMethod):
            self._charge(func.obj)
            out = func(*args, **kwargs)
        else:
            if id(func) not in _BUILTIN_FUNCS and not _is_module_func(func):
                raise Unsupported("a call of something that is not a known pure function")
            key = kwargs.get("key")
            if key is not None and id(key) not in _BUILTIN_FUNCS:
                raise Unsupported("a key function")
            if func is format and len(args) > 1:
                check_format_spec(str(args[1]))
            out = _check_size(_GUARDED.get(id(func), func)(*args, **kwargs))
        self._charge(out)
        return out


_LITERALS: dict[int, tuple[ast.expr, Any]] = {}


def _literal_code(e: ast.expr) -> Any:
    """Compiled code of a container display made of constants only (None otherwise); cached
    per node. Evaluating it can do nothing but build the value, as large as the source."""
    hit = _LITERALS.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    code = None
    if all(isinstance(n, _LITERAL_NODES) for n in ast.walk(e)) and all(
        isinstance(n.operand, ast.Constant) for n in ast.walk(e) if isinstance(n, ast.UnaryOp)
    ):
        code = compile(ast.Expression(e), "<literal>", "eval")
    if len(_LITERALS) > 50_000:
        _LITERALS.clear()
    _LITERALS[id(e)] = (e, code)
    return code


_LITERAL_NODES = (
    ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Constant, ast.Load, ast.UnaryOp, ast.USub, ast.UAdd,
)  # fmt: skip


def _pending(values: Any) -> bool:
    return any(v is PENDING for v in values)


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= 120 else text[:119] + "…"
