"""Full benchmark passes (``adapters.evaluation.passes``, ``adapters.evaluate --dataset``): every
problem of a 5-problem fixture benchmark in AIME24's released schema, pass@1 / avg@k / unbiased
pass@k against hand-computed values, results.json records, resuming."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from adapters.evaluate import main
from adapters.evaluation.passes import Benchmark, PassArgs, pass_at_k, run_passes, score_records
from adapters.policies import ScriptedPolicy
from adapters.policies.specs import parse_policy_spec

BENCH5 = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "bench5" / "aime24.jsonl"
RIGHT_ON = {"What is 2 + 3?": "5", "What is 7 * 6?": "42"}  # right on 2 of the 5 problems


def scripted(prompt: str) -> str:
    for q, a in RIGHT_ON.items():
        if q in prompt:
            return f"\\boxed{{{a}}}"
    return "\\boxed{-1}"


POLICIES = {
    "wrong": ScriptedPolicy(lambda _p: "The answer is \\boxed{123456}", name="wrong"),
    "two-of-five": ScriptedPolicy(scripted, name="two"),
}


def factory(spec: str):
    return POLICIES[spec] if spec in POLICIES else parse_policy_spec(spec)


def test_pass_at_k_closed_form_hand_case():
    # n = 5 samples, c = 2 correct, k = 3: 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    # and against the product form 1 - prod_{i=n-c+1}^{n} (1 - k/i) (Codex paper, numerically
    # stable version) on a grid
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                prod = math.prod(1 - k / i for i in range(n - c + 1, n + 1)) if n - c >= k else 0
                assert pass_at_k(n, c, k) == pytest.approx(1 - prod), (n, c, k)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_score_records_pass_at_k_over_problems():
    # problem 0: 1 of 4 correct, problem 1: 4 of 4
    recs = [{"index": 0, "correct": s == 0} for s in range(4)]
    recs += [{"index": 1, "correct": True} for _ in range(4)]
    s = score_records(recs, 4, ks=(2,))
    assert s["pass@1"]["mean"] == pytest.approx((0.25 + 1.0) / 2)
    assert s["avg@4"] == s["pass@1"]
    # pass@2: problem 0: 1 - C(3,2)/C(4,2) = 0.5; problem 1: 1.0 -> mean 0.75
    assert s["pass@2"]["mean"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="samples"):
        score_records(recs[:-1], 4)


@pytest.mark.parametrize("spec, expected", [("oracle", 1.0), ("wrong", 0.0), ("two-of-five", 0.4)])
def test_five_problem_pass(tmp_path, spec, expected):
    args = PassArgs(
        benchmarks=(Benchmark("aime24", str(BENCH5), setting="math"),),
        policies=(spec,),
        samples=2,
        ks=(2,),
        chunk_size=2,  # chunks of 2, 2 and 1 problems
    )
    res = run_passes(args, tmp_path, policy_factory=factory)
    (row,) = res["rows"]
    assert row["problems"] == 5 and row["samples"] == 2
    assert row["pass@1"]["mean"] == pytest.approx(expected)
    assert row["avg@2"]["mean"] == pytest.approx(expected)
    # deterministic policies: every sample agrees, so pass@2 equals pass@1
    assert row["pass@2"]["mean"] == pytest.approx(expected)
    assert len(res["records"]) == 10  # one per problem and sample
    ids = sorted({r["problem_id"] for r in res["records"]})
    assert ids == [f"aime24/{i}" for i in range(60, 65)]
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["rows"] == res["rows"]
    assert (tmp_path / "report.md").exists() and (tmp_path / "charts" / "passes.png").exists()


def test_pass_resumes_and_refuses_other_arguments(tmp_path):
    args = PassArgs(
        benchmarks=(Benchmark("aime24", str(BENCH5), setting="math"),),
        policies=("two-of-five",),
        chunk_size=2,
    )
    first = run_passes(args, tmp_path, policy_factory=factory)
    units = sorted((tmp_path / "units").iterdir())
    assert len(units) == 3
    units[1].unlink()  # a killed run: one chunk missing
    calls = []

    def counting(spec):
        calls.append(spec)
        return factory(spec)

    again = run_passes(args, tmp_path, policy_factory=counting)
    assert again["rows"] == first["rows"] and calls == ["two-of-five"]
    calls.clear()
    run_passes(args, tmp_path, policy_factory=counting)  # complete: nothing is played
    assert calls == []
    from adapters.evaluation import ArgumentMismatch

    with pytest.raises(ArgumentMismatch):
        run_passes(
            PassArgs(args.benchmarks, args.policies, samples=2, chunk_size=2),
            tmp_path,
            policy_factory=factory,
        )


def test_cli_full_pass_writes_results(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "--env", "math", "--dataset", "aime24", "--data-path", str(BENCH5),
            "--policy", "oracle", "--samples", "3", "--pass-k", "2",
            "--temperature", "0.6", "--top-p", "0.95", "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    (row,) = res["rows"]
    assert row["pass@1"]["mean"] == 1.0 and row["avg@3"]["mean"] == 1.0
    assert row["pass@2"]["mean"] == 1.0 and len(res["records"]) == 15
    assert res["arguments"]["temperature"] == 0.6 and res["arguments"]["top_p"] == 0.95
    assert re.search(r"\| aime24 \| oracle \| 5 \|", capsys.readouterr().out)


def test_cli_full_pass_compile_decode(tmp_path, graph_starts):
    """``--compile-decode`` reaches a pass's model policies: the same sampled records as off (the
    tiny model's greedy completions are blank lines, its draws at temperature 1 are not)."""
    records = []
    for mode in ("off", "eager"):
        out = tmp_path / mode
        rc = main(
            [
                "--env", "math", "--dataset", "aime24", "--data-path", str(BENCH5), "--limit", "2",
                "--policy", "tiny", "--max-new-tokens", "6", "--temperature", "1.0",
                "--compile-decode", mode,
                "--out", str(out), "--no-progress",
            ]
        )  # fmt: skip
        assert rc == 0
        res = json.loads((out / "results.json").read_text())
        records.append([r["completion"] for r in res["records"]])
    assert graph_starts and set(graph_starts) == {"eager"}
    assert len(records[0]) == 2 and all(c.strip() for c in records[0])
    assert records[0] == records[1]


# ------------------------------------------------------------------------------ judge grading


def lenient_judge(calls):
    def fn(prompt: str) -> str:
        calls.append(prompt)
        ref = re.search(r"Reference answer\(s\): (.*)", prompt).group(1)
        ans = re.search(r"Model's final answer: (.*)", prompt).group(1)
        if ref == "99":
            return "Close enough: TRUE"  # a lenient judge: wrong on this problem
        return "TRUE" if ans == ref else "FALSE"

    return ScriptedPolicy(fn, name="judge")


def test_judge_grading_agreement_and_cache(tmp_path):
    calls: list[str] = []
    judge = lenient_judge(calls)

    def fac(spec):
        return judge if spec == "judge" else factory(spec)

    args = PassArgs(
        benchmarks=(Benchmark("aime24", str(BENCH5), setting="math"),),
        policies=("two-of-five",),
        judge="judge",
    )
    (row,) = run_passes(args, tmp_path, policy_factory=fac)["rows"]
    j = row["judge"]
    # exact match: right on 2 of 5; the judge also accepts the wrong answer to "100 - 1"
    assert row["pass@1"]["mean"] == pytest.approx(0.4)
    assert j["pass@1"]["mean"] == pytest.approx(0.6) and j["agreement"] == pytest.approx(0.8)
    # kappa: observed .8; chance .4 * .6 + .6 * .4 = .48; (.8 - .48) / (1 - .48)
    assert j["kappa"] == pytest.approx(0.32 / 0.52) and j["unparsed"] == 0
    assert len(calls) == 5
    assert "Model's final answer: -1" in calls[2]  # the answer inside the box, not the box
    run_passes(args, tmp_path, policy_factory=fac)  # cached: the judge is not asked again
    assert len(calls) == 5
    assert "agreement" in (tmp_path / "report.md").read_text()


def test_judge_decodes_with_mae_table_4_sampling(tmp_path):
    seen = []

    class Recording(ScriptedPolicy):
        def generate(self, prompts, params=None):
            seen.append(params)
            return super().generate(prompts, params)

    judge = Recording(lambda _p: "TRUE", name="judge")
    args = PassArgs(
        benchmarks=(Benchmark("aime24", str(BENCH5), setting="math"),),
        policies=("oracle",),
        judge="judge",
    )
    run_passes(args, tmp_path, policy_factory=lambda s: judge if s == "judge" else factory(s))
    (params,) = seen  # MAE Appendix B.5, Table 4: T 1.0, top-p 0.95, up to 1000 tokens
    assert (params.temperature, params.top_p, params.max_new_tokens) == (1.0, 0.95, 1000)
    assert len(params.prompt_seeds) == 5 and len(set(params.prompt_seeds)) == 5  # reproducible
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["judge_sampling"] == {"temperature": 1.0, "top_p": 0.95, "max_new_tokens": 1000}


def test_unparsable_judge_counts_wrong(tmp_path):
    mute = ScriptedPolicy(lambda _p: "I cannot say.", name="mute")
    args = PassArgs(
        benchmarks=(Benchmark("aime24", str(BENCH5), setting="math"),),
        policies=("oracle",),
        judge="mute",
    )
    (row,) = run_passes(
        args, tmp_path, policy_factory=lambda s: mute if s == "mute" else factory(s)
    )["rows"]
    assert row["judge"]["unparsed"] == 5 and row["judge"]["pass@1"]["mean"] == 0.0
    assert row["pass@1"]["mean"] == 1.0


def test_code_benchmark_pass_runs_the_tests(tmp_path):
    # MBPP+ (evalplus's released file, 4 problems): the golden programs pass every test; a
    # program that defines nothing fails every problem
    mbpp_plus = BENCH5.parents[1] / "MbppPlus-v0.2.0.jsonl"
    no_code = ScriptedPolicy(lambda _p: "```python\nx = 1\n```", name="no-code")
    args = PassArgs(
        benchmarks=(Benchmark("mbpp+", str(mbpp_plus)),),  # the registry's setting: code
        policies=("oracle", "no-code"),
    )
    fac = lambda s: no_code if s == "no-code" else factory(s)  # noqa: E731
    rows = run_passes(args, tmp_path, policy_factory=fac)["rows"]
    assert [(r["policy"], r["problems"], r["pass@1"]["mean"]) for r in rows] == [
        ("oracle", 4, 1.0),
        ("no-code", 4, 0.0),
    ]


def test_problem_with_a_broken_golden_is_scored_wrong_not_crashing(tmp_path):
    # APPS rows as released; the first problem's golden program now prints a wrong answer, so
    # the code setting refuses it as an instance: it counts as wrong, the others are played
    rows = [json.loads(line) for line in (BENCH5.parents[1] / "apps.jsonl").open()]
    rows[0]["solutions"] = json.dumps(["print('wrong')"])
    path = tmp_path / "apps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = PassArgs(benchmarks=(Benchmark("apps", str(path), mode="single"),), policies=("oracle",))
    res = run_passes(args, tmp_path / "out", policy_factory=factory)
    (row,) = res["rows"]
    n = row["problems"]
    assert n == 3  # the fourth row has no usable tests: not a problem of the set
    assert row["pass@1"]["mean"] == pytest.approx(2 / 3)
    first = res["records"][0]
    assert first["index"] == 0 and not first["correct"]
    assert first["error"].startswith("invalid instance: the solution fails test")
