"""``benchmarks/learning.py``: the rows it runs (``--methods``), TrainConfig values for every run
(``--set``), the table with the scripted references, and the raw reports written per setting."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "learning_benchmark", REPO / "benchmarks/learning.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_methods_and_overrides(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    code = _benchmark().main(
        [
            "--envs", "plan_path", "--model", "tiny", "--methods", "shared", "--budget-min", "0",
            "--episodes", "2", "--eval-every", "0", "--threads", "1", "--out", str(out),
            "--set", "max_new_tokens=64", "--set", "instances_per_step=2",
        ]
    )  # fmt: skip
    assert code == 0
    text = (out / "table.txt").read_text()
    assert "MAS (untrained)" in text and "cold start + AT-GRPO (shared policy)" in text
    assert "per-role" not in text and "Single agent" not in text  # not asked for
    assert "no-op" in text and "oracle" in text and "open loop" in text
    raw = json.loads((out / "results.json").read_text())["plan_path"]
    want = {"mas", "cold", "shared", "ref:no-op", "ref:constant", "ref:oracle", "ref:open loop"}
    assert set(raw["reports"]) >= want
    assert "per_role" not in raw["reports"] and "single" not in raw["reports"]
    assert raw["steps"] == {"shared": 1}  # at least one step, whatever the budget
    assert raw["reports"]["mas"]["episodes"] == 2
    config = (out / "plan_path-shared" / "config.yaml").read_text()
    assert "max_new_tokens: 64  # user" in config
    assert "instances_per_step: 2  # user" in config
    assert not (out / "plan_path-per_role").exists()


def test_unknown_method_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown rows"):
        _benchmark().main(
            ["--envs", "plan_path", "--methods", "shared,bogus", "--out", str(tmp_path)]
        )
