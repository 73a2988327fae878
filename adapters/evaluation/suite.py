"""The whole-suite benchmark: every setting, both modes, several policies, fixed seeds, resumable.

``python -m adapters.evaluate --suite default --policy oracle --policy smollm2 --out DIR`` is the
command line; :func:`run_suite` is the same from Python.

**Suites** (:data:`SUITES`, :func:`resolve_suite`). An entry is a setting, a mode and the
setting's options:

* ``default`` - sized to finish on a 2-core CPU with the embedded 135M model: each of the nine
  settings in ``multi`` mode, plus ``single`` mode for the five AT-GRPO settings (sudoku,
  sokoban, plan_path, code, math), on small instances where a setting has size options
  (the ``cpu_options`` of its spec: 6 x 6 Sokoban with one box, 6 x 6 path planning, two-term
  arithmetic for math and MarsRL; MAE and SAGE estimate difficulty from 2 answers, CoMAS
  discusses with 2 agents, as the training recipes' CPU scale-down does); 8 episodes per entry
  and policy, 128 new tokens per completion. The protocol (agents, turn horizon, rewards) is
  each setting's own.
* ``all`` - the same 14 entries with every setting's default sizes (the papers' protocols), 32
  episodes, 256 new tokens.
* ``NAMES`` - a comma-separated list of setting ids (``sokoban``: its entries of ``default``)
  or ``id:mode`` (``sokoban:single``), with ``default``'s sizes and episodes. An id may be
  ``module:id`` (``my_pkg.my_env:my_id``, or ``my_pkg.my_env:my_id:single``): the module is
  imported first, so a setting registered outside this repository runs too.

**What is run.** Each policy plays every role. For every entry and policy the suite plays
``episodes`` greedy episodes (by default: ``temperature`` 0, one episode per instance) on
``split`` instances whose seeds derive from ``seed``: every policy sees the same instances. The
episodes are played in chunks of ``chunk_size``, one :class:`~adapters.rollout.RolloutEngine`
run each, whose prompts at every wave go to the policy in one ``generate`` call; an HTTP policy
(``openai:``) sends them concurrently (up to ``concurrency`` requests in flight), so a server
that batches (vLLM, SGLang) sees a chunk's episodes at once. A chunk starts from fresh shared
objects (the MAE and SAGE question pools), so its numbers depend on its arguments alone.

**Open loop.** After every model policy (not ``oracle`` or ``constant:``) the report has a row
``open loop of POLICY`` (:func:`open_loop_chunks`): the policy's most frequent completion at each
of a role's turns over the entry's episodes, replayed on the same instances with no model
(:func:`~adapters.evaluation.references.open_loop_reference`). A policy that scores no more than
its open loop answers the same whatever the instance says. It is computed from the saved
chunks whenever the report is written, so it costs env steps only (and sandbox runs where the
setting executes code).

**Resuming.** ``OUT/run.json`` holds the arguments (the suite's entries with their options, the
policies, episodes, chunk size, seed, split, decoding, prompt prefixes, device and dtype).
Every finished chunk is written at once to ``OUT/units/SETTING.MODE.POLICY.cNNN.json`` (a
temporary name, then a rename), so a killed run loses at most the chunks it was playing. Run
the same command with the same ``--out`` again and it plays only the missing chunks; different
arguments are refused with the list of differences (use another ``--out``). When every chunk is
there, the report is written from the chunk files (:mod:`adapters.evaluation.report`):
``results.json`` (every number, per episode too), ``report.md`` (the table, with 95% intervals)
and ``charts/SETTING.png`` (bars per policy, error bars = the intervals). A finished run started
again only rewrites the report.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import envs
from adapters.evaluation import report as report_mod
from adapters.evaluation.runner import evaluate, with_prompt_prefixes
from adapters.policies.base import EVAL_TEMPERATURE, MAX_NEW_TOKENS, Policy
from adapters.policies.specs import parse_policy_spec, split_role_spec
from adapters.rollout import env_roles, follow_share, has_team_reward

__all__ = [
    "SUITES",
    "ArgumentMismatch",
    "Suite",
    "SuiteArgs",
    "SuiteEntry",
    "Unit",
    "plan_units",
    "resolve_suite",
    "run_suite",
    "setting_entries",
]

FORMAT_VERSION = 1


@dataclass(frozen=True)
class SuiteEntry:
    """One row group of the benchmark: a setting in a mode with its options."""

    setting: str
    mode: str = "multi"
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.setting}:{self.mode}"

    def env_config(self) -> dict[str, Any]:
        return {**dict(self.options), "mode": self.mode}

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "mode": self.mode, "options": dict(self.options)}


@dataclass(frozen=True)
class Suite:
    """A named list of entries with its default episodes and completion length."""

    name: str
    entries: tuple[SuiteEntry, ...]
    episodes: int
    max_new_tokens: int


def setting_entries(setting: str, cpu: bool = True) -> tuple[SuiteEntry, ...]:
    """A setting's entries, one per mode of its spec, with its ``cpu_options`` when ``cpu``."""
    entry = envs.spec(setting)
    options = dict(entry.cpu_options) if cpu else {}
    return tuple(SuiteEntry(entry.id, mode, options) for mode in entry.modes)


def _entries(cpu: bool) -> tuple[SuiteEntry, ...]:
    """Every registered setting's entries: all ``multi`` ones first, then the ``single`` ones."""
    every = [e for s in envs.list_envs() for e in setting_entries(s, cpu)]
    return tuple(sorted(every, key=lambda e: envs.MODES.index(e.mode)))


SUITES: dict[str, Suite] = {
    "default": Suite("default", _entries(cpu=True), episodes=8, max_new_tokens=128),
    "all": Suite("all", _entries(cpu=False), episodes=32, max_new_tokens=MAX_NEW_TOKENS),
}


def _split_mode(name: str) -> tuple[str, str]:
    """``id``, ``id:mode``, ``module:id`` or ``module:id:mode`` -> (setting, mode or "")."""
    left, sep, right = name.rpartition(":")
    if sep and (right in envs.MODES or left in envs.list_envs(include_aliases=True)):
        return left, right
    return name, ""


def resolve_suite(spec: str) -> Suite:
    """``default``, ``all``, or a comma-separated list of ``id`` / ``id:mode`` (see above); an id
    may be ``module:id`` (a setting registered outside this repository)."""
    spec = spec.strip()
    if spec in SUITES:
        return SUITES[spec]
    base = SUITES["default"]
    chosen: list[SuiteEntry] = []
    for name in (n.strip() for n in spec.split(",")):
        if not name:
            continue
        setting, mode = _split_mode(name)
        try:
            found = setting_entries(setting)
        except ValueError as e:
            raise ValueError(f"--suite {spec!r}: {e} (or default, all; id:mode)") from None
        if mode:
            if mode not in envs.MODES:
                raise ValueError(f"mode must be multi or single in --suite {name!r}")
            if mode not in (e.mode for e in found):
                raise ValueError(
                    f"--suite {name!r}: mode={mode!r} does not exist for {found[0].setting} "
                    f"(its modes: {', '.join(e.mode for e in found)})"
                )
            found = tuple(e for e in found if e.mode == mode)
        chosen.extend(e for e in found if e not in chosen)
    if not chosen:
        raise ValueError(f"--suite {spec!r} names no setting")
    return Suite(spec, tuple(chosen), base.episodes, base.max_new_tokens)


@dataclass(frozen=True)
class SuiteArgs:
    """Everything that decides a suite run's numbers (``run.json``; checked on resume)."""

    suite: Suite
    policies: tuple[str, ...]
    episodes: int
    chunk_size: int = 16
    seed: int = 0
    split: str = "val"
    temperature: float = EVAL_TEMPERATURE
    top_p: float = 1.0
    max_new_tokens: int = MAX_NEW_TOKENS
    system_prompt: str | None = None
    demos: int = 0
    device: str | None = None
    dtype: str | None = None
    batch_size: int = 16
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    compile_decode: str = "off"

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("a suite run needs at least one --policy")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"a policy is given twice: {list(self.policies)}")
        for p in self.policies:
            if split_role_spec(p)[0] is not None:
                raise ValueError(
                    f"--policy {p!r}: with --suite each policy plays every role (ROLE=SPEC is "
                    "for single-setting runs with --env)"
                )
        if self.episodes < 1 or self.chunk_size < 1:
            raise ValueError("episodes and chunk size must be >= 1")

    def fingerprint(self) -> dict[str, Any]:
        out = asdict(self)
        out["suite"] = {
            "name": self.suite.name,
            "entries": [e.to_dict() for e in self.suite.entries],
        }
        out["policies"] = list(self.policies)
        out["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        if not self.chat_template_kwargs:  # run directories written before the field match
            del out["chat_template_kwargs"]
        if self.compile_decode == "off":  # likewise
            del out["compile_decode"]
        return {"format": FORMAT_VERSION, **out}


@dataclass(frozen=True)
class Unit:
    """A chunk of episodes of one entry played by one policy: the unit of work and of saving."""

    entry: SuiteEntry
    policy: str
    policy_index: int
    chunk: int
    first: int
    episodes: int

    @property
    def filename(self) -> str:
        return (
            f"{self.entry.setting}.{self.entry.mode}."
            f"{policy_slug(self.policy, self.policy_index)}.c{self.chunk:03d}.json"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.entry.to_dict(),
            "policy": self.policy,
            "chunk": self.chunk,
            "first": self.first,
            "episodes": self.episodes,
        }


def policy_slug(spec: str, index: int) -> str:
    """A file-name-safe label of a policy spec: ``p1-smollm2``, ``p2-openai_http_...``."""
    return f"p{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "_", spec).strip("_")[:40]


def plan_units(args: SuiteArgs) -> list[Unit]:
    """Every chunk of the run, in the order they are played (entry, policy, chunk)."""
    units = []
    for entry in args.suite.entries:
        for pi, policy in enumerate(args.policies):
            for c, first in enumerate(range(0, args.episodes, args.chunk_size)):
                n = min(args.chunk_size, args.episodes - first)
                units.append(Unit(entry, policy, pi, c, first, n))
    return units


class ArgumentMismatch(ValueError):
    """The output directory holds a run with other arguments."""


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` through a temporary sibling and a rename: readers see all of it or none."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(raw)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _check_run_file(out: Path, fingerprint: dict[str, Any]) -> None:
    path = out / "run.json"
    if not path.exists():
        write_atomic(path, json.dumps(fingerprint, indent=2, sort_keys=True))
        return
    try:
        saved = json.loads(path.read_text())
    except ValueError:
        raise ArgumentMismatch(f"{path} is not valid JSON; use another --out") from None
    diffs = [
        f"{k}: {json.dumps(saved.get(k))} -> {json.dumps(fingerprint.get(k))}"
        for k in sorted(set(saved) | set(fingerprint))
        if saved.get(k) != fingerprint.get(k)
    ]
    if diffs:
        raise ArgumentMismatch(
            f"{out} holds a suite run with other arguments, so it cannot be resumed with these "
            "(use another --out, or the same arguments to continue it):\n  " + "\n  ".join(diffs)
        )


def _load_unit(path: Path, unit: Unit) -> dict[str, Any] | None:
    """A saved chunk, or None if there is none (a damaged file is an error, not a redo)."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        raise ValueError(
            f"{path} is damaged (not JSON); delete it to play that chunk again"
        ) from None
    if data.get("unit") != unit.to_dict():
        raise ValueError(f"{path} holds another chunk ({data.get('unit')}); delete it")
    return data


def run_suite(
    args: SuiteArgs,
    out: str | os.PathLike[str],
    *,
    progress: bool = True,
    concurrency: int = 16,
    policy_factory: Callable[[str], Policy] | None = None,
    after_unit: Callable[[Unit], None] | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Play every missing chunk of ``args`` into ``out``, then write the report; returns the
    results (``results.json``'s content).

    ``policy_factory`` builds a policy from a spec (default: :func:`~adapters.policies.specs.
    parse_policy_spec` with ``args``' device, dtype and batch size); policies are built only when
    a chunk needs them and reused across settings. ``after_unit`` is called after each chunk is
    saved. ``command`` is shown at the top of ``report.md``.
    """
    from tqdm.auto import tqdm

    root = Path(out)
    (root / "units").mkdir(parents=True, exist_ok=True)
    _check_run_file(root, args.fingerprint())
    units = plan_units(args)
    saved = [_load_unit(root / "units" / u.filename, u) for u in units]
    todo = [i for i, data in enumerate(saved) if data is None]
    built: dict[str, Policy] = {}

    def policy(spec: str) -> Policy:
        if spec not in built:
            built[spec] = (policy_factory or _default_factory(args, concurrency))(spec)
        return built[spec]

    total = sum(u.episodes for u in units)
    done = total - sum(units[i].episodes for i in todo)
    with tqdm(
        total=total,
        initial=done,
        unit="ep",
        disable=not progress,
        dynamic_ncols=True,
        bar_format="{l_bar}{bar}| {n:.1f}/{total_fmt} ep [{elapsed}<{remaining}{postfix}]",
    ) as bar:
        for i in todo:
            u = units[i]
            start = float(bar.n)
            moved = follow_share(bar, u.episodes, f"{u.entry.key} {u.policy}")
            data = _play(args, u, policy(u.policy), moved)
            bar.update(start + u.episodes - bar.n)
            write_atomic(root / "units" / u.filename, json.dumps(data))
            saved[i] = data
            if after_unit is not None:
                after_unit(u)
    entries = [
        {**e.to_dict(), "key": e.key, "has_team_reward": has_team_reward(e.setting, e.env_config())}
        for e in args.suite.entries
    ]
    chunks = [(u.to_dict(), data["report"]) for u, data in zip(units, saved) if data is not None]
    loops = open_loop_chunks(args, chunks)
    looped = {u["policy"] for u, _r in loops}
    policies = [x for p in args.policies for x in (p, open_loop_name(p)) if x == p or x in looped]
    results = report_mod.summarise(args.fingerprint(), entries, policies, chunks + loops)
    write_atomic(root / "results.json", json.dumps(results, indent=1))
    write_atomic(root / "report.md", report_mod.markdown(results, command=command))
    (root / "charts").mkdir(exist_ok=True)
    for setting, png in report_mod.charts(results).items():
        write_atomic(root / "charts" / f"{setting}.png", png)
    return results


def open_loop_name(policy: str) -> str:
    """The row name of a policy's open-loop reference."""
    return f"open loop of {policy}"


def open_loop_chunks(
    args: SuiteArgs, chunks: list[tuple[dict[str, Any], dict[str, Any]]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """For every entry and model policy (not ``oracle`` or ``constant:``), the open-loop
    reference of all its episodes (:func:`~adapters.evaluation.references.open_loop_reference`:
    its most frequent completion at each of a role's turns, replayed on the same instances) as
    one more chunk, policy :func:`open_loop_name`. Computed from the saved records, no model."""
    from adapters.evaluation.references import open_loop_reference

    out = []
    for entry in args.suite.entries:
        for policy in args.policies:
            if policy == "oracle" or policy.startswith("constant:"):
                continue
            mine = [
                (u, r)
                for u, r in chunks
                if (u["setting"], u["mode"], u["policy"]) == (entry.setting, entry.mode, policy)
            ]
            if not mine:
                continue
            merged = {**mine[0][1], "per_episode": [e for _u, r in mine for e in r["per_episode"]]}
            unit = {
                **entry.to_dict(),
                "policy": open_loop_name(policy),
                "chunk": 0,
                "first": 0,
                "episodes": len(merged["per_episode"]),
            }
            out.append((unit, open_loop_reference(merged).to_dict()))
    return out


def _default_factory(args: SuiteArgs, concurrency: int) -> Callable[[str], Policy]:
    """Policies of a run's specs on its device, with its ``compile_decode`` (a suite's
    ``chat_template_kwargs`` applied; a pass, whose ``args`` are the command line's, applies its
    own, :mod:`adapters.evaluation.passes`)."""
    kwargs = args.chat_template_kwargs if isinstance(args, SuiteArgs) else {}

    def build(spec: str) -> Policy:
        p = parse_policy_spec(
            spec,
            device=args.device,
            dtype=args.dtype,
            batch_size=args.batch_size,
            chat_template_kwargs=kwargs,
            compile_decode=args.compile_decode,
        )
        if hasattr(p, "max_concurrency"):  # an HTTP policy: requests in flight per generate
            p.max_concurrency = max(1, concurrency)
        return p

    return build


def _play(args: SuiteArgs, u: Unit, policy: Policy, on_progress: Any) -> dict[str, Any]:
    cfg = u.entry.env_config()
    roles = env_roles(u.entry.setting, cfg)
    policies: dict[str, Policy] = {u.policy: policy}
    role_policy = {r: u.policy for r in roles}
    if args.system_prompt or args.demos:
        policies, role_policy = with_prompt_prefixes(
            u.entry.setting,
            cfg,
            policies,
            role_policy,
            system_prompt=args.system_prompt,
            demos=args.demos,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
    rep = evaluate(
        u.entry.setting,
        policies,
        episodes=u.episodes,
        env_config=cfg,
        role_policy=role_policy,
        split=args.split,
        seed=args.seed,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        first=u.first,
        on_progress=on_progress,
    )
    return {"unit": u.to_dict(), "report": rep.to_dict()}
