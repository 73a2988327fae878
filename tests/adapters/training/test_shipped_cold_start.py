"""The cold starts the project ships (``adapters/training/coldstarts/``) are what their recorded
command makes: the default CPU run of their setting finds them by its own key, their examples
are the oracle's (the data hash), and (slow) the command's first optimizer steps log the losses
the shipped card records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.training.coldstart import (
    CARD,
    SHIPPED,
    _run_view,
    cold_start_of,
    examples_hash,
    make_cold_start,
    oracle_examples,
    shipped_cold_start,
)
from adapters.training.config import TrainConfig

SHIPPED_DIRS = sorted(p for p in SHIPPED.iterdir() if (p / CARD).is_file())


def _run_config(card: dict) -> TrainConfig:
    """The default CPU run of the card's setting (the run whose cold start it is)."""
    cfg = TrainConfig(env=card["env"]).resolved(cuda=False)
    assert cfg.policy.init.startswith("cold-start"), cfg.policy.init
    return cfg


def test_something_is_shipped():
    assert [p.name.split("-")[0] for p in SHIPPED_DIRS] == ["sokoban"]


@pytest.mark.parametrize("where", SHIPPED_DIRS, ids=lambda p: p.name)
def test_the_default_run_finds_it_and_its_data_is_the_oracles(where: Path):
    card = json.loads((where / CARD).read_text())
    cfg = _run_config(card)
    cs = cold_start_of(cfg)
    assert shipped_cold_start(cfg, cs) == where
    env_config, prefix = _run_view(cfg)
    assert (card["env_config"], card["prompt_prefix"], card["model"]) == (
        env_config,
        prefix,
        cfg.policy.model,
    )
    examples = oracle_examples(
        cfg.env, env_config, cs.episodes, cs.seed, prefix=prefix, roles=cs.role_episodes()
    )
    assert examples_hash(examples) == card["data_sha256"] and len(examples) == card["examples"]
    assert card["command"].startswith(f"python -m adapters.sft --env {card['env']} ")
    assert f"--episodes {cs.episodes} " in card["command"]
    assert f"--roles {','.join(cs.roles or ())} " in card["command"]


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
    cfg = _run_config(card)
    try:
        out = make_cold_start(cfg, cold_start_of(cfg), tmp_path / "cs", max_steps=2, progress=False)
    except EmbeddedModelMissing as exc:  # pragma: no cover - the embedded model ships with dev
        pytest.skip(f"embedded model not installed: {exc}")
    made = json.loads((out / CARD).read_text())
    assert made["data_sha256"] == card["data_sha256"]
    got = [entry["loss"] for entry in made["losses"]][:2]
    want = [entry["loss"] for entry in card["losses"]][:2]
    assert got == pytest.approx(want, rel=0.03), (got, want)
