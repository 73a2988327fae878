"""LLM-judge grading of benchmark passes, as MAE grades its general benchmarks (MAE 5.1: a strong
model compares the answer inside the solver's tags with the ground truth and says TRUE or FALSE).

:func:`judge_records` re-grades the records of a full pass (:mod:`adapters.evaluation.passes`)
with any policy as the judge (``--judge SPEC``: e.g. ``openai:BASE_URL#MODEL``). For each
record it shows the judge the question, the reference answer(s) and the model's final answer
(:func:`~verifiers.answer_formats.final_answer_text` of the record's last completion) and reads
the verdict with :func:`~verifiers.answer_formats.parse_judgement`. Verdicts are cached in a JSON
file keyed by a hash of the judge spec and the three texts, so a resumed or repeated run asks
the judge only about new answers. :func:`judge_summary` gives pass@1 under the judge, how many
verdicts did not parse (counted wrong), and the agreement with the exact-match grading (the
share of records where both say the same, and Cohen's kappa).

The judge decodes as MAE's did (:class:`JudgeSampling`, MAE Appendix B.5, Table 4: temperature
1.0, top-p 0.95, at most 1,000 new tokens), so it may reason before its verdict. Each verdict is
sampled with a seed derived from its cache key, so the same run gives the same verdicts; the
sampling values are part of the key (and of ``run.json``), so a run with other values asks
again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adapters.evaluation.stats import mean_interval
from adapters.policies.base import Policy, SamplingParams
from envs.core.splits import stable_hash
from verifiers.answer_formats import final_answer_text, parse_judgement

__all__ = [
    "JUDGE_TEMPLATE",
    "JudgeSampling",
    "cohen_kappa",
    "judge_prompt",
    "judge_records",
    "judge_summary",
]


@dataclass(frozen=True)
class JudgeSampling:
    """How the judge decodes: MAE Appendix B.5, Table 4 (temperature 1.0, top-p 0.95, max tokens
    1000).

    >>> JudgeSampling()
    JudgeSampling(temperature=1.0, top_p=0.95, max_new_tokens=1000)
    """

    temperature: float = 1.0
    top_p: float = 0.95
    max_new_tokens: int = 1000

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_new_tokens < 1:
            raise ValueError(f"invalid judge sampling {self}")


JUDGE_TEMPLATE = (
    "You grade answers to benchmark questions.\n\n"
    "Question:\n{question}\n\n"
    "Reference answer(s): {reference}\n\n"
    "Model's final answer: {answer}\n\n"
    "Does the model's final answer mean the same as a reference answer (ignore formatting, "
    "wording and units written differently)? Reply with one word: TRUE or FALSE."
)


def judge_prompt(question: str, references: Sequence[str], answer: str) -> str:
    """The judge's prompt for one answer (question clipped to 6000 characters).

    >>> "Reference answer(s): Paris | paris city" in judge_prompt(
    ...     "Capital?", ["Paris", "paris city"], "Paris"
    ... )
    True
    """
    return JUDGE_TEMPLATE.format(
        question=str(question)[:6000],
        reference=" | ".join(str(r) for r in references),
        answer=str(answer)[:2000],
    )


def judge_records(
    records: Sequence[dict[str, Any]],
    problems: Mapping[str, Any],
    judge: Policy,
    *,
    judge_spec: str,
    cache_path: str | Path,
    sampling: JudgeSampling | None = None,
    save: Callable[[Path, str], None] | None = None,
) -> None:
    """Set ``record["judge_correct"]`` (True / False, or None when the verdict did not parse)
    on every record whose ``problem_id`` is in ``problems``; ``record["judge_answer"]`` is the
    answer the judge saw. The judge decodes with ``sampling`` (default: MAE Table 4). New
    verdicts are added to the cache file."""
    sampling = sampling or JudgeSampling()
    path = Path(cache_path)
    cache: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    todo: list[tuple[dict[str, Any], str, str]] = []
    for rec in records:
        prob = problems.get(rec["problem_id"])
        if prob is None:
            continue
        answer = final_answer_text(rec.get("completion", "")) or ""
        refs = [prob.answer, *getattr(prob, "aliases", ())]
        prompt = judge_prompt(prob.question, refs, answer)
        key = stable_hash([judge_spec, asdict(sampling), prob.question, refs, answer])
        rec["judge_answer"] = answer
        if not answer:
            rec["judge_correct"] = False  # nothing to judge: wrong, as exact match says
            continue
        if key in cache:
            rec["judge_correct"] = parse_judgement(cache[key])
        else:
            todo.append((rec, key, prompt))
    if todo:
        params = SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens,
            prompt_seeds=tuple(int(k[:8], 16) for _r, k, _p in todo),
        )
        prompts = [[{"role": "user", "content": p}] for _r, _k, p in todo]
        outs = judge.generate(prompts, params)
        for (rec, key, _p), comps in zip(todo, outs):
            text = comps[0].text if comps else ""
            cache[key] = text
            rec["judge_correct"] = parse_judgement(text)
        data = json.dumps(cache, indent=0, sort_keys=True)
        if save is not None:
            save(path, data)
        else:
            path.write_text(data)


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa of two binary gradings (``None`` when chance agreement is 1).

    Hand case: a = [T, T, F, F], b = [T, F, F, F]: observed 3/4; chance 0.5 * 0.25 + 0.5 * 0.75
    = 0.5; kappa = (0.75 - 0.5) / (1 - 0.5) = 0.5.

    >>> cohen_kappa([True, True, False, False], [True, False, False, False])
    0.5
    """
    n = len(a)
    if n == 0 or n != len(b):
        raise ValueError("two gradings of the same non-empty records are needed")
    po = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    return None if pe == 1 else (po - pe) / (1 - pe)


def judge_summary(records: Sequence[Mapping[str, Any]], samples: int) -> dict[str, Any]:
    """pass@1 under the judge (unparsed verdicts count as wrong), the number unparsed, and the
    agreement with exact match (share equal, Cohen's kappa)."""
    judged = [r for r in records if "judge_correct" in r]
    if not judged:
        raise ValueError("no judged records")
    by_problem: dict[int, list[bool]] = {}
    for r in judged:
        by_problem.setdefault(int(r["index"]), []).append(bool(r["judge_correct"]))
    judge_ok = [bool(r["judge_correct"]) for r in judged]
    exact_ok = [bool(r["correct"]) for r in judged]
    return {
        "pass@1": mean_interval([sum(xs) / len(xs) for xs in by_problem.values()]).to_dict(),
        "samples": samples,
        "judged": len(judged),
        "unparsed": sum(r["judge_correct"] is None for r in judged),
        "agreement": sum(x == y for x, y in zip(judge_ok, exact_ok)) / len(judged),
        "kappa": cohen_kappa(judge_ok, exact_ok),
    }
