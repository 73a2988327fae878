"""TRL's OpenEnv path (``environment_factory``) against a real server: the environment class on
its own, the project's tool template accepted by TRL, and ``GRPOTrainer`` steps on CPU, with a
tiny model (final plain answers) and with the embedded SmolLM2 calling the ``answer`` tool; the
rewards TRL logs must equal the env's, replayed in-process."""

from __future__ import annotations

import json
import os

import pytest

import envs
from adapters.integrations.tool_template import with_tool_calling
from adapters.integrations.trl_openenv import (
    _final_text,
    env_reward,
    environment_factory,
    openenv_dataset,
    tool_demonstrations,
)
from tests.integrations.conftest import flush

CONFIG = {"mode": "single", "max_turns": 1, "height": 4, "width": 4}  # the server's config
MULTI = {"mode": "multi", "max_turns": 2}  # sent with reset by the class test
MARSRL = "solver_verifier_corrector"  # short prompts and answers: one-digit arithmetic on CPU
MARSRL_CONFIG = dict(envs.spec(MARSRL).cpu_options)


@pytest.fixture(scope="module")
def server(server_factory):
    args = ["--env", "plan_path", "--max-sessions", "16"]
    for k, v in CONFIG.items():
        args += ["--env-config", f"{k}={json.dumps(v)}"]
    return server_factory({"plan_path": ("adapters.serve_env", *args)})["plan_path"]


@pytest.fixture(scope="module")
def marsrl_server(server_factory):
    args = ["--env", MARSRL, "--max-sessions", "8"]
    for k, v in MARSRL_CONFIG.items():
        args += ["--env-config", f"{k}={json.dumps(v)}"]
    return server_factory({MARSRL: ("adapters.serve_env", *args)})[MARSRL]


def _replay(
    seed: int, split: str, actions: list[dict], env_id: str = "plan_path", **over
) -> dict[str, float]:
    raw = envs.make(env_id, **{**(CONFIG if env_id == "plan_path" else {}), **over}).unwrapped
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
    assert prompt == "\n\n" + twin.observe("tool")["prompt"]  # set off from the instruction
    alone = cls().reset(prompt=[{"role": "user", "content": ""}], seed=5, split="val")
    assert alone == twin.observe("tool")["prompt"]  # fills an empty message as it is
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


def _grpo(tmp_path, model, tok, url: str, dataset, **options) -> tuple[list[dict], list[list]]:
    """Two GRPO steps through the server at ``url``; what TRL logged per step, and each step's
    rollouts as ``(reset arguments, actions the server received, reward)``."""
    pytest.importorskip("trl")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    scored: list[list] = []

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
        num_generations=2,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        gradient_checkpointing=False,  # recomputing activations costs time and saves no CPU memory
        seed=0,
        **options,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        args=args,
        train_dataset=dataset,
        reward_funcs=reward,
        environment_factory=environment_factory(url),
    )
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(scored) == len(logged) == 2  # one generation batch per step
    return logged, scored


def _check_rewards(logged: list[dict], scored: list[list], env_id: str, **config) -> None:
    """Each step's logged mean reward is its rollouts', and each rollout's reward is the episode
    replayed in-process from the actions the server received."""
    for batch, h in zip(scored, logged, strict=True):
        rewards = [r for _, _, r in batch]
        assert h["rewards/reward/mean"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
        for episode, actions, r in batch:
            returns = _replay(episode["seed"], episode["split"], actions, env_id, **config)
            assert r == pytest.approx(sum(returns.values()) / len(returns))


@pytest.mark.slow
def test_grpo_trainer_trains_through_the_server(server, tmp_path):
    from tests.adapters.integrations.test_trl_adapter import _bigram_llama

    model, tok = _bigram_llama()  # tiny_model() rewired to answer "#### [R]", "#### [U]" or "hello"
    tok = with_tool_calling(tok)  # TRL's tools need a tool-calling template: the project's
    logged, scored = _grpo(
        tmp_path,
        model,
        tok,
        server.url,
        openenv_dataset(4, seed=100),
        per_device_train_batch_size=4,
        max_completion_length=16,
        learning_rate=1e-2,
    )
    _check_rewards(logged, scored, "plan_path")
    for batch in scored:
        for _, actions, _ in batch:  # the model answers in plain text: submitted as final
            assert [(a["agent"], a["via"]) for a in actions] == [("planner", "final")]
    spread = sum(len({r for _, _, r in batch}) > 1 for batch in scored)
    assert spread > 0  # the rewards differ, so GRPO got a signal from the server's rewards


def answer(text: str) -> str:
    """Submit your complete answer to the current task as the role that acts now.

    Args:
        text: Your complete answer, in the format the task asks for.
    """
    return text


def test_the_embedded_tokenizer_gets_a_tool_template_trl_accepts():
    """SmolLM2's own template renders no tools (TRL refuses it); with the project's ChatML tool
    template TRL's checks pass, its parser reads a ``<tool_call>`` as the call, and a plain
    reply as content; a tokenizer without ChatML tokens is refused clearly."""
    from trl.chat_template_utils import (
        is_chat_template_prefix_preserving,
        parse_response,
        supports_tool_calling,
    )

    from adapters.policies.models import load_tokenizer

    tok = load_tokenizer("smollm2")
    assert not supports_tool_calling(tok)
    tok = with_tool_calling(tok)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    assert with_tool_calling(tok) is tok and tok.chat_template is not None
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Go."}],
        tools=[answer],
        add_generation_prompt=True,
        return_dict=False,
    )
    rendered = tok.decode(prompt)
    assert '"name": "answer"' in rendered and rendered.endswith("<|im_start|>assistant\n")
    call = (
        '<tool_call>\n{"name": "answer", "arguments": {"text": "#### [U]"}}\n</tool_call><|im_end|>'
    )
    ids = tok(call, add_special_tokens=False)["input_ids"]
    parsed = parse_response(tok, ids, prefix=list(prompt), tools=[answer])
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "answer", "arguments": {"text": "#### [U]"}}}
    ]
    plain = parse_response(tok, tok("#### [U]<|im_end|>")["input_ids"], prefix=list(prompt))
    assert plain["content"] == "#### [U]" and not plain.get("tool_calls")

    class NotChatML:
        chat_template = None

        def get_vocab(self):
            return {"<s>": 0}

    with pytest.raises(ValueError, match="fits ChatML models"):
        with_tool_calling(NotChatML())


def test_tool_demonstrations_show_the_oracle_through_the_tool():
    demos = tool_demonstrations("plan_path", CONFIG, n=2, seed=3)
    assert [m["role"] for m in demos] == ["user", "assistant", "tool"] * 2
    call = demos[1]["tool_calls"][0]["function"]
    assert call["name"] == "answer" and "####" in call["arguments"]["text"]
    assert demos[0]["content"] != demos[3]["content"]  # two different train instances
    rows = openenv_dataset(2, demonstrations=demos)
    prompt = rows["prompt"][0]  # datasets fills absent keys with None, which templates ignore
    assert [m["role"] for m in prompt] == ["system"] + ["user", "assistant", "tool"] * 2 + ["user"]
    assert prompt[2]["tool_calls"] == demos[1]["tool_calls"] and prompt[-1]["content"] == ""
    every = tool_demonstrations(MARSRL, MARSRL_CONFIG, n=1)  # the roles the oracle's episode had
    solver = tool_demonstrations(MARSRL, MARSRL_CONFIG, n=1, roles=["solver"])
    assert len(every) > 3 and solver == every[:3]


@pytest.mark.slow
def test_grpo_with_the_embedded_model_calls_the_answer_tool(marsrl_server, tmp_path):
    """TRL's ``environment_factory`` path with SmolLM2-135M-Instruct (the model this machine
    has), on MarsRL's CPU setting: its tokenizer given the project's tool template, one solved
    solver's turn shown before the task, nearly greedy sampling. In two GRPO steps the model calls
    ``answer`` (TRL's ``tools/call_frequency`` > 0, and the server received the call's text),
    and every reward TRL logged is the server's, replayed in-process."""
    from adapters.policies.models import load_policy_model

    model, tok = load_policy_model("smollm2", dtype="float32")
    demos = tool_demonstrations(MARSRL, MARSRL_CONFIG, n=1, seed=0, roles=["solver"])
    logged, scored = _grpo(
        tmp_path,
        model,
        with_tool_calling(tok),
        marsrl_server.url,
        openenv_dataset(2, seed=100, demonstrations=demos),
        per_device_train_batch_size=2,
        max_completion_length=48,
        max_tool_calling_iterations=1,
        temperature=0.2,
        learning_rate=1e-6,
    )
    frequency = [h["tools/call_frequency"] for h in logged]
    via_tool = [a for batch in scored for _, acts, _ in batch for a in acts if a["via"] == "tool"]
    print(f"[trl] call frequency per step {frequency}; {len(via_tool)} answers through the tool")
    assert sum(frequency) > 0 and via_tool
    _check_rewards(logged, scored, MARSRL, **MARSRL_CONFIG)
