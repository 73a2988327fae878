"""TRL adapter: train any setting with TRL's ``GRPOTrainer`` through its ``rollout_func`` hook.

One model plays every role (role sharing). Each dataset row names one episode; for every row TRL
hands over, the rollout function plays the *whole* multi-agent episode with the model being
trained writing every agent's turn, and returns it as one GRPO sample whose reward is the env's::

    from trl import GRPOConfig, GRPOTrainer
    from adapters.integrations.trl import env_dataset, env_reward, make_rollout_func

    cfg = {"mode": "multi", "max_turns": 2}
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=GRPOConfig(output_dir="runs/trl", num_generations=4, max_completion_length=256),
        train_dataset=env_dataset("plan_path", 256, **cfg),
        reward_funcs=env_reward,
        rollout_func=make_rollout_func("plan_path", max_episode_tokens=2048, **cfg),
    )
    trainer.train()

Dataset
-------
:func:`env_dataset` returns rows ``{"prompt", "env_id", "seed", "split", "instance_id", "agent"}``.
``prompt`` is ``[{"role": "user", "content": <first agent's initial observation>,
"mas_episode": <JSON {"env_id", "seed", "split"}>}]``: TRL passes the rollout function *only the
prompts* (``self.rollout_func(prompts, self)``), so the reset seed travels inside the message
(chat templates ignore the extra key); that ``env_id`` is data, so it resolves only against
settings already registered and imports nothing (:func:`envs.registered_spec`). Row ``i`` resets
with seed ``seed * 1_000_003 + i``. A system message may be prepended to the prompts
(``dataset.map``); it is kept.

One sample = one episode
------------------------
``prompt_ids`` is the chat-templated dataset prompt (the first observation, with TRL's
``chat_template`` / ``chat_template_kwargs``). ``completion_ids`` is the rest of the transcript:
the model's tokens of turn 1, then the env's tokens (the chat-template glue that closes the
assistant turn and opens a user message holding the next acting agent's observation, plus the
generation prompt), the model's tokens of turn 2, and so on. Each turn is generated from the
whole transcript so far (exactly the context TRL's loss forward pass sees). ``env_mask`` is 1 on
the model's tokens, 0 on the env's; TRL multiplies it into the loss mask. ``logprobs`` carries the
sampling log-probs when the backend gives them (vLLM), with 0.0 on env tokens (TRL's own tool loop
does the same), and is ``None`` otherwise (TRL's own transformers path returns ``None`` too).
The env's glue tokens are found the way TRL finds tool-result tokens: render a dummy
``[user, assistant]`` conversation with and without the new user message and keep the difference
(the prefix cut after its last EOS). A model turn that did not end with EOS (cut at
``max_completion_length``) gets the EOS inserted as an env token when the template closes
assistant turns with it.

Generation goes through ``trainer._generate_single_turn(ids, None, {}, num_generations=1)``, the
helper TRL 1.16's own multi-turn tool loop calls: it honours ``use_vllm`` (server or colocate),
``use_transformers_continuous_batching`` and plain ``generate`` with the trainer's sampling settings
(temperature, top-p/k, ``max_completion_length`` tokens per turn).

Groups
------
TRL repeats every row ``num_generations`` times before calling the rollout function (the
``RepeatSampler``) and groups outputs by position. Each row is played as its own episode (own env,
own sampled tokens) and outputs keep the row order, so the ``num_generations`` episodes of a group
are independent samples of the same instance. They share the reset seed, hence also any env-side
randomness drawn from it (e.g. a random speaker order): the first observation, which is the
group's shared prompt, may depend on it.

Rewards
-------
Extra output fields (forwarded by TRL to reward functions, one value per sample):
``episode_reward`` (float), ``episode_success`` (bool, ``raw.success`` at the end),
``episode_returns`` (agent -> sum of that agent's step rewards, delayed awards included),
``episode_steps`` (model turns played), ``episode_cut`` (True when the token budget or the model
context stopped the episode before the env ended it) and ``episode_actions``
(``[{"agent", "text"}]``, the texts the env received). ``reward_mode`` sets ``episode_reward``:
``"mean"`` (default) the mean over the setting's agents of their returns, ``"sum"`` their sum,
``"success"`` 1.0/0.0, or a callable ``f(raw_env, returns) -> float``. :func:`env_reward` returns
``episode_reward`` (logged by TRL as ``rewards/env_reward/mean``); :func:`env_success` returns
success as 0/1.

Budget: ``max_episode_tokens`` caps ``len(completion_ids)`` (model + env tokens); when the next
turn would not fit, the episode stops there (``episode_cut``) and its reward covers the steps
played. ``None`` (default) leaves only the model's context (``max_position_embeddings``, and
``vllm_max_model_length``) as the limit.

Limitations: one scalar advantage per episode (no per-turn credit; ``adapters.rollout`` does
per-turn AT-GRPO groups); do not combine with TRL ``tools``/``environment_factory`` (TRL ignores
``env_mask`` then); text-only tokenizers. With several processes every rank generates for all of
its rows each round until no rank has a live episode (generation calls are collective).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from adapters.rollout.envpool import flush_dead_steps

__all__ = [
    "EPISODE_KEY",
    "REWARD_MODES",
    "env_dataset",
    "env_reward",
    "env_success",
    "episode_seed",
    "make_rollout_func",
]

EPISODE_KEY = "mas_episode"
REWARD_MODES = ("mean", "sum", "success")
_DUMMY = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


def episode_seed(seed: int, index: int) -> int:
    """The reset seed of row ``index`` of ``env_dataset(..., seed=seed)``."""
    return (int(seed) * 1_000_003 + int(index)) % 2**63


def _canonical_id(env_id: str) -> str:
    import envs

    return envs.spec(env_id).id


def _registered_id(env_id: Any) -> str:
    """The canonical id of an id read from a prompt (data): registered settings only, nothing
    imported (:func:`envs.registered_spec`)."""
    import envs

    return envs.registered_spec(env_id).id


def _build_env(env_id: str, env_config: dict[str, Any], shared: dict[str, Any]) -> Any:
    import envs

    return envs.make(env_id, **env_config, **shared)


def _shared_objects(env_id: str, env_config: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(run-wide shared objects of the setting, a raw env built with them)."""
    import envs

    raw_cls = type(envs.make(env_id, **env_config).unwrapped)
    shared = dict(raw_cls.create_shared(**env_config))
    return shared, _build_env(env_id, env_config, shared).unwrapped


def env_dataset(env_id: str, n: int, split: str = "train", seed: int = 0, **env_config: Any):
    """A ``datasets.Dataset`` of ``n`` episodes of ``env_id`` for :class:`trl.GRPOTrainer`.

    See the module docstring for the row layout. ``env_config`` goes to ``envs.make`` and must
    match the ``make_rollout_func`` configuration (the rollout checks the first observation).
    """
    import datasets

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    canonical = _canonical_id(env_id)
    _, raw = _shared_objects(env_id, env_config)
    rows = []
    for i in range(n):
        s = episode_seed(seed, i)
        raw.reset(seed=s, options={"split": split})
        flush_dead_steps(raw)
        if not raw.agents:
            raise RuntimeError(f"{canonical} episode with seed {s} ended before any agent acted")
        agent = raw.agent_selection
        key = json.dumps({"env_id": canonical, "seed": s, "split": split})
        message = {"role": "user", "content": raw.observe(agent)["prompt"], EPISODE_KEY: key}
        rows.append(
            {
                "prompt": [message],
                "env_id": canonical,
                "seed": s,
                "split": split,
                "instance_id": raw.instance_id,
                "agent": agent,
            }
        )
    raw.close()
    return datasets.Dataset.from_list(rows)


# ------------------------------------------------------------------------------------------
# reward functions (TRL calls them with prompts=, completions=, completion_ids= and every
# dataset column / rollout extra field as keyword lists)


def _field(kwargs: dict[str, Any], name: str) -> list[Any]:
    if name not in kwargs:
        raise ValueError(
            f"reward function needs the {name!r} field; pass rollout_func=make_rollout_func(...) "
            "to GRPOTrainer so the env plays the episodes"
        )
    return list(kwargs[name])


def env_reward(prompts: Sequence[Any] | None = None, completions: Any = None, **kwargs: Any):
    """TRL reward function: the env's episode reward (``episode_reward``) of every sample.

    Also logs ``env/success`` and ``env/cut`` through TRL's ``log_metric`` when available.
    """
    rewards = [float(r) for r in _field(kwargs, "episode_reward")]
    log_metric = kwargs.get("log_metric")
    if callable(log_metric) and rewards:
        success = _field(kwargs, "episode_success")
        log_metric("env/success", sum(map(bool, success)) / len(success))
        if "episode_cut" in kwargs:
            cut = list(kwargs["episode_cut"])
            log_metric("env/cut", sum(map(bool, cut)) / len(cut))
    return rewards


def env_success(prompts: Sequence[Any] | None = None, completions: Any = None, **kwargs: Any):
    """TRL reward function: 1.0 when the env reported success at the end of the episode."""
    return [1.0 if s else 0.0 for s in _field(kwargs, "episode_success")]


# ------------------------------------------------------------------------------------------
# chat templating of the transcript


class _Chat:
    """Token ids of the first prompt and of the env's glue between turns, for one tokenizer."""

    def __init__(self, tokenizer: Any, chat_template: str | None, kwargs: dict[str, Any]):
        self.tok = tokenizer
        self.chat_template = chat_template
        self.kwargs = dict(kwargs)
        prefix = self.encode(_DUMMY, add_generation_prompt=False)
        eos = tokenizer.eos_token_id
        cut = [i for i, t in enumerate(prefix) if t == eos]
        # The template closes assistant turns with EOS: the model writes it, we cut there.
        self.closes_with_eos = bool(cut)
        self.prefix = prefix[: cut[-1] + 1] if cut else prefix

    def encode(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> list[int]:
        out = self.tok.apply_chat_template(
            messages,
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            return_dict=True,
            **self.kwargs,
        )
        ids = out["input_ids"]
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return [int(i) for i in ids]

    def turn_ids(self, observation: str) -> list[int]:
        """Env tokens after an assistant turn: a user message with ``observation`` and the
        generation prompt."""
        full = self.encode(
            [*_DUMMY, {"role": "user", "content": observation}], add_generation_prompt=True
        )
        if full[: len(self.prefix)] != self.prefix:
            raise ValueError(
                "the chat template is not prefix-preserving (rendering a [user, assistant] "
                "conversation changes when a user message follows), so turns cannot be "
                "concatenated token by token; pass a prefix-preserving chat_template to "
                "make_rollout_func"
            )
        return full[len(self.prefix) :]


# ------------------------------------------------------------------------------------------
# the rollout


@dataclass
class _Episode:
    env: Any
    messages: list[dict[str, str]]
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)
    returns: dict[str, float] = field(default_factory=dict)
    actions: list[dict[str, str]] = field(default_factory=list)
    done: bool = False
    cut: bool = False

    @property
    def raw(self) -> Any:
        return self.env.unwrapped


def _episode_key(prompt: Any) -> dict[str, Any]:
    if isinstance(prompt, str) or not isinstance(prompt, Sequence):
        raise ValueError(
            "the TRL rollout needs conversational prompts built by env_dataset(...); "
            f"got {type(prompt).__name__}"
        )
    for message in prompt:
        value = message.get(EPISODE_KEY) if isinstance(message, dict) else None
        if value:
            key = json.loads(value) if isinstance(value, str) else dict(value)
            if not {"env_id", "seed", "split"} <= set(key):
                raise ValueError(f"malformed {EPISODE_KEY!r} entry in a prompt: {value!r}")
            return key
    raise ValueError(
        f"prompt carries no {EPISODE_KEY!r} key naming its episode; build the dataset with "
        "adapters.integrations.trl.env_dataset(...)"
    )


def _generate(trainer: Any, batch: list[list[int]]) -> tuple[list[list[int]], Any]:
    fn = getattr(trainer, "_generate_single_turn", None)
    if fn is None:
        raise TypeError(
            "make_rollout_func needs a trl GRPOTrainer with _generate_single_turn (trl 1.16); "
            f"got {type(trainer).__name__}"
        )
    completion_ids, logprobs = fn(batch, None, {}, 1)
    ids = [[int(t) for t in row] for row in completion_ids]
    lps = None if logprobs is None else [list(row) for row in logprobs]
    return ids, lps


def _any_live(trainer: Any, n_live: int, sync: bool) -> bool:
    if not sync:
        return n_live > 0
    import torch

    acc = trainer.accelerator
    total = acc.gather(torch.tensor([n_live], device=acc.device)).sum()
    return int(total.item()) > 0


def _context_limit(trainer: Any) -> int | None:
    limits = []
    config = getattr(getattr(trainer, "model", None), "config", None)
    n = getattr(config, "max_position_embeddings", None)
    if isinstance(n, int) and n > 0:
        limits.append(n)
    args = getattr(trainer, "args", None)
    if getattr(trainer, "use_vllm", False):
        v = getattr(args, "vllm_max_model_length", None)
        if isinstance(v, int) and v > 0:
            limits.append(v)
    return min(limits) if limits else None


def _episode_reward(raw: Any, returns: dict[str, float], mode: Any) -> float:
    if callable(mode):
        return float(mode(raw, dict(returns)))
    if mode == "success":
        return 1.0 if raw.success else 0.0
    values = [returns.get(a, 0.0) for a in raw.possible_agents]
    total = float(sum(values))
    return total if mode == "sum" else total / max(1, len(values))


def make_rollout_func(
    env_id: str,
    *,
    reward_mode: str | Callable[[Any, dict[str, float]], float] = "mean",
    max_episode_tokens: int | None = None,
    check_prompt: bool = True,
    env_workers: int = 4,
    chat_template: str | None = None,
    **env_config: Any,
) -> Callable[[list[Any], Any], dict[str, Any]]:
    """A ``rollout_func(prompts, trainer)`` for :class:`trl.GRPOTrainer` (see module docstring).

    Args:
        env_id: the setting (``envs.list_envs()``); ``env_config`` goes to ``envs.make``.
        reward_mode: ``"mean"`` / ``"sum"`` of the agents' episode returns, ``"success"``, or
            ``f(raw_env, returns) -> float``.
        max_episode_tokens: cap on each sample's ``completion_ids`` (model + env tokens).
        check_prompt: raise when the env's first observation differs from the dataset prompt
            (a config mismatch between ``env_dataset`` and this function).
        env_workers: threads stepping envs (sandboxed tool code runs in other processes).
        chat_template: overrides TRL's / the tokenizer's template for the transcript.
    """
    if not (callable(reward_mode) or reward_mode in REWARD_MODES):
        raise ValueError(
            f"reward_mode must be one of {REWARD_MODES} or a callable, got {reward_mode!r}"
        )
    if max_episode_tokens is not None and (
        not isinstance(max_episode_tokens, int) or max_episode_tokens < 1
    ):
        raise ValueError(
            f"max_episode_tokens must be a positive int or None, got {max_episode_tokens!r}"
        )
    if not isinstance(env_workers, int) or env_workers < 1:
        raise ValueError(f"env_workers must be a positive int, got {env_workers!r}")
    canonical = _canonical_id(env_id)
    shared, probe = _shared_objects(env_id, env_config)
    probe.close()
    chats: dict[int, _Chat] = {}

    def chat_for(trainer: Any) -> _Chat:
        proc = trainer.processing_class
        tok = getattr(proc, "tokenizer", proc)
        key = id(tok)
        if key not in chats:
            template = chat_template if chat_template is not None else trainer.chat_template
            chats[key] = _Chat(tok, template, getattr(trainer, "chat_template_kwargs", {}) or {})
        return chats[key]

    def start(prompt: Any) -> _Episode:
        key = _episode_key(prompt)
        if _registered_id(key["env_id"]) != canonical:
            raise ValueError(f"a prompt of env {key['env_id']!r} reached the {canonical!r} rollout")
        env = _build_env(canonical, env_config, shared)
        raw = env.unwrapped
        raw.reset(seed=int(key["seed"]), options={"split": key["split"]})
        flush_dead_steps(raw)
        if not raw.agents:
            raise RuntimeError(f"{canonical} episode {key} ended before any agent acted")
        observation = raw.observe(raw.agent_selection)["prompt"]
        messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
        if check_prompt and messages[-1]["content"] != observation:
            raise ValueError(
                f"the {canonical} env's first observation for seed {key['seed']} differs from "
                "the dataset prompt: build the dataset and the rollout function with the same "
                "env config (or pass check_prompt=False)"
            )
        messages[-1]["content"] = observation
        return _Episode(env=env, messages=messages, returns={a: 0.0 for a in raw.possible_agents})

    def act(ep: _Episode, text: str) -> None:
        raw = ep.raw
        agent = raw.agent_selection
        raw.step(text)
        for a, r in raw.rewards.items():
            ep.returns[a] = ep.returns.get(a, 0.0) + float(r)
        ep.actions.append({"agent": agent, "text": text})
        flush_dead_steps(raw)

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        chat = chat_for(trainer)
        tok = chat.tok
        eos_ids = set(getattr(trainer, "eos_token_ids", None) or [tok.eos_token_id])
        per_turn = int(getattr(trainer, "max_completion_length", 0) or 0)
        ctx = _context_limit(trainer)
        sync = getattr(getattr(trainer, "accelerator", None), "num_processes", 1) > 1
        backend_logprobs = True  # False once the backend returns none (transformers generate)
        pool = ThreadPoolExecutor(max_workers=env_workers) if env_workers > 1 else None
        run = pool.map if pool is not None else map
        try:
            episodes = list(run(start, prompts))
            for ep in episodes:
                ep.prompt_ids = chat.encode(ep.messages, add_generation_prompt=True)
            while True:
                live = [ep for ep in episodes if not ep.done]
                if not _any_live(trainer, len(live), sync):
                    break
                rows = episodes if sync else live
                batch = [ep.prompt_ids + (ep.completion_ids if not ep.done else []) for ep in rows]
                new_ids, new_lps = _generate(trainer, batch)
                backend_logprobs = backend_logprobs and new_lps is not None
                turns = []
                for i, ep in enumerate(rows):
                    if ep.done:
                        continue
                    ids = new_ids[i]
                    lps = new_lps[i] if new_lps is not None else [0.0] * len(ids)
                    if max_episode_tokens is not None:
                        room = max_episode_tokens - len(ep.completion_ids)
                        ids, lps = ids[:room], lps[:room]
                    ep.completion_ids += ids
                    ep.env_mask += [1] * len(ids)
                    ep.logprobs += list(lps)
                    turns.append((ep, ids, tok.decode(ids, skip_special_tokens=True)))
                list(run(lambda t: act(t[0], t[2]), turns))
                for ep, ids, _ in turns:
                    raw = ep.raw
                    if not raw.agents:
                        ep.done = True
                        continue
                    glue = []
                    if chat.closes_with_eos and (not ids or ids[-1] not in eos_ids):
                        glue.append(tok.eos_token_id)
                    glue += chat.turn_ids(raw.observe(raw.agent_selection)["prompt"])
                    total = len(ep.completion_ids) + len(glue)
                    over_budget = max_episode_tokens is not None and total >= max_episode_tokens
                    context = len(ep.prompt_ids) + total + max(per_turn, 1)
                    if over_budget or (ctx is not None and context > ctx):
                        ep.done = ep.cut = True  # no room for the next turn: stop here
                        continue
                    ep.completion_ids += glue
                    ep.env_mask += [0] * len(glue)
                    ep.logprobs += [0.0] * len(glue)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        for ep in episodes:  # TRL reads completion_ids[-1]: never hand it an empty list
            if not ep.completion_ids:
                ep.completion_ids, ep.env_mask, ep.logprobs = [tok.eos_token_id], [0], [0.0]
        out = {
            "prompt_ids": [ep.prompt_ids for ep in episodes],
            "completion_ids": [ep.completion_ids for ep in episodes],
            "logprobs": [ep.logprobs for ep in episodes] if backend_logprobs else None,
            "env_mask": [ep.env_mask for ep in episodes],
            "episode_reward": [_episode_reward(ep.raw, ep.returns, reward_mode) for ep in episodes],
            "episode_success": [bool(ep.raw.success) for ep in episodes],
            "episode_returns": [dict(ep.returns) for ep in episodes],
            "episode_steps": [len(ep.actions) for ep in episodes],
            "episode_cut": [ep.cut for ep in episodes],
            "episode_actions": [list(ep.actions) for ep in episodes],
        }
        for ep in episodes:
            ep.env.close()
        return out

    rollout_func.env_id = canonical  # type: ignore[attr-defined]
    rollout_func.env_config = dict(env_config)  # type: ignore[attr-defined]
    return rollout_func
