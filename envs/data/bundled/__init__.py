"""Small problem sets shipped with the package (no network, no hub).

``stdin_basic.jsonl``: 40 short stdin/stdout programming problems written for this suite (sums,
sorting, primes, brackets, run-length encoding, ...), each with a golden solution, 1 public example
(shown in the statement) and 6-7 hidden tests whose expected outputs were produced by the golden
solution. Rows are :meth:`CodeProblem.to_dict` records; splits are by content hash as everywhere
(33 train, 4 val, 3 test).
"""

from __future__ import annotations

import json
from importlib import resources

from envs.data.records import CodeProblem

__all__ = ["load_bundled_stdin"]


def load_bundled_stdin() -> list[CodeProblem]:
    """The bundled stdin/stdout problems.

    >>> ps = load_bundled_stdin()
    >>> len(ps), ps[0].style, ps[0].id
    (40, 'stdin', 'bundled_stdin/sum_two')
    """
    text = resources.files(__name__).joinpath("stdin_basic.jsonl").read_text(encoding="utf-8")
    return [CodeProblem.from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]
