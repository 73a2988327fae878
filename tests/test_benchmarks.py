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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
MAIN = re.compile(r"^if __name__ == .__main__.:", re.M)
QUICK_LIMIT_S = 300  # one script on a busy machine (a hang, not a speed limit)


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


def _run_quick(script: Path, tmp: Path) -> tuple[float, str | None]:
    """``python benchmarks/NAME.py --quick`` in a fresh process: (seconds, failure or None)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    cwd = tmp / script.stem
    cwd.mkdir()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(script), "--quick"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=QUICK_LIMIT_S,
        )
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, f"no result after {QUICK_LIMIT_S} s"
    seconds = time.perf_counter() - t0
    tail = f"\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-2000:]}"
    if proc.returncode != 0:
        return seconds, f"exit status {proc.returncode}{tail}"
    if "Traceback (most recent call last)" in proc.stderr:
        return seconds, f"a traceback on stderr{tail}"
    if sum(bool(re.search(r"\d", line)) for line in proc.stdout.splitlines()) < 2:
        return seconds, f"no table{tail}"
    return seconds, None


@pytest.mark.slow
def test_every_benchmark_runs_in_its_quick_mode(tmp_path: Path):
    """All scripts, two at a time (they are single-threaded; a 2-core machine runs them all
    in about a minute when idle)."""
    scripts = _scripts()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(scripts, pool.map(lambda p: _run_quick(p, tmp_path), scripts)))
    for script, (seconds, _failure) in results.items():
        print(f"{script.name} --quick: {seconds:.1f} s")
    print(f"all {len(scripts)} benchmarks: {time.perf_counter() - t0:.1f} s")
    failed = {s.name: why for s, (_t, why) in results.items() if why is not None}
    assert not failed, "\n\n".join(f"{name} --quick: {why}" for name, why in failed.items())
