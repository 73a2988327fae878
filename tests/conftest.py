"""How the suite shares the machine when ``scripts/test.sh`` runs it on every core (pytest-xdist,
``-n``): which tests run alone, and which start first.

``scripts/test.sh`` runs the tests on all cores and then, alone, those marked ``serial``: tests
that measure what another test running beside them would change (this process's CPU time or peak
RSS, a wall-clock bound on a few seconds of work in other processes, the order in which a server
admits requests sent a few tenths of a second apart). A test module that measures CPU time with
:func:`tests.cost.cpu_cost` or peak RSS with :mod:`resource` is serial as a whole without saying
so, so that a new cost test cannot land in the parallel pass by mistake; other tests say
``@pytest.mark.serial`` and why.

The tests that declare a timeout longer than the default (``@pytest.mark.timeout``) are the
longest of the slow pass (minutes each): they are collected first, longest first, so that a
worker starts them at once and ends with the others instead of after them.
"""

from __future__ import annotations

import resource
import types

import pytest

from tests.cost import cpu_cost


def measures_cost(module: types.ModuleType | None) -> bool:
    """Whether a test module imports :func:`tests.cost.cpu_cost` or :mod:`resource`."""
    if module is None:
        return False
    return any(value is cpu_cost or value is resource for value in vars(module).values())


def declared_timeout(item: pytest.Item) -> float:
    """The seconds of the test's own ``timeout`` marker (0 without one)."""
    mark = item.get_closest_marker("timeout")
    if mark is None:
        return 0.0
    value = mark.args[0] if mark.args else mark.kwargs.get("timeout", 0)
    return float(value or 0)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if measures_cost(getattr(item, "module", None)):
            item.add_marker(pytest.mark.serial)
    items.sort(key=lambda item: -declared_timeout(item))  # stable: the rest keep their order
