"""Full benchmark passes: every problem of a benchmark, each played ``samples`` times, scored as
the papers score them (pass@1, avg@k, unbiased pass@k), resumable.

``python -m adapters.evaluate --env math --dataset aime24 --data-path F --policy P --samples 32
--temperature 0.6 --top-p 0.95 --out DIR`` is the command line; :func:`run_passes` is the same
from Python, and the paper suites (:mod:`adapters.evaluation.papers`) call it too.

**What is played.** A benchmark is a dataset of :data:`envs.data.catalog.DATASETS` read from a
file or directory in its released format (or the hub cache). Unlike ``--split`` evaluations,
which draw instances from the setting's content-hash split, a pass plays problem ``i`` of the
file as an explicit instance, ``samples`` times (sample ``s`` with generation seed derived from
``(seed, benchmark, i, s)``), in the setting's ``single`` mode by default (one agent answers
once; the papers' single-model numbers). Each policy spec plays every role.

**Metrics** (per benchmark and policy; ``n`` samples of a problem, ``c`` of them correct):

* ``pass@1``: the mean over problems of ``c / n`` (with one greedy sample, the accuracy SAGE and
  AT-GRPO report); ``avg@n`` is the same number under MarsRL's name (avg@32: 32 samples);
* ``pass@k`` (``k <= n``, asked with ``ks``): the mean over problems of the unbiased estimator
  ``1 - C(n - c, k) / C(n, k)`` (:func:`pass_at_k`);

each with a 95% Student-t interval over problems (:func:`~adapters.evaluation.stats.
mean_interval`).

**Limits and decoding.** A pass decodes at most ``max_new_tokens`` new tokens per completion
(default :data:`PAPER_MAX_NEW_TOKENS` = 4,096, the smallest response limit of the five papers,
AT-GRPO A.2.1 and CoMAS Appendix C; the paper suites set their paper's own,
:mod:`adapters.evaluation.papers`), left-truncates prompts longer than ``max_prompt_tokens``
tokens (``None``: the model's context; an HTTP server applies its own), samples with
``temperature`` / ``top_p`` / ``top_k``, and renders chat templates with
``chat_template_kwargs`` (``template_switches`` are set only where a policy's template reads
them: a paper's switch such as Qwen3's ``enable_thinking``; what was done per policy is in
``results.json`` under ``template`` and in the report's header). ``protocol`` lines say where
the values come from and what a command line changed; the report and ``run.json`` carry them.

**Setting columns.** Where the setting's first agent is a solver whose answer is graded on its
own (MarsRL's solver-verifier-corrector), each record also says whether that first answer was
right (``solver_correct``), and the row has ``solver`` (pass@1 of the Solver alone) beside the
system's metrics: MarsRL's tables report both.

**Resuming.** ``OUT/run.json`` holds the arguments; each chunk of ``chunk_size`` problems (all
their samples) of one benchmark and policy is saved at once to ``OUT/units/`` (temporary name,
then rename), so the same command continues a killed run and other arguments are refused.
``OUT/results.json`` holds the numbers and one record per problem and sample; ``report.md`` the
table; ``charts/passes.png`` the pass@1 bars.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adapters.evaluation.judge import JudgeSampling
from adapters.evaluation.stats import mean_interval
from adapters.evaluation.suite import _check_run_file, write_atomic
from adapters.policies.base import EVAL_TEMPERATURE, MAX_NEW_TOKENS, GenerationConfig, Policy
from adapters.rollout import (
    EpisodeSpec,
    RolloutConfig,
    RolloutEngine,
    RolloutProgress,
    create_shared_objects,
    derive_seed,
    env_roles,
    follow_share,
)
from verifiers.extract import clip_text

__all__ = [
    "PAPER_MAX_NEW_TOKENS",
    "Benchmark",
    "PassArgs",
    "benchmark_problems",
    "evaluate_datasets",
    "hash_subsample",
    "pass_at_k",
    "play_pass",
    "run_passes",
    "score_records",
]

FORMAT_VERSION = 2  # 2: decoding limits, chat template arguments, judge sampling, protocol
PAPER_MAX_NEW_TOKENS = 4096
"""A full pass's completion budget (see the module docstring); the CPU-sized evaluations and the
trainer use the generation section's :data:`~adapters.policies.base.MAX_NEW_TOKENS`."""
COMPLETION_CHARS = 4000
"""The last completion of each episode is kept in its record (clipped to this many characters),
so answers can be re-graded (e.g. by an LLM judge) without playing again."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``.

    Hand case: n = 4, c = 1, k = 2: ``1 - C(3, 2) / C(4, 2) = 1 - 3/6 = 0.5``.

    >>> pass_at_k(4, 1, 2), pass_at_k(4, 0, 2), pass_at_k(4, 3, 2), pass_at_k(5, 2, 1)
    (0.5, 0.0, 1.0, 0.4)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of a pass: a registered dataset, its file, the setting that plays it."""

    dataset: str
    data_path: str | None = None
    setting: str | None = None  # default: the dataset's setting in the registry
    mode: str = "single"
    env_config: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # loader options
    name: str | None = None  # label in tables (default: the dataset)
    limit: int | None = None  # the first LIMIT problems (smoke runs; None: all)
    subsample: int | None = None  # a fixed pseudo-random subset of this size (CoMAS: 500)

    @property
    def label(self) -> str:
        return self.name or self.dataset

    @property
    def env_id(self) -> str:
        from envs.data.catalog import dataset_info

        return self.setting or dataset_info(self.dataset).setting

    def config(self) -> dict[str, Any]:
        return {**dict(self.env_config), "mode": self.mode}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["env_config"], d["options"] = dict(self.env_config), dict(self.options)
        return d


def benchmark_problems(bench: Benchmark) -> list[Any]:
    """Every problem of the benchmark, in file order, as its setting loads them (the spec's
    ``problem_loader``: code sets through the code setting); math problems without an answer
    are dropped."""
    import envs
    from envs.data.catalog import load_dataset

    problems = envs.spec(bench.env_id).load_problems(bench.dataset, bench.data_path, bench.options)
    if problems is None:
        problems = load_dataset(bench.dataset, bench.data_path, **dict(bench.options))
    problems = [p for p in problems if str(getattr(p, "answer", "x")).strip()]
    if bench.subsample is not None and len(problems) > bench.subsample:
        problems = hash_subsample(problems, bench.subsample)
    return problems if bench.limit is None else problems[: bench.limit]


def hash_subsample(problems: Sequence[Any], n: int) -> list[Any]:
    """``n`` problems chosen by the hash of their text (those with the smallest keys), in file
    order: a pseudo-random subset that is the same on every machine and for every policy.

    >>> from envs.data.records import MathProblem
    >>> ps = [MathProblem(str(i), f"question {i}", "1", "demo") for i in range(10)]
    >>> sub = hash_subsample(ps, 3)
    >>> len(sub), sub == hash_subsample(list(reversed(ps)), 3)[::-1], sub == ps[:3]
    (3, True, False)
    """
    chosen = set(sorted(range(len(problems)), key=lambda i: (problems[i].key, i))[:n])
    return [p for i, p in enumerate(problems) if i in chosen]


@dataclass(frozen=True)
class PassArgs:
    """Everything that decides a pass's numbers (``run.json``; checked on resume)."""

    benchmarks: tuple[Benchmark, ...]
    policies: tuple[str, ...]
    samples: int = 1
    ks: tuple[int, ...] = ()
    temperature: float = EVAL_TEMPERATURE
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = PAPER_MAX_NEW_TOKENS
    max_prompt_tokens: int | None = None
    seed: int = 0
    chunk_size: int = 16
    judge: str | None = None  # a policy spec grading non-code answers TRUE/FALSE (MAE 5.1)
    judge_sampling: JudgeSampling = field(default_factory=JudgeSampling)
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    template_switches: Mapping[str, Any] = field(default_factory=dict)  # only where read
    protocol: tuple[str, ...] = ()  # where the values come from, what was changed

    def __post_init__(self) -> None:
        if not self.benchmarks or not self.policies:
            raise ValueError("a pass needs at least one benchmark and one policy")
        if self.samples < 1 or self.chunk_size < 1:
            raise ValueError("samples and chunk size must be >= 1")
        if self.max_new_tokens < 1 or (self.max_prompt_tokens or 1) < 1:
            raise ValueError("max_new_tokens and max_prompt_tokens must be >= 1")
        bad = [k for k in self.ks if not 1 <= k <= self.samples]
        if bad:
            raise ValueError(f"pass@k needs 1 <= k <= samples ({self.samples}); got {bad}")
        labels = [b.label for b in self.benchmarks]
        if len(set(labels)) != len(labels):
            raise ValueError(f"two benchmarks share a name: {labels}")

    def fingerprint(self) -> dict[str, Any]:
        out = asdict(self)
        out["benchmarks"] = [b.to_dict() for b in self.benchmarks]
        out["policies"], out["ks"] = list(self.policies), list(self.ks)
        out["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        out["template_switches"] = dict(self.template_switches)
        out["protocol"] = list(self.protocol)
        return {"format": FORMAT_VERSION, "kind": "passes", **out}


def play_pass(
    bench: Benchmark,
    policy: Policy | Mapping[str, Policy],
    problems: Sequence[Any],
    *,
    first: int = 0,
    samples: int = 1,
    temperature: float = EVAL_TEMPERATURE,
    top_p: float = 1.0,
    top_k: int = -1,
    max_new_tokens: int = PAPER_MAX_NEW_TOKENS,
    seed: int = 0,
    on_episode: Callable[[Any], None] | None = None,
    role_policy: Mapping[str, str] | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
) -> list[dict[str, Any]]:
    """Play problems ``first ..`` (the given ones) ``samples`` times each with ``policy`` in every
    role (or ``policy`` a mapping of policy ids with ``role_policy``, as the trainer has them); one
    record per problem and sample: index, id, sample, correct, team reward, tokens and the episode's
    last completion (clipped)."""
    cfg = bench.config()
    shared = create_shared_objects(bench.env_id, cfg)
    full = {**cfg, **dict(shared)}
    invalid = _invalid_instances(bench.env_id, full, problems)
    playable = [i for i in range(len(problems)) if i not in invalid]
    specs = [
        EpisodeSpec(
            bench.env_id,
            seed=derive_seed(seed, "pass", bench.label, first + i, s),
            config=dict(full),
            options={"instance": problems[i]},
        )
        for i in playable
        for s in range(samples)
    ]
    rcfg = RolloutConfig(candidates=1, sampling="parallel")
    gen = GenerationConfig(
        temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens
    )
    if isinstance(policy, Mapping):
        policies = dict(policy)
        if role_policy is None:
            raise ValueError("a mapping of policies needs role_policy")
    else:
        policies = {"policy": policy}
        role_policy = {r: "policy" for r in env_roles(bench.env_id, cfg)}
    engine = RolloutEngine(
        bench.env_id, policies, rcfg, generation=gen, env_config=full, role_policy=role_policy
    )
    try:
        if not specs:
            return _unplayable_records(problems, invalid, first, samples)
        result = engine.run(
            specs,
            seed=derive_seed(seed, "pass-generation", bench.label, first),
            on_episode=on_episode,
            on_progress=on_progress,
        )
    finally:
        engine.close()
    tokens: dict[int, int] = {}
    last: dict[int, tuple[int, str]] = {}  # instance -> (step, completion) of its last step
    solver: dict[int, bool] = {}  # instance -> the first agent's own answer right (module doc)
    for smp in result.samples:
        correct = smp.reward_parts.get("components", {}).get("correct")
        if smp.step == 0 and smp.role == "solver" and correct is not None:
            solver[smp.instance] = bool(correct)
        tokens[smp.instance] = tokens.get(smp.instance, 0) + (
            len(smp.completion_ids) or len(smp.logprobs)
        )
        if smp.instance not in last or smp.step >= last[smp.instance][0]:
            last[smp.instance] = (smp.step, smp.completion)
    records = _unplayable_records(problems, invalid, first, samples)
    for e in sorted(result.episodes, key=lambda e: e.instance):
        j, s = divmod(e.instance, samples)
        i = playable[j]
        records.append(
            {
                "index": first + i,
                "problem_id": str(getattr(problems[i], "id", first + i)),
                "instance_id": e.instance_id,
                "sample": s,
                "correct": bool(e.success),
                "team": float(e.final_team),
                "turns": e.turns,
                "completion_tokens": tokens.get(e.instance, 0),
                "completion": clip_text(last.get(e.instance, (0, ""))[1], COMPLETION_CHARS),
                **({"solver_correct": solver[e.instance]} if e.instance in solver else {}),
            }
        )
    return sorted(records, key=lambda r: (r["index"], r["sample"]))


def _invalid_instances(
    env_id: str, config: Mapping[str, Any], problems: Sequence[Any]
) -> dict[int, str]:
    """``{index: reason}`` of the problems the setting refuses as instances (e.g. a code problem
    whose released golden solution fails its own tests); they are scored wrong, not played."""
    import envs

    env = envs.make(env_id, **dict(config))
    bad: dict[int, str] = {}
    for i, p in enumerate(problems):
        try:
            env.reset(seed=0, options={"instance": p})
        except ValueError as e:
            bad[i] = f"invalid instance: {e}"[:300]
    env.close()
    return bad


def _unplayable_records(
    problems: Sequence[Any], invalid: Mapping[int, str], first: int, samples: int
) -> list[dict[str, Any]]:
    return [
        {
            "index": first + i,
            "problem_id": str(getattr(problems[i], "id", first + i)),
            "instance_id": "",
            "sample": s,
            "correct": False,
            "team": 0.0,
            "turns": 0,
            "completion_tokens": 0,
            "completion": "",
            "error": why,
        }
        for i, why in sorted(invalid.items())
        for s in range(samples)
    ]


def score_records(
    records: Sequence[Mapping[str, Any]], samples: int, ks: Sequence[int] = ()
) -> dict[str, Any]:
    """pass@1 (= avg@samples), and pass@k for each of ``ks``, each a mean over problems with its
    95% interval; ``problems`` and ``samples`` counted.

    >>> recs = [{"index": i, "correct": c} for i, c in enumerate([True, False, True])]
    >>> s = score_records(recs, 1)
    >>> round(s["pass@1"]["mean"], 3), s["problems"]
    (0.667, 3)
    """
    by_problem: dict[int, list[bool]] = {}
    for r in records:
        by_problem.setdefault(int(r["index"]), []).append(bool(r["correct"]))
    if not by_problem:
        raise ValueError("no records to score")
    for idx, xs in by_problem.items():
        if len(xs) != samples:
            raise ValueError(f"problem {idx} has {len(xs)} samples, expected {samples}")
    counts = [sum(xs) for xs in by_problem.values()]
    out: dict[str, Any] = {
        "problems": len(counts),
        "samples": samples,
        "pass@1": mean_interval([c / samples for c in counts]).to_dict(),
    }
    if samples > 1:
        out[f"avg@{samples}"] = out["pass@1"]
    if any("solver_correct" in r for r in records):  # MarsRL's Solver column
        solver: dict[int, list[bool]] = {}
        for r in records:  # a problem the setting refused (no solver step) counts wrong
            solver.setdefault(int(r["index"]), []).append(bool(r.get("solver_correct")))
        out["solver"] = mean_interval([sum(xs) / len(xs) for xs in solver.values()]).to_dict()
    for k in ks:
        out[f"pass@{k}"] = mean_interval([pass_at_k(samples, c, k) for c in counts]).to_dict()
    return out


def evaluate_datasets(
    env_id: str,
    policies: Mapping[str, Policy],
    role_policy: Mapping[str, str],
    datasets: Sequence[str],
    *,
    env_config: Mapping[str, Any] | None = None,
    seed: int = 0,
    temperature: float = EVAL_TEMPERATURE,
    max_new_tokens: int = MAX_NEW_TOKENS,
    out: str | Path | None = None,
) -> dict[str, float]:
    """A full pass (one sample per problem) over each of ``datasets`` (``NAME`` or
    ``NAME=PATH``) with the trainer's policies, in the trainer's setting and mode; returns
    ``{name: pass@1}`` and writes the rows and records to ``out`` (JSON) when given. This is
    what ``adapters.train --eval-dataset`` runs at each evaluation point."""
    cfg = dict(env_config or {})
    mode = str(cfg.pop("mode", "multi"))
    for key in ("dataset", "data_path", "data_split", "data_options"):
        cfg.pop(key, None)  # the training data: the pass plays the benchmark's own problems
    rows, records, scores = [], [], {}
    for item in datasets:
        name, _, path = str(item).partition("=")
        bench = Benchmark(
            name.strip(), path.strip() or None, setting=env_id, mode=mode, env_config=cfg
        )
        recs = play_pass(
            bench,
            policies,
            benchmark_problems(bench),
            seed=seed,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            role_policy=role_policy,
        )
        row = {"benchmark": bench.label, **score_records(recs, 1)}
        rows.append(row)
        records += [{"benchmark": bench.label, **r} for r in recs]
        scores[bench.label] = float(row["pass@1"]["mean"])
    if out is not None:
        write_atomic(Path(out), json.dumps({"rows": rows, "records": records}, indent=1))
    return scores


def _slug(text: str, index: int) -> str:
    return f"p{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_")[:40]


def _play_chunks(
    args: PassArgs,
    bench: Benchmark,
    problems: Sequence[Any],
    spec: str,
    pi: int,
    root: Path,
    built: dict[str, Policy],
    policy_factory: Callable[[str], Policy],
    progress: bool,
) -> tuple[list[dict[str, Any]], str]:
    """The records of one benchmark and policy (saved chunks are read, missing ones played) and
    what was done with the policy's chat template (saved with each chunk)."""
    from tqdm.auto import tqdm

    records: list[dict[str, Any]] = []
    template = ""
    chunks = range(0, len(problems), args.chunk_size)
    with tqdm(
        total=len(problems) * args.samples,
        disable=not progress,
        unit="ep",
        bar_format="{l_bar}{bar}| {n:.1f}/{total_fmt} ep [{elapsed}<{remaining}{postfix}]",
    ) as bar:
        bar.set_postfix_str(f"{bench.label} {spec}")
        for c, first in enumerate(chunks):
            path = root / "units" / f"{_slug(bench.label, 0)[3:]}.{_slug(spec, pi)}.c{c:03d}.json"
            unit = {"benchmark": bench.label, "policy": spec, "first": first}
            if path.exists():
                data = json.loads(path.read_text())
                if data.get("unit") != unit:
                    raise ValueError(f"{path} holds another chunk; delete it")
                bar.update(len(data["records"]))
            else:
                if spec not in built:
                    built[spec] = _prepared(policy_factory(spec), args)
                start, size = float(bar.n), len(problems[first : first + args.chunk_size])
                recs = play_pass(
                    bench,
                    built[spec],
                    problems[first : first + args.chunk_size],
                    first=first,
                    samples=args.samples,
                    temperature=args.temperature,
                    top_p=args.top_p,
                    top_k=args.top_k,
                    max_new_tokens=args.max_new_tokens,
                    seed=args.seed,
                    on_progress=follow_share(bar, size * args.samples, f"{bench.label} {spec}"),
                )
                bar.update(start + size * args.samples - bar.n)
                data = {"unit": unit, "records": recs, "template": built[spec].template_note}  # type: ignore[attr-defined]
                write_atomic(path, json.dumps(data))
            records.extend(data["records"])
            template = data.get("template") or template
    return records, template


def _prepared(policy: Policy, args: PassArgs) -> Policy:
    """A policy under evaluation with the pass's prompt limit and chat template arguments;
    ``policy.template_note`` says what was done with its template."""
    from adapters.policies.specs import set_chat_template_kwargs

    if args.max_prompt_tokens is not None and hasattr(policy, "max_prompt_tokens"):
        policy.max_prompt_tokens = args.max_prompt_tokens
    notes = [
        set_chat_template_kwargs(policy, args.chat_template_kwargs),
        set_chat_template_kwargs(policy, args.template_switches, only_where_read=True),
    ]
    policy.template_note = "; ".join(n for n in notes if n)  # type: ignore[attr-defined]
    return policy


def run_passes(
    args: PassArgs,
    out: str | Path,
    *,
    policy_factory: Callable[[str], Policy],
    progress: bool = False,
    command: str | None = None,
) -> dict[str, Any]:
    """Play every missing chunk of every benchmark and policy into ``out``, then write
    ``results.json``, ``report.md`` and ``charts/passes.png``; returns the results."""
    import envs

    root = Path(out)
    (root / "units").mkdir(parents=True, exist_ok=True)
    _check_run_file(root, args.fingerprint())
    built: dict[str, Policy] = {}
    rows: list[dict[str, Any]] = []
    all_records: list[dict[str, Any]] = []
    template: dict[str, str] = {}
    for bench in args.benchmarks:
        problems = benchmark_problems(bench)
        if not problems:
            raise ValueError(f"benchmark {bench.label!r} has no problems")
        for pi, spec in enumerate(args.policies):
            try:
                records, note = _play_chunks(
                    args, bench, problems, spec, pi, root, built, policy_factory, progress
                )
            except NotImplementedError as e:  # e.g. the oracle on a set without solutions
                rows.append(
                    {
                        "benchmark": bench.label,
                        "dataset": bench.dataset,
                        "policy": spec,
                        "error": str(e),
                    }
                )
                continue
            if note:
                template[spec] = note
            for r in records:
                r.update(benchmark=bench.label, policy=spec)
            row = {
                "benchmark": bench.label,
                "dataset": bench.dataset,
                "policy": spec,
                **score_records(records, args.samples, args.ks),
            }
            if args.judge and envs.spec(bench.env_id).answer_kind == "text":
                from adapters.evaluation.judge import judge_records, judge_summary

                if args.judge not in built:
                    built[args.judge] = policy_factory(args.judge)
                judge_records(
                    records,
                    {str(p.id): p for p in problems},
                    built[args.judge],
                    judge_spec=args.judge,
                    cache_path=root / "judge_cache.json",
                    sampling=args.judge_sampling,
                    save=write_atomic,
                )
                row["judge"] = judge_summary(records, args.samples)
            rows.append(row)
            all_records.extend(records)
    results = {
        "arguments": args.fingerprint(),
        "template": template,
        "rows": rows,
        "records": all_records,
    }
    write_atomic(root / "results.json", json.dumps(results, indent=1))
    write_atomic(root / "report.md", markdown(results, command=command))
    (root / "charts").mkdir(exist_ok=True)
    write_atomic(root / "charts" / "passes.png", chart(results))
    return results


def metric_names(samples: int, ks: Sequence[int]) -> list[str]:
    """The metric columns of a pass: ``pass@1``, ``avg@n`` when ``n > 1``, then ``pass@k``."""
    names = ["pass@1"] + ([f"avg@{samples}"] if samples > 1 else [])
    return names + [f"pass@{k}" for k in ks if f"pass@{k}" not in ("pass@1",)]


def protocol_lines(results: Mapping[str, Any]) -> list[str]:
    """The header lines of a pass's reports: decoding limits, where the protocol's values come
    from and what was changed, and what was done with each policy's chat template."""
    a = results["arguments"]
    prompt = a.get("max_prompt_tokens")
    lines = [
        f"Decoding: at most {a['max_new_tokens']} new tokens per completion, prompts "
        + (f"left-truncated at {prompt} tokens" if prompt else "up to the model's context")
        + f"; T {a['temperature']}, top-p {a['top_p']}, top-k {a.get('top_k', -1)}"
    ]
    lines += list(a.get("protocol", []))
    lines += [f"Chat template: {note}" for note in results.get("template", {}).values()]
    return lines


def markdown(results: Mapping[str, Any], command: str | None = None) -> str:
    """A table: one row per benchmark and policy, ``mean ± half-width`` (95%) per metric."""
    from adapters.evaluation.report import fmt_interval

    a = results["arguments"]
    names = metric_names(a["samples"], a["ks"])
    if any("solver" in r for r in results["rows"]):  # the Solver alone (MarsRL's tables)
        names.append("solver")
    lines = [
        f"# Benchmark passes ({a['samples']} sample(s) per problem, T {a['temperature']}, "
        f"top-p {a['top_p']})",
        "",
    ]
    if command:
        lines += [f"`{command}`", ""]
    lines += [*(f"- {x}" for x in protocol_lines(results)), ""]
    lines.append("| benchmark | policy | problems | " + " | ".join(names) + " |")
    lines.append("|---|---|---|" + "---|" * len(names))
    for row in results["rows"]:
        if "error" in row:
            lines.append(f"| {row['benchmark']} | {row['policy']} | n/a: {row['error']} |")
            continue
        cells = " | ".join(fmt_interval(row.get(n), 3) for n in names)
        lines.append(f"| {row['benchmark']} | {row['policy']} | {row['problems']} | {cells} |")
    judged = [r for r in results["rows"] if "judge" in r]
    if judged:
        lines += [
            "",
            f"Graded by the judge `{a['judge']}` (TRUE/FALSE; unparsed verdicts count wrong):",
            "",
            "| benchmark | policy | pass@1 (judge) | pass@1 (exact) | agreement | kappa "
            "| unparsed |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in judged:
            j = r["judge"]
            kappa = "-" if j["kappa"] is None else f"{j['kappa']:.2f}"
            lines.append(
                f"| {r['benchmark']} | {r['policy']} | {fmt_interval(j['pass@1'], 3)} | "
                f"{fmt_interval(r['pass@1'], 3)} | {j['agreement']:.3f} | {kappa} | "
                f"{j['unparsed']} |"
            )
    return "\n".join(lines) + "\n"


def chart(results: Mapping[str, Any]) -> bytes:
    """Bars of pass@1 per benchmark, one per policy, error bars = the 95% intervals."""
    import io

    from matplotlib.figure import Figure

    benches = list(dict.fromkeys(r["benchmark"] for r in results["rows"]))
    policies = list(results["arguments"]["policies"])
    fig = Figure(figsize=(max(4.0, 1.2 * len(benches) + 2), 3.6))
    ax = fig.subplots()
    width = 0.8 / max(1, len(policies))
    for j, pol in enumerate(policies):
        mine = {
            r["benchmark"]: r["pass@1"]
            for r in results["rows"]
            if r["policy"] == pol and "pass@1" in r
        }
        ivs = [mine.get(b) for b in benches]
        means = [iv["mean"] if iv else 0.0 for iv in ivs]
        errs = [(iv["high"] - iv["low"]) / 2 if iv else 0.0 for iv in ivs]
        xs = [i + (j - (len(policies) - 1) / 2) * width for i in range(len(benches))]
        ax.bar(xs, means, width, yerr=errs, capsize=3, label=pol, color=f"C{j}")
    ax.set_xticks(range(len(benches)), benches, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass@1, 95% interval", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()
