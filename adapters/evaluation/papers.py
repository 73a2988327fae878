"""The papers' evaluation tables, one command each: ``--suite paper:NAME``.

``python -m adapters.evaluate --suite paper:marsrl --data-dir DATA --policy P --out DIR`` runs
that paper's protocol (its benchmarks, sampling and metric; :data:`PAPER_SUITES`) as full
benchmark passes (:mod:`adapters.evaluation.passes`) on the files found in ``DATA`` (each
benchmark as ``DATA/NAME.jsonl`` / ``.json`` / ``.parquet`` / ``.csv`` or ``DATA/NAME/``, NAME
as in :data:`envs.data.registry.DATASETS`), skips and lists the benchmarks whose files are
absent, and prints the table in the paper's layout (a row per policy, a column per benchmark in
the paper's order, the paper's group averages, percentages). ``OUT`` holds ``results.json``,
``report.md``, ``table.md`` and ``charts/``; the run resumes like every pass.

=========  ===================================================  ==============================
suite      benchmarks (paper's groups)                           protocol
=========  ===================================================  ==============================
at-grpo    math: AIME24, AIME25, OlympiadBench; code: APPS,      the multi-agent team (MAS
           LiveCodeBench (v6), CodeContests (5.1)                mode), greedy, accuracy
mae        ID: GSM8K, MATH, ARC-C, MMLU, GPQA, CQA, OBQA, NQ,    one answer, greedy, accuracy
           TriviaQA, SQuAD, BoolQ, HellaSwag, MBPP+,             (MAE grades with an LLM judge:
           HumanEval+; OOD: TruthfulQA, BBH, LiveBench,          add ``--judge SPEC``; 5.1)
           AMC, Minerva, Winogrande, OlympiadBench, MMLU-Pro
sage       code: HumanEval+, MBPP+, LiveCodeBench (v1-v5);       greedy pass@1 (5.1)
           math: GSM8K, MATH, AIME24, AIME25, AMC'23,
           OlympiadBench
comas      math: GSM8K, MATH-500; code: HumanEval, MBPP;         one answer at T 0.7, at most
           science: SciBench, GPQA; general: MMLU                500 problems per benchmark (4.1)
marsrl     AIME25, BeyondAIME                                    the solver-verifier-corrector
                                                                 system, 32 samples at T 0.6,
                                                                 top-p 0.95, avg@32 (4.1)
=========  ===================================================  ==============================

CoMAS keeps a random 500 problems of a larger benchmark and gives no seed; here the 500 whose
text hashes lowest are kept (:func:`~adapters.evaluation.passes.hash_subsample`), a fixed subset. The command-line ``--samples``, ``--temperature``, ``--top-p`` and
``--limit`` override a suite's values (e.g. a 2-sample smoke run of MarsRL's protocol).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.evaluation.passes import Benchmark, PassArgs, run_passes

__all__ = ["PAPER_SUITES", "PaperSuite", "main_paper_suite", "paper_table", "plan_paper_suite"]


@dataclass(frozen=True)
class PaperSuite:
    """A paper's evaluation protocol: benchmark groups (dataset, column label), the setting and
    mode that play them, sampling and the metric its table reports."""

    name: str
    title: str
    groups: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    metric: str = "pass@1"
    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    mode: str = "single"
    math_setting: str = "math"
    subsample: int | None = None  # problems kept per benchmark (a fixed pseudo-random subset)
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per dataset

    def datasets(self) -> list[str]:
        return [d for _g, cols in self.groups for d, _label in cols]


PAPER_SUITES: dict[str, PaperSuite] = {
    s.name: s
    for s in (
        PaperSuite(
            "at-grpo",
            "AT-GRPO Table 2 (code and math)",
            (
                (
                    "Math",
                    (("aime24", "AIME24"), ("aime25", "AIME25"), ("olympiadbench", "OlyBench")),
                ),
                (
                    "Code",
                    (
                        ("apps", "APPS"),
                        ("livecodebench", "LiveCodeBench"),
                        ("code_contests", "CodeContests"),
                    ),
                ),
            ),
            mode="multi",
        ),
        PaperSuite(
            "mae",
            "MAE Table 2 (in-distribution and out-of-distribution)",
            (
                (
                    "ID",
                    (
                        ("gsm8k", "GSM8K"),
                        ("math", "MATH"),
                        ("arc_challenge", "ARC-C"),
                        ("mmlu", "MMLU"),
                        ("gpqa", "GPQA"),
                        ("commonsense_qa", "CQA"),
                        ("openbookqa", "OBQA"),
                        ("natural_questions", "NQ"),
                        ("triviaqa", "TriviaQA"),
                        ("squad", "SQuAD"),
                        ("boolq", "BoolQ"),
                        ("hellaswag", "HellaSwag"),
                        ("mbpp+", "MBPP+"),
                        ("humaneval+", "HumanEval+"),
                    ),
                ),
                (
                    "OOD",
                    (
                        ("truthfulqa", "TruthfulQA"),
                        ("bbh", "BBH"),
                        ("livebench_reasoning", "LiveBench"),
                        ("amc", "AMC"),
                        ("minerva", "Minerva"),
                        ("winogrande", "Winogrande"),
                        ("olympiadbench", "Olympiad"),
                        ("mmlu_pro", "MMLU-Pro"),
                    ),
                ),
            ),
        ),
        PaperSuite(
            "sage",
            "SAGE Table 1 (code and math, pass@1)",
            (
                (
                    "Code",
                    (
                        ("humaneval+", "HumanEval+"),
                        ("mbpp+", "MBPP+"),
                        ("livecodebench", "LiveCodeBench"),
                    ),
                ),
                (
                    "Math",
                    (
                        ("gsm8k", "GSM8K"),
                        ("math", "MATH"),
                        ("aime24", "AIME24"),
                        ("aime25", "AIME25"),
                        ("amc23", "AMC"),
                        ("olympiadbench", "OlympiadBench"),
                    ),
                ),
            ),
            options={"livecodebench": {"version": "release_v5"}},
        ),
        PaperSuite(
            "comas",
            "CoMAS Table 1 (Vanilla setup)",
            (
                ("Math", (("gsm8k", "GSM8K"), ("math500", "MATH-500"))),
                ("Coding", (("humaneval", "HumanEval"), ("mbpp", "MBPP"))),
                ("Science", (("scibench", "SciBench"), ("gpqa", "GPQA"))),
                ("General", (("mmlu", "MMLU"),)),
            ),
            temperature=0.7,
            subsample=500,
        ),
        PaperSuite(
            "marsrl",
            "MarsRL Table 1 (avg@32)",
            (("Benchmarks", (("aime25", "AIME2025"), ("beyond_aime", "BeyondAIME"))),),
            metric="avg@32",
            samples=32,
            temperature=0.6,
            top_p=0.95,
            mode="multi",
            math_setting="solver_verifier_corrector",
        ),
    )
}


def resolve_paper_suite(spec: str) -> PaperSuite:
    name = spec.removeprefix("paper:")
    if name not in PAPER_SUITES:
        raise ValueError(
            f"unknown paper suite {spec!r}; known: paper:{', paper:'.join(PAPER_SUITES)}"
        )
    return PAPER_SUITES[name]


def plan_paper_suite(
    suite: PaperSuite, data_dir: str | Path | None, *, limit: int | None = None
) -> tuple[list[Benchmark], list[str]]:
    """The benchmarks whose files are in ``data_dir`` (or that ship with a package, like
    HumanEval; without ``data_dir``: all, from the hub cache), and the names of those skipped
    because their files are absent."""
    from envs.data.registry import dataset_info, find_data_file

    benches, skipped = [], []
    for dataset in suite.datasets():
        path = find_data_file(data_dir, dataset) if data_dir is not None else None
        if data_dir is not None and path is None and not dataset_info(dataset).offline:
            skipped.append(dataset)
            continue
        code = dataset_info(dataset).setting == "code"
        benches.append(
            Benchmark(
                dataset,
                path,
                setting="code" if code else suite.math_setting,
                mode=suite.mode,
                options=dict(suite.options.get(dataset, {})),
                limit=limit,
                subsample=suite.subsample,
            )
        )
    return benches, skipped


def paper_table(suite: PaperSuite, results: Mapping[str, Any], skipped: Sequence[str]) -> str:
    """The paper's layout: a row per policy, the paper's columns (percent), group averages over
    the benchmarks that were run, and the overall average; skipped benchmarks show ``-``."""
    samples = results["arguments"]["samples"]
    metric = suite.metric if suite.metric != f"avg@{suite.samples}" else f"avg@{samples}"
    if samples == 1:
        metric = "pass@1"
    policies = list(results["arguments"]["policies"])
    judge = results["arguments"].get("judge")
    value = {}
    errors = {(r["benchmark"], r["policy"]): r["error"] for r in results["rows"] if "error" in r}
    for r in results["rows"]:
        if "error" in r:
            continue  # the judge's grading when there is one (MAE), else the metric
        value[(r["benchmark"], r["policy"])] = (
            r["judge"]["pass@1"]["mean"] if "judge" in r else r[metric]["mean"]
        )
    header, sep = ["Method"], ["---"]
    for group, cols in suite.groups:
        header += [label for _d, label in cols]
        if len(suite.groups) > 1:
            header.append(f"{group} Avg.")
    header.append("Overall Avg.")
    sep = ["---"] * len(header)
    lines = [
        f"{suite.title}: {metric} (%) on {samples} sample(s) per problem",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(sep) + "|",
    ]
    for pol in policies:
        cells, every = [pol], []
        for _group, cols in suite.groups:
            got = [value.get((d, pol)) for d, _label in cols]
            cells_na = [(d, pol) in errors for d, _label in cols]
            cells += [
                "n/a" if na else "-" if v is None else f"{100 * v:.2f}"
                for v, na in zip(got, cells_na)
            ]
            vals = [v for v in got if v is not None]
            every += vals
            if len(suite.groups) > 1:
                cells.append(f"{100 * sum(vals) / len(vals):.2f}" if vals else "-")
        cells.append(f"{100 * sum(every) / len(every):.2f}" if every else "-")
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"n/a: {pol} cannot play {bench}: {why}" for (bench, pol), why in errors.items()]
    if judge:
        notes.append(f"non-code benchmarks graded by the judge {judge} (see report.md)")
    if skipped:
        notes.append("skipped (no file in --data-dir): " + ", ".join(skipped))
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def main_paper_suite(
    parser: argparse.ArgumentParser, args: argparse.Namespace, command: str | None = None
) -> int:
    """``python -m adapters.evaluate --suite paper:NAME`` (called by :mod:`adapters.evaluate`
    with its parsed arguments; ``command`` is shown in the report)."""
    from adapters.evaluation.suite import ArgumentMismatch, _default_factory, write_atomic

    try:
        suite = resolve_paper_suite(args.suite)
    except ValueError as e:
        parser.error(str(e))
    refused = [
        flag
        for flag, value in (
            ("--dataset", args.dataset),
            ("--data-path", args.data_path),
            ("--mode", args.mode),
            ("--max-turns", args.max_turns),
            ("--env-config", args.env_config),
            ("--instance", args.instance),
            ("--json", args.json),
        )
        if value
    ]
    if refused:
        parser.error(
            f"{', '.join(refused)}: --suite paper:NAME chooses its own settings and datasets "
            "(use --data-dir)"
        )
    benches, skipped = plan_paper_suite(suite, args.data_dir, limit=args.limit)
    if skipped:
        print(f"skipping (no file in {args.data_dir}): {', '.join(skipped)}", file=sys.stderr)
    if not benches:
        print(
            f"error: no benchmark of paper:{suite.name} found in {args.data_dir}", file=sys.stderr
        )
        return 2
    overridden = {a for a in ("temperature", "top_p") if getattr(args, a) != parser.get_default(a)}
    samples = args.samples if args.samples != parser.get_default("samples") else suite.samples
    run = PassArgs(
        benchmarks=tuple(benches),
        policies=tuple(args.policy),
        samples=samples,
        ks=tuple(args.pass_k),
        temperature=args.temperature if "temperature" in overridden else suite.temperature,
        top_p=args.top_p if "top_p" in overridden else suite.top_p,
        max_new_tokens=256 if args.max_new_tokens is None else args.max_new_tokens,
        seed=args.seed,
        chunk_size=args.chunk_size,
        judge=args.judge,
    )
    out = Path(args.out or f"runs/paper-{suite.name}")
    try:
        results = run_passes(
            run,
            out,
            policy_factory=_default_factory(args, args.concurrency),  # type: ignore[arg-type]
            progress=not args.no_progress,
            command=command,
        )
    except ArgumentMismatch as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = paper_table(suite, results, skipped)
    write_atomic(out / "table.md", table)
    print(table)
    print(
        f"wrote {out / 'table.md'}, {out / 'results.json'}, {out / 'report.md'}, {out / 'charts'}/"
    )
    return 0
