"""Evaluate policies on a setting or on the whole suite: ``python -m adapters.evaluate``.

One setting (``--env``)::

    python -m adapters.evaluate --env plan_path --policy oracle --episodes 20
    python -m adapters.evaluate --env sokoban --policy smollm2 --episodes 8 --mode single
    python -m adapters.evaluate --env sudoku --policy tool=oracle --policy planner=smollm2
    python -m adapters.evaluate --env math --policy openai:http://127.0.0.1:8000/v1#qwen3 \\
        --json results.json
    python -m adapters.evaluate --env sokoban --policy runs/my-run/final/shared   # a LoRA adapter

The whole suite (``--suite``)::

    python -m adapters.evaluate --suite default --policy oracle --policy smollm2 --out runs/suite
    python -m adapters.evaluate --suite sokoban,math:single --policy openai:http://h:8000/v1#m \\
        --episodes 16 --out runs/suite-m

Policy specs (:mod:`adapters.policies.specs`): ``oracle`` (the env's scripted correct answer),
``constant:TEXT`` (answers ``TEXT`` to every prompt; ``constant:`` answers nothing: the trivial
baselines), ``smollm2`` (the embedded model), ``tiny`` (random tiny model, for smoke tests), a local
checkpoint directory or a LoRA adapter directory written by the trainer, ``openai:BASE_URL[#MODEL]``
(any OpenAI-compatible server). With ``--env``, ``ROLE=SPEC`` assigns a policy to one role and a
spec without ``ROLE=`` serves every role that has no explicit one. With ``--suite``, every
``--policy`` is one policy to compare, and each plays every role.

Decoding is greedy by default (``--temperature 0``, the AT-GRPO validation setting), one episode
per instance (parallel sampling with K = 1). Every role may write ``--max-new-tokens``;
``--role-max-new-tokens ROLE=N`` (repeatable) gives a role a smaller limit, as a training run's
``role_sampling`` does (the grid settings' CPU runs train their planner under 64 tokens; a run's
own evaluations follow it with ``--eval-role-limits``), and the report's ``token_limits`` says
each role's. Instances come from ``--split`` (default ``val``)
with seeds derived from ``--seed``, so two evaluations with the same seed see the same
instances. The table reports the success rate, the mean final team reward, mean turns and steps,
and per agent the mean per-step reward and the mean episode return; ``--json`` writes the same
numbers plus one record per episode, and the episode viewer beside it (``FILE.html``,
:mod:`adapters.view`; ``--no-view`` skips it). A progress bar counts agent steps, so it moves
after every generation wave, with an ETA from the first wave on (its total, each episode's
turns times agents, shrinks as episodes end early: :mod:`adapters.rollout.progress`); it shows
the wave, the live episodes, those done and the tokens generated. The setting, its options, an
explicit instance and every policy spec are checked before any model loads (a local path must
exist, an ``openai:`` server must answer within 5 s), and so is what the run needs from the
machine (:mod:`adapters.preflight`: bubblewrap when a setting's agents run programs, the
embedded model's files); a mistake ends in one ``error:`` line and exit status 2
(:mod:`adapters.cli`).

Suites (:mod:`adapters.evaluation.suite`):

* ``default``: the nine settings in multi-agent mode and the five AT-GRPO settings (sudoku,
  sokoban, plan_path, code, math) in single-agent mode, on CPU-sized instances (6 x 6 Sokoban
  with one box, 6 x 6 path planning, 4 x 4 Sudoku, 2 answers for MAE's and SAGE's difficulty, 2
  CoMAS agents), 8 episodes per entry and policy, at most 128 new tokens;
* ``all``: the same 14 entries at every setting's default size, 32 episodes, 256 tokens;
* ``ID,ID:MODE,...``: those settings (``ID``: its entries of ``default``) at ``default``'s sizes.

A suite run writes ``--out DIR`` (default ``runs/suite-NAME``): ``results.json``,
``episodes.html`` (the episode viewer), ``report.md``
(success rate, team reward, reward per role, completion tokens and wall time, with 95%
intervals) and ``charts/SETTING.png``, with a progress bar over all episodes. It saves every
finished chunk of ``--chunk-size`` episodes, so the same command continues a killed run (other
arguments on the same ``--out`` are refused). The episodes of a chunk are generated together:
an ``openai:`` policy keeps up to ``--concurrency`` requests in flight.

Full benchmark passes (``--dataset``; :mod:`adapters.evaluation.passes`): every problem of a
benchmark read from ``--data-path`` (a file or directory in the dataset's released format;
without it the Hugging Face cache), each played ``--samples`` times in the setting's single mode,
reported as pass@1 (= avg@samples) and, with ``--pass-k K``, unbiased pass@K, with 95%
intervals, at most 4,096 new tokens per completion unless ``--max-new-tokens`` says otherwise;
resumable like ``--suite``::

    python -m adapters.evaluate --env math --dataset aime24 --data-path aime_2024.jsonl \
        --policy openai:http://127.0.0.1:8000/v1#m --samples 32 --temperature 0.6 \
        --top-p 0.95 --pass-k 8 --out runs/aime24

``--chat-template-kwargs KEY=VALUE`` (repeatable) is given to every policy that renders a chat
template (e.g. ``enable_thinking=false``, Qwen3's no-thinking mode); ``--suite paper:NAME`` runs
a paper's evaluation with its protocol (:mod:`adapters.evaluation.papers`).

This module only parses arguments; the work is done by :mod:`adapters.evaluation` (``evaluate``,
``EvalReport``) and :mod:`adapters.evaluation.suite` (``run_suite``).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters import cli
from adapters.policies.graphs import MODES
from adapters.policies.quantize import QUANTIZE_CHOICES

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from adapters.policies.base import MAX_NEW_TOKENS

    p = argparse.ArgumentParser(
        prog="python -m adapters.evaluate",
        description="Evaluate policies on a multi-agent setting (--env; greedy, one episode per "
        "instance), or compare policies on the whole suite (--suite) with a report directory.",
        epilog="Suites: default (9 settings multi + 5 single, CPU-sized, 8 episodes), all (the "
        "same at default sizes, 32 episodes), or ID,ID:MODE,... See the module docstring.",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--env", help="setting id (envs.list_envs()) or package.module:id")
    what.add_argument(
        "--suite",
        metavar="default|all|NAMES",
        help="benchmark the suite: default, all, or a comma-separated list of setting ids / "
        "ID:MODE; writes results.json, report.md and charts/ to --out",
    )
    p.add_argument(
        "--policy",
        action="append",
        required=True,
        help="repeatable: oracle | constant:TEXT | smollm2 | tiny | PATH | openai:BASE_URL[#MODEL]"
        ". With --env: "
        "SPEC or ROLE=SPEC (one policy per role). With --suite: each --policy is one policy to "
        "compare, playing every role",
    )
    p.add_argument(
        "--episodes", type=int, default=None, help="(default: 8; with --suite the suite's)"
    )
    p.add_argument("--split", default="val", choices=("train", "val", "test"))
    p.add_argument("--mode", default=None, help="multi | single (--env; default: multi)")
    p.add_argument("--max-turns", type=int, default=None, help="(--env)")
    p.add_argument("--env-config", action="append", default=[], metavar="KEY=VALUE", help="(--env)")
    p.add_argument("--instance", default=None, help="explicit instance as JSON (--env)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--temperature", type=float, default=None, help="(default: 0; paper:NAME the paper's)"
    )
    p.add_argument("--top-p", type=float, default=None, help="(default: 1; paper:NAME the paper's)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"(default: {MAX_NEW_TOKENS}; --suite: the suite's; --dataset: 4096; paper:NAME: the "
        "paper's)",
    )
    p.add_argument(
        "--role-max-new-tokens",
        action="append",
        default=[],
        metavar="ROLE=N",
        help="repeatable (--env): a smaller token limit for one role, as a training run's "
        "role_sampling sets (the grid settings' CPU runs: planner=64)",
    )
    p.add_argument(
        "--chat-template-kwargs",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="repeatable: an apply_chat_template argument for every policy that renders a chat "
        "template (an openai: server gets them as chat_template_kwargs), e.g. "
        "enable_thinking=false; a JSON mapping works too",
    )
    p.add_argument("--system-prompt", default=None, help="system message for model policies")
    p.add_argument(
        "--demos",
        type=int,
        default=0,
        help="oracle demonstrations per role before each prompt (as the trainer's --demos; "
        "answers longer than --max-new-tokens are left out)",
    )
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: checkpoint's)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument(
        "--compile-decode",
        default="off",
        choices=MODES,
        help="model policies: decode steps compiled over a static KV cache, CUDA graphs on CUDA "
        "(adapters/policies/graphs.py; as the trainer's --compile-decode)",
    )
    p.add_argument(
        "--quantize",
        default="auto",
        choices=QUANTIZE_CHOICES,
        help="model policies: float16-weight (fp16) or int8 linear layers "
        "(adapters/policies/quantize.py); auto (default): fp16 for a float32 model on a CPU "
        "without native bfloat16, else none",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--json",
        default=None,
        help="write the report as JSON here (--env), and the episode viewer beside it "
        "(FILE.html; python -m adapters.view)",
    )
    p.add_argument(
        "--no-view",
        action="store_true",
        help="do not write the episode viewer page beside --json or a suite's results.json",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench = p.add_argument_group("full benchmark passes (--env with --dataset)")
    bench.add_argument(
        "--dataset",
        action="append",
        default=[],
        help="repeatable: play every problem of this dataset (envs.data.catalog names: aime24, "
        "mmlu, gpqa, livecodebench, ...); writes results.json to --out",
    )
    bench.add_argument(
        "--data-path",
        action="append",
        default=[],
        help="the dataset's file or directory in its released format (one per --dataset, in "
        "order; without it the Hugging Face cache, or --data-dir)",
    )
    bench.add_argument(
        "--data-dir",
        default=None,
        help="directory holding NAME.jsonl / .json / .parquet / .csv or NAME/ per dataset",
    )
    bench.add_argument(
        "--samples", type=int, default=None, help="samples per problem (avg@N; default 1)"
    )
    bench.add_argument(
        "--pass-k", type=int, action="append", default=[], help="repeatable: report pass@K"
    )
    bench.add_argument("--limit", type=int, default=None, help="only the first LIMIT problems")
    bench.add_argument(
        "--setup",
        default=None,
        metavar="NAME[,NAME]",
        help="paper:comas: the inference setups to run (vanilla, consistency, autogen, debate; "
        "CoMAS 4.1), each a row per policy; default vanilla",
    )
    bench.add_argument(
        "--judge",
        default=None,
        metavar="SPEC",
        help="also grade non-code answers with this policy as a TRUE/FALSE judge (MAE's "
        "grading), cached in OUT/judge_cache.json; reports its agreement with exact match",
    )
    suite = p.add_argument_group("suite runs (--suite)")
    suite.add_argument("--out", default=None, help="report directory (default: runs/suite-NAME)")
    suite.add_argument(
        "--chunk-size",
        type=int,
        default=16,
        help="episodes generated together (an openai: policy's concurrent requests) and saved "
        "as one unit (what a killed run loses at most)",
    )
    suite.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight per openai: policy"
    )
    return p


# flags that describe one setting; a suite run takes its settings from the suite
_SETTING_FLAGS = {
    "mode": "--mode",
    "max_turns": "--max-turns",
    "env_config": "--env-config",
    "instance": "--instance",
    "json": "--json",
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    return cli.run(lambda: parser, lambda args: _main(parser, args, argv), argv)


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Any) -> int:
    if args.episodes is not None and args.episodes < 1:
        parser.error("--episodes must be at least 1")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        args.chat_template_kwargs = _template_kwargs(args)
    except ValueError as e:
        parser.error(str(e))
    if args.role_max_new_tokens and (args.suite is not None or args.dataset):
        parser.error("--role-max-new-tokens is for one setting's episodes (--env)")
    if args.setup and not (args.suite or "").startswith("paper:"):
        parser.error("--setup chooses CoMAS's inference setups of --suite paper:comas")
    if args.suite is not None and args.suite.startswith("paper:"):
        from adapters.evaluation.papers import main_paper_suite

        return main_paper_suite(
            parser,
            args,
            _command(argv),
            check=lambda benches: _preflight(
                [(b.env_id, b.config()) for b in benches], args.policy
            ),
        )
    if args.suite is not None:
        return _main_suite(parser, args, argv)
    if args.dataset:
        return _main_passes(parser, args, argv)
    if args.out:  # one setting writes a report file, not a directory
        parser.error(
            "--out is the directory of --suite and --dataset runs; with --env, "
            "--json FILE writes the report"
        )
    import envs
    from adapters.evaluation import evaluate, with_prompt_prefixes
    from adapters.policies.base import MAX_NEW_TOKENS
    from adapters.policies.specs import assign_roles, build_policies, check_policy_specs
    from adapters.rollout import env_roles, follow_steps
    from adapters.training.flags import parse_key_values, parse_value

    with cli.bad_input("--env"):
        envs.spec(args.env)
    with cli.bad_input("--env-config"):
        env_config = parse_key_values(args.env_config, "--env-config")
        if args.mode:
            env_config["mode"] = args.mode
        if args.max_turns:
            env_config["max_turns"] = args.max_turns
        roles = env_roles(args.env, env_config)
    with cli.bad_input(""):
        role_limits = _role_limits(args.role_max_new_tokens, roles)
    instance = parse_value(args.instance) if args.instance else None
    if instance is not None:
        with cli.bad_input("--instance"):
            envs.make(args.env, **env_config).reset(options={"instance": instance})
    with cli.bad_input("--policy"):
        check_policy_specs(args.policy, roles)  # loads nothing; a server must answer
    _preflight([(args.env, env_config)], assign_roles(args.policy, roles).values())
    json_path = _output_file(args.json, "--json")
    max_new_tokens = MAX_NEW_TOKENS if args.max_new_tokens is None else args.max_new_tokens
    policies, role_policy = build_policies(
        args.policy,
        roles,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        chat_template_kwargs=_template_kwargs(args),
        compile_decode=args.compile_decode,
        quantize=args.quantize,
    )
    if args.system_prompt or args.demos:
        policies, role_policy = with_prompt_prefixes(
            args.env,
            env_config,
            policies,
            role_policy,
            system_prompt=args.system_prompt,
            demos=args.demos,
            max_new_tokens=max_new_tokens,
            seed=args.seed,
        )
    episodes = 8 if args.episodes is None else args.episodes
    with _progress(f"eval {args.env}", args.no_progress) as bar:
        report = evaluate(
            args.env,
            policies,
            episodes=episodes,
            env_config=env_config,
            role_policy=role_policy,
            split=args.split,
            seed=args.seed,
            temperature=_given(args.temperature, 0.0),
            top_p=_given(args.top_p, 1.0),
            max_new_tokens=max_new_tokens,
            role_max_new_tokens=role_limits,
            instance=instance,
            on_progress=follow_steps(bar),
        )
    print(report.table())
    if json_path is not None:
        json_path.write_text(json.dumps(report.to_dict(), indent=2))
        print(f"wrote {json_path}")
        if not args.no_view:
            _write_view(json_path)
    return 0


def _preflight(settings: Iterable[tuple[str, Mapping[str, Any]]], specs: Iterable[str]) -> None:
    """What the evaluation needs from this machine (the sandbox of the settings it plays, the
    embedded model's files), checked before a policy loads: one line (:mod:`adapters.preflight`)."""
    from adapters.preflight import evaluation_problems

    problems = evaluation_problems(settings, specs)
    if problems:
        raise cli.UsageError("; ".join(problems))


def _progress(desc: str, disabled: bool) -> Any:
    """A progress bar on stderr over an evaluation's agent steps, its total estimated as it goes
    (:func:`~adapters.rollout.progress.follow_steps`), its rate the mean since the start."""
    from tqdm.auto import tqdm

    return tqdm(desc=desc, unit="step", disable=disabled, dynamic_ncols=True, smoothing=0)


def _output_file(name: str | None, flag: str) -> Path | None:
    """``name`` as a path whose directory exists (made now), checked before the work starts."""
    if name is None:
        return None
    path = Path(name)
    with cli.bad_input(flag):
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a directory; give a file name")
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _write_view(path: Path) -> None:
    """Write the episode viewer of ``path`` beside it; a failure is reported, not raised (the
    evaluation itself is already saved)."""
    from adapters.evaluation.viewer import AUTO_BUDGET_S, write_viewer

    try:
        page, n = write_viewer(path, budget_s=AUTO_BUDGET_S)
    except Exception as exc:
        print(
            f"warning: no episode viewer ({type(exc).__name__}: {exc}); "
            f"python -m adapters.view {path} --debug shows why",
            file=sys.stderr,
        )
        return
    print(f"wrote {page} (the episode viewer, {n} episodes: open it in a browser)")


def _main_suite(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str] | None
) -> int:
    from adapters.evaluation import ArgumentMismatch, SuiteArgs, resolve_suite, run_suite
    from adapters.policies.specs import check_policy_specs

    given = [flag for key, flag in _SETTING_FLAGS.items() if getattr(args, key)]
    if given:
        parser.error(f"{', '.join(given)} describe one setting (--env); a suite sets its own")
    try:
        suite = resolve_suite(args.suite)
        run = SuiteArgs(
            suite=suite,
            policies=tuple(args.policy),
            episodes=suite.episodes if args.episodes is None else args.episodes,
            chunk_size=args.chunk_size,
            seed=args.seed,
            split=args.split,
            temperature=_given(args.temperature, 0.0),
            top_p=_given(args.top_p, 1.0),
            chat_template_kwargs=_template_kwargs(args),
            max_new_tokens=(
                suite.max_new_tokens if args.max_new_tokens is None else args.max_new_tokens
            ),
            system_prompt=args.system_prompt,
            demos=args.demos,
            device=args.device,
            dtype=args.dtype,
            batch_size=args.batch_size,
            compile_decode=args.compile_decode,
        )
    except ValueError as e:
        parser.error(str(e))
    with cli.bad_input("--policy"):
        check_policy_specs(args.policy)
    _preflight([(e.setting, e.env_config()) for e in suite.entries], args.policy)
    out = Path(args.out or f"runs/suite-{re.sub(r'[^A-Za-z0-9_.-]+', '_', suite.name)}")
    command = "python -m adapters.evaluate " + shlex.join(
        sys.argv[1:] if argv is None else list(argv)
    )
    try:
        run_suite(
            run,
            out,
            progress=not args.no_progress,
            concurrency=args.concurrency,
            command=command,
        )
    except ArgumentMismatch as e:
        raise cli.UsageError(str(e)) from e
    print((out / "report.md").read_text())
    print(f"wrote {out / 'results.json'}, {out / 'report.md'} and {out / 'charts'}/")
    if not args.no_view:
        _write_view(out / "results.json")
    return 0


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


def _role_limits(items: list[str], roles: Sequence[str]) -> dict[str, int]:
    """``--role-max-new-tokens ROLE=N`` items: each a role of the setting and a positive
    integer."""
    from adapters.training.config import ConfigError
    from adapters.training.flags import parse_key_values

    out = parse_key_values(items, "--role-max-new-tokens")
    for role, n in out.items():
        if role not in roles:
            raise ConfigError(f"--role-max-new-tokens: no role {role!r} (roles: {list(roles)})")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"--role-max-new-tokens {role}={n!r}: expects a positive integer")
    return out


def _template_kwargs(args: argparse.Namespace) -> dict[str, object]:
    from adapters.training.flags import parse_mapping_items

    given = args.chat_template_kwargs
    if isinstance(given, dict):  # already parsed (main)
        return given
    return parse_mapping_items(given, "--chat-template-kwargs")


def _command(argv: Sequence[str] | None) -> str:
    return "python -m adapters.evaluate " + shlex.join(sys.argv[1:] if argv is None else list(argv))


def _main_passes(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str] | None
) -> int:
    from adapters.evaluation import ArgumentMismatch
    from adapters.evaluation.passes import PAPER_MAX_NEW_TOKENS, Benchmark, PassArgs, run_passes
    from adapters.evaluation.suite import _default_factory
    from adapters.policies.specs import check_policy_specs
    from adapters.training.flags import parse_key_values
    from envs.data.catalog import find_data_file

    if len(args.data_path) > len(args.dataset):
        parser.error("more --data-path than --dataset")
    if args.instance or args.json:
        parser.error("--instance and --json are not used by a full pass (--dataset)")
    with cli.bad_input("--env-config"):
        env_config = parse_key_values(args.env_config, "--env-config")
    with cli.bad_input("--policy"):
        check_policy_specs(args.policy)
    benches = []
    for i, name in enumerate(args.dataset):
        path = args.data_path[i] if i < len(args.data_path) else None
        if path is None and args.data_dir:
            path = find_data_file(args.data_dir, name)
        benches.append(
            Benchmark(
                name,
                path,
                setting=args.env,
                mode=args.mode or "single",
                env_config=env_config,
                limit=args.limit,
            )
        )
    _preflight([(b.env_id, b.config()) for b in benches], args.policy)
    try:
        run = PassArgs(
            benchmarks=tuple(benches),
            policies=tuple(args.policy),
            samples=args.samples or 1,
            ks=tuple(args.pass_k),
            temperature=_given(args.temperature, 0.0),
            top_p=_given(args.top_p, 1.0),
            max_new_tokens=_given(args.max_new_tokens, PAPER_MAX_NEW_TOKENS),  # type: ignore[arg-type]
            seed=args.seed,
            chunk_size=args.chunk_size,
            judge=args.judge,
            chat_template_kwargs=_template_kwargs(args),
        )
    except ValueError as e:
        parser.error(str(e))
    out = Path(args.out or f"runs/pass-{'_'.join(args.dataset)}")
    try:
        run_passes(
            run,
            out,
            policy_factory=_default_factory(args, args.concurrency),  # type: ignore[arg-type]
            progress=not args.no_progress,
            command=_command(argv),
        )
    except ArgumentMismatch as e:
        raise cli.UsageError(str(e)) from e
    print((out / "report.md").read_text())
    print(f"wrote {out / 'results.json'}, {out / 'report.md'} and {out / 'charts'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
