"""The cold starts the project ships (``adapters/training/coldstarts/``) are what their recorded
command makes: a run with the command's options finds them by its own key, the default CPU run
of their setting names one, their examples are the oracle's (the data hash), and (slow) the
command's first optimizer steps log the losses the shipped card records."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from adapters.sft import build_parser, configs_from_args
from adapters.training.coldstart import (
    CARD,
    SHIPPED,
    ColdStartConfig,
    _run_view,
    canonical_env_config,
    examples_hash,
    make_cold_start,
    oracle_examples,
    sft_command,
    shipped_cold_start,
)
from adapters.training.config import ConfigError, TrainConfig
from adapters.training.shipped import shipped_init

SHIPPED_DIRS = sorted(p for p in SHIPPED.iterdir() if (p / CARD).is_file())


def _run_config(card: dict) -> tuple[TrainConfig, ColdStartConfig]:
    """The configs the card's recorded ``python -m adapters.sft`` command means."""
    argv = shlex.split(card["command"])
    assert argv[:3] == ["python", "-m", "adapters.sft"], argv
    cfg, cs = configs_from_args(build_parser().parse_args([*argv[3:], "--device", "cpu"]))
    return cfg, cs


def test_something_is_shipped():
    assert [p.name.split("-")[0] for p in SHIPPED_DIRS] == ["plan_path", "sokoban", "sudoku"]


@pytest.mark.parametrize("env", ["sokoban", "plan_path", "sudoku"])
def test_the_default_cpu_run_names_a_shipped_one(env: str):
    cfg = TrainConfig(env=env).resolved(cuda=False)
    where = shipped_init(cfg.policy.init)
    assert where in SHIPPED_DIRS and where.name.startswith(env + "-")
    with pytest.raises(ConfigError, match="no shipped cold start of that name"):
        TrainConfig(init="shipped:nothing-here").resolved(cuda=False)
    with pytest.raises(ConfigError, match=r"shipped: \['plan_path-[0-9a-f]+', 'sokoban-"):
        TrainConfig(init="shipped:../coldstarts").resolved(cuda=False)


@pytest.mark.parametrize("where", SHIPPED_DIRS, ids=lambda p: p.name)
def test_the_default_run_finds_it_and_its_data_is_the_oracles(where: Path):
    card = json.loads((where / CARD).read_text())
    cfg, cs = _run_config(card)
    assert shipped_cold_start(cfg, cs) == where
    env_config, prefix = _run_view(cfg)
    assert (
        canonical_env_config(cfg.env, card["env_config"]),
        card["prompt_prefix"],
        card["model"],
    ) == (
        canonical_env_config(cfg.env, env_config),
        prefix,
        cfg.policy.model,
    )
    examples = oracle_examples(
        cfg.env, env_config, cs.episodes, cs.seed, prefix=prefix, roles=cs.role_episodes()
    )
    assert examples_hash(examples) == card["data_sha256"] and len(examples) == card["examples"]
    assert card["command"] == sft_command(card["env"], cfg.policy.model, env_config, cs)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("where", SHIPPED_DIRS, ids=lambda p: p.name)
def test_the_command_reproduces_the_first_steps_losses(where: Path, tmp_path: Path):
    """Two optimizer steps of the recorded command (about 3 minutes on 2 cores) log the card's
    first two losses within 3% (the first is the base model's loss on the examples, the second
    follows one update; bfloat16 autocast and thread counts move the last digits)."""
    pytest.importorskip("trl")
    from adapters.policies.models import EmbeddedModelMissing

    card = json.loads((where / CARD).read_text())
    cfg, cs = _run_config(card)
    try:
        out = make_cold_start(cfg, cs, tmp_path / "cs", max_steps=2, progress=False)
    except EmbeddedModelMissing as exc:  # pragma: no cover - the embedded model ships with dev
        pytest.skip(f"embedded model not installed: {exc}")
    made = json.loads((out / CARD).read_text())
    assert made["data_sha256"] == card["data_sha256"]
    got = [entry["loss"] for entry in made["losses"]][:2]
    want = [entry["loss"] for entry in card["losses"]][:2]
    assert got == pytest.approx(want, rel=0.03), (got, want)
