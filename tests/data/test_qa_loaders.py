"""Loaders of MAE's, CoMAS's, SAGE's and MarsRL's benchmarks on fixtures in each release's schema
(column names and types as published; CSV for GPQA, parquet for MMLU-Pro, JSONL otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.data import DATASETS, find_data_file, load_dataset
from envs.data.code_sets import load_kodcode
from envs.data.qa_sets import load_bbh, load_gpqa, load_truthfulqa
from verifiers.answer_formats import check_answer
from verifiers.math_answer import is_correct

FIX = Path(__file__).parent / "fixtures"


def _check(p, completion):
    return check_answer(
        completion, p.answer, answer_format=p.answer_format, choices=p.choices, aliases=p.aliases
    ).correct


def test_arc_letters_and_digit_labels():
    a, b = load_dataset("arc_challenge", FIX / "arc_challenge.jsonl")
    assert (a.id, a.answer, a.answer_format) == ("arc_challenge/Mercury_7175875", "C", "choice")
    assert "C. Planetary days will become shorter." in a.question
    # the second row's labels are "1".."4" and its key "4": the fourth option, letter D
    assert b.answer == "D" and b.choices[3] == "an iron nail"
    assert _check(b, "The answer is (D).") and _check(b, "Answer: an iron nail")
    assert not _check(b, "The answer is (A).")


def test_mmlu_index_answer_and_subject():
    a, b = load_dataset("mmlu", FIX / "mmlu.jsonl")
    assert (a.answer, b.answer) == ("B", "C")  # answer 1 and 2 as indices
    assert a.metadata["subject"] == "abstract_algebra"
    assert b.choices == ("Sydney", "Melbourne", "Canberra", "Perth")


def test_mmlu_pro_parquet_ten_options():
    (p,) = load_dataset("mmlu_pro", FIX / "mmlu_pro.parquet")
    assert (p.id, p.answer, len(p.choices)) == ("mmlu_pro/70", "I", 9)
    assert "I. Unsafe practices, Distress, Fear, Serious" in p.question
    assert _check(p, "... the answer is (I)") and not _check(p, "the answer is (J)")


def test_gpqa_csv_shuffle_is_fixed_by_question():
    (p,) = load_dataset("gpqa", FIX / "gpqa_diamond.csv")
    assert p.id == "gpqa/recLt2ahhk0aadLVF" and p.metadata["domain"] == "Physics"
    assert sorted(p.choices) == sorted(["10^-4 eV", "10^-11 eV", "10^-8 eV", "10^-9 eV"])
    assert p.choices["ABCD".index(p.answer)] == "10^-4 eV"
    (again,) = load_gpqa(path=FIX / "gpqa_diamond.csv")
    assert again.choices == p.choices  # same question, same order, every run


def test_commonsense_openbook_hellaswag_winogrande():
    (cqa,) = load_dataset("commonsense_qa", FIX / "commonsense_qa.jsonl")  # unkeyed row dropped
    assert (cqa.answer, len(cqa.choices)) == ("A", 5)
    (obqa,) = load_dataset("openbookqa", FIX / "openbookqa.jsonl")
    assert obqa.answer == "D" and obqa.question.startswith("The sun is responsible for")
    (hs,) = load_dataset("hellaswag", FIX / "hellaswag.jsonl")
    assert hs.answer == "D" and "A man is sitting on a roof. he" in hs.question
    w1, w2 = load_dataset("winogrande", FIX / "winogrande.jsonl")
    assert (w1.answer, w2.answer) == ("A", "B") and w2.choices == ("trophy", "suitcase")


def test_truthfulqa_mc1_right_answer_tracked_through_shuffle():
    (p,) = load_truthfulqa(path=FIX / "truthfulqa.jsonl")
    right = "Nauru is the smallest country in the world that is at least one square mile in area."
    assert p.choices["ABC".index(p.answer)] == right and len(p.choices) == 3


def test_short_answer_sets_keep_aliases():
    nq1, _ = load_dataset("natural_questions", FIX / "natural_questions.jsonl")
    assert nq1.answer == "14 December 1972 UTC" and nq1.aliases == ("December 1972",)
    assert _check(nq1, "It was in \\boxed{December 1972}.")
    (tq,) = load_dataset("triviaqa", FIX / "triviaqa.jsonl")
    assert tq.answer == "Sunset Boulevard" and "Sunset Blvd" in tq.aliases
    assert tq.id == "triviaqa/tc_33" and _check(tq, "Answer: sunset blvd.")
    (sq,) = load_dataset("squad", FIX / "squad.jsonl")
    assert sq.answer == "Denver Broncos" and sq.aliases == ()  # duplicates folded
    assert sq.question.startswith("Super Bowl 50") and "Question: Which NFL team" in sq.question


def test_boolq_bbh_livebench():
    no, yes = load_dataset("boolq", FIX / "boolq.jsonl")
    assert (no.answer, yes.answer, no.answer_format) == ("no", "yes", "yesno")
    assert _check(yes, "Answer: Yes.") and not _check(no, "Answer: Yes.")
    b1, b2 = load_bbh(path=FIX / "bbh.jsonl", config="boolean_expressions")
    assert (b1.answer, b2.answer, b1.id) == ("False", "True", "bbh/boolean_expressions/0")
    assert _check(b1, "Let's think step by step. So the answer is False.")
    (lb,) = load_dataset("livebench_reasoning", FIX / "livebench_reasoning.jsonl")
    assert lb.answer == "no, yes, yes" and lb.metadata["task"] == "web_of_lies_v2"
    assert _check(lb, "thinking...\n**no, yes, yes**")


def test_science_sets():
    (sb,) = load_dataset("scibench", FIX / "scibench.jsonl")
    assert (sb.answer, sb.metadata["unit"], sb.id) == ("1.0", "atm", "scibench/atkins/1.1")
    assert is_correct("\\boxed{1}", sb.answer)
    phys, bio, _ = load_dataset("webinstruct", FIX / "webinstruct.jsonl")
    assert (phys.answer_format, bio.answer_format) == ("math", "qa")
    kept = load_dataset(
        "webinstruct", FIX / "webinstruct.jsonl", categories=("Physics", "Chemistry", "Biology")
    )
    assert [p.id for p in kept] == ["webinstruct/wi-1", "webinstruct/wi-2"]  # CoMAS 4.1


def test_competition_math_sets():
    a, b = load_dataset("amc", FIX / "amc.jsonl")
    assert (a.answer, b.answer, a.id) == ("7", "9", "amc/0")  # released as floats 7.0, 9.0
    (p23,) = load_dataset("amc23", FIX / "amc23.jsonl")
    assert p23.answer == "27" and p23.question.startswith("Cities $A$")
    (mv,) = load_dataset("minerva", FIX / "minerva.jsonl")
    assert mv.answer == "3.25"
    (ba,) = load_dataset("beyond_aime", FIX / "beyond_aime.jsonl")
    assert (ba.answer, ba.source) == ("9", "beyond_aime")


def test_math_level_filter():
    rows = [
        {"problem": f"q{lv}", "level": f"Level {lv}", "type": "Algebra", "solution": "\\boxed{1}"}
        for lv in (1, 3, 4, 5, "?")
    ]
    kept = load_dataset("math", rows=rows, levels=(4, 5))
    assert [p.question for p in kept] == ["q4", "q5"]
    assert [p.question for p in load_dataset("math_l45", rows=rows)] == ["q4", "q5"]


def test_kodcode_pytest_file_becomes_asserts():
    ps = load_kodcode(path=FIX / "kodcode.jsonl", difficulties=("medium", "hard"))
    (p,) = ps  # the easy one is dropped
    assert (p.id, p.entry_point, p.difficulty) == ("kodcode/Leetcode_3_I", "add", "medium")
    code = p.tests[0].code
    assert "from solution" not in code and code.rstrip().endswith("test_add_negative()")
    scope: dict = {}
    exec(p.golden_solution + "\n" + code, scope)  # the golden passes its own tests
    with pytest.raises(AssertionError):
        exec("def add(a, b):\n    return a - b\n" + code, {})


def test_registry_names_and_data_dir(tmp_path):
    assert {"aime24", "gpqa", "bbh", "kodcode", "beyond_aime", "math_l45"} <= set(DATASETS)
    assert "release_v6" in DATASETS["livecodebench"].release
    (tmp_path / "aime24.jsonl").write_text("{}\n")
    (tmp_path / "mmlu").mkdir()
    assert find_data_file(tmp_path, "aime24") == str(tmp_path / "aime24.jsonl")
    assert find_data_file(tmp_path, "mmlu") == str(tmp_path / "mmlu")
    assert find_data_file(tmp_path, "gpqa") is None
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("no_such_set")


def test_registry_code_sets_are_the_code_settings():
    from envs.code import DATASETS as CODE
    from envs.data.catalog import dataset_names
    from envs.math import DATASETS as MATH

    assert set(dataset_names("code")) <= set(CODE)
    assert set(dataset_names("math")) <= set(MATH)


def test_kodcode_through_the_code_setting():
    from envs.code import load_code_problems

    (p,) = load_code_problems(
        "kodcode", str(FIX / "kodcode.jsonl"), None, {"difficulties": ["medium"]}
    )
    assert p.entry_point == "add"
