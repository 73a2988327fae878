"""Every script in ``benchmarks/`` runs in its ``--quick`` mode (``benchmarks/_quick.py``).

Benchmarks are not imported by the package, so nothing else notices when a refactoring breaks
one; this test runs each script as a user would, ``python benchmarks/NAME.py --quick``, in a
fresh process from a temporary working directory, and fails on a non-zero exit status, a
traceback, or an output without a table row. A new script joins by existing (a ``__main__``
block, a name without a leading ``_``).
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
MAIN = re.compile(r"^if __name__ == .__main__.:", re.M)
QUICK_LIMIT_S = 90  # one script; all of them together take under two minutes


def _scripts() -> list[Path]:
    return sorted(
        p for p in BENCH.glob("*.py") if not p.name.startswith("_") and MAIN.search(p.read_text())
    )


def test_every_benchmark_module_is_a_script_or_used_by_one():
    scripts = _scripts()
    assert len(scripts) >= 10, [p.name for p in scripts]
    sources = "\n".join(p.read_text() for p in scripts)
    for helper in sorted(set(BENCH.glob("*.py")) - set(scripts)):
        used = re.search(rf"\b(?:from|import)\s+(?:benchmarks\.)?{helper.stem}\b", sources)
        assert used, f"{helper.name} has no __main__ block and no script imports it"


def test_quick_convention_doctests():
    spec = importlib.util.spec_from_file_location("_quick", BENCH / "_quick.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = doctest.testmod(module)
    assert result.attempted >= 3 and result.failed == 0


@pytest.mark.slow
@pytest.mark.parametrize("script", _scripts(), ids=lambda p: p.name)
def test_quick_mode_runs(script: Path, tmp_path: Path):
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(script), "--quick"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=QUICK_LIMIT_S,
    )
    seconds = time.perf_counter() - t0
    tail = f"\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{script.name} --quick exited {proc.returncode}{tail}"
    assert "Traceback (most recent call last)" not in proc.stderr, tail
    rows = [line for line in proc.stdout.splitlines() if re.search(r"\d", line)]
    assert len(rows) >= 2, f"{script.name} --quick printed no table{tail}"
    print(f"{script.name} --quick: {seconds:.1f} s")
