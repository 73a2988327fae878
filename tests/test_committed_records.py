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
