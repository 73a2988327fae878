"""Plain values across the sandbox boundary: a tagged JSON encoding of Python data.

Function calls into a sandboxed program (``sandboxes.Job(..., calls=...)``) take their arguments
and return their results in this encoding, so that nothing but *data* crosses the boundary: a
value the host decodes is a fresh object of a built-in type, never an object of the program's
making, so a custom ``__eq__``, ``__bool__`` or ``__hash__`` cannot take part in a comparison on
the host.

=====================  =====================================================================
Python value           encoding (JSON)
=====================  =====================================================================
None, bool, str        themselves
int                    itself when ``|x| < 2**63``, else ``["i", hex]``
float                  itself (``NaN`` / ``Infinity`` as Python's ``json`` writes them)
list / tuple           ``["l", [...]]`` / ``["t", [...]]``
set / frozenset        ``["s", [...]]`` / ``["fs", [...]]``
dict                   ``["d", [[key, value], ...]]``
bytes / bytearray      ``["b", hex]`` / ``["ba", hex]``
complex                ``["c", real, imag]``
Fraction / Decimal     ``["q", numerator, denominator]`` / ``["m", str]``
range                  ``["r", start, stop, step]``
dict keys / items      ``["dk", [...]]`` / ``["di", [...]]``
other iterators        ``["it", [...]]`` (consumed: generators, map, zip, dict values, ...)
anything else          ``["o", type name]``: an :class:`Opaque` placeholder
=====================  =====================================================================

Sets are encoded in a canonical order (the same set gives the same text in any process).
Subclasses of the built-in types (``Counter``, ``namedtuple``, ``IntEnum``, a ``str`` subclass
with its own ``__eq__``) are encoded through the base type's own methods, i.e. as the plain value
they hold. On the host an iterator comes back as an :class:`Iterated` (iterable, equal to nothing)
and anything else as an :class:`Opaque` (equal to nothing, no truth value).

Both directions are bounded: :func:`encode` stops at ``MAX_DEPTH`` levels and ``max_items``
items, :func:`decode` refuses malformed input, deeper nesting and unhashable set members with
``ValueError``. Numbers whose cost is not their length are bounded by magnitude too: a
``Decimal`` of 14 characters (``4E+400000``) stands for an integer of 400,001 digits, which
``int()``, ``round()`` or a comparison with an ``int`` converts in time quadratic in its digits
(seconds), and normalising a ``Fraction`` (its gcd) is quadratic in its parts. So a Decimal's
exponent (adjusted, ``MAX_DECIMAL_EXPONENT``) and coefficient (``MAX_DECIMAL_DIGITS``) and a
Fraction's numerator and denominator (``MAX_FRACTION_BITS``) are checked in both directions,
before the value is made (ints, strings and containers cost what their encoding's length says). The
module uses the standard library only: the sandbox's fork server loads this source as the module
``_mas_plain``, which programs running inside can import.

>>> decode(loads(dumps(encode((1, [2.5, "x"], {3: None})))))
(1, [2.5, 'x'], {3: None})
>>> decode(["m", "4E+400000"])
Traceback (most recent call last):
...
sandboxes.plain.PlainError: decimal too large or too precise
>>> class Liar:
...     def __eq__(self, other): return True
>>> decode(encode(Liar())) == 7
False
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_DECIMAL_DIGITS",
    "MAX_DECIMAL_EXPONENT",
    "MAX_FRACTION_BITS",
    "PlainError",
    "Opaque",
    "Iterated",
    "encode",
    "decode",
    "dumps",
    "loads",
]

MAX_DEPTH = 100
"""Deepest nesting of containers encoded or decoded."""
MAX_ITEMS = 1_000_000
"""Most items (of all containers together) in one encoded value."""
MAX_DECIMAL_EXPONENT = 4300
"""Largest adjusted exponent (either sign) of a Decimal: its integer part has at most as many
digits as CPython converts between ``int`` and ``str`` by default (``sys.int_info``)."""
MAX_DECIMAL_DIGITS = 400
"""Most coefficient digits of a Decimal."""
MAX_FRACTION_BITS = 14_300
"""Largest numerator or denominator (in bits, about 4,300 digits) of a Fraction."""
_BIG = 1 << 63


def _check_decimal(d: Decimal) -> Decimal:
    if d.is_finite() and (
        len(d.as_tuple().digits) > MAX_DECIMAL_DIGITS or abs(d.adjusted()) > MAX_DECIMAL_EXPONENT
    ):
        raise PlainError("decimal too large or too precise")
    if not d.is_finite() and len(d.as_tuple().digits) > MAX_DECIMAL_DIGITS:  # a NaN's payload
        raise PlainError("decimal too large or too precise")
    return d


def _check_fraction(num: int, den: int) -> None:
    if max(num.bit_length(), den.bit_length()) > MAX_FRACTION_BITS:
        raise PlainError("fraction too large")


class PlainError(ValueError):
    """A value that cannot be encoded (too deep, too big) or an invalid encoding."""


class Opaque:
    """Stands for a value of a type that does not cross the boundary; equal to nothing."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise TypeError(f"a {self.type_name} object has no plain truth value")

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


class Iterated:
    """The items an iterator (generator, map, dict values, ...) produced; iterable, equal to
    nothing (as the iterator itself would be)."""

    __slots__ = ("items",)

    def __init__(self, items: list) -> None:
        self.items = list(items)

    def __iter__(self):
        return iter(self.items)

    def __eq__(self, other: object) -> bool:
        return other is self

    def __ne__(self, other: object) -> bool:
        return other is not self

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<iterator over {self.items!r}>"


# ----------------------------------------------------------------------------------------------
# encoding (runs inside the sandbox, on values of the program)
# ----------------------------------------------------------------------------------------------

_KEYS_TYPE: type = type({}.keys())
_ITEMS_TYPE: type = type({}.items())
_VALUES_TYPE: type = type({}.values())


def encode(value: object, max_items: int = MAX_ITEMS) -> object:
    """The JSON-able encoding of ``value`` (see the module docstring).

    >>> encode({1: (2, 3)})
    ['d', [[1, ['t', [2, 3]]]]]
    >>> encode(iter([1, 2]))
    ['it', [1, 2]]
    """
    budget = [max_items]
    return _enc(value, 0, budget)


def _count(budget: list, n: int = 1) -> None:
    budget[0] -= n
    if budget[0] < 0:
        raise PlainError("value too large")


def _enc(v: Any, depth: int, budget: list) -> Any:
    if depth > MAX_DEPTH:
        raise PlainError("value nested too deeply")
    _count(budget)
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_BIG < v < _BIG else ["i", hex(v)]
    if t is float:
        return v
    if isinstance(v, bool):  # pragma: no cover - bool cannot be subclassed
        return bool(v)
    if isinstance(v, int):
        return _enc(int.__int__(v), depth, budget)
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, str):
        return _enc(str.__str__(v), depth, budget)
    if isinstance(v, (list, tuple)):
        base: Any = list if isinstance(v, list) else tuple
        n = base.__len__(v)
        _count(budget, n)
        items = [_enc(base.__getitem__(v, i), depth + 1, budget) for i in range(n)]
        return ["l" if base is list else "t", items]
    if isinstance(v, dict):
        _count(budget, dict.__len__(v))
        pairs = [[_enc(k, depth + 1, budget), _enc(x, depth + 1, budget)] for k, x in dict.items(v)]
        return ["d", pairs]
    if isinstance(v, (set, frozenset)):
        base2: Any = set if isinstance(v, set) else frozenset
        _count(budget, base2.__len__(v))
        items = [_enc(x, depth + 1, budget) for x in base2.__iter__(v)]
        items.sort(key=dumps)  # canonical: the same set gives the same text in any process
        return ["s" if base2 is set else "fs", items]
    if isinstance(v, bytes):
        return ["b", bytes.hex(v)]
    if isinstance(v, bytearray):
        return ["ba", bytearray.hex(v)]
    if isinstance(v, complex):
        return ["c", complex.__getattribute__(v, "real"), complex.__getattribute__(v, "imag")]
    if t is Fraction:
        _check_fraction(v.numerator, v.denominator)
        return ["q", _enc(v.numerator, depth, budget), _enc(v.denominator, depth, budget)]
    if t is Decimal:
        return ["m", str(_check_decimal(v))]
    if t is range:
        r = v
        return [
            "r",
            _enc(r.start, depth, budget),
            _enc(r.stop, depth, budget),
            _enc(r.step, depth, budget),
        ]
    if t is Iterated:
        return ["it", [_enc(x, depth + 1, budget) for x in _limited(v.items, budget)]]
    if t is Opaque:
        return ["o", v.type_name]
    if t is _KEYS_TYPE or t is _ITEMS_TYPE:
        tag = "dk" if t is _KEYS_TYPE else "di"
        return [tag, [_enc(x, depth + 1, budget) for x in _limited(v, budget)]]
    if t is _VALUES_TYPE or (hasattr(t, "__next__") and hasattr(t, "__iter__")):
        return ["it", [_enc(x, depth + 1, budget) for x in _limited(v, budget)]]
    return ["o", _type_name(t)]


def _limited(it, budget: list):
    for x in it:
        _count(budget)
        yield x


def _type_name(t: type) -> str:
    try:
        name = type.__getattribute__(t, "__name__")
    except Exception:
        return "object"
    return name if isinstance(name, str) and len(name) <= 80 else "object"


# ----------------------------------------------------------------------------------------------
# decoding (runs on the host, on whatever the sandbox sent)
# ----------------------------------------------------------------------------------------------


def decode(tree: object, max_items: int = MAX_ITEMS) -> object:
    """The Python value of an encoding; ``PlainError`` when it is malformed.

    >>> decode(["s", [1, ["t", [2]]]]) == {1, (2,)}
    True
    >>> decode(["s", [["l", []]]])
    Traceback (most recent call last):
    ...
    sandboxes.plain.PlainError: unhashable set member or dict key
    """
    try:
        return _dec(tree, 0, [max_items])
    except PlainError:
        raise
    except (TypeError, ValueError, OverflowError, ArithmeticError, RecursionError) as exc:
        raise PlainError(f"invalid plain value: {type(exc).__name__}") from None


def _dec(x: Any, depth: int, budget: list) -> Any:
    if depth > MAX_DEPTH:
        raise PlainError("value nested too deeply")
    _count(budget)
    t = type(x)
    if x is None or t is bool or t is str or t is int or t is float:
        return x
    if t is not list or len(x) < 2 or type(x[0]) is not str:
        raise PlainError("invalid plain value")
    tag, rest = x[0], x[1:]
    if tag in ("l", "t", "s", "fs", "it", "dk", "di"):
        if len(rest) != 1 or type(rest[0]) is not list:
            raise PlainError("invalid plain value")
        _count(budget, len(rest[0]))
        items: list[Any] = [_dec(y, depth + 1, budget) for y in rest[0]]
        try:
            if tag == "l":
                return items
            if tag == "t":
                return tuple(items)
            if tag == "s":
                return set(items)
            if tag == "fs":
                return frozenset(items)
            if tag == "dk":
                return dict.fromkeys(items).keys()
            if tag == "di":
                if not all(type(p) is tuple and len(p) == 2 for p in items):
                    raise PlainError("invalid plain value")
                return dict(items).items()
        except TypeError:
            raise PlainError("unhashable set member or dict key") from None
        return Iterated(items)
    if tag == "d":
        if len(rest) != 1 or type(rest[0]) is not list:
            raise PlainError("invalid plain value")
        out = {}
        for pair in rest[0]:
            if type(pair) is not list or len(pair) != 2:
                raise PlainError("invalid plain value")
            key = _dec(pair[0], depth + 1, budget)
            try:
                out[key] = _dec(pair[1], depth + 1, budget)
            except TypeError:
                raise PlainError("unhashable set member or dict key") from None
        return out
    if tag in ("i", "b", "ba", "m", "o"):
        if len(rest) != 1 or type(rest[0]) is not str or len(rest[0]) > 4 * MAX_ITEMS:
            raise PlainError("invalid plain value")
        s = rest[0]
        if tag == "i":
            return int(s, 16)
        if tag == "b":
            return bytes.fromhex(s)
        if tag == "ba":
            return bytearray.fromhex(s)
        if tag == "m":
            if len(s) > MAX_DECIMAL_DIGITS + 20:
                raise PlainError("decimal too long")
            return _check_decimal(Decimal(s))
        return Opaque(s[:80])
    if tag in ("c", "q", "r"):
        parts: list[Any] = [_dec(y, depth + 1, budget) for y in rest]
        if tag == "c" and len(parts) == 2 and all(type(p) is float for p in parts):
            return complex(parts[0], parts[1])
        if tag == "q" and len(parts) == 2 and all(type(p) is int for p in parts):
            _check_fraction(parts[0], parts[1])
            return Fraction(parts[0], parts[1])
        if tag == "r" and len(parts) == 3 and all(type(p) is int for p in parts):
            return range(*parts)
    raise PlainError("invalid plain value")


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps(tree: object) -> str:
    """Compact JSON text of an encoding (one line)."""
    return _ENCODER.encode(tree)


def loads(text: str) -> object:
    """The encoding in a JSON text; ``PlainError`` when it is not JSON (or nested too deeply)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PlainError(f"invalid JSON: {type(exc).__name__}") from None
