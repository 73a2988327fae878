"""Math loaders on small fixtures in each dataset's real schema (no hub access)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.data import (
    DatasetUnavailable,
    MathProblem,
    load_aime24,
    load_aime25,
    load_gsm8k,
    load_math,
    load_olympiadbench,
    load_polaris,
    load_reasoning_gym,
)
from verifiers.math_answer import grade, is_correct

FIX = Path(__file__).parent / "fixtures"


def test_gsm8k_fixture_via_datasets_json():
    ps = load_gsm8k(path=FIX / "gsm8k.jsonl")
    assert [p.answer for p in ps] == ["10", "2200", "4.5"]
    assert ps[0].id == "gsm8k/test/0" and ps[0].source == "gsm8k"
    assert "####" in ps[0].solution
    assert all(isinstance(p, MathProblem) for p in ps)
    assert len(load_gsm8k(path=FIX / "gsm8k.jsonl", limit=2)) == 2


def test_math_boxed_answers_and_skips_unboxed():
    ps = load_math(path=FIX / "competition_math.jsonl")
    assert [p.answer for p in ps] == [r"\frac{5}{6}", r"\{1, 2\}"]
    assert ps[0].metadata == {"level": "Level 1", "subject": "Prealgebra"}
    assert is_correct(r"\boxed{5/6}", ps[0].answer)
    assert is_correct(r"\boxed{\{2, 1\}}", ps[1].answer)


def test_math500_schema_uses_answer_field():
    (p,) = load_math(hub_name="HuggingFaceH4/MATH-500", path=FIX / "math500.jsonl")
    assert p.answer == "4" and p.id == "math/test/algebra/1.json"
    assert p.metadata["subject"] == "Algebra"


def test_polaris():
    ps = load_polaris(path=FIX / "polaris.jsonl")
    assert [(p.answer, p.metadata["difficulty"]) for p in ps] == [("4", "3/8"), ("9", "8/8")]


def test_aime_both_schemas():
    (h4,) = load_aime24(path=FIX / "aime24_h4.jsonl")
    (mx,) = load_aime24(path=FIX / "aime24_maxwell.jsonl")
    assert (h4.id, h4.answer) == ("aime24/60", "738")
    assert (mx.id, mx.answer) == ("aime24/2024-I-1", "204")
    assert mx.question.startswith("Every morning")
    (p25,) = load_aime25(path=FIX / "aime25.jsonl")
    assert (p25.answer, p25.source) == ("70", "aime25")


def test_olympiadbench_lists_and_context():
    a, b = load_olympiadbench(path=FIX / "olympiadbench.jsonl")
    assert a.answer == "4" and a.id == "olympiadbench/1606"
    assert b.answer == "3, -3" and b.question.startswith("Consider real numbers only.")
    assert grade(r"\boxed{-3, 3}", b.answer).correct


def test_rows_argument_and_errors():
    rows = [{"question": "1+1?", "answer": "#### 2"}]
    assert load_gsm8k(rows=rows)[0].answer == "2"
    with pytest.raises(ValueError):
        load_gsm8k(rows=rows, path=FIX / "gsm8k.jsonl")
    with pytest.raises(FileNotFoundError):
        load_gsm8k(path=FIX / "missing.jsonl")
    with pytest.raises(TypeError):
        load_gsm8k(rows=["not a dict"])  # type: ignore[list-item]


def test_missing_hub_dataset_says_how_to_get_it(monkeypatch):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_CACHE", "/nonexistent-cache-dir")
    with pytest.raises(DatasetUnavailable) as info:
        load_gsm8k(split="test")
    msg = str(info.value)
    assert "openai/gsm8k" in msg and "HF_DATASETS_CACHE" in msg and "path=" in msg


def test_reasoning_gym_offline_and_deterministic():
    a = load_reasoning_gym("gsm_symbolic", size=5, seed=3)
    b = load_reasoning_gym("gsm_symbolic", size=5, seed=3)
    c = load_reasoning_gym("gsm_symbolic", size=5, seed=4)
    assert [p.to_dict() for p in a] == [p.to_dict() for p in b]
    assert [p.question for p in a] != [p.question for p in c]
    assert all(p.answer.lstrip("-").replace(".", "").isdigit() for p in a)
    arith = load_reasoning_gym("basic_arithmetic", size=20, seed=0)
    # the generator's own answers grade as correct against themselves, wrong when shifted by
    # more than NumEq's tolerance (relative 1e-6 for large answers)
    assert all(is_correct(f"#### {p.answer}", p.answer) for p in arith)
    shifted = [int(p.answer) + abs(int(p.answer)) // 100_000 + 1 for p in arith]
    assert not any(is_correct(f"#### {s}", p.answer) for s, p in zip(shifted, arith))
    with pytest.raises(ValueError):
        load_reasoning_gym("basic_arithmetic", size=0)


def test_record_roundtrip():
    p = load_polaris(path=FIX / "polaris.jsonl")[0]
    assert MathProblem.from_dict(p.to_dict()) == p
