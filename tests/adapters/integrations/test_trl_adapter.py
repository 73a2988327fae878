"""TRL adapter: datasets of episodes, the multi-agent rollout function, and real GRPOTrainer steps.

The fast tests drive ``rollout_func`` with a stand-in trainer (scripted generation, the char
tokenizer); the slow test trains a tiny Llama with ``trl.GRPOTrainer`` for two steps on CPU.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

import envs
from adapters.integrations import trl as ta
from adapters.rollout import flush_dead_steps

from ..conftest import make_char_tokenizer

PLAN = {"mode": "multi", "max_turns": 2, "height": 4, "width": 4}
EOS_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<eos>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class ScriptedTrainer:
    """What rollout_func uses of a GRPOTrainer, with generation replaced by ``script(context)``."""

    def __init__(self, tok, script, logprobs=False, max_completion_length=32, eos=True):
        self.processing_class = tok
        self.chat_template = None
        self.chat_template_kwargs = {}
        self.eos_token_ids = [tok.eos_token_id]
        self.max_completion_length = max_completion_length
        self.accelerator = SimpleNamespace(num_processes=1)
        self.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=1_000_000))
        self.script, self.logprobs, self.eos = script, logprobs, eos
        self.batches = []

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations):
        assert images is None and multimodal_fields == {} and num_generations == 1
        self.batches.append([list(p) for p in prompt_ids])
        tok = self.processing_class
        out = []
        for ids in prompt_ids:
            text = self.script(tok.decode(ids, skip_special_tokens=False))
            ids = tok.encode(text, add_special_tokens=False)[: self.max_completion_length]
            if self.eos and len(ids) < self.max_completion_length:
                ids.append(tok.eos_token_id)
            out.append(ids)
        lps = [[-0.5] * len(ids) for ids in out] if self.logprobs else None
        return out, lps


def _replay(env_id, config, seed, actions, reward_mode="mean"):
    """Play ``actions`` in a fresh env: (episode reward, success, returns)."""
    raw = envs.make(env_id, **config).unwrapped
    raw.reset(seed=seed, options={"split": "train"})
    returns = {a: 0.0 for a in raw.possible_agents}
    flush_dead_steps(raw)
    for act in actions:
        assert raw.agent_selection == act["agent"]
        raw.step(act["text"])
        for a, r in raw.rewards.items():
            returns[a] += r
        flush_dead_steps(raw)
    assert not raw.agents, "the rollout stopped before the episode ended"
    return ta._episode_reward(raw, returns, reward_mode), bool(raw.success), returns


def _segments(ids, mask):
    """Maximal runs of equal mask value: [(mask, ids), ...]."""
    out = []
    for t, m in zip(ids, mask, strict=True):
        if out and out[-1][0] == m:
            out[-1][1].append(t)
        else:
            out.append((m, [t]))
    return out


@pytest.fixture(scope="module")
def tok():
    return make_char_tokenizer()


# ------------------------------------------------------------------------------ dataset


def test_env_dataset_rows_name_reproducible_episodes():
    ds = ta.env_dataset("plan_path", 3, seed=5, **PLAN)
    assert len(ds) == 3 and set(ds.column_names) >= {"prompt", "seed", "split", "env_id"}
    assert ds[:]["seed"] == [ta.episode_seed(5, i) for i in range(3)]
    assert len(set(ds["instance_id"])) == 3
    for row in ds:
        (message,) = row["prompt"]
        key = json.loads(message[ta.EPISODE_KEY])
        assert key == {"env_id": "plan_path", "seed": row["seed"], "split": "train"}
        raw = envs.make("plan_path", **PLAN).unwrapped
        raw.reset(seed=row["seed"], options={"split": "train"})
        assert message["role"] == "user" and row["agent"] == raw.agent_selection == "tool"
        assert message["content"] == raw.observe("tool")["prompt"]
    again = ta.env_dataset("plan_path", 3, seed=5, **PLAN)
    assert again["prompt"] == ds["prompt"]
    assert ta.env_dataset("plan_path", 3, seed=6, **PLAN)["seed"] != ds["seed"]
    with pytest.raises(ValueError, match="positive int"):
        ta.env_dataset("plan_path", 0)
    with pytest.raises(ValueError, match="unknown env id"):
        ta.env_dataset("plan_pat", 1)


# ------------------------------------------------------------------------------ rollout


def test_rollout_plays_whole_multi_agent_episodes(tok):
    ds = ta.env_dataset("plan_path", 2, **PLAN)
    prompts = [p for p in ds["prompt"] for _ in range(3)]  # TRL repeats rows num_generations times
    answers = iter(["#### [R]", "no idea", "#### [U]", "#### [D, L]"] * 20)
    trainer = ScriptedTrainer(tok, lambda ctx: next(answers))
    out = ta.make_rollout_func("plan_path", **PLAN)(prompts, trainer)

    n = len(prompts)
    for key in ("prompt_ids", "completion_ids", "env_mask", "episode_reward", "episode_actions"):
        assert len(out[key]) == n
    assert out["logprobs"] is None  # the backend gave none, as TRL's transformers path
    assert trainer.batches[0] == out["prompt_ids"]  # the first turn is generated from the prompt
    for i in range(n):
        seed = json.loads(prompts[i][0][ta.EPISODE_KEY])["seed"]
        ids, mask, actions = out["completion_ids"][i], out["env_mask"][i], out["episode_actions"][i]
        assert len(ids) == len(mask)
        # tool, planner, tool, planner (nobody reaches the goal with these answers in 2 turns)
        assert [a["agent"] for a in actions] == ["tool", "planner"] * 2
        assert out["episode_steps"][i] == 4 and out["episode_cut"][i] is False
        segs = _segments(ids, mask)
        assert [m for m, _ in segs] == [1, 0, 1, 0, 1, 0, 1]
        model_texts = [tok.decode(s, skip_special_tokens=True) for m, s in segs if m == 1]
        assert model_texts == [a["text"] for a in actions]
        assert all(s[-1] == tok.eos_token_id for m, s in segs if m == 1)
        # each env segment opens a user turn holding the next acting agent's observation
        env_texts = [tok.decode(s) for m, s in segs if m == 0]
        assert all(t.startswith("<|user|>") and t.endswith("<|assistant|>") for t in env_texts)
        assert "You are the planner" in env_texts[0] and "You are the tool agent" in env_texts[1]
        reward, success, returns = _replay("plan_path", PLAN, seed, actions)
        assert out["episode_reward"][i] == pytest.approx(reward)
        assert out["episode_returns"][i] == pytest.approx(returns)
        assert out["episode_success"][i] == success
        assert reward == pytest.approx(sum(returns.values()) / 2)
    # the three copies of a row are independent episodes of the same instance
    assert out["episode_actions"][0] != out["episode_actions"][1]
    prompt_of = [tok.decode(p) for p in out["prompt_ids"]]
    assert prompt_of[0] == prompt_of[1] == prompt_of[2] != prompt_of[3]


def test_logprobs_are_kept_with_zeros_on_env_tokens(tok):
    ds = ta.env_dataset("plan_path", 1, **PLAN)
    trainer = ScriptedTrainer(tok, lambda ctx: "#### [R]", logprobs=True)
    out = ta.make_rollout_func("plan_path", **PLAN)(ds["prompt"], trainer)
    (lps,), (mask,) = out["logprobs"], out["env_mask"]
    assert len(lps) == len(mask) and 0 in mask
    assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(lps, mask, strict=True))


def test_eos_is_inserted_when_a_turn_is_cut_and_the_template_closes_with_it():
    tok = make_char_tokenizer()
    tok.chat_template = EOS_TEMPLATE
    ds = ta.env_dataset("plan_path", 1, **PLAN)
    trainer = ScriptedTrainer(tok, lambda ctx: "#### [R] and more text", max_completion_length=8)
    out = ta.make_rollout_func("plan_path", **PLAN)(ds["prompt"], trainer)
    segs = _segments(out["completion_ids"][0], out["env_mask"][0])
    assert [len(s) for m, s in segs if m == 1] == [8, 8, 8, 8]  # every turn cut at 8 tokens
    for m, s in segs:
        if m == 0:  # the env closes the cut assistant turn with EOS, then opens a user turn
            assert s[0] == tok.eos_token_id and tok.decode(s[1:]).startswith("\n<|user|>")
    assert out["episode_actions"][0][0]["text"] == "#### [R]"


def test_oracle_episodes_end_early_with_success(tok):
    config = {"mode": "single", "max_turns": 3, "height": 4, "width": 4}
    ds = ta.env_dataset("plan_path", 3, seed=1, **config)
    oracle = {}
    for seed in ds["seed"]:
        raw = envs.make("plan_path", **config).unwrapped
        raw.reset(seed=seed, options={"split": "train"})
        oracle[raw.observe("planner")["prompt"]] = raw.oracle("planner")

    def script(ctx):
        return next(ans for obs, ans in oracle.items() if obs in ctx)

    trainer = ScriptedTrainer(tok, script, max_completion_length=200)
    out = ta.make_rollout_func("plan_path", reward_mode="success", **config)(ds["prompt"], trainer)
    assert out["episode_success"] == [True] * 3 and out["episode_reward"] == [1.0] * 3
    assert out["episode_steps"] == [1] * 3 and all(m == [1] * len(m) for m in out["env_mask"])
    mean = ta.make_rollout_func("plan_path", **config)(ds["prompt"], trainer)["episode_reward"]
    assert all(r > 0.9 for r in mean)  # fmt + legal + shortest, and the team reward at the goal


def test_several_processes_generate_full_batches_until_every_rank_is_done(tok):
    pytest.importorskip("torch")
    config = {"mode": "single", "max_turns": 3, "height": 4, "width": 4}
    ds = ta.env_dataset("plan_path", 2, seed=1, **config)
    raw = envs.make("plan_path", **config).unwrapped
    raw.reset(seed=ds["seed"][0], options={"split": "train"})
    first_obs, first_answer = raw.observe("planner")["prompt"], raw.oracle("planner")

    def script(ctx):  # row 0 solves its task at once, row 1 plays all 3 turns
        return first_answer if first_obs in ctx else "no idea"

    rf = ta.make_rollout_func("plan_path", **config)
    alone = ScriptedTrainer(tok, script, max_completion_length=200)
    ranked = ScriptedTrainer(tok, script, max_completion_length=200)
    ranked.accelerator = SimpleNamespace(num_processes=2, device="cpu", gather=lambda t: t * 2)
    out1, out2 = rf(ds["prompt"], alone), rf(ds["prompt"], ranked)
    assert out1["episode_steps"] == out2["episode_steps"] == [1, 3]
    assert [len(b) for b in alone.batches] == [2, 1, 1]  # finished rows leave the batch
    assert [len(b) for b in ranked.batches] == [2, 2, 2]  # ... unless generation is collective
    for key in ("completion_ids", "env_mask", "episode_reward", "episode_actions"):
        assert out1[key] == out2[key]


def test_token_budget_cuts_the_episode(tok):
    ds = ta.env_dataset("plan_path", 2, **PLAN)
    trainer = ScriptedTrainer(tok, lambda ctx: "#### [R]")
    first = ta.make_rollout_func("plan_path", **PLAN)(ds["prompt"], trainer)
    budget = len(_segments(first["completion_ids"][0], first["env_mask"][0])[0][1]) + 5
    cut = ta.make_rollout_func("plan_path", max_episode_tokens=budget, **PLAN)
    out = cut(ds["prompt"], ScriptedTrainer(tok, lambda ctx: "#### [R]"))
    assert out["episode_cut"] == [True, True] and out["episode_steps"] == [1, 1]
    assert all(
        len(c) <= budget and set(m) == {1} for c, m in zip(out["completion_ids"], out["env_mask"])
    )
    tool_only = [r["tool"] for r in out["episode_returns"]]
    assert out["episode_reward"] == pytest.approx([r / 2 for r in tool_only])
    # the model's context stops an episode too (after the first turn, which is always played)
    small = ScriptedTrainer(tok, lambda ctx: "#### [R]")
    small.model.config.max_position_embeddings = len(first["prompt_ids"][0]) + 40
    out = ta.make_rollout_func("plan_path", **PLAN)(ds["prompt"], small)
    assert out["episode_cut"] == [True, True] and out["episode_steps"] == [1, 1]
    assert all(set(m) == {1} for m in out["env_mask"])  # no dangling env tokens


def test_reward_modes_and_reward_functions(tok):
    ds = ta.env_dataset("plan_path", 2, **PLAN)
    outs = {}
    for mode in ("mean", "sum", "success"):
        rf = ta.make_rollout_func("plan_path", reward_mode=mode, **PLAN)
        outs[mode] = rf(ds["prompt"], ScriptedTrainer(tok, lambda ctx: "#### [R]"))
    custom = ta.make_rollout_func("plan_path", reward_mode=lambda raw, ret: ret["planner"], **PLAN)
    outs["custom"] = custom(ds["prompt"], ScriptedTrainer(tok, lambda ctx: "#### [R]"))
    for i in range(2):
        returns = outs["mean"]["episode_returns"][i]
        assert outs["sum"]["episode_reward"][i] == pytest.approx(sum(returns.values()))
        assert outs["mean"]["episode_reward"][i] == pytest.approx(sum(returns.values()) / 2)
        assert outs["custom"]["episode_reward"][i] == pytest.approx(returns["planner"])
        assert outs["success"]["episode_reward"][i] == float(outs["mean"]["episode_success"][i])
    logged = {}
    out = outs["mean"]
    fields = {k: v for k, v in out.items() if k.startswith("episode_")}
    rewards = ta.env_reward([], [], log_metric=logged.__setitem__, **fields)
    assert rewards == out["episode_reward"] and set(logged) == {"env/success", "env/cut"}
    assert ta.env_success([], [], **fields) == [float(s) for s in out["episode_success"]]
    with pytest.raises(ValueError, match="rollout_func=make_rollout_func"):
        ta.env_reward(["p"], ["c"], seed=[0])


def test_misuse_raises_clear_errors(tok):
    ds = ta.env_dataset("plan_path", 1, **PLAN)
    trainer = ScriptedTrainer(tok, lambda ctx: "x")
    other = {**PLAN, "height": 5}
    with pytest.raises(ValueError, match="same env config"):
        ta.make_rollout_func("plan_path", **other)(ds["prompt"], trainer)
    plain = [[{"role": "user", "content": "hello"}]]
    with pytest.raises(ValueError, match="env_dataset"):
        ta.make_rollout_func("plan_path", **PLAN)(plain, trainer)
    with pytest.raises(ValueError, match="reached the 'sokoban' rollout"):
        ta.make_rollout_func("sokoban")(ds["prompt"], trainer)
    with pytest.raises(ValueError, match="reward_mode"):
        ta.make_rollout_func("plan_path", reward_mode="best")
    with pytest.raises(ValueError, match="max_episode_tokens"):
        ta.make_rollout_func("plan_path", max_episode_tokens=0)
    with pytest.raises(TypeError, match="_generate_single_turn"):
        ta.make_rollout_func("plan_path", **PLAN)(ds["prompt"], SimpleNamespace(**vars(trainer)))


# ------------------------------------------------------------------------------ GRPOTrainer


def _bigram_llama():
    """tiny_model() rewired into a bigram sampler over a few SmolLM2 tokens: after the generation
    prompt ("\\n") it writes "#### [R]" / "#### [U]" (a well-formed plan_path answer) or "hello"
    (a format failure) with equal odds, so rewards within a group vary. Attention and MLP outputs
    start at zero (the residual stream is the token embedding); all weights stay trainable."""
    import torch

    from adapters.policies.models import tiny_model

    model, tok = tiny_model(seed=0, tie_word_embeddings=False)
    enc = {
        s: tok.encode(s, add_special_tokens=False) for s in ("\n", "#### [R]", "#### [U]", "hello")
    }
    nl, hello = enc["\n"][0], enc["hello"][0]
    hashes, bracket, r, close = enc["#### [R]"]
    u = enc["#### [U]"][2]
    eos = tok.eos_token_id
    table = {nl: [hashes, hello], hashes: [bracket], bracket: [r, u], r: [close], u: [close]}
    table.update({close: [eos], hello: [eos]})
    h = model.config.hidden_size
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        head.zero_()
        for k, (token, nexts) in enumerate(table.items()):
            emb[token].zero_()
            emb[token, k] = 1.0
            for nxt in nexts:  # the final RMSNorm scales the one-hot row to sqrt(h)
                head[nxt, k] = 20.0 / h**0.5
    return model, tok


@pytest.mark.slow
def test_grpo_trainer_trains_on_env_rewards(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    config = {"mode": "multi", "max_turns": 1, "height": 4, "width": 4}
    model, tok = _bigram_llama()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    rollout = ta.make_rollout_func("plan_path", **config)
    played, scored = [], []

    def recording_rollout(prompts, trainer):
        out = rollout(prompts, trainer)
        played.append((prompts, out))
        return out

    def env_reward(prompts, completions, **kwargs):
        rewards = ta.env_reward(prompts, completions, **kwargs)
        scored.append(rewards)
        return rewards

    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
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
        train_dataset=ta.env_dataset("plan_path", 4, **config),
        reward_funcs=env_reward,
        rollout_func=recording_rollout,
    )
    trainer.train()

    assert len(played) == len(scored) == 2  # one generation batch per step
    logged = [h["rewards/env_reward/mean"] for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2
    groups_with_spread = 0
    for (prompts, out), rewards, mean in zip(played, scored, logged, strict=True):
        assert rewards == out["episode_reward"]
        assert mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
        seeds = [json.loads(p[0][ta.EPISODE_KEY])["seed"] for p in prompts]
        assert seeds[0] == seeds[1] and seeds[2] == seeds[3]  # TRL's groups of num_generations
        groups_with_spread += (rewards[0] != rewards[1]) + (rewards[2] != rewards[3])
        for seed, actions, reward in zip(seeds, out["episode_actions"], rewards, strict=True):
            assert [a["agent"] for a in actions] == ["tool", "planner"]
            assert reward == pytest.approx(_replay("plan_path", config, seed, actions)[0])
    assert groups_with_spread > 0  # a non-zero advantage, so the update came from env rewards
    changed = [k for k, v in model.named_parameters() if not torch.equal(v.detach(), before[k])]
    assert "lm_head.weight" in changed and "model.embed_tokens.weight" in changed
