"""Imports run one way: every module may import only from its own layer or the layers below it,
and no two modules import each other (directly or around a cycle).

Layers, lowest first (docs/design.md section 1 and ``adapters/README.md``)::

    sandboxes  <-  verifiers  <-  envs  <-  adapters

    envs:      envs.core  <-  envs.data  <-  envs.pools  <-  envs.<setting>  <-  envs
    adapters:  policies  <-  rollout  <-  evaluation  <-  training  <-  integrations
               <-  the command lines (adapters.train, adapters.evaluate, ...)

Every ``import`` statement counts, including the lazy ones inside functions and those under
``if TYPE_CHECKING`` (a lazy import is still a dependency). The checker is a pure function of a
source tree; it is tested on a synthetic tree with a planted upward import and a planted cycle, and
then run on the real tree.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sandboxes", "verifiers", "envs", "adapters")


# ---------------------------------------------------------------------------------------------
# the checker


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def collect_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            out[module_name(path, root)] = path
    return out


def imported_modules(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The project modules that ``path`` (module ``name``) imports, anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:  # a name inside a module: keep the module
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                hit = resolve(alias.name)
                if hit:
                    found.add(hit)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                hit = resolve(f"{base}.{alias.name}") or resolve(base)
                if hit:
                    found.add(hit)
    found.discard(name)
    return found


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    modules = collect_modules(root, packages)
    return {name: imported_modules(path, name, modules) for name, path in modules.items()}


def layer_violations(graph: dict[str, set[str]], rank: Callable[[str], int]) -> list[str]:
    """``"a -> b"`` for every import of a module ``b`` in a higher layer than ``a``."""
    return sorted(
        f"{src} (layer {rank(src)}) -> {dst} (layer {rank(dst)})"
        for src, targets in graph.items()
        for dst in targets
        if rank(dst) > rank(src)
    )


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# the project's layers

ADAPTER_LAYERS = ("policies", "rollout", "evaluation", "training", "integrations")
ENV_HELPERS = ("envs.pools",)


def project_rank(module: str) -> int:
    """Layer of a project module: 10 per top-level package, plus its place inside it."""
    top, _, rest = module.partition(".")
    base = 10 * PACKAGES.index(top)
    if top == "envs":
        if module == "envs":
            return base + 4  # the registry: envs.make
        if rest.startswith("core"):
            return base + 0
        if rest.startswith("data"):
            return base + 1
        if module in ENV_HELPERS:
            return base + 2
        return base + 3  # one module per setting
    if top == "adapters":
        sub = rest.split(".")[0]
        if sub in ADAPTER_LAYERS:
            return base + ADAPTER_LAYERS.index(sub)
        return base + len(ADAPTER_LAYERS)  # command lines, the package
    return base


# ---------------------------------------------------------------------------------------------
# the checker catches what it should (synthetic tree)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _toy_rank(module: str) -> int:
    return {"low": 0, "high": 1}[module.split(".")[0]]


def test_checker_finds_a_planted_upward_import(tmp_path):
    _write(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from high.b import g  # lazy, still upward\n",
            "high/__init__.py": "",
            "high/b.py": "from low.a import f\n",
        },
    )
    graph = import_graph(tmp_path, ("low", "high"))
    assert graph["high.b"] == {"low.a"}
    assert layer_violations(graph, _toy_rank) == ["low.a (layer 0) -> high.b (layer 1)"]


def test_checker_finds_a_planted_cycle_and_relative_imports(tmp_path):
    _write(
        tmp_path,
        {
            "low/__init__.py": "from low.a import x\n",
            "low/a.py": "from .b import y\nx = 1\n",
            "low/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from low import a\n"
                "y = 2\n"
            ),
            "high/__init__.py": "",
        },
    )
    graph = import_graph(tmp_path, ("low", "high"))
    assert graph["low.a"] == {"low.b"}
    assert import_cycles(graph) == [["low.a", "low.b"]]
    assert layer_violations(graph, _toy_rank) == []


# ---------------------------------------------------------------------------------------------
# the real tree


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT, PACKAGES)


def test_every_module_has_a_layer(graph):
    assert "adapters.training.trainer" in graph and "envs.core.base" in graph
    for name in graph:
        project_rank(name)  # raises for a module outside the known packages


def test_imports_only_run_downwards(graph):
    assert layer_violations(graph, project_rank) == []


def test_no_import_cycles(graph):
    assert import_cycles(graph) == []


def test_lower_packages_do_not_import_heavy_libraries():
    """``import envs`` stays fast and works without the train extra (docs/design.md section 1)."""
    heavy = {"torch", "transformers", "vllm", "ray", "peft", "trl", "accelerate"}
    offenders = []
    for pkg in ("sandboxes", "verifiers", "envs"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                offenders += [
                    f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in heavy
                ]
    assert offenders == []


def setting_id_comparisons(root: Path, ids: Iterable[str]) -> list[str]:
    """Comparisons in ``root``'s Python files with a string literal that is one of ``ids``
    (``env == "code"``, ``setting in ("math", "mae")``): code keyed by a setting id."""
    ids = set(ids)
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            for item in [
                *operands,
                *(
                    e
                    for o in operands
                    if isinstance(o, ast.Tuple | ast.List | ast.Set)
                    for e in o.elts
                ),
            ]:
                if isinstance(item, ast.Constant) and item.value in ids:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {item.value}")
    return found


def test_adapters_compare_no_setting_id(tmp_path):
    """Nothing in ``adapters/`` is keyed by a setting id (docs/design.md section 2): what differs
    between settings is a fact of their spec, so a setting added in another package needs no
    edit there. The check finds a planted comparison."""
    import envs

    ids = envs.list_envs(include_aliases=True)
    planted = tmp_path / "adapters"
    planted.mkdir()
    (planted / "m.py").write_text('def f(env_id):\n    return env_id != "code"\n')
    assert setting_id_comparisons(planted, ids) == ["adapters/m.py:2: code"]
    assert setting_id_comparisons(ROOT / "adapters", ids) == []


def test_public_entry_points():
    """The paths users import: the commands and the rollout engine at the package's top."""
    import importlib

    from adapters.rollout import RolloutEngine, engine

    assert RolloutEngine is engine.RolloutEngine
    for cli in ("adapters.train", "adapters.evaluate", "adapters.serve"):
        assert callable(importlib.import_module(cli).main)
