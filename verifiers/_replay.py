"""In-sandbox harness that runs an assert test *without* the program under test.

:mod:`verifiers.assert_plans` sends this file's source, followed by a call of :func:`_mas_main`,
as the code of a sandbox job (it is never imported on the host). The job holds the test's
trusted prelude (starter-code helpers) and the test code, but not the program: every name the
test uses that neither defines is a *stub* (:class:`_Remote`). Calling a stub looks the call up
in a table of the program's results, computed earlier by the program's own job
(:mod:`sandboxes.calls`) and handed in as plain data, so the test compares its expected values
with values the program can no longer influence, in a process the program never ran in.

Modes: ``discover`` (no table yet) and ``verdict``. A call missing from the table is recorded as
*needed* and returns :data:`PENDING`, which absorbs every operation, so that the test runs on and
names every call it makes; the host then runs the program on them and tries again (a call whose
arguments are pending waits for a later round). One line
goes to fd 3: ``<nonce> R <json>`` with the status (``pass``, ``fail``, ``error``,
``unresolved``, ``missing``, ``discovered``), a reason and the needed calls. Standard library,
``_mas_plain`` and ``_mas_inside`` only.
"""
# ruff: noqa: UP031, SIM905  (plain try/except and %-formatting, as in the sandbox server)

import builtins

try:  # installed by the sandbox's fork server
    import _mas_inside as _I
    import _mas_plain as _P
except ImportError:  # read on the host (tools, doctest collection)
    from sandboxes import inside as _I
    from sandboxes import plain as _P


class _Stop(BaseException):
    """Ends the test run: ``status`` is the outcome."""

    def __init__(self, status, reason=""):
        super().__init__(status)
        self.status, self.reason = status, reason


class _PendingType:
    """A result not known yet (discovery): every operation on it gives it back."""

    def _same(self, *args, **kwargs):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _same
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = __invert__ = _same
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _same
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __round__ = _same
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __getitem__ = __call__ = _same

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __bool__(self):
        return True

    def __hash__(self):
        return 0

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __contains__(self, item):
        return True

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __repr__(self):
        return "PENDING"


PENDING = _PendingType()
_PENDING_TEXT = '["o","_PendingType"]'


class _Calls:
    def __init__(self, table, mode):
        self.table = {}  # key -> list of records, used in order
        for path, args, kwargs, record in table:
            self.table.setdefault(self.key(path, args, kwargs), []).append(record)
        self.used = {}
        self.mode = mode
        self.needed = []
        self.missing = ""

    @staticmethod
    def key(path, args, kwargs):
        return _P.dumps([list(path), args, kwargs])

    def call(self, path, args, kwargs):
        try:
            a, k = _P.encode(tuple(args)), _P.encode(dict(kwargs))
        except Exception:
            raise TypeError("the arguments of %s are not plain data" % path[0]) from None
        key = self.key(path, a, k)
        if _PENDING_TEXT in key:
            return PENDING  # its arguments depend on a result not known yet: a later round
        n = self.used.get(key, 0)
        records = self.table.get(key, [])
        if n >= len(records):
            # not made yet: the test runs on (results pending) to name every call it needs
            if len(self.needed) < 2000:
                self.needed.append([list(path), a, k])
            return PENDING
        self.used[key] = n + 1
        record = records[n]
        if record[0] == "ok":
            return _P.decode(record[1])
        if record[0] == "exc":
            klass = getattr(builtins, record[1], None)
            if not (isinstance(klass, type) and issubclass(klass, BaseException)):
                klass = Exception
            if issubclass(klass, (SystemExit, KeyboardInterrupt, GeneratorExit)):
                klass = RuntimeError
            raise klass(record[2])
        self.missing = record[1] if len(record) > 1 else "no result"
        raise _Stop("missing", self.missing)


class _Remote:
    """A function (or class) of the program; calls go to the table."""

    def __init__(self, calls, path):
        self._calls, self._path = calls, tuple(path)

    def __call__(self, *args, **kwargs):
        if not args and not kwargs:
            return _Lazy(self._calls, self._path)
        return self._calls.call(self._path, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Remote(self._calls, (*self._path, name))


class _Lazy:
    """``f()``: the call's result, fetched when it is used; ``Solution().method`` is a method of
    a fresh instance (the program's job makes it)."""

    def __init__(self, calls, path):
        self._calls, self._path, self._done, self._value = calls, path, False, None

    def _get(self):
        if not self._done:
            self._value, self._done = self._calls.call(self._path, (), {}), True
        return self._value

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_calls", "_path", "_done", "_value"):
            raise AttributeError(name)
        return _Remote(self._calls, (*self._path, "()", name))


def _delegate(name):
    def method(self, *args):
        return getattr(self._get(), name)(*args)

    return method


for _name in (
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __bool__ __len__ __iter__ __contains__ "
    "__getitem__ __add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __floordiv__ "
    "__mod__ __pow__ __neg__ __abs__ __int__ __float__ __index__ __str__ __repr__ __hash__ "
    "__round__"
).split():
    setattr(_Lazy, _name, _delegate(_name))


def _checked(test, calls):
    """The test's code with every ``assert`` made tolerant while results are pending: once a
    call's result is unknown, a false assert or an error inside one does not end the run (so the
    run goes on and names the calls after it); otherwise asserts behave as usual."""
    import ast

    def pending():
        return calls.mode == "discover" or bool(calls.needed)

    def failed(exc=None, msg=None):
        if isinstance(exc, _Stop) or (exc is not None and not pending()):
            raise exc
        if exc is None and not pending():
            raise AssertionError(msg) if msg is not None else AssertionError()

    class Rewrite(ast.NodeTransformer):
        def visit_Assert(self, node):
            msg = node.msg if node.msg is not None else ast.Constant(None)
            call = ast.parse(
                "try:\n    __mas_ok__ = bool(X)\nexcept BaseException as __mas_e__:\n"
                "    __mas_failed__(__mas_e__)\nelse:\n    if not __mas_ok__:\n"
                "        __mas_failed__(None, M)\n"
            ).body[0]
            call.body[0].value.args[0] = node.test
            call.orelse[0].body[0].value.args[1] = msg
            for n in ast.walk(call):
                ast.copy_location(n, node)
            return call

    tree = Rewrite().visit(ast.parse(test, "test.py"))
    ast.fix_missing_locations(tree)
    return compile(tree, "test.py", "exec", dont_inherit=True), failed


def _mas_main(nonce, mode, table_json, stubs, prelude, test):
    import random

    random.seed(0)
    table = _P.loads(table_json)
    calls = _Calls(table, mode)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    out = {"s": "pass", "r": ""}
    try:
        exec(compile(prelude, "prelude.py", "exec", dont_inherit=True), ns)
        for name in stubs:
            ns[name] = _Remote(calls, (name,))
        code, ns["__mas_failed__"] = _checked(test, calls)
        exec(code, ns)
    except _Stop as stop:
        out = {"s": stop.status, "r": stop.reason}
    except AssertionError as exc:
        out = {"s": "fail", "r": _where(exc) + (": %s" % exc if str(exc) else "")}
    except BaseException as exc:
        out = {"s": "error", "r": "%s: %s" % (type(exc).__name__, str(exc)[:300])}
    if mode == "discover" or calls.needed:
        # results were pending: the outcome means nothing yet, the calls found so far count
        out = {"s": "discovered" if mode == "discover" else "unresolved", "r": ""}
    out["n"] = calls.needed
    if calls.missing:
        out["m"] = calls.missing
    _I.write_results(("%s R %s\n" % (nonce, _P.dumps(out))).encode("utf-8", "replace"))
    _I.finish()


def _where(exc):
    tb = exc.__traceback__
    line = 0
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "test.py":
            line = tb.tb_lineno
        tb = tb.tb_next
    return "assertion failed (test line %d)" % line if line else "assertion failed"
