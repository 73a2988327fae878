"""In-sandbox harness that turns a policy's assert test into plain asserts, with no program.

:mod:`verifiers.assert_plans` sends this file's source, followed by a call of
:func:`_mas_concretize`, as the code of a sandbox job (it is never imported on the host). The job
holds the trusted prelude and the test, and nothing of any program: no result, no expected value,
no golden output. Every name the test takes from the program is a *symbol* (:class:`_Sym`):
calling it, and every operation on what a call returns, builds the source text of an expression
instead of a value. The test's own computation (helpers, loops over its inputs, seeded random
inputs, prelude helpers on its inputs) runs for real, so what comes out is the test with its
inputs and expected values written as literals::

    def expected(n):                        assert f(0) == 0
        return n * n                  ->    assert f(1) == 1
    for i in range(3):                      assert f(2) == 4
        assert f(i) == expected(i)

That text is then planned on the host like any test a policy writes; if the host can decide it
(:func:`verifiers.assert_plans.plan_test` says ``static``), it is decided there over the
program's plain results, otherwise the test is invalid. A test whose control flow depends on a
program's result (``if f(2) > 0:``, iterating over a result, a result as a dict key) cannot be
written this way and is reported ``undecided``; so is a value with no literal form.

One line goes to fd 3: ``<nonce> C <json>`` with ``s`` (``ok``, ``undecided``, ``error``), ``r``
(a reason) and ``c`` (the asserts). Standard library, ``_mas_plain`` and ``_mas_inside`` only.
"""
# ruff: noqa: UP031, SIM905  (%-formatting and word lists, as in the sandbox server)

import builtins

try:  # installed by the sandbox's fork server
    import _mas_inside as _I
    import _mas_plain as _P
except ImportError:  # read on the host (tools, doctest collection)
    from sandboxes import inside as _I
    from sandboxes import plain as _P

_MAX_CHARS = 200_000  # the longest test assert_plans accepts (MAX_TEST_CHARS)
_MAX_ASSERTS = 2000  # as many as a test may make calls (MAX_CALLS)
_MAX_DEPTH = 40


class _Undecided(BaseException):
    """The test cannot be written without the program's results (``str``: why)."""


class _Sym:
    """What a program's call returns, as the source text of an expression."""

    __slots__ = ("_s",)

    def __init__(self, src):
        if len(src) > _MAX_CHARS:
            raise _Undecided("an expression longer than %d characters" % _MAX_CHARS)
        object.__setattr__(self, "_s", src)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Sym("%s.%s" % (self._s, name))

    def __setattr__(self, name, value):
        raise _Undecided("an assignment to an attribute of a result")

    def __call__(self, *args, **kwargs):
        return _Sym("%s(%s)" % (self._s, _args(args, kwargs)))

    def __getitem__(self, key):
        return _Sym("%s[%s]" % (self._s, _index(key)))

    def __bool__(self):
        raise _Undecided("control flow that depends on a result of the program")

    def __iter__(self):
        raise _Undecided("iteration over a result of the program")

    def __len__(self):
        raise _Undecided("len() of a result outside an expression")

    def __contains__(self, item):
        raise _Undecided("`in` over a result outside an expression")

    def __hash__(self):
        raise _Undecided("a result of the program used as a key")

    def __index__(self):
        raise _Undecided("a result of the program used as an index or size")

    def __int__(self):
        raise _Undecided("int() of a result outside an expression")

    def __float__(self):
        raise _Undecided("float() of a result outside an expression")

    def __complex__(self):
        raise _Undecided("complex() of a result outside an expression")

    def __str__(self):
        raise _Undecided("text made of a result of the program")

    def __repr__(self):
        raise _Undecided("text made of a result of the program")

    def __format__(self, spec):
        raise _Undecided("text made of a result of the program")

    def __reversed__(self):
        raise _Undecided("iteration over a result of the program")

    def __round__(self, n=None):
        return _Sym("round(%s)" % _args((self,) if n is None else (self, n), {}))

    def __abs__(self):
        return _Sym("abs(%s)" % self._s)

    def __neg__(self):
        return _Sym("(-%s)" % self._s)

    def __pos__(self):
        return _Sym("(+%s)" % self._s)

    def __invert__(self):
        return _Sym("(~%s)" % self._s)


def _binary(op):
    def forward(self, other):
        return _Sym("(%s %s %s)" % (self._s, op, _lit(other)))

    def reflected(self, other):
        return _Sym("(%s %s %s)" % (_lit(other), op, self._s))

    return forward, reflected


for _name, _op in (
    ("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("floordiv", "//"),
    ("mod", "%"), ("pow", "**"), ("and", "&"), ("or", "|"), ("xor", "^"), ("lshift", "<<"),
    ("rshift", ">>"), ("matmul", "@"),
):  # fmt: skip
    _f, _r = _binary(_op)
    setattr(_Sym, "__%s__" % _name, _f)
    setattr(_Sym, "__r%s__" % _name, _r)

for _name, _op in (
    ("eq", "=="),
    ("ne", "!="),
    ("lt", "<"),
    ("le", "<="),
    ("gt", ">"),
    ("ge", ">="),
):
    setattr(_Sym, "__%s__" % _name, _binary(_op)[0])


def _symbolic(value, depth=0):
    """Does ``value`` hold a symbol (inside plain containers too)?"""
    if isinstance(value, _Sym):
        return True
    if depth > _MAX_DEPTH:
        raise _Undecided("a value nested more than %d deep" % _MAX_DEPTH)
    if isinstance(value, dict):
        return any(_symbolic(k, depth + 1) or _symbolic(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_symbolic(v, depth + 1) for v in value)
    return False


_TYPES = {
    t: t.__name__
    for t in (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset, type(None))
}
_TYPES[type(None)] = "type(None)"


def _lit(value, depth=0):
    """Python source that evaluates to ``value`` (a symbol: its expression)."""
    if isinstance(value, _Sym):
        return value._s
    if depth > _MAX_DEPTH:
        raise _Undecided("a value nested more than %d deep" % _MAX_DEPTH)
    t = type(value)
    if value is None or t in (bool, int, str, bytes):
        return repr(value)
    if t is float:
        if value != value:
            return "float('nan')"
        if value in (float("inf"), float("-inf")):
            return "float('%s')" % ("inf" if value > 0 else "-inf")
        return repr(value)
    if t is complex:
        return "complex(%s, %s)" % (_lit(value.real), _lit(value.imag))
    if t is list:
        return "[%s]" % ", ".join(_lit(v, depth + 1) for v in value)
    if t is tuple:
        inner = ", ".join(_lit(v, depth + 1) for v in value)
        return "(%s,)" % inner if len(value) == 1 else "(%s)" % inner
    if t is dict:
        items = ("%s: %s" % (_lit(k, depth + 1), _lit(v, depth + 1)) for k, v in value.items())
        return "{%s}" % ", ".join(items)
    if t in (set, frozenset):
        inner = ", ".join(_lit(v, depth + 1) for v in _sorted_if_can(value))
        body = ("{%s}" % inner) if value else ""
        return body if (t is set and value) else "%s(%s)" % (t.__name__, body)
    if isinstance(value, type) and value in _TYPES:
        return _TYPES[value]
    if isinstance(value, _Module):
        return value._name
    raise _Undecided("a value with no literal form (%s)" % t.__name__)


def _sorted_if_can(items):
    try:
        return sorted(items)
    except TypeError:
        return list(items)


def _args(args, kwargs):
    parts = [_lit(a) for a in args]
    parts += ["%s=%s" % (k, _lit(v)) for k, v in kwargs.items()]
    return ", ".join(parts)


def _index(key):
    if isinstance(key, slice):
        return ":".join("" if x is None else _lit(x) for x in (key.start, key.stop, key.step))
    if isinstance(key, tuple):
        return ", ".join(_index(k) for k in key) + ("," if len(key) == 1 else "")
    return _lit(key)


class _Remote:
    """A name the test takes from the program (the entry point, ``Solution``)."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        return _Sym("%s(%s)" % (self._name, _args(args, kwargs)))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Sym("%s.%s" % (self._name, name))


class _Module:
    """``math`` or ``json`` for the test: its functions build expressions when given symbols."""

    def __init__(self, module, name, used):
        self._module, self._name, self._used = module, name, used

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if not callable(value) or name.startswith("_"):
            return value
        where = "%s.%s" % (self._name, name)

        def call(*args, **kwargs):
            if _symbolic((args, kwargs)):
                self._used.add(self._name)
                return _Sym("%s(%s)" % (where, _args(args, kwargs)))
            return value(*args, **kwargs)

        return call


_WRAPPED = (
    "abs all any bool dict divmod float frozenset int isinstance len list max min pow repr "
    "reversed round set sorted str sum tuple"
).split()


def _builtins_for(used):
    real_import = builtins.__import__
    table = dict(vars(builtins))

    def wrap(name):
        real = getattr(builtins, name)

        def call(*args, **kwargs):
            # an iterator argument (a generator expression) is read once, here, so that its
            # items can be written out when one of them is a result
            args = tuple(list(a) if hasattr(a, "__next__") else a for a in args)
            if _symbolic((args, kwargs)):
                return _Sym("%s(%s)" % (name, _args(args, kwargs)))
            return real(*args, **kwargs)

        return call

    for name in _WRAPPED:
        table[name] = wrap(name)

    def imported(name, globals=None, locals=None, fromlist=(), level=0):
        module = real_import(name, globals, locals, fromlist, level)
        if name in ("math", "json") and not level:
            return _Module(module, name, used)
        return module

    table["__import__"] = imported
    table["print"] = lambda *a, **k: None  # nothing the test prints is read
    return table


# ------------------------------------------------------------------------ rewritten expressions


def _compare(op, a, b):
    if _symbolic(a) or _symbolic(b):
        return _Sym("(%s %s %s)" % (_lit(a), op, _lit(b)))
    return _OPS[op](a, b)


_OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "is": lambda a, b: a is b,
    "is not": lambda a, b: a is not b,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
}


def _join(word, parts):
    if len(parts) == 1:
        return parts[0]
    return _Sym("(%s)" % (" %s " % word).join(_lit(p) for p in parts))


def _mas_cmp(ops, *thunks):
    left = thunks[0]()
    parts = []
    for op, thunk in zip(ops, thunks[1:]):
        right = thunk()
        r = _compare(op, left, right)
        if isinstance(r, _Sym):
            parts.append(r)
        elif not r:
            return False
        left = right
    return _join("and", parts) if parts else True


def _mas_bool(word, *thunks):
    parts = []
    value = None
    for thunk in thunks:
        value = thunk()
        if isinstance(value, _Sym):
            parts.append(value)
            continue
        if (not value) if word == "and" else bool(value):
            if not parts:
                return value  # decided before any result was involved
            parts.append(value)
            break
        if parts:
            parts.append(value)
    return _join(word, parts) if parts else value


def _mas_not(value):
    return _Sym("(not %s)" % value._s) if isinstance(value, _Sym) else not value


def _mas_ifexp(cond, then, other):
    c = cond()
    if isinstance(c, _Sym):
        return _Sym("(%s if %s else %s)" % (_lit(then()), c._s, _lit(other())))
    return then() if c else other()


class _Asserts:
    def __init__(self):
        self.lines = []
        self.chars = 0

    def check(self, value):
        if isinstance(value, _Sym):
            line = "assert %s" % value._s
        elif value:
            return
        else:
            line = "assert False"  # fails whatever the program does
        if len(self.lines) >= _MAX_ASSERTS:
            raise _Undecided("more than %d asserts" % _MAX_ASSERTS)
        self.chars += len(line) + 1
        if self.chars > _MAX_CHARS:
            raise _Undecided("asserts longer than %d characters" % _MAX_CHARS)
        self.lines.append(line)


def _rewritten(test):
    """``test`` compiled with comparisons, ``and``/``or``/``not``, conditional expressions and
    ``assert`` statements routed through the helpers above (they keep Python's semantics on
    plain values and build expressions on symbols)."""
    import ast

    def thunk(node):
        return ast.Lambda(
            ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            node,
        )

    def call(name, args):
        return ast.Call(ast.Name(name, ast.Load()), args, [])

    names = {
        ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
    }  # fmt: skip

    class Rewrite(ast.NodeTransformer):
        def visit_Compare(self, node):
            self.generic_visit(node)
            ops = ast.Tuple([ast.Constant(names[type(o)]) for o in node.ops], ast.Load())
            return call("__mas_cmp__", [ops] + [thunk(n) for n in [node.left, *node.comparators]])

        def visit_BoolOp(self, node):
            self.generic_visit(node)
            word = "and" if isinstance(node.op, ast.And) else "or"
            return call("__mas_bool__", [ast.Constant(word)] + [thunk(v) for v in node.values])

        def visit_UnaryOp(self, node):
            self.generic_visit(node)
            return call("__mas_not__", [node.operand]) if isinstance(node.op, ast.Not) else node

        def visit_IfExp(self, node):
            self.generic_visit(node)
            return call("__mas_ifexp__", [thunk(node.test), thunk(node.body), thunk(node.orelse)])

        def visit_Assert(self, node):
            self.generic_visit(node)
            return ast.Expr(call("__mas_assert__", [node.test]))

    tree = Rewrite().visit(ast.parse(test, "test.py"))
    ast.fix_missing_locations(tree)
    return compile(tree, "test.py", "exec", dont_inherit=True)


def _mas_concretize(nonce, stubs, prelude, test):
    import random

    random.seed(0)
    used = set()
    asserts = _Asserts()
    ns = {"__name__": "__main__", "__builtins__": _builtins_for(used)}
    out = {"s": "ok", "r": ""}
    try:
        exec(compile(prelude, "prelude.py", "exec", dont_inherit=True), ns)
        for name in stubs:
            ns[name] = _Remote(name)
        ns.update(
            __mas_cmp__=_mas_cmp,
            __mas_bool__=_mas_bool,
            __mas_not__=_mas_not,
            __mas_ifexp__=_mas_ifexp,
            __mas_assert__=asserts.check,
        )
        exec(_rewritten(test), ns)
    except _Undecided as exc:
        out = {"s": "undecided", "r": str(exc)}
    except BaseException as exc:
        out = {"s": "error", "r": "%s: %s" % (type(exc).__name__, str(exc)[:300])}
    if out["s"] == "ok":
        head = ["import %s" % m for m in sorted(used)]
        out["c"] = "\n".join(head + asserts.lines) or "pass"
    _I.write_results(("%s C %s\n" % (nonce, _P.dumps(out))).encode("utf-8", "replace"))
    _I.finish()
