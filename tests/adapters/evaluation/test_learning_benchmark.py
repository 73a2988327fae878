"""``benchmarks/learning.py``: the rows it runs (``--methods``), TrainConfig values for every run
(``--set``), the table with the scripted references, the records written per row, ``--resume``,
and its verdicts on the paper's ordering."""

from __future__ import annotations

import gzip
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


def _tiny_args(out: Path, steps: int, episodes: int, max_new_tokens: int, instances: int) -> list:
    """The at-grpo row of the tiny model on 4 x 4 Plan-Path maps."""
    return [
        "--envs", "plan_path", "--model", "tiny", "--methods", "at-grpo", "--steps", str(steps),
        "--episodes", str(episodes), "--threads", "1", "--out", str(out),
        "--set", f"max_new_tokens={max_new_tokens}", "--set", f"instances_per_step={instances}",
        "--env-config", "height=4", "--env-config", "width=4",
        "--env-config", "min_distance=2", "--env-config", "wall_density=0.3",
    ]  # fmt: skip


def test_methods_and_overrides(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    args = _tiny_args(out, steps=1, episodes=2, max_new_tokens=16, instances=2)
    code = _benchmark().main(args)
    assert code == 0
    where = out / "plan_path"
    text = (where / "table.md").read_text()
    for row in ("cold-start", "at-grpo", "noop", "constant", "oracle", "open-loop"):
        assert f"| `{row}` |" in text
        report = json.loads(gzip.decompress((where / f"{row}.json.gz").read_bytes()))
        assert report["episodes"] == 2
    assert "per-role" not in text and "single-grpo" not in text  # not asked for
    assert "- `at-grpo`: 1 steps x 2 instances x K=4 (tree, at-grpo" in text
    assert "at-grpo above cold-start" in text  # the paper's ordering, checked
    (config,) = (where / "runs").glob("at-grpo-*/config.yaml")
    assert "max_new_tokens: 16  # user" in config.read_text()
    assert "instances_per_step: 2  # user" in config.read_text()
    assert "height: 4" in config.read_text()
    # --resume reads every recorded row instead of running it again
    before = {p.name: p.read_bytes() for p in where.glob("*.json.gz")}
    assert _benchmark().main([*args, "--resume"]) == 0
    assert {p.name: p.read_bytes() for p in where.glob("*.json.gz")} == before
    assert "read by --resume" in (where / "table.md").read_text()
    # a trained row whose records were lost: --resume continues its trainer from the checkpoint
    # (no second training run) and evaluates the same trained weights again
    for row in ("at-grpo", "open-loop"):
        (where / f"{row}.json.gz").unlink()
    assert _benchmark().main([*args, "--resume"]) == 0
    assert len(list((where / "runs").glob("at-grpo-*"))) == 1
    for row in ("at-grpo", "open-loop"):
        old, new = (
            json.loads(gzip.decompress(b))["per_episode"]
            for b in (before[f"{row}.json.gz"], (where / f"{row}.json.gz").read_bytes())
        )
        assert [e["transcript"] for e in new] == [e["transcript"] for e in old]


def test_a_row_stopped_part_way_resumes_at_its_last_step(tmp_path: Path, monkeypatch) -> None:
    """Every row checkpoints after each step, so ``--resume`` continues a row killed during its
    second step from the first (the same run directory, one more step), not from scratch."""
    from adapters.training.trainer import Trainer

    out = tmp_path / "bench"
    args = _tiny_args(out, steps=2, episodes=1, max_new_tokens=8, instances=1)
    real_step = Trainer.train_step

    def killed_in_step_two(self):
        if self.step == 1:
            raise KeyboardInterrupt("killed")
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", killed_in_step_two)
    with pytest.raises(KeyboardInterrupt):
        _benchmark().main(args)
    monkeypatch.setattr(Trainer, "train_step", real_step)
    assert _benchmark().main([*args, "--resume"]) == 0
    (run,) = (out / "plan_path" / "runs").glob("at-grpo-*")
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert (out / "plan_path" / "at-grpo.json.gz").is_file()


def test_unknown_method_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown rows"):
        _benchmark().main(
            ["--envs", "plan_path", "--methods", "at-grpo,bogus", "--out", str(tmp_path)]
        )


def _report(solved: int, n: int = 64) -> dict:
    eps = [
        {"instance_id": f"i{i}", "success": float(i < solved), "progress": 0.0, "team": 0.0}
        for i in range(n)
    ]
    return {"success_rate": solved / n, "per_episode": eps}


def test_ordering_holds_only_where_the_interval_says_so():
    reps = {
        "cold-start": _report(20),
        "single-grpo": _report(10),
        "open-loop": _report(2),
        "at-grpo": _report(40),
        "per-role": _report(22),  # below at-grpo: at-grpo is the one compared
        "swapped": _report(21),  # within one level of per-role: not significantly below
    }
    lines = _benchmark().ordering(reps)
    assert lines[0].startswith("- at-grpo above single-grpo") and lines[0].endswith(": holds")
    assert lines[1].startswith("- at-grpo above cold-start") and lines[1].endswith(": holds")
    assert lines[3].startswith("- swapped below per-role") and "does not hold" in lines[3]
    reps["swapped"] = _report(2)
    reps["at-grpo"] = _report(21)  # one level more than the cold start: not significant
    lines = _benchmark().ordering(reps)
    assert "per-role above cold-start" in lines[1] and "does not hold" in lines[1]
    assert lines[3].endswith(": holds")


def test_every_method_brings_known_rows():
    mod = _benchmark()
    for rows in mod.METHODS.values():
        assert set(rows) <= set(mod.LABELS)
    assert set(mod.BASELINES) <= set(mod.LABELS)


def test_sa_rows_added_later_reuse_the_recorded_single_grpo(tmp_path: Path) -> None:
    """``--methods sa-train-mas-eval --resume`` after a run that recorded ``single-grpo``: the
    planner comes from that row's last checkpoint, its record is left as it was (not evaluated
    again), and the tool-alone and team rows are added."""
    out = tmp_path / "bench"
    base = _tiny_args(out, steps=1, episodes=1, max_new_tokens=8, instances=1)
    i = base.index("--methods")
    first = [*base[:i], "--methods", "single-grpo", *base[i + 2 :]]
    assert _benchmark().main(first) == 0
    where = out / "plan_path"
    recorded = (where / "single-grpo.json.gz").read_bytes()
    later = [*base[:i], "--methods", "sa-train-mas-eval", *base[i + 2 :], "--resume"]
    assert _benchmark().main(later) == 0
    assert (where / "single-grpo.json.gz").read_bytes() == recorded
    assert len(list((where / "runs").glob("single-grpo-*"))) == 1  # not trained again
    for row in ("sa-tool", "sa-train-mas-eval"):
        assert (where / f"{row}.json.gz").is_file()
    text = (where / "table.md").read_text()
    assert "- `single-grpo`: (recorded by an earlier run, read by --resume)" in text
    assert "- `sa-tool`: 1 steps x 1 instances x K=4" in text
