"""Tag extraction and format scores, including odd and hostile text."""

from __future__ import annotations

import time

import pytest

from verifiers.formats import check_format, extract_tag, find_tags, format_score, has_unique_tag


def test_find_and_extract():
    text = "<think>hmm</think>\n<answer>\n 42 \n</answer>"
    assert find_tags(text, "think") == ["hmm"]
    assert extract_tag(text, "answer").value == "42"
    assert extract_tag(text, "plan").reason == "no <plan> block found"
    assert extract_tag("< answer >x</ answer >", "answer").value == "x"
    assert extract_tag("<answer>a <answer>b</answer>", "answer").value == "a <answer>b"


def test_uniqueness_mae_format():
    assert has_unique_tag("<question>Q?</question>", "question")
    assert not has_unique_tag("<question>Q?</question><question>R?</question>", "question")
    assert not has_unique_tag("Q?", "question")
    assert not has_unique_tag("<question>Q?", "question")


def test_check_format_hand_computed():
    req = ["question", "answer", "plan", "score"]
    text = "<question>q</question><answer>a</answer><answer>b</answer><plan> </plan>"
    r = check_format(text, req)
    assert r.score == pytest.approx(1 / 4)  # only <question> counts
    assert r.missing == ("score",) and r.duplicated == ("answer",) and r.empty == ("plan",)
    assert not r.ok and "missing: <score>" in r.reason
    r = check_format(text, req, duplicate_credit=0.5)
    assert r.score == pytest.approx(1.5 / 4)
    r = check_format("<plan>p</plan><score>8</score>", ["plan", "score"])
    assert r.ok and r.score == 1.0 and r.contents == {"plan": "p", "score": "8"}
    assert check_format("<plan>p", ["plan"]).unclosed == ("plan",)


def test_empty_output_neutral_value():
    assert format_score("", ["answer"]) == 0.0
    assert format_score("   ", ["answer"], empty_output_score=0.5) == 0.5
    assert format_score(None, ["answer"], empty_output_score=0.5) == 0.5


def test_api_errors():
    with pytest.raises(ValueError):
        check_format("x", [])
    with pytest.raises(ValueError):
        find_tags("x", "<answer>")
    with pytest.raises(ValueError):
        check_format("x", ["a"], duplicate_credit=2)


def test_hostile_text_is_linear():
    many_open = "<answer>" * 50_000
    many_pairs = "<answer>x</answer>" * 10_000
    t = time.perf_counter()
    assert extract_tag(many_open, "answer").reason == "<answer> is never closed"
    assert len(find_tags(many_pairs, "answer")) == 10_000
    assert check_format("\x00\xff<answer>\ud800</answer>", ["answer"]).ok
    assert time.perf_counter() - t < 2.0
