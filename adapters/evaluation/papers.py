"""The papers' evaluation tables, one command each: ``--suite paper:NAME``.

``python -m adapters.evaluate --suite paper:marsrl --data-dir DATA --policy P --out DIR`` runs
that paper's protocol (its benchmarks, decoding limits, sampling and metric;
:data:`PAPER_SUITES`) as full benchmark passes (:mod:`adapters.evaluation.passes`) on the files
found in ``DATA`` (each benchmark as ``DATA/NAME.jsonl`` / ``.json`` / ``.parquet`` / ``.csv`` or
``DATA/NAME/``, NAME as in :data:`envs.data.catalog.DATASETS`), skips and lists the benchmarks
whose files are absent, and prints the table in the paper's layout (a row per policy, a column
per benchmark in the paper's order, the paper's group averages, percentages). ``OUT`` holds
``results.json``, ``report.md``, ``table.md`` and ``charts/``; the run resumes like every pass.

=========  ======================================  ===========================================
suite      benchmarks (paper's groups)             protocol (the paper's section)
=========  ======================================  ===========================================
at-grpo    math: AIME24, AIME25, OlympiadBench;    the multi-agent team (MAS mode), greedy
           code: APPS, LiveCodeBench (v6),         (A.2.1: validation at temperature 0), 4,096
           CodeContests (5.1)                      new tokens, 8,192 prompt tokens (A.2.1, math
                                                   and code), Qwen3's no-thinking mode (5.1)
mae        ID: GSM8K, MATH, ARC-C, MMLU, GPQA,     one answer, greedy, 8,192 new and 8,192
           CQA, OBQA, NQ, TriviaQA, SQuAD, BoolQ,  prompt tokens (Table 3); ``--judge SPEC``
           HellaSwag, MBPP+, HumanEval+; OOD:      grades with an LLM judge at T 1.0, top-p
           TruthfulQA, BBH, LiveBench, AMC,        0.95, up to 1,000 tokens (5.1, Appendix B.5
           Minerva, Winogrande, OlympiadBench,     Table 4)
           MMLU-Pro
sage       code: HumanEval+, MBPP+, LiveCodeBench  greedy pass@1 (5.1), 8,192 new and 8,192
           (v1-v5); math: GSM8K, MATH, AIME24,     prompt tokens (Appendix A, Table 4)
           AIME25, AMC'23, OlympiadBench
comas      math: GSM8K, MATH-500; code:            one answer at T 0.7, 4,096 new tokens, 28,672
           HumanEval, MBPP; science: SciBench,     prompt tokens (Appendix C, Table 2), at most
           GPQA; general: MMLU                     500 problems per benchmark (4.1); the
                                                   Vanilla setup, or ``--setup`` (below)
marsrl     AIME25, BeyondAIME                      the solver-verifier-corrector system played
                                                   as MarsRL evaluates it (below), 32 samples
                                                   at T 0.6, top-p 0.95, top-k -1, 65,536 new
                                                   and 32,768 prompt tokens (4.1), avg@32; the
                                                   Solver and Reasoning System columns
=========  ======================================  ===========================================

**The protocol is the default, on every device.** The command-line ``--max-new-tokens``,
``--samples``, ``--temperature``, ``--top-p`` and ``--limit`` override a suite's values (e.g. a
2-sample smoke run of MarsRL's protocol); the table's header, ``report.md`` and ``run.json``
(``protocol``) then list every value that differs from the paper's. :func:`paper_pass_args`
resolves a command line to the pass's arguments, so what a run will do can be checked before it
runs. ``--chat-template-kwargs KEY=VALUE`` reaches every policy that renders a chat template.

**AT-GRPO's no-thinking mode** (5.1: Qwen3 "in the no-thinking mode"): the suite renders
prompts with ``enable_thinking=False`` for every policy whose chat template reads that switch
(Qwen3's does; other templates are left alone), and the header says, per policy, whether it was
set. An ``openai:`` server's template cannot be read from here: give
``--chat-template-kwargs enable_thinking=false`` to send it.

**MarsRL's evaluation process.** MarsRL caps a problem at five agent steps during training
(3.1) and evaluates with the process of its public inference script (4.1 cites it): up to eleven
checks, acceptance after four accepting checks in a row, and input limits in tokens
(:data:`envs.solver_verifier_corrector.EVALUATION_CONFIG`, documented in that setting's page).
Its tables report the Solver alone and the Reasoning System (the final answer of the process);
both come from the same episodes: the first agent's own answer and the system's final one.

**CoMAS's setups** (4.1, "Setups"; the paper follows MASLab's implementations): ``--setup``
``vanilla`` (default), ``consistency``, ``autogen``, ``debate``, or several comma-separated; each
setup of each policy is one row (``consistency:P``). :mod:`adapters.evaluation.setups` says what
each one does and what had to be chosen.

CoMAS keeps a random 500 problems of a larger benchmark and gives no seed; here the 500 whose
text hashes lowest are kept (:func:`~adapters.evaluation.passes.hash_subsample`), a fixed subset.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.evaluation.passes import Benchmark, PassArgs, protocol_lines, run_passes
from adapters.policies.base import EVAL_TEMPERATURE

__all__ = [
    "PAPER_SUITES",
    "PaperSuite",
    "main_paper_suite",
    "paper_pass_args",
    "paper_table",
    "plan_paper_suite",
]


@dataclass(frozen=True)
class PaperSuite:
    """A paper's evaluation protocol: benchmark groups (dataset, column label), the setting and
    mode that play them, decoding limits and sampling, the metric its table reports, and the
    section each value comes from (``sources``)."""

    name: str
    title: str
    groups: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    metric: str = "pass@1"
    samples: int = 1
    temperature: float = EVAL_TEMPERATURE
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 4096
    max_prompt_tokens: int | None = None
    mode: str = "single"
    math_setting: str = "math"
    subsample: int | None = None  # problems kept per benchmark (a fixed pseudo-random subset)
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per dataset
    env_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per setting
    template_switches: Mapping[str, Any] = field(default_factory=dict)  # where templates read
    columns: tuple[str, ...] = ()  # per benchmark, e.g. ("Solver", "Reasoning System")
    setups: tuple[str, ...] = ("vanilla",)  # inference setups the paper reports (CoMAS)
    sources: Mapping[str, str] = field(default_factory=dict)

    def datasets(self) -> list[str]:
        return [d for _g, cols in self.groups for d, _label in cols]


def _marsrl_evaluation() -> dict[str, Any]:
    import envs

    return envs.spec("solver_verifier_corrector").paper_evaluation_options()


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
            max_new_tokens=4096,
            max_prompt_tokens=8192,
            template_switches={"enable_thinking": False},
            sources={
                "temperature": "A.2.1: validation is deterministic (temperature 0)",
                "max_new_tokens": "A.2.1: maximum response length 4096",
                "max_prompt_tokens": "A.2.1: maximum prompt length 8192 (math and code)",
                "template_switches": "5.1: Qwen3 in the no-thinking mode",
                "mode": "5.1: the multi-agent system (MAS) of each domain",
            },
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
            max_new_tokens=8192,
            max_prompt_tokens=8192,
            sources={
                "temperature": "5.1 names no sampling for the evaluated model: greedy",
                "max_new_tokens": "Appendix A.2, Table 3: max response length 8192",
                "max_prompt_tokens": "Appendix A.2, Table 3: max prompt length 8192",
                "judge": "Appendix B.5, Table 4: temperature 1.0, top-p 0.95, max tokens 1000",
            },
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
            max_new_tokens=8192,
            max_prompt_tokens=8192,
            sources={
                "temperature": "5.1: pass@1 from greedy decoding",
                "max_new_tokens": "Appendix A, Table 4: maximum response length 8192",
                "max_prompt_tokens": "Appendix A, Table 4: maximum prompt length 8192",
            },
        ),
        PaperSuite(
            "comas",
            "CoMAS Table 1",
            (
                ("Math", (("gsm8k", "GSM8K"), ("math500", "MATH-500"))),
                ("Coding", (("humaneval", "HumanEval"), ("mbpp", "MBPP"))),
                ("Science", (("scibench", "SciBench"), ("gpqa", "GPQA"))),
                ("General", (("mmlu", "MMLU"),)),
            ),
            temperature=0.7,
            subsample=500,
            max_new_tokens=4096,
            max_prompt_tokens=28672,
            setups=("vanilla", "consistency", "autogen", "debate"),
            sources={
                "temperature": "Appendix C, Table 2: evaluation temperature 0.7",
                "max_new_tokens": "Appendix C, Table 2: token limit for responses 4096",
                "max_prompt_tokens": "Appendix C, Table 2: token limit for prompts 28672",
                "subsample": "4.1: 500 samples kept of a larger benchmark",
                "setups": "4.1: Vanilla, Consistency, AutoGen, Debate (MASLab's implementations)",
            },
        ),
        PaperSuite(
            "marsrl",
            "MarsRL Table 1 (avg@32)",
            (("Benchmarks", (("aime25", "AIME2025"), ("beyond_aime", "BeyondAIME"))),),
            metric="avg@32",
            samples=32,
            temperature=0.6,
            top_p=0.95,
            top_k=-1,
            max_new_tokens=65536,
            max_prompt_tokens=32768,
            mode="multi",
            math_setting="solver_verifier_corrector",
            env_config={"solver_verifier_corrector": _marsrl_evaluation()},
            columns=("Solver", "Reasoning System"),
            sources={
                "samples": "4.1: each set repeated 32 times, avg@32",
                "temperature": "4.1: temperature 0.6, top-p 0.95, top-k -1 for every agent",
                "max_new_tokens": "4.1: maximum response length 64k tokens",
                "max_prompt_tokens": "4.1: maximum input length 32k tokens",
                "env_config": "the Figure 1 process as the public inference script runs it "
                "(4.1): at most 11 checks, acceptance after 4 in a row",
                "columns": "Tables 1-3: Solver and Reasoning System",
            },
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
    import envs
    from envs.data.catalog import dataset_info, find_data_file

    benches, skipped = [], []
    for dataset in suite.datasets():
        path = find_data_file(data_dir, dataset) if data_dir is not None else None
        if data_dir is not None and path is None and not dataset_info(dataset).offline:
            skipped.append(dataset)
            continue
        # programs are decided by the setting that runs their tests; answers by the suite's own
        played_by = dataset_info(dataset).setting
        is_program = envs.spec(played_by).answer_kind == "program"
        setting = played_by if is_program else suite.math_setting
        benches.append(
            Benchmark(
                dataset,
                path,
                setting=setting,
                mode=suite.mode,
                env_config=dict(suite.env_config.get(setting, {})),
                options=dict(suite.options.get(dataset, {})),
                limit=limit,
                subsample=suite.subsample,
            )
        )
    return benches, skipped


def paper_pass_args(
    suite: PaperSuite,
    args: argparse.Namespace,
    benches: Sequence[Benchmark],
    policies: Sequence[str] | None = None,
) -> PassArgs:
    """The pass a ``--suite paper:NAME`` command line runs: the suite's protocol, with the
    values the command line gives instead (``None`` = not given), each change listed in
    ``protocol``; ``args.chat_template_kwargs`` is a mapping (``adapters.evaluate`` parses the
    flag)."""
    protocol = [f"{suite.title}: the paper's protocol"]
    protocol += [f"{key}: {why}" for key, why in suite.sources.items()]
    chosen: dict[str, Any] = {}
    changed = []
    for key, flag in (
        ("samples", "--samples"),
        ("temperature", "--temperature"),
        ("top_p", "--top-p"),
        ("max_new_tokens", "--max-new-tokens"),
    ):
        paper, given = getattr(suite, key), getattr(args, key, None)
        chosen[key] = paper if given is None else given
        if given is not None and given != paper:
            changed.append(f"{key} {paper} -> {given} ({flag})")
    if getattr(args, "limit", None) is not None:
        changed.append(f"only the first {args.limit} problems of each benchmark (--limit)")
    if changed:
        protocol.append("CHANGED from the paper's protocol: " + "; ".join(changed))
    return PassArgs(
        benchmarks=tuple(benches),
        policies=tuple(policies if policies is not None else args.policy),
        samples=chosen["samples"],
        ks=tuple(getattr(args, "pass_k", ()) or ()),
        temperature=chosen["temperature"],
        top_p=chosen["top_p"],
        top_k=suite.top_k,
        max_new_tokens=chosen["max_new_tokens"],
        max_prompt_tokens=suite.max_prompt_tokens,
        seed=getattr(args, "seed", 0),
        chunk_size=getattr(args, "chunk_size", 16),
        judge=getattr(args, "judge", None),
        chat_template_kwargs=dict(getattr(args, "chat_template_kwargs", None) or {}),
        template_switches=dict(suite.template_switches),
        protocol=tuple(protocol),
    )


def _metric(suite: PaperSuite, samples: int) -> str:
    if samples == 1:
        return "pass@1"
    return suite.metric if suite.metric != f"avg@{suite.samples}" else f"avg@{samples}"


def paper_table(suite: PaperSuite, results: Mapping[str, Any], skipped: Sequence[str]) -> str:
    """The paper's layout: a row per policy, the paper's columns (percent), group averages over
    the benchmarks that were run, and the overall average; skipped benchmarks show ``-``. A
    suite with ``columns`` (MarsRL) has those per benchmark (the Solver alone, the system) and,
    as the paper's table, no averages. The header repeats the protocol lines of the pass."""
    samples = results["arguments"]["samples"]
    metric = _metric(suite, samples)
    policies = list(results["arguments"]["policies"])
    judge = results["arguments"].get("judge")
    value: dict[tuple[str, str], float] = {}
    solver: dict[tuple[str, str], float] = {}
    errors = {(r["benchmark"], r["policy"]): r["error"] for r in results["rows"] if "error" in r}
    for r in results["rows"]:
        if "error" in r:
            continue  # the judge's grading when there is one (MAE), else the metric
        key = (r["benchmark"], r["policy"])
        value[key] = r["judge"]["pass@1"]["mean"] if "judge" in r else r[metric]["mean"]
        if "solver" in r:
            solver[key] = r["solver"]["mean"]

    def cell(d: str, pol: str, got: dict[tuple[str, str], float]) -> str:
        if (d, pol) in errors:
            return "n/a"
        v = got.get((d, pol))
        return "-" if v is None else f"{100 * v:.2f}"

    header = ["Method"]
    for group, cols in suite.groups:
        if suite.columns:
            header += [f"{label} {c}" for _d, label in cols for c in suite.columns]
            continue
        header += [label for _d, label in cols]
        if len(suite.groups) > 1:
            header.append(f"{group} Avg.")
    if not suite.columns:
        header.append("Overall Avg.")
    lines = [
        f"{suite.title}: {metric} (%) on {samples} sample(s) per problem",
        "",
        *(f"- {x}" for x in protocol_lines(results)),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * len(header)) + "|",
    ]
    for pol in policies:
        cells, every = [pol], []
        for _group, cols in suite.groups:
            if suite.columns:  # (Solver, Reasoning System) per benchmark
                cells += [
                    cell(d, pol, solver if c == suite.columns[0] else value)
                    for d, _label in cols
                    for c in suite.columns
                ]
                continue
            cells += [cell(d, pol, value) for d, _label in cols]
            vals = [value[(d, pol)] for d, _label in cols if (d, pol) in value]
            every += vals
            if len(suite.groups) > 1:
                cells.append(f"{100 * sum(vals) / len(vals):.2f}" if vals else "-")
        if not suite.columns:
            cells.append(f"{100 * sum(every) / len(every):.2f}" if every else "-")
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"n/a: {pol} cannot play {bench}: {why}" for (bench, pol), why in errors.items()]
    if suite.columns:
        notes.append(
            f"{suite.columns[0]}: the first agent's own answer; {suite.columns[1]}: the final "
            "answer of the whole process (the same episodes)"
        )
    if judge:
        notes.append(f"non-code benchmarks graded by the judge {judge} (see report.md)")
    if skipped:
        notes.append("skipped (no file in --data-dir): " + ", ".join(skipped))
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def main_paper_suite(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    command: str | None = None,
    check: Callable[[list[Benchmark]], None] | None = None,
) -> int:
    """``python -m adapters.evaluate --suite paper:NAME`` (called by :mod:`adapters.evaluate`
    with its parsed arguments; ``command`` is shown in the report; ``check`` is called with the
    benchmarks to play before any policy is built, and raises to stop the run)."""
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
    from adapters.evaluation.setups import setup_spec, with_setups

    setups = [x.strip() for x in (getattr(args, "setup", None) or "vanilla").split(",")]
    unknown = [x for x in setups if x not in suite.setups]
    if unknown:
        parser.error(
            f"--setup {','.join(unknown)}: paper:{suite.name} reports {', '.join(suite.setups)}"
        )
    policies = [setup_spec(x, p) for x in setups for p in args.policy]
    benches, skipped = plan_paper_suite(suite, args.data_dir, limit=args.limit)
    if skipped:
        print(f"skipping (no file in {args.data_dir}): {', '.join(skipped)}", file=sys.stderr)
    if not benches:
        print(
            f"error: no benchmark of paper:{suite.name} found in {args.data_dir}", file=sys.stderr
        )
        return 2
    if check is not None:
        check(benches)
    try:
        run = paper_pass_args(suite, args, benches, policies)
    except ValueError as e:
        parser.error(str(e))
    out = Path(args.out or f"runs/paper-{suite.name}")
    try:
        results = run_passes(
            run,
            out,
            policy_factory=with_setups(_default_factory(args, args.concurrency)),  # type: ignore[arg-type]
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
