"""Answer checkers for multiple choice, short answers, BBH and yes/no: hand-checked verdicts and
hostile completions (none raises, none takes long)."""

from __future__ import annotations

import time

import pytest

from verifiers.answer_formats import (
    check_answer,
    check_bbh,
    check_choice,
    check_qa,
    check_yes_no,
    choice_letter,
    token_f1,
)

OPTS = ["Paris", "London", "Rome", "Berlin"]


@pytest.mark.parametrize(
    "completion, letter",
    [
        ("The answer is (C).", "C"),  # MMLU-Pro harness phrase
        ("Answer: c", "C"),
        ("\\boxed{D}", "D"),
        ("<answer>B</answer>", "B"),
        ("<answer>London</answer>", "B"),  # option text maps to its letter
        ("the answer is rome.", "C"),
        ("Let me think. Paris is not it... so A is wrong and the best is D", "D"),  # last letter
        ("The answer is E", None),  # out of range: no guessing from other letters
        ("I have no idea", None),  # "I" is a word, not an option
        ("Answer: Madrid", None),
    ],
)
def test_choice_letter(completion, letter):
    assert choice_letter(completion, OPTS) == letter


def test_choice_verdict_and_reason():
    assert check_choice("So the answer is (B)", "B", OPTS).correct
    wrong = check_choice("So the answer is (A)", "B", OPTS)
    assert (wrong.correct, wrong.extracted, wrong.score) == (False, "A", 0.0)
    assert "picked A" in wrong.reason


def test_qa_exact_match_and_f1_hand_values():
    # SQuAD normalisation: case, punctuation, articles
    assert check_qa("Answer: The Denver Broncos!", ["Denver Broncos"]).correct
    # prediction "denver" vs "denver broncos": precision 1, recall 1/2 -> F1 = 2/3
    c = check_qa("Answer: Denver", ["Denver Broncos"])
    assert not c.correct and c.score == pytest.approx(2 / 3)
    # best over aliases: "sunset blvd" equals the alias exactly
    assert check_qa("\\boxed{Sunset Blvd.}", ["Sunset Boulevard", "Sunset Blvd"]).score == 1.0
    assert token_f1("a the an", ["the"]) == 0.0  # both normalise to nothing: no credit
    assert not check_qa("Answer: x", []).correct


def test_bbh_and_yes_no():
    assert check_bbh("So the answer is (B).", "(B)").correct
    assert check_bbh("So the answer is b", "(B)").correct
    assert check_bbh("So the answer is 24.", "24").correct
    assert not check_bbh("So the answer is 240.", "24").correct
    assert check_yes_no("<answer>No</answer>", "no").correct
    assert check_yes_no("The answer is true", True).correct
    assert not check_yes_no("Answer: yes", False).correct
    assert check_yes_no("Answer: perhaps", True).extracted is None


HOSTILE = [
    None,
    123,
    b"\\boxed{A}",
    "",
    "\x00" * 100,
    "\\boxed{" * 50_000,
    "answer is " * 50_000,
    "<answer>" * 50_000,
    "A " * 200_000,
    "(" * 100_000 + "B",
    "\ud800 answer is (A)",
]


@pytest.mark.parametrize("fmt", ["choice", "qa", "bbh", "yesno"])
def test_hostile_completions_never_raise_and_finish_fast(fmt):
    for bad in HOSTILE:
        t0 = time.perf_counter()
        c = check_answer(bad, "A", answer_format=fmt, choices=OPTS, aliases=["x"])
        assert time.perf_counter() - t0 < 2.0, (fmt, repr(bad)[:40])
        assert isinstance(c.correct, bool) and 0.0 <= c.score <= 1.0
        if not isinstance(bad, str):
            assert not c.correct and c.reason == "completion is not a string"


def test_unknown_format_is_a_caller_error():
    with pytest.raises(ValueError):
        check_answer("A", "A", answer_format="essay")
