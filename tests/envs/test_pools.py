"""QuestionPool (envs.pools): items, de-duplication, canonical order, deterministic sampling,
JSONL/state_dict round trips, seed sources, thread safety, and the verifier helpers."""

from __future__ import annotations

import pickle
import random
import threading
from pathlib import Path

import numpy as np
import pytest

import envs
from envs.core.splits import SPLITS
from envs.pools import (
    OFFLINE_SEEDS,
    PoolItem,
    QuestionPool,
    assert_block,
    check_code_reference,
    check_math_reference,
    load_seed_items,
    question_key,
    verify_answer,
)
from verifiers.code_tests import TestCase
from verifiers.written_tests import split_assert_block

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"


def _math(i: int, **kw) -> PoolItem:
    return PoolItem(f"What is {i} + {i}?", kind="math", answer=str(2 * i), **kw)


def _code_item() -> PoolItem:
    tests, _ = split_assert_block("assert inc(1) == 2\nassert inc(-1) == 0\nassert inc(0) == 1")
    return PoolItem(
        "Write inc(x) returning x + 1.",
        kind="code",
        answer="def inc(x):\n    return x + 1\n",
        tests=tests,
        entry_point="inc",
    )


# ---------------------------------------------------------------- items


def test_item_round_trip_and_validation():
    item = _code_item()
    d = item.to_dict()
    assert PoolItem.from_dict(d) == item
    assert item.verifiable and item.kind == "code" and item.split in SPLITS
    assert _math(3).verifiable and not PoolItem("Why is the sky blue?").verifiable
    with pytest.raises(ValueError, match="non-empty question"):
        PoolItem("   ")
    with pytest.raises(ValueError, match="kind"):
        PoolItem("q", kind="poetry")
    with pytest.raises(ValueError, match="unknown pool item field"):
        PoolItem.from_dict({"question": "q", "colour": "red"})
    with pytest.raises(TypeError):
        PoolItem("q", tests=("assert True",))


def test_question_key_normalises_whitespace_only():
    assert question_key("What is\n 2 + 2 ?") == question_key("What is 2 + 2 ?")
    assert question_key("What is 2 + 2?") != question_key("What is 2 + 3?")


# ---------------------------------------------------------------- pool content


def test_dedup_and_counts():
    pool = QuestionPool([_math(1), _math(2)], seed_set="toy")
    assert len(pool) == 2 and pool.seed_size == 2 and pool.seed_set == "toy"
    assert not pool.add(PoolItem("What is 1  +  1?\n", kind="math", answer="2"))
    assert pool.add(_math(3, origin="generated"))
    assert len(pool) == 3 and pool.stats == {"added": 1, "duplicates": 1}
    assert "What is 3 + 3?" in pool and _math(2) in pool and "What is 9 + 9?" not in pool
    assert pool.get("What is  3 + 3?").origin == "generated"
    assert sum(pool.count(s) for s in SPLITS) == 3


def test_canonical_order_is_independent_of_insertion_order():
    items = [_math(i) for i in range(40)]
    a, b = QuestionPool(seed_set="s"), QuestionPool(seed_set="s")
    for it in items:
        a.add(it)
    shuffled = list(items)
    random.Random(3).shuffle(shuffled)
    for it in shuffled:
        b.add(it)
    assert a.state_dict() == b.state_dict()
    keys = [it.key for it in a.items()]
    assert keys == sorted(keys)


def test_sampling_is_deterministic_split_aware_and_filtered():
    pool = QuestionPool([_math(i) for i in range(200)] + [_code_item()])
    draws = [pool.sample(np.random.default_rng(7), "train").key for _ in range(3)]
    assert len(set(draws)) == 1
    seq1 = [pool.sample(rng).key for rng in [np.random.default_rng(1)] for _ in range(20)]
    seq2 = [pool.sample(rng).key for rng in [np.random.default_rng(1)] for _ in range(20)]
    assert seq1 == seq2 and len(set(seq1)) > 5
    for split in SPLITS:
        for s in range(10):
            assert pool.sample(np.random.default_rng(s), split).split == split
    rng = np.random.default_rng(0)
    for _ in range(10):
        assert pool.sample(rng, where=lambda it: it.kind == "code").kind == "code"
    with pytest.raises(ValueError, match="no eligible item"):
        pool.sample(rng, where=lambda it: it.kind == "text")
    with pytest.raises(TypeError, match="numpy Generator"):
        pool.sample(random.Random(0))
    with pytest.raises(ValueError, match="unknown split"):
        pool.sample(rng, "dev")


def test_where_cache_is_invalidated_by_additions():
    pool = QuestionPool([_math(1)])
    is_code = lambda it: it.kind == "code"  # noqa: E731
    with pytest.raises(ValueError):
        pool.sample(np.random.default_rng(0), where=is_code)
    pool.add(_code_item())
    assert pool.sample(np.random.default_rng(0), where=is_code).kind == "code"


# ---------------------------------------------------------------- checkpoints


def test_jsonl_round_trip_is_exact(tmp_path):
    pool = QuestionPool([_math(i) for i in range(5)] + [_code_item()], seed_set="toy")
    pool.add(
        PoolItem(
            "Ünïcödé question — 中文 😀?",
            origin="generated",
            source="propose_solve_judge",
            metadata={"quality": 7 / 9, "difficulty": 0.1 + 0.2, "reference": None},
        )
    )
    pool.add(_math(1))  # duplicate, counted
    path = tmp_path / "pool.jsonl"
    pool.save(path)
    loaded = QuestionPool.load(path)
    assert loaded.state_dict() == pool.state_dict()
    assert loaded.items() == pool.items()
    assert loaded.seed_hash == pool.seed_hash and loaded.stats == {"added": 1, "duplicates": 1}
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + len(pool)
    loaded.save(tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == path.read_bytes()


def test_load_state_dict_in_place_and_pickle():
    pool = QuestionPool([_math(i) for i in range(3)])
    other = QuestionPool([_math(i) for i in range(10, 15)], seed_set="other")
    holder = {"pool": pool}
    pool.load_state_dict(other.state_dict())
    assert holder["pool"].state_dict() == other.state_dict()
    clone = pickle.loads(pickle.dumps(pool))
    assert clone.state_dict() == pool.state_dict() and clone is not pool
    clone.add(_math(99))
    assert len(clone) == len(pool) + 1
    with pytest.raises(ValueError, match="format marker"):
        pool.load_state_dict({"items": []})


def test_concurrent_additions_are_safe_and_order_free():
    items = [_math(i) for i in range(400)]
    pool = QuestionPool()

    def worker(chunk):
        for it in chunk:
            pool.add(it)
            pool.add(it)  # duplicate from another "clone"

    threads = [threading.Thread(target=worker, args=(items[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(pool) == 400 and pool.stats == {"added": 400, "duplicates": 400}
    assert pool.state_dict()["items"] == QuestionPool(items).state_dict()["items"]


# ---------------------------------------------------------------- seed sources


def test_offline_seed_set():
    pool = QuestionPool.from_sources(OFFLINE_SEEDS)
    kinds = {k: sum(it.kind == k for it in pool) for k in ("math", "code")}
    assert kinds == {"math": 300, "code": 164}
    assert pool.seed_set == "+".join(OFFLINE_SEEDS) and all(pool.count(s) > 0 for s in SPLITS)
    assert all(it.verifiable and it.origin == "seed" for it in pool)
    again = QuestionPool.from_sources(OFFLINE_SEEDS)
    assert again.seed_hash == pool.seed_hash and again.state_dict() == pool.state_dict()
    he = next(it for it in pool if it.source == "humaneval")
    assert verify_answer(he, he.answer).score == 1.0


def test_seed_source_specs(tmp_path):
    items = load_seed_items(("humaneval:5",))
    assert len(items) == 5 and [i.key for i in items] == sorted(i.key for i in items)
    gsm = load_seed_items((f"gsm8k:2@{FIXTURES / 'gsm8k.jsonl'}",))
    assert len(gsm) == 2 and all(it.kind == "math" and it.answer for it in gsm)
    maths = load_seed_items((f"math:1@{FIXTURES / 'competition_math.jsonl'}",))
    assert len(maths) == 1 and maths[0].kind == "math" and maths[0].answer
    mbpp = load_seed_items((f"mbpp@{FIXTURES / 'mbpp_full.jsonl'}",))
    assert mbpp and all(it.kind == "code" and it.tests for it in mbpp)
    QuestionPool([_math(1), _math(2)]).save(tmp_path / "p.jsonl")
    assert len(load_seed_items((f"items@{tmp_path / 'p.jsonl'}",))) == 2
    for bad in ("nonsense", "humaneval:0", "items", "a b"):
        with pytest.raises(ValueError):
            load_seed_items((bad,))
    with pytest.raises(TypeError):
        load_seed_items("humaneval")


def test_create_shared_builds_one_pool_for_all_envs():
    shared = envs.make("mae").unwrapped.create_shared(seed_sources=("humaneval:20",))
    pool = shared["pool"]
    assert isinstance(pool, QuestionPool) and len(pool) == 20
    a = envs.make("mae", pool=pool, seed_sources=("humaneval:20",)).unwrapped
    b = envs.make("sage", pool=pool).unwrapped
    assert a.pool is pool and b.pool is pool
    assert a.clone().pool is pool
    with pytest.raises(TypeError, match="QuestionPool"):
        envs.make("mae", pool=[1, 2])
    with pytest.raises(TypeError, match="unknown config option"):
        envs.make("sage").unwrapped.create_shared(not_an_option=1)


# ---------------------------------------------------------------- verifiers


def test_verify_answer_math_code_text():
    m = PoolItem("Half of 3?", kind="math", answer="1.5")
    assert verify_answer(m, r"\boxed{\frac{3}{2}}").score == 1.0
    assert verify_answer(m, "2").score == 0.0
    assert verify_answer(m, None).score == 0.0 and verify_answer(m, "  ").reason == "no answer"
    c = _code_item()
    assert verify_answer(c, "```python\ndef inc(x):\n    return x + 1\n```").score == 1.0
    half = verify_answer(c, "def inc(x):\n    return 1")
    assert half.score == pytest.approx(1 / 3) and "1/3 tests passed" in half.reason
    assert verify_answer(c, "def inc(:").score == 0.0
    t = PoolItem("Capital of France?", answer="Paris")
    assert verify_answer(t, " paris. ").score == 1.0 and verify_answer(t, "Lyon").score == 0.0
    assert verify_answer(PoolItem("Open question?"), "anything").score == 0.0


def test_reference_checks():
    assert check_math_reference("42") == (True, "ok")
    assert check_math_reference(r"\frac{\sqrt{2}}{2}")[0]
    assert not check_math_reference("The answer is forty")[0]
    assert not check_math_reference(None)[0] and not check_math_reference("1\n2")[0]
    tests, why = split_assert_block(
        "```python\nimport math\nassert f(4) == 2\nassert f(9) == 3\n```"
    )
    assert why == "ok" and len(tests) == 2 and all("import math" in t.code for t in tests)
    assert check_code_reference("import math\ndef f(x):\n    return math.isqrt(x)", tests)[0]
    ok, why = check_code_reference("def f(x):\n    return 2", tests)
    assert not ok and "fails its tests" in why
    assert split_assert_block("x = 1")[1] == "the tests contain no assert"
    assert split_assert_block("assert (")[1].startswith("the tests do not compile")
    assert len(split_assert_block("\n".join(f"assert {i} == {i}" for i in range(50)))[0]) == 20
    semi = split_assert_block("import math; assert math.isqrt(9) == 3")[0]
    assert [t.code for t in semi] == ["import math\nassert math.isqrt(9) == 3\n"]
    assert "longer than" in split_assert_block("assert True\n" * 10_000)[1]
    check = "def check(candidate):\n    assert candidate(1) == 2\n\ncheck(inc)\n"
    assert split_assert_block(check) == ((TestCase.asserts(check, "tests"),), "ok")
    assert assert_block((TestCase.asserts("assert a\n"), TestCase.io("1", "1"))) == "assert a"


# ---------------------------------------------------------------- pools grown by episodes


def _scripted(raw, agent: str, rng: random.Random) -> str:
    """A seeded policy that proposes new questions and accepts about half of them."""
    h = int(question_key(raw.observe(agent)["prompt"])[:8], 16) + rng.randrange(10**6)
    if agent == "proposer":
        return f"<question>Compute {h % 997} * {h % 89} + {h % 13}.</question>"
    if agent == "solver":
        return "<answer>7</answer>"
    return f"<score>{9 if h % 2 else 5}</score>"


def _grow(seed: int, threaded: bool) -> dict:
    """Three waves of four MAE episodes on envs sharing one pool; resets in order, then the
    episodes are played one after another or on four threads at once."""
    cfg = {"seed_sources": ("humaneval:40",), "num_answers": 2}
    pool = envs.make("mae", **cfg).unwrapped.create_shared(**cfg)["pool"]
    raws = [envs.make("mae", pool=pool, **cfg).unwrapped for _ in range(4)]

    def run(raw, rng):
        while raw.agents:
            a = raw.agent_selection
            raw.step(None if raw.terminations[a] else _scripted(raw, a, rng))

    rngs = [random.Random(seed * 100 + i) for i in range(len(raws))]  # one per env (thread)

    rng = np.random.default_rng(seed)
    for _ in range(3):
        for raw in raws:
            raw.reset(seed=int(rng.integers(2**31)))
        if threaded:
            jobs = list(zip(raws, rngs))[::-1]
            threads = [threading.Thread(target=run, args=job) for job in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for raw, r in zip(raws, rngs):
                run(raw, r)
    return pool.state_dict()


def test_same_seed_same_pools_across_runs_and_thread_orders():
    first = _grow(11, threaded=False)
    assert first["stats"]["added"] > 0 and len(first["items"]) > 40
    assert _grow(11, threaded=False) == first
    assert _grow(11, threaded=True) == first
    assert _grow(12, threaded=False) != first
    generated = [d for d in first["items"] if d["origin"] == "generated"]
    assert all(d["metadata"]["quality"] >= 0.7 for d in generated)


def test_registry_question_answering_sets_as_seed_sources():
    from envs.pools import load_seed_items, verify_answer

    fix = "tests/data/fixtures"
    items = load_seed_items([f"mmlu@{fix}/mmlu.jsonl", f"boolq:1@{fix}/boolq.jsonl"])
    by_answer = {it.answer: it for it in items}
    assert len(items) == 3 and {"B", "C"} <= set(by_answer)  # MMLU letters, one BoolQ item
    canberra = by_answer["C"]
    assert canberra.kind == "text" and "C. Canberra" in canberra.question
    assert verify_answer(canberra, "C").score == 1.0
    assert verify_answer(canberra, "B").score == 0.0
