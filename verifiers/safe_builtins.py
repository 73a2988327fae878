"""What the host evaluator (:mod:`verifiers.host_eval`) may call, and the guards around it.

A test evaluated on the host may use a fixed list of pure built-ins (``abs``, ``len``,
``sorted``, ``sum``, ``isinstance``, constructors of the built-in types, ...), the modules
``math``, ``json`` and ``string`` (selected names), some side-effect-free methods of ``str``,
``list``, ``tuple``, ``dict`` and ``set``, and Python's operators. Each is wrapped so that it
cannot make a value larger than ``MAX_ITEMS`` items or ``MAX_INT_BITS`` bits (a range, a
repetition, a power, a shift, a join, a replace): past a bound :class:`TooExpensive` is raised
and the test is not evaluated on the host. Anything else is :class:`Unsupported`.

Numbers are charged by magnitude, not by the length of their text. A program's result may be a
``Decimal`` or a ``Fraction`` (decoded with bounded exponent and parts, :mod:`sandboxes.plain`,
but arithmetic grows them): ``int()``, ``round()``, ``math.floor`` / ``ceil`` / ``trunc`` and
``%d`` of a Decimal convert its integer part in time quadratic in its digits (``4E+400000``: 8 s),
a Fraction's operations divide and take gcds of its parts, and comparing a Decimal with an
``int`` converts the int the same way. So :func:`integral_bits` bounds the integer a conversion
would make before it is made (past ``MAX_INT_BITS``: :class:`TooExpensive`), :func:`work`
charges a Decimal and a Fraction what converting them costs, and an evaluation that has seen a
Decimal charges its integers quadratically (``work(..., squared_ints=True)``).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
import string
from collections.abc import Callable, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

MAX_ITEMS = 100_000
"""Largest container, string or range the evaluator makes."""
MAX_INT_BITS = 100_000
"""Largest integer (in bits) the evaluator makes."""


class Unsupported(Exception):
    """The test uses something the host evaluator does not evaluate."""


class TooExpensive(Unsupported):
    """Evaluating the test would exceed a bound."""


def _size(x: Any) -> int:
    if isinstance(x, str | bytes | list | tuple | dict | set | frozenset | range):
        return len(x)
    return 0


def _check_size(x: Any) -> Any:
    if _size(x) > MAX_ITEMS:
        raise TooExpensive(f"a value of more than {MAX_ITEMS} items")
    if type(x) is int and x.bit_length() > MAX_INT_BITS:
        raise TooExpensive(f"an integer of more than {MAX_INT_BITS} bits")
    if type(x) is Fraction and max(x.numerator.bit_length(), x.denominator.bit_length()) > (
        MAX_INT_BITS
    ):
        raise TooExpensive(f"a fraction of more than {MAX_INT_BITS} bits")
    return x


_LOG2_10 = 3.3219280948873626


def integral_bits(x: Any) -> int:
    """Bits of the integer that ``int(x)``, ``round(x)`` or ``math.floor(x)`` of a number makes,
    known without making it (an upper bound; 0 for anything else).

    >>> (
    ...     integral_bits(Decimal("4E+400000")),
    ...     integral_bits(Fraction(10 ** 30, 7)),
    ...     integral_bits(2.5),
    ... )
    (1328775, 98, 2)
    """
    t = type(x)
    if t is int or t is bool:
        return int(x).bit_length()
    if t is float:
        return math.frexp(x)[1] if math.isfinite(x) else 0
    if t is Decimal:
        if not x.is_finite() or x.adjusted() < 0:
            return 1
        return int((x.adjusted() + 1) * _LOG2_10) + 1
    if t is Fraction:
        return max(1, x.numerator.bit_length() - x.denominator.bit_length() + 1)
    return 0


def check_integral(x: Any) -> Any:
    """``x``, if the integer a conversion of it would make fits ``MAX_INT_BITS``; checked before
    the conversion runs."""
    if integral_bits(x) > MAX_INT_BITS:
        raise TooExpensive(f"converting a number of more than {MAX_INT_BITS} bits to an integer")
    return x


def _integral(fn: Callable) -> Callable:
    """``int``, ``math.floor``, ``math.ceil``, ``math.trunc`` behind :func:`check_integral`."""

    def call(x: Any = 0, *rest: Any) -> Any:
        if not rest:  # int(text, base) parses text: CPython bounds its digits itself
            check_integral(x)
        return _check_size(fn(x, *rest))

    call.__name__ = getattr(fn, "__name__", "builtin")
    return call


def _round(x: Any, ndigits: Any = None) -> Any:
    if ndigits is None:
        return _check_size(round(check_integral(x)))
    if type(ndigits) is int and abs(ndigits) > MAX_ITEMS:  # round(5, -10**9) makes 10**10**9
        raise TooExpensive(f"round() to more than {MAX_ITEMS} digits")
    return _check_size(round(x, ndigits))


def call_work(func: Any, args: Sequence[Any]) -> int:
    """Work of a call beyond touching its arguments: ``round(n, -k)`` of an integer divides it
    by ``10 ** k``."""
    ints = all(type(a) is int for a in args)
    if func is round and len(args) == 2 and ints and args[1] < 0:
        return work(args[0]) * int(-args[1] * _LOG2_10 / 64 + 1) // 8
    if func is divmod and len(args) == 2 and ints:
        return work(args[0]) * work(args[1]) // 8
    return 0


def check_format_value(x: Any, spec: str) -> None:
    """Before ``format(x, spec)``: a Decimal in fixed-point writes every digit of its integer
    part (``format(Decimal('1E+999999'), 'f')`` is a million characters)."""
    if type(x) is Decimal and x.is_finite() and x.adjusted() > MAX_ITEMS:
        raise TooExpensive(f"formatting a number of more than {MAX_ITEMS} digits")


def _consuming(fn: Callable) -> Callable:
    """A builtin whose iterable arguments are checked for size first (ranges, mostly)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        for a in args:
            if isinstance(a, range) and len(a) > MAX_ITEMS:
                raise TooExpensive(f"a range of more than {MAX_ITEMS} items")
        return _check_size(fn(*args, **kwargs))

    call.__name__ = getattr(fn, "__name__", "builtin")
    return call


def _listing(fn: Callable) -> Callable:
    return _consuming(lambda *a, **k: list(fn(*a, **k)))


def _sum(iterable: Any, start: Any = 0) -> Any:
    if not isinstance(start, int | float | complex | Fraction | Decimal):
        raise TooExpensive("sum() of non-numbers")
    return sum(iterable, start)


def _range(*args: Any) -> range:
    r = range(*args)
    if len(r) > MAX_ITEMS:
        raise TooExpensive(f"a range of more than {MAX_ITEMS} items")
    return r


MAX_MODPOW_BITS = 4096
"""Largest exponent and modulus (in bits) of a three-argument ``pow``: its cost grows with
``exp_bits * mod_bits ** 2`` (100,000-bit operands took seconds)."""


def _pow(base: Any, exp: Any, mod: Any = None) -> Any:
    if mod is None:
        return _power(base, exp)
    if not all(type(v) is int for v in (base, exp, mod)):
        raise Unsupported("pow() with a modulus of non-integers")
    if max(exp.bit_length(), mod.bit_length()) > MAX_MODPOW_BITS:
        raise TooExpensive(f"pow() with operands of more than {MAX_MODPOW_BITS} bits")
    return pow(base, exp, mod)


_WIDTHS = re.compile(r"\d+")
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d*)(?:\.(\*|\d*))?[hlL]?(.)", re.S)


def check_format_spec(spec: str) -> str:
    """A ``format()`` spec whose widths and precisions fit ``MAX_ITEMS`` (a width is allocated
    before any size check could see the result: ``format(0, '01500000000d')`` is 1.5 GB).

    >>> check_format_spec(">10.3f")
    '>10.3f'
    >>> check_format_spec("01500000000d")
    Traceback (most recent call last):
    ...
    verifiers.safe_builtins.TooExpensive: a format width of more than 100000
    """
    if len(spec) > 20:
        raise Unsupported("a long format spec")
    if any(int(w) > MAX_ITEMS for w in _WIDTHS.findall(spec)):
        raise TooExpensive(f"a format width of more than {MAX_ITEMS}")
    return spec


def _mod(a: Any, b: Any) -> Any:
    """``a % b``; for ``str % args`` (printf-style formatting) the widths are checked first, and
    the magnitude of every number formatted (``%d`` of a Decimal makes an int of it)."""
    if isinstance(a, str | bytes):
        for arg in b.values() if isinstance(b, dict) else b if isinstance(b, tuple) else (b,):
            check_integral(arg)
        text = a if isinstance(a, str) else a.decode("latin-1")
        for m in _PERCENT_SPEC.finditer(text):
            for w in m.group(1, 2):
                if w == "*":
                    raise Unsupported("a '*' width in %-formatting")
                if w and int(w) > MAX_ITEMS:
                    raise TooExpensive(f"a format width of more than {MAX_ITEMS}")
    return a % b


def _power(base: Any, exp: Any) -> Any:
    ints = type(base) is int and type(exp) is int
    if ints and exp > 0 and abs(base) > 1 and exp * base.bit_length() > MAX_INT_BITS:
        raise TooExpensive("an integer power too large")
    if isinstance(base, Decimal) or isinstance(exp, Decimal):
        raise Unsupported("Decimal powers")
    return base**exp


def _mul(a: Any, b: Any) -> Any:
    if isinstance(a, int) and _size(b):
        a, b = b, a
    if _size(a) and isinstance(b, int) and _size(a) * max(b, 0) > MAX_ITEMS:
        raise TooExpensive(f"a value of more than {MAX_ITEMS} items")
    return a * b


def _lshift(a: Any, b: Any) -> Any:
    if isinstance(b, int) and b > MAX_INT_BITS:
        raise TooExpensive("a shift too large")
    return a << b


def _join(sep: str, items: Any) -> str:
    parts = list(items)
    if len(sep) * len(parts) + sum(len(p) if isinstance(p, str) else 0 for p in parts) > MAX_ITEMS:
        raise TooExpensive(f"a string of more than {MAX_ITEMS} characters")
    return sep.join(parts)


def _print(*args: Any, **kwargs: Any) -> None:
    return None


def _repr(x: Any) -> str:
    return _check_size(repr(x))


_BUILTINS: dict[str, Any] = {
    f.__name__: f
    for f in (
        abs, all, any, bool, bytes, chr, complex, dict, divmod, enumerate, float, frozenset,
        int, isinstance, len, list, max, min, ord, pow, print, range, repr, reversed, round,
        set, sorted, str, sum, tuple, type, zip,
    )
}  # fmt: skip
# What a call of one of them really runs: the builtin behind a size check.
_GUARDED: dict[int, Callable] = {
    id(all): _consuming(all),
    id(any): _consuming(any),
    id(bytes): _consuming(bytes),
    id(dict): _consuming(dict),
    id(enumerate): _listing(enumerate),
    id(frozenset): _consuming(frozenset),
    id(int): _integral(int),
    id(round): _round,
    id(list): _consuming(list),
    id(max): _consuming(max),
    id(min): _consuming(min),
    id(pow): _pow,
    id(print): _print,
    id(range): _range,
    id(repr): _repr,
    id(reversed): _listing(reversed),
    id(set): _consuming(set),
    id(sorted): _consuming(sorted),
    id(str): lambda *a: _check_size(str(*a)),
    id(sum): _consuming(_sum),
    id(tuple): _consuming(tuple),
    id(zip): _listing(zip),
}
_BUILTIN_FUNCS = {id(v) for v in _BUILTINS.values()}
_MODULES: dict[str, dict[str, Any]] = {
    "math": {
        k: getattr(math, k)
        for k in [
            "isclose",
            "fabs",
            "sqrt",
            "floor",
            "ceil",
            "trunc",
            "isnan",
            "isinf",
            "isfinite",
            "pi",
            "e",
            "inf",
            "nan",
            "tau",
            "log",
            "log2",
            "log10",
            "exp",
            "sin",
            "cos",
            "tan",
            "atan",
            "atan2",
            "hypot",
            "gcd",
            "lcm",
            "copysign",
        ]
    }
    | {
        "floor": _integral(math.floor),
        "ceil": _integral(math.ceil),
        "trunc": _integral(math.trunc),
        "factorial": lambda n: math.factorial(n) if n <= 2000 else _too("factorial"),
        "gcd": lambda *a: math.gcd(*a) if _small_ints(a) else _too("gcd of huge integers"),
        "lcm": lambda *a: math.lcm(*a) if _small_ints(a) else _too("lcm of huge integers"),
    },
    "json": {
        "loads": lambda s: _check_size(json.loads(s)),
        "dumps": lambda v: _check_size(json.dumps(v)),
    },
    "string": {
        k: getattr(string, k)
        for k in ["ascii_letters", "ascii_lowercase", "ascii_uppercase", "digits", "punctuation"]
    },
}
_METHODS: dict[type, set[str]] = {
    str: set(
        [
            "lower",
            "upper",
            "strip",
            "lstrip",
            "rstrip",
            "split",
            "rsplit",
            "startswith",
            "endswith",
            "count",
            "find",
            "rfind",
            "index",
            "isdigit",
            "isalpha",
            "isalnum",
            "isspace",
            "islower",
            "isupper",
            "title",
            "capitalize",
            "casefold",
            "splitlines",
            "zfill",
            "join",
            "replace",
        ]
    ),
    list: {
        "count",
        "index",
        "copy",
        "append",
        "extend",
        "pop",
        "insert",
        "remove",
        "sort",
        "reverse",
    },
    tuple: {"count", "index"},
    dict: {"keys", "values", "items", "get", "copy"},
    set: {"union", "intersection", "difference", "issubset", "issuperset", "copy", "add"},
    frozenset: {"union", "intersection", "difference", "issubset", "issuperset"},
}


def _too(what: str) -> Any:
    raise TooExpensive(what)


def _small_ints(args: tuple) -> bool:
    return len(args) <= 64 and all(type(a) is not int or a.bit_length() <= 4096 for a in args)


def work(x: Any, cap: int = 10_000_000, squared_ints: bool = False) -> int:
    """What touching ``x`` once costs (comparing, scanning, copying, converting it), in element
    steps: a container's elements (nested ones counted as often as they occur: ``[a] * n`` is
    ``n`` times ``a``), a string's length / 16, an integer's 64-bit limbs (at least 1; with
    ``squared_ints`` also limbs ** 2 / 8, what converting it to a Decimal costs), a Decimal's or a
    Fraction's conversion to an integer (limbs ** 2 / 8 of what it converts). Counting stops
    once past ``cap``; the evaluator charges this for every operand and result.

    >>> work([1, 2, 3]), work("a" * 160), work(1 << 6400), work([[0] * 10] * 10)
    (4, 11, 101, 121)
    >>> work(Decimal("1E+4000")), work(1 << 6400, squared_ints=True)
    (5409, 1376)
    """
    t = type(x)
    if t is int:
        limbs = x.bit_length() // 64 + 1
        return limbs + limbs * limbs // 8 if squared_ints and limbs > 1 else limbs
    if t is str or t is bytes:
        return len(x) // 16 + 1
    if t is Decimal or t is Fraction:
        return _number_work(x)
    if t not in _CONTAINERS:
        return 1
    if t is range:
        return len(x) + 1
    items = x.values() if t is dict else x
    total = len(x) + 1
    kinds = set(map(type, items))
    if total > cap:
        return total
    flat = _CONTAINERS_SET.isdisjoint(kinds) and _COSTLY.isdisjoint(kinds)
    if flat and not (squared_ints and int in kinds):
        return total
    for v in items:
        total += work(v, cap - total, squared_ints)
        if total > cap:
            break
    return total


def _number_work(x: Decimal | Fraction) -> int:
    if isinstance(x, Decimal):
        limbs = integral_bits(x) // 64 + 1
        return limbs * limbs // 8 + len(x.as_tuple().digits) // 16 + 1
    n = x.numerator.bit_length() // 64 + 1
    d = x.denominator.bit_length() // 64 + 1
    return n + d + (n + d) * (n + d) // 8


def holds_decimal(x: Any, cap: int = 1_000_000) -> bool:
    """Whether ``x`` is or contains a Decimal (looking at no more than ``cap`` values).

    >>> holds_decimal([1, (2, {3: Decimal(4)})]), holds_decimal([1.5] * 10)
    (True, False)
    """
    stack, seen = [x], 0
    while stack and seen < cap:
        v = stack.pop()
        seen += 1
        t = type(v)
        if t is Decimal:
            return True
        if t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        elif t in _CONTAINERS and t is not range:
            stack.extend(v)
    return False


_CONTAINERS = (list, tuple, dict, set, frozenset, range)
_CONTAINERS_SET = frozenset(_CONTAINERS)
_COSTLY = frozenset({Decimal, Fraction})


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: _mod,
    ast.Pow: _power,
    ast.LShift: _lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.Not: operator.not_,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
}


def _is_module_func(f: Any) -> bool:
    return any(f is v for mod in _MODULES.values() for v in mod.values() if callable(v))


class _Module:
    def __init__(self, name: str) -> None:
        self.name = name


class _BoundMethod:
    def __init__(self, obj: Any, name: str) -> None:
        self.obj, self.name = obj, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for a in (*args, *kwargs.values()):
            if callable(a):
                raise Unsupported("a function as a method argument")
        if self.name == "join":
            return _join(self.obj, *args)
        if self.name == "replace":
            old, new = ([*list(args), None, None])[:2]
            if not isinstance(old, str) or not isinstance(new, str):
                raise Unsupported("this replace")
            if (len(self.obj) + 1) * max(1, len(new)) > MAX_ITEMS and len(new) > len(old):
                raise TooExpensive("a string too long")
        if self.name in ("split", "rsplit", "splitlines") and _size(self.obj) > MAX_ITEMS:
            raise TooExpensive("a string too long to split")
        if self.name in ("extend", "append", "insert", "add") and _size(self.obj) >= MAX_ITEMS:
            raise TooExpensive(f"a value of more than {MAX_ITEMS} items")
        if self.name == "zfill" and args and isinstance(args[0], int) and args[0] > MAX_ITEMS:
            raise TooExpensive("zfill too wide")
        if self.name == "sort" and kwargs.get("key") is not None:
            raise Unsupported("a key function")
        return _check_size(getattr(self.obj, self.name)(*args, **kwargs))
