"""The evaluation records committed under ``benchmarks/results/`` replay: a fresh env, reset as
each record says and stepped with its completions, pays the rewards the record holds, ends with
its final team reward, and makes its instance (a record from a version that generated or split
instances differently names its instance in ``reset_options``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from adapters.evaluation.replay import play, replay

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
# at most this many episodes of each committed report are replayed (evenly spread)
PER_REPORT = 4


def _reports() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*.json*") if p.suffix in (".json", ".gz"))


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


REPORTS = [p for p in _reports() if isinstance(_load(p).get("per_episode"), list)]


def test_records_are_committed():
    assert REPORTS, f"no evaluation report under {RESULTS}"


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_sample_of_each_committed_report_replays_to_its_rewards(path: Path):
    episodes = _load(path)["per_episode"]
    step = max(1, len(episodes) // PER_REPORT)
    for rec in episodes[::step][:PER_REPORT]:
        recorded = [t["reward"] for t in rec["transcript"]]
        assert replay(rec) == pytest.approx(recorded, abs=1e-9), rec["index"]
        _rewards, raw, team = play(rec, lambda a, k, i, t=rec["transcript"]: t[i]["completion"])
        assert raw.instance_id == rec["instance_id"]
        assert team == pytest.approx(rec["team"], abs=1e-9)
        assert bool(raw.success) == rec["success"]


def test_a_record_whose_instance_this_version_does_not_make_is_refused():
    rec = dict(_load(REPORTS[0])["per_episode"][0])
    rec["instance_id"] = "0" * 16  # not what its reset makes
    with pytest.raises(ValueError, match="recorded by a version that generated or split"):
        replay(rec)


def test_record_run_writes_rows_that_replay_and_a_table(tmp_path: Path):
    """benchmarks/record_run.py on a run directory of scripted evaluations (plan_path)."""
    import sys

    from adapters.evaluation.viewer import find_sources

    sys.path.insert(0, str(RESULTS.parents[1]))
    from benchmarks.record_run import main, scripted_run

    run = tmp_path / "run"
    scripted_run(run)
    out = tmp_path / "rows"
    assert main([str(run), str(out), "--command", "python -m adapters.train --env plan_path"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "at-grpo.json.gz",
        "cold-start.json.gz",
        "noop.json.gz",
        "table.md",
    ]
    first = (out / "at-grpo.json.gz").read_bytes()
    assert main([str(run), str(out), "--command", "x"]) == 0
    assert (out / "at-grpo.json.gz").read_bytes() == first  # same run, same bytes
    kind, sources = find_sources(out)
    assert kind == "table" and [s.label for s in sources] == ["at-grpo", "cold-start", "noop"]
    for s in sources:
        for rec in s.report["per_episode"]:
            assert replay(rec) == pytest.approx([t["reward"] for t in rec["transcript"]])
    table = (out / "table.md").read_text()
    assert "before -> after" in table and "no-op" in table and "cut off" not in table
    assert "failed episodes, by primary cause" in table
