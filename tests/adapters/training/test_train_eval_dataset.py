"""``adapters.train --eval-dataset``: full passes over a benchmark disjoint from the training data
at the trainer's evaluation points (tiny char model, math setting, no download)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from adapters.training.flags import _convert
from adapters.training.trainer import Trainer

from ..conftest import char_models
from ..conftest import tiny_train_config as cfg

FIX = Path(__file__).resolve().parents[2] / "data" / "fixtures"
BENCH5 = FIX / "bench5" / "aime24.jsonl"


class Recording(Trainer):
    """Keeps the instance ids of every training rollout."""

    trained: set[str]

    def rollout(self, step):
        result = super().rollout(step)
        self.trained = getattr(self, "trained", set()) | {e.instance_id for e in result.episodes}
        return result


def test_eval_dataset_flag_takes_several():
    assert _convert("eval_dataset", "aime24=a.jsonl,aime25") == ["aime24=a.jsonl", "aime25"]


def test_train_evaluates_full_passes_on_a_disjoint_dataset(tmp_path):
    base = dict(
        env="math",
        env_config={"mode": "single", "dataset": "gsm8k", "data_path": str(FIX / "gsm8k.jsonl")},
        eval_episodes=1,
        eval_split="train",
        eval_dataset=[f"aime24={BENCH5}"],
        steps=1,
    )
    logs: list[str] = []
    t = Recording(cfg(tmp_path, **base), models=char_models(0), log=logs.append)
    t.train()
    out = Path(t.out)
    for tag in ("before", "after"):
        data = json.loads((out / f"eval_datasets_{tag}.json").read_text())
        (row,) = data["rows"]
        assert row["benchmark"] == "aime24" and row["problems"] == 5
        ids = sorted(r["problem_id"] for r in data["records"])
        assert ids == [f"aime24/{i}" for i in range(60, 65)]  # every problem, once
        # none of the evaluated problems was trained on
        assert not {r["instance_id"] for r in data["records"]} & t.trained
    assert t.trained  # training did roll out (gsm8k problems)
    assert any(line.startswith("after: pass@1 aime24") for line in logs)


def test_train_dataset_flags_set_the_setting_data():
    from adapters.train import config_from_argv

    c, _ = config_from_argv(
        ["--env", "math", "--dataset", "mmlu", "--data-path", "mmlu.jsonl",
         "--eval-dataset", "aime24=a.jsonl,gpqa"]
    )  # fmt: skip
    assert c.env_config["dataset"] == "mmlu" and c.env_config["data_path"] == "mmlu.jsonl"
    assert c.eval.eval_dataset == ["aime24=a.jsonl", "gpqa"]


def test_eval_dataset_needs_evaluation_points(tmp_path):
    from adapters.training.config import ConfigError

    with pytest.raises(ConfigError, match="eval_episodes"):
        cfg(tmp_path, eval_episodes=0, eval_dataset=["aime24"])
