"""The failure breakdown (adapters.evaluation.failures) sorts each turn by what went wrong,
from the records alone: scripted teams with a known flaw get exactly that class, and the
viewer's ``--failures`` prints the table for a directory of reports (a benchmark table)."""

from __future__ import annotations

import gzip
import json

import pytest

from adapters.evaluation import evaluate
from adapters.evaluation.failures import (
    breakdown,
    classified,
    classify_record,
    format_breakdown,
)
from adapters.policies.specs import build_policies

SMALL = {"height": 5, "width": 5, "min_distance": 3, "wall_density": 0.1}


def _records(specs: list[str], episodes: int = 2) -> list[dict]:
    policies, mapping = build_policies(specs, ["tool", "planner"])
    rep = evaluate(
        "plan_path", policies, role_policy=mapping, episodes=episodes, env_config=SMALL, seed=4
    )
    return json.loads(json.dumps(rep.to_dict()))["per_episode"]


@pytest.mark.parametrize(
    ("specs", "tool", "planner", "cause"),
    [
        (["tool=oracle", "planner=oracle"], "solves", "solves", None),
        (
            ["tool=oracle", "planner=constant:#### [U]"],
            "solves",
            "does not adopt a solving proposal",
            "planner does not adopt a solving proposal",
        ),
        (
            ["tool=constant:```python\nprint('[R'\n```", "planner=constant:no marker"],
            "does not compile",
            "no answer",
            "tool: does not compile",
        ),
        (
            ["tool=constant:```python\nprint(1)", "planner=constant:#### [L]"],
            "cut off at the limit",
            "wrong or partial answer",
            "tool: cut off at the limit",
        ),
        (
            ["tool=constant:```python\nprint('[L]')\n```", "planner=constant:#### [L]"],
            "wrong or partial plan",
            "wrong or partial answer",
            "tool: wrong or partial plan",
        ),
    ],
)
def test_a_scripted_flaw_gets_its_class(specs, tool, planner, cause):
    for rec in _records(specs):
        ep = classify_record(rec)
        assert ep.turns["tool"][0] == tool and ep.turns["planner"][0] == planner, ep
        if cause is None:
            assert ep.success and ep.cause is None
        elif not ep.success:
            assert ep.cause == cause


def test_a_program_that_pastes_the_map_with_a_row_dropped_miscopies_it():
    # the oracle's own program, its map pasted without the goal's row: it runs and finds no path
    for rec in _records(["tool=oracle", "planner=oracle"]):
        tool = rec["transcript"][0]
        assert tool["role"] == "tool" and "LEVEL" in tool["completion"]
        head, rest = tool["completion"].split('LEVEL = """')
        rows, tail = rest.split('"""', 1)
        kept = [row for row in rows.split("\n") if "G" not in row]
        assert len(kept) == len(rows.split("\n")) - 1
        tool["completion"] = head + 'LEVEL = """' + "\n".join(kept) + '"""' + tail
        assert classify_record(rec).turns["tool"][0] == "map miscopied"


def test_the_table_counts_each_report_and_the_viewer_prints_it(tmp_path, capsys):
    good = {"per_episode": _records(["tool=oracle", "planner=oracle"], 3)}
    bad = {"per_episode": _records(["tool=constant:```python\nprint(1)", "planner=constant:"], 3)}
    table = breakdown({"good": good, "bad": bad})
    assert table["good"]["failed"] == 0 and table["good"]["turns"]["tool"] == {"solves": 3}
    assert table["bad"]["failed"] == 3
    assert table["bad"]["causes"] == {"tool: cut off at the limit": 3}
    text = format_breakdown(table)
    assert "3 / 3" in text and "0 / 3" in text
    # a benchmark table's directory: one report per row, plain or gzip-compressed
    (tmp_path / "oracle.json").write_text(json.dumps(good))
    (tmp_path / "cut-off.json.gz").write_bytes(gzip.compress(json.dumps(bad).encode()))
    from adapters.view import main

    assert main([str(tmp_path), "--failures"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["cut-off", "oracle"]
    assert "tool: cut off at the limit" in out


def test_only_tool_and_planner_settings_have_classes():
    assert classified("sokoban") and classified("sudoku", {"size": 4})
    assert not classified("math")


def test_a_compressed_report_that_expands_too_far_is_refused(tmp_path, monkeypatch):
    from adapters.evaluation import viewer

    monkeypatch.setattr(viewer, "MAX_REPORT_BYTES", 1000)
    (tmp_path / "big.json.gz").write_bytes(gzip.compress(b"[" + b"0," * 5000 + b"0]"))
    with pytest.raises(ValueError, match="expands past"):
        viewer.find_sources(tmp_path)
