"""Judge score parsing and the SAGE / MAE / CoMAS normalisations, on hand-computed cases."""

from __future__ import annotations

import pytest

from verifiers.judge import (
    comas_rewards,
    comas_score,
    mae_norm,
    mae_score,
    parse_score,
    sage_norm,
    sage_score,
)


@pytest.mark.parametrize(
    ("text", "value", "source"),
    [
        ("<score>8</score>", 8.0, "tag"),
        ("<score> 7.5 </score>", 7.5, "tag"),
        ("<SCORE>9</SCORE>", 9.0, "tag"),
        ("<score>7/10</score>", 7.0, "tag"),
        ("<score>4 / 5</score>", 8.0, "tag"),
        ("<score>8 out of 10</score>", 8.0, "tag"),
        ("<score>Score: **6**</score>", 6.0, "tag"),
        ("<score>0.8</score>", 0.8, "tag"),
        ("<score>1</score> blah <score>10</score>", 10.0, "tag"),
        ("analysis... final score 6/10", 6.0, "fallback"),
        ("I'd give it a 3, no wait, 4", 4.0, "fallback"),
        ("<score>7", 7.0, "fallback"),
    ],
)
def test_parse_score(text, value, source):
    p = parse_score(text)
    assert (p.value, p.source) == (value, source)


@pytest.mark.parametrize("text", [None, "", "no numbers", "<score></score>", "<score>n/a</score>"])
def test_parse_score_unparsable(text):
    p = parse_score(text)
    assert p.value is None and not p.ok and p.reason


def test_parse_score_no_fallback_and_counts():
    assert parse_score("rating: 9", fallback=False).value is None
    assert parse_score("<score>1</score><score>2</score>").n_tags == 2
    assert parse_score("<score>2/3</score>", scale_max=3).value == 2.0
    assert parse_score("<score>" + "9" * 400 + "</score>").value is None  # absurd number
    assert parse_score("x" * 100_000 + "<score>5</score>").value == 5.0
    # completions are cut at 200k characters before parsing: a score after that is not seen
    assert parse_score("x" * 1_000_000 + "<score>5</score>").value is None


def test_sage_norm_hand_computed():
    assert sage_norm(0.0) == 0.0 and sage_norm(0.7) == 0.7 and sage_norm(1.0) == 1.0
    assert sage_norm(1.9) == pytest.approx(0.1)
    assert sage_norm(7) == pytest.approx(6 / 9)
    assert sage_norm(10) == 1.0
    for s in (-1, 10.01, 100, None, float("nan"), float("inf")):
        assert sage_norm(s) == 0.5
    assert sage_score("<score>4</score>") == pytest.approx(1 / 3)
    assert sage_score("nothing") == 0.5


def test_mae_norm_hand_computed():
    assert mae_norm(1) == 0.0 and mae_norm(10) == 1.0
    assert mae_norm(7.3) == pytest.approx(0.7)
    assert mae_norm(-5) == 0.0 and mae_norm(42) == 1.0 and mae_norm(None) == 0.5
    assert mae_score("<score>4</score>") == pytest.approx(1 / 3)
    assert mae_score("<score>oops</score>") == 0.5


def test_comas():
    assert comas_score("fatal. <score>1</score>") == 1
    assert comas_score("<score>2</score>") == 2
    assert comas_score("<score>3.0</score>") == 3
    for bad in ("<score>0</score>", "<score>4</score>", "<score>2.5</score>", "3", None, ""):
        assert comas_score(bad) is None
    assert comas_score("final: 2", fallback=True) == 2
    assert comas_rewards(3) == (1.0, 0.0, 0.0)
    assert comas_rewards(2) == (0.5, 0.5, 0.0)
    assert comas_rewards(1) == (0.0, 1.0, 0.0)
    assert comas_rewards(None) == (None, None, -1.0)
    with pytest.raises(ValueError):
        comas_rewards(4)
