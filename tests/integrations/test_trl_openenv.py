"""TRL's OpenEnv path (``environment_factory``) against a real server: the environment class on
its own, and ``GRPOTrainer`` steps on CPU with a tiny model whose rewards must equal the env's."""

from __future__ import annotations

import json
import os

import pytest

import envs
from adapters.integrations.trl_openenv import (
    _final_text,
    env_reward,
    environment_factory,
    openenv_dataset,
)
from tests.integrations.conftest import flush

CONFIG = {"mode": "single", "max_turns": 1, "height": 4, "width": 4}  # the server's config
MULTI = {"mode": "multi", "max_turns": 2}  # sent with reset by the class test


@pytest.fixture(scope="module")
def server(server_factory):
    args = ["--env", "plan_path", "--max-sessions", "16"]
    for k, v in CONFIG.items():
        args += ["--env-config", f"{k}={json.dumps(v)}"]
    return server_factory({"plan_path": ("adapters.serve_env", *args)})["plan_path"]


def _replay(seed: int, split: str, actions: list[dict], **over) -> dict[str, float]:
    raw = envs.make("plan_path", **{**CONFIG, **over}).unwrapped
    raw.reset(seed=seed, options={"split": split})
    returns = dict.fromkeys(raw.possible_agents, 0.0)
    for a in actions:
        assert raw.agent_selection == a["agent"]
        raw.step(a["text"])
        for k, r in raw.rewards.items():
            returns[k] += r
        flush(raw)
    return returns


def test_environment_class_plays_episodes_through_the_tool(server):
    cls = environment_factory(server.url, config=MULTI)
    env = cls()
    twin = envs.make("plan_path", **{**CONFIG, **MULTI}).unwrapped
    prompt = env.reset(prompt=[{"role": "user", "content": "x"}], seed=5, split="val")
    twin.reset(seed=5, options={"split": "val"})
    assert prompt.strip() == twin.observe("tool")["prompt"]
    while not env.done:
        agent = twin.agent_selection
        reply = env.answer(text=twin.oracle(agent))
        twin.step(twin.oracle(agent))
        flush(twin)
        if twin.agents:
            assert reply == twin.observe(twin.agent_selection)["prompt"]
    assert "episode is over (success: True)" in reply and env.success
    with pytest.raises(ValueError, match="episode is over"):
        env.answer(text="again")
    assert [a["agent"] for a in env.actions] == ["tool", "planner"] * (len(env.actions) // 2)
    assert env.returns == _replay(5, "val", env.actions, **MULTI)
    assert env_reward(completions=[[]], environments=[env]) == [
        sum(env.returns.values()) / len(env.returns)
    ]
    rows = openenv_dataset(3, seed=7, split="val")
    assert rows["seed"] == [7, 8, 9] and rows["split"] == ["val"] * 3
    assert _final_text([{"role": "assistant", "content": "hi"}]) == "hi"
    assert _final_text([{"role": "assistant", "content": "", "tool_calls": [{}]}]) is None
    with pytest.raises(ValueError, match="reward_mode"):
        environment_factory(server.url, reward_mode="max")


@pytest.mark.slow
def test_grpo_trainer_trains_through_the_server(server, tmp_path):
    pytest.importorskip("trl")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl.chat_template_utils as ctu
    from trl import GRPOConfig, GRPOTrainer

    from tests.adapters.test_trl_adapter import _bigram_llama

    model, tok = _bigram_llama()  # tiny_model() rewired to answer "#### [R]", "#### [U]" or "hello"
    tok.chat_template = ctu.qwen2_5_chat_template  # TRL's tools need a tool-calling template
    scored = []

    def reward(prompts, completions, environments, **kwargs):
        rewards = env_reward(prompts, completions, environments, **kwargs)
        scored.append(
            [(dict(e.episode), list(e.actions), r) for e, r in zip(environments, rewards)]
        )
        return rewards

    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=16,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        args=args,
        train_dataset=openenv_dataset(4, seed=100),
        reward_funcs=reward,
        environment_factory=environment_factory(server.url),
    )
    trainer.train()

    assert len(scored) == 2  # one generation batch per step
    logged = [h["rewards/reward/mean"] for h in trainer.state.log_history if "loss" in h]
    spread = 0
    for batch, mean in zip(scored, logged, strict=True):
        rewards = [r for _, _, r in batch]
        assert mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
        for episode, actions, r in batch:
            assert len(actions) == 1 and actions[0]["agent"] == "planner"  # the final plain answer
            returns = _replay(episode["seed"], episode["split"], actions)
            assert r == pytest.approx(sum(returns.values()) / len(returns))
        spread += len(set(rewards)) > 1
    assert spread > 0  # the rewards differ, so GRPO got a signal from the server's rewards
