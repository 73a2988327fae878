"""HumanEval+ and MBPP+ (`evalplus <https://github.com/evalplus/evalplus>`_) as code problems.

evalplus releases each dataset as one JSONL file (``HumanEvalPlus-v0.1.10.jsonl.gz``,
``MbppPlus-v0.2.0.jsonl.gz`` on its GitHub releases) and caches it decompressed as
``~/.cache/evalplus/HumanEvalPlus-v0.1.10.jsonl`` / ``MbppPlus-v0.2.0.jsonl`` (``-Mini`` /
``-NoExtreme`` variants likewise). Each line is a task::

    {"task_id": "HumanEval/0", "prompt": <signature and docstring>, "entry_point": "...",
     "canonical_solution": <body completing the prompt>, "base_input": [[arg, ...], ...],
     "plus_input": [[arg, ...], ...], "atol": 0, "contract": <input assertions>, ...}

MBPP+'s ``prompt`` is a docstring holding the task text and one example assert; its inputs are
JSON, with tuples, sets and complex numbers restored per task by evalplus's
``mbpp_deserialize_inputs`` (ported here as :func:`mbpp_deserialize_inputs`).

:func:`load_humaneval_plus` / :func:`load_mbpp_plus` read such a file (``path``: the file, or a
directory holding it; default: ``$HUMANEVAL_OVERRIDE_PATH`` / ``$MBPP_OVERRIDE_PATH``, then
evalplus's cache directory) without importing evalplus (whose dependencies include model-provider
SDKs that pin an old protobuf). Nothing is downloaded.

Tests. As in evalplus, the expected output of every base and plus input is what the canonical
solution (``prompt + canonical_solution``) returns on it, computed by running it in the sandbox
once and cached in ``$MAS_CACHE_DIR/evalplus`` (default ``~/.cache/mas-rl-envs/evalplus``),
keyed by the dataset file's hash; inputs on which the canonical solution fails or exceeds
``golden_timeout_s`` are dropped (counted in ``metadata["dropped_inputs"]``). Each input becomes
one differential test (:mod:`verifiers.diff_tests`): the candidate runs on the inputs in the
sandbox and the host compares with evalplus's rules (``atol``, ``numpy.allclose``, special
oracles), so expected values never enter the sandbox.

Problems (:class:`~envs.data.records.CodeProblem`, ``style="function"``): HumanEval+'s prompt
is the starter code (as for HumanEval); MBPP+'s prompt is the docstring's text. The golden
solution is ``prompt + canonical_solution``. ``source`` is ``"humaneval+"`` / ``"mbpp+"``. In
the ``code`` setting: ``envs.make("code", dataset="humaneval+")`` (or ``"mbpp+"``; ``data_path``
as ``path``, ``data_options`` for ``version``, ``mini``, ``noextreme``, ``limit``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

from envs.data.records import CodeProblem
from verifiers import diff_tests

__all__ = [
    "HUMANEVAL_PLUS_VERSION",
    "MBPP_PLUS_VERSION",
    "evalplus_file",
    "load_evalplus",
    "load_humaneval_plus",
    "load_mbpp_plus",
    "mbpp_deserialize_inputs",
    "read_tasks",
]

HUMANEVAL_PLUS_VERSION = "v0.1.10"
MBPP_PLUS_VERSION = "v0.2.0"
REQUIRED = ("task_id", "prompt", "entry_point", "canonical_solution", "base_input", "plus_input")
RELEASES = "https://github.com/evalplus/{repo}_release/releases/download/{version}/{name}.jsonl.gz"
_DATASETS = {  # name -> (evalplus file stem, version, override variable, evalplus dataset key)
    "humaneval+": ("HumanEvalPlus", HUMANEVAL_PLUS_VERSION, "HUMANEVAL_OVERRIDE_PATH", "humaneval"),
    "mbpp+": ("MbppPlus", MBPP_PLUS_VERSION, "MBPP_OVERRIDE_PATH", "mbpp"),
}


def evalplus_cache_dir() -> Path:
    """evalplus's cache directory (``appdirs.user_cache_dir("evalplus")`` on Linux)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "evalplus"


def evalplus_file(
    dataset: str,
    path: str | os.PathLike[str] | None = None,
    *,
    version: str | None = None,
    mini: bool = False,
    noextreme: bool = False,
) -> Path:
    """Where the dataset's JSONL(.gz) is: ``path`` (a file, or a directory holding evalplus's
    file name), the override variable, or evalplus's cache. Raises FileNotFoundError saying
    where to get it."""
    stem, default_version, override, _ = _spec(dataset)
    if mini and noextreme:
        raise ValueError("mini and noextreme are exclusive (as in evalplus)")
    extra = "-Mini" if mini else "-NoExtreme" if noextreme else ""
    version = version or default_version
    names = [f"{stem}{extra}-{version}.jsonl", f"{stem}{extra}-{version}.jsonl.gz"]
    names += [f"{stem}{extra}.jsonl.gz", f"{stem}{extra}.jsonl"]
    candidates: list[Path] = []
    if path is not None:
        p = Path(path)
        candidates += [p / n for n in names] if p.is_dir() else [p]
    elif os.environ.get(override):
        candidates.append(Path(os.environ[override]))
    else:
        candidates += [evalplus_cache_dir() / n for n in names]
    for c in candidates:
        if c.is_file():
            return c
    url = RELEASES.format(repo=stem.lower(), version=version, name=stem + extra)
    raise FileNotFoundError(
        f"{dataset} data not found (looked for {', '.join(str(c) for c in candidates)}). "
        f"Download {url} and pass its path (data_path=... / path=...), or run evalplus once "
        "so that it is in evalplus's cache."
    )


def _spec(dataset: str) -> tuple[str, str, str, str]:
    if dataset not in _DATASETS:
        raise ValueError(f"unknown evalplus dataset {dataset!r}; choose one of {list(_DATASETS)}")
    return _DATASETS[dataset]


def read_tasks(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The tasks of an evalplus JSONL(.gz) file, checked for the fields evaluation needs."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    tasks = []
    for n, line in enumerate(io.StringIO(raw.decode("utf-8")), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}, line {n}: not JSON ({exc})") from None
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise ValueError(f"{path}, line {n}: task lacks {missing} (evalplus schema)")
        for k in ("base_input", "plus_input"):
            if not isinstance(row[k], list) or not all(isinstance(a, list) for a in row[k]):
                raise ValueError(f"{path}, line {n}: {k} must be a list of argument lists")
        if not str(row["entry_point"]).isidentifier():
            raise ValueError(f"{path}, line {n}: bad entry_point {row['entry_point']!r}")
        tasks.append(row)
    return tasks


# ---------------------------------------------------------------- MBPP+ inputs (evalplus port)

_TUPLE_ROWS = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596}
_TUPLE_ROWS |= {616, 630, 726, 740, 744, 809}
_NESTED_TUPLES = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}
_FIRST_NESTED = {75, 413, 444, 753}
_FIRST_TUPLE = {250, 405, 446, 617, 720, 763, 808}
_DEEP_TUPLES = {259, 401, 445}


def _all_tuples(x: Any) -> Any:
    return tuple(_all_tuples(i) for i in x) if isinstance(x, list) else x


def mbpp_deserialize_inputs(task_id: str, inputs: list) -> list:
    """MBPP+'s JSON inputs with their Python types restored (evalplus's function of that name:
    tuples, sets and complex numbers where the tasks need them)."""
    t = int(str(task_id).split("/")[-1])
    if t in _TUPLE_ROWS:
        return [[tuple(lst) for lst in inp] for inp in inputs]
    if t in _NESTED_TUPLES:
        return [[[tuple(lst) for lst in lst_lst] for lst_lst in inp] for inp in inputs]
    if t in _FIRST_NESTED:
        return [[[tuple(lst) for lst in inp[0]], inp[1]] for inp in inputs]
    if t in (106, 750):
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if t == 115:
        return [
            [[set(i) if isinstance(i, list) and len(i) else {} for i in inp[0]]] for inp in inputs
        ]
    if t == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if t in _FIRST_TUPLE:
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if t in _DEEP_TUPLES:
        rows = [[[tuple(lst) for lst in lst_lst] for lst_lst in inp] for inp in inputs]
        return [[tuple(lst) for lst in inp] for inp in rows]
    if t == 278:
        rows = [[[tuple(i) if isinstance(i, list) else i for i in inp[0]]] for inp in inputs]
        return [[tuple(lst) for lst in inp] for inp in rows]
    if t == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if t == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}, *inp[1:]] for inp in inputs]
    if t == 252:
        return [[complex(inp[0])] for inp in inputs]
    if t in (580, 615, 791):
        return [_all_tuples(inp) for inp in inputs]
    return inputs


# ---------------------------------------------------------------- expected outputs


def _cache_dir() -> Path:
    base = os.environ.get("MAS_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "mas-rl-envs"
    )
    return Path(base) / "evalplus"


def _expected_outputs(
    dataset: str,
    file_hash: str,
    tasks: list[dict[str, Any]],
    inputs: dict[str, list],
    sandbox: Any,
    golden_timeout_s: float,
) -> dict[str, dict[str, Any]]:
    """``task_id -> {"expected": [encoded], "ref_s": [...], "dropped": [input index]}``, from the
    cache or by running the canonical solutions (one sandbox batch for the missing ones)."""
    import sandboxes

    runner = diff_tests.RUNNER_VERSION
    path = _cache_dir() / f"{dataset.rstrip('+')}plus-{file_hash[:16]}-{runner}.json"
    cached: dict[str, dict[str, Any]] = {}
    if path.is_file():
        try:
            cached = json.loads(path.read_text())
        except ValueError:
            cached = {}
    todo = [t for t in tasks if t["task_id"] not in cached]
    if not todo:
        return cached
    programs = [
        (
            t["prompt"] + t["canonical_solution"],
            t["entry_point"],
            [json.dumps(diff_tests.encode(list(a))) for a in inputs[t["task_id"]]],
            [golden_timeout_s] * len(inputs[t["task_id"]]),
        )
        for t in todo
    ]
    limits = sandboxes.Limits(wall_s=golden_timeout_s, memory_mb=2048)
    runs = diff_tests.run_inputs(programs, sandbox=sandbox, limits=limits, task_timeout_s=600.0)
    not_none = dataset == "mbpp+"
    for t, (res, got) in zip(todo, runs):
        if res.error:
            raise RuntimeError(
                f"{t['task_id']}: the canonical solution could not be run: {res.error}"
            )
        expected: list[Any] = []
        ref_s: list[float] = []
        dropped: list[int] = []
        per_call = float(res.duration_s or 0.0) / max(1, len(got))  # no per-call clock
        for i, rec in enumerate(got):
            if rec is None or rec.status != "ok":
                dropped.append(i)
                expected.append(None)
                ref_s.append(0.0)
                continue
            value = rec.value
            if not_none and t["entry_point"] in diff_tests.MBPP_OUTPUT_NOT_NONE_TASKS:
                value = value is not None  # evalplus keeps only whether it is None
            expected.append(diff_tests.encode(value))
            ref_s.append(per_call)
        cached[t["task_id"]] = {"expected": expected, "ref_s": ref_s, "dropped": dropped}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(cached))
    os.replace(tmp, path)
    return cached


# ---------------------------------------------------------------- loaders


def _mbpp_text(prompt: str) -> str:
    text = prompt.strip()
    if text.startswith('"""') and text.endswith('"""'):
        text = text[3:-3]
    return text.strip()


def load_evalplus(
    dataset: str,
    path: str | os.PathLike[str] | None = None,
    *,
    version: str | None = None,
    mini: bool = False,
    noextreme: bool = False,
    limit: int | None = None,
    sandbox: Any = None,
    golden_timeout_s: float = 20.0,
) -> list[CodeProblem]:
    """``"humaneval+"`` or ``"mbpp+"`` as :class:`CodeProblem` records (see the module doc).

    ``limit`` keeps the first tasks of the file (before any canonical solution runs).
    """
    _, _, _, key = _spec(dataset)
    file = evalplus_file(dataset, path, version=version, mini=mini, noextreme=noextreme)
    tasks = read_tasks(file)
    if limit is not None:
        tasks = tasks[: max(0, int(limit))]
    groups: dict[str, list[tuple[str, list]]] = {}
    for t in tasks:
        base, plus = t["base_input"], t["plus_input"]
        if dataset == "mbpp+":
            base = mbpp_deserialize_inputs(t["task_id"], base)
            plus = mbpp_deserialize_inputs(t["task_id"], plus)
        groups[t["task_id"]] = [("base", base), ("plus", plus)]
    inputs = {tid: [a for _, g in gs for a in g] for tid, gs in groups.items()}
    file_hash = hashlib.sha256(file.read_bytes()).hexdigest()
    outputs = _expected_outputs(dataset, file_hash, tasks, inputs, sandbox, golden_timeout_s)
    problems = []
    for t in tasks:
        tid, entry = t["task_id"], t["entry_point"]
        out = outputs[tid]
        dropped = set(out["dropped"])
        tests = []
        k = 0
        for group, args_list in groups[tid]:
            for j, args in enumerate(args_list):
                if k not in dropped:
                    tests.append(
                        diff_tests.make_test(
                            args,
                            diff_tests.decode(out["expected"][k]),
                            atol=float(t.get("atol") or 0),
                            dataset=key,
                            entry_point=entry,
                            ref_s=out["ref_s"][k],
                            name=f"{tid}:{group}:{j}",
                        )
                    )
                k += 1
        prompt = t["prompt"] if dataset == "humaneval+" else _mbpp_text(t["prompt"])
        problems.append(
            CodeProblem(
                id=tid,
                prompt=prompt,
                style="function",
                golden_solution=t["prompt"] + t["canonical_solution"],
                tests=tuple(tests),
                entry_point=entry,
                starter_code=t["prompt"] if dataset == "humaneval+" else "",
                source=dataset,
                metadata={
                    "atol": t.get("atol"),
                    "contract": t.get("contract", ""),
                    "base_inputs": len(groups[tid][0][1]),
                    "plus_inputs": len(groups[tid][1][1]),
                    "dropped_inputs": len(dropped),
                },
            )
        )
    return problems


def load_humaneval_plus(path: str | os.PathLike[str] | None = None, **kw: Any) -> list[CodeProblem]:
    """HumanEval+ (164 tasks in v0.1.10) from a local file or evalplus's cache."""
    return load_evalplus("humaneval+", path, **kw)


def load_mbpp_plus(path: str | os.PathLike[str] | None = None, **kw: Any) -> list[CodeProblem]:
    """MBPP+ (378 tasks in v0.2.0) from a local file or evalplus's cache."""
    return load_evalplus("mbpp+", path, **kw)
