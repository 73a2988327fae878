"""Training a served setting with TRL's ``GRPOTrainer`` the OpenEnv way (``environment_factory``).

TRL's native OpenEnv integration (``GRPOTrainer(environment_factory=...)``, TRL >= 1.x, marked
experimental there) creates one environment object per rollout, calls its ``reset(**row)`` with
the dataset row, appends the returned text to the row's prompt, and exposes the object's public
methods to the model as function-calling tools; the rollout is a multi-turn tool-calling loop.
:func:`environment_factory` builds such a class around :class:`~adapters.integrations.openenv.
MasEnvClient`, so every rollout is one episode on a server started with
``python -m adapters.serve_env``::

    from trl import GRPOConfig, GRPOTrainer
    from adapters.integrations.trl_openenv import env_reward, environment_factory, openenv_dataset

    trainer = GRPOTrainer(
        model="Qwen/Qwen3-1.7B",                     # a chat template with tool calling
        args=GRPOConfig(num_generations=8, max_completion_length=2048),
        train_dataset=openenv_dataset(512, split="train"),
        environment_factory=environment_factory("http://127.0.0.1:8000"),
        reward_funcs=env_reward,
    )
    trainer.train()

The model plays every role in turn (role sharing): the prompt ends with the first acting role's
observation; the tool ``answer(text)`` submits ``text`` as the acting role's completion and
returns the next acting role's observation (or the outcome once the episode is over).
:func:`env_reward` returns each rollout's episode reward as the server computed it:
``reward_mode`` ``"mean"`` (default) or ``"sum"`` of the roles' returns, or ``"success"``
(1/0).

The final plain answer: a model often ends a rollout with an ordinary message instead of a tool
call (for a one-step episode that message *is* the answer). TRL does not pass it to the
environment, so an environment class written to TRL's documentation, whose reward function only
reads the environment's state, scores such a rollout as if the model had said nothing. Ours
submits it: :func:`env_reward` first submits the rollout's last assistant message, when it is
not a tool call and the episode is still running, as the acting role's completion
(``submit_final=True``), then reads the episode's reward. A class of one's own should do the
same in its reward function.

The project's own models: SmolLM2-135M-Instruct (and ``tiny``, which has its tokenizer) ship a
chat template without tools, which TRL refuses; :func:`~adapters.integrations.tool_template.
with_tool_calling` gives their tokenizer a ChatML template with Hermes/Qwen-style
``<tool_call>`` JSON and TRL's parser of it. A model that small does not call a tool it is only
told about; :func:`tool_demonstrations` puts solved turns of other episodes (train split, the
setting's oracle answering through the ``answer`` tool) before the task, and the model copies
the call. On MarsRL's CPU setting one solved solver turn was enough: SmolLM2 wrote a well-formed
call on 8 of 8 instances (greedy); on Plan-Path's 4x4 grids, with two demonstrations, on 2 of 8
(it ran on past the answer and broke the JSON)::

    tok = with_tool_calling(tok)
    demos = tool_demonstrations("solver_verifier_corrector", config, n=1, roles=["solver"])
    trainer = GRPOTrainer(model=model, processing_class=tok,
                          train_dataset=openenv_dataset(64, demonstrations=demos), ...)

The demonstrations teach the call's format; their answers are those of other instances.

Rows of :func:`openenv_dataset` carry ``seed`` and ``split`` columns (TRL passes every column to
``reset``); ``num_generations`` copies of a row share the seed, hence the instance, as GRPO's
groups should. Each environment object holds one WebSocket session, and TRL keeps a pool of them
as large as a generation batch: start the server with ``--max-sessions`` at least that. Set
``GRPOConfig(max_tool_calling_iterations=...)`` to the episode's turns: after the last one the
tool answers that the episode is over, and a model that keeps calling it only spends tokens.

Limits: one scalar advantage per rollout; for per-turn credit assignment use
:mod:`adapters.rollout`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters.integrations.openenv import MasAction, MasEnvClient

__all__ = [
    "DEFAULT_INSTRUCTION",
    "env_reward",
    "environment_factory",
    "openenv_dataset",
    "tool_demonstrations",
]

DEFAULT_INSTRUCTION = (
    "You play every role of a team, one turn at a time. The task of the role that acts now "
    "follows. Answer it by calling the `answer` tool with your complete answer; the tool returns "
    "the next task, until the episode is over."
)
REWARD_MODES = ("mean", "sum", "success")
DEMO_REPLY = "Answer received. The next task follows, if there is one."
"""What the ``answer`` tool says back in a demonstration."""


def openenv_dataset(
    n: int,
    *,
    seed: int = 0,
    split: str = "train",
    instruction: str = DEFAULT_INSTRUCTION,
    demonstrations: list[dict[str, Any]] | None = None,
):
    """A ``datasets.Dataset`` of ``n`` episodes: ``prompt``, ``seed`` (``seed + i``) and
    ``split`` columns, for :func:`environment_factory` rollouts. The prompt is the instruction
    as a user message, to which TRL appends the episode's first task; with
    ``demonstrations`` (:func:`tool_demonstrations`) it is the instruction as the system
    message, the demonstrations, and an empty user message that TRL fills with the task, so that
    the task reads exactly as the demonstrations' do."""
    import datasets

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if demonstrations:
        prompt = [
            {"role": "system", "content": instruction},
            *demonstrations,
            {"role": "user", "content": ""},
        ]
    else:
        prompt = [{"role": "user", "content": instruction}]
    rows = [{"prompt": prompt, "seed": seed + i, "split": split} for i in range(n)]
    return datasets.Dataset.from_list(rows)


def tool_demonstrations(
    env_id: str,
    config: dict[str, Any] | None = None,
    *,
    n: int = 2,
    seed: int = 0,
    roles: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Chat messages showing the ``answer`` tool at work: for ``n`` train-split episodes of the
    setting (with the server's ``config``), the first task of each role (of ``roles``, default
    all), the oracle's answer as an ``answer`` call, and the tool's reply (:data:`DEMO_REPLY`)."""
    from adapters.rollout import env_roles, oracle_demos

    config = dict(config or {})
    shown = list(roles) if roles is not None else env_roles(env_id, config)
    demos = oracle_demos(env_id, config, shown, n, seed)
    messages: list[dict[str, Any]] = []
    for role in shown:
        pairs = demos.get(role, [])
        for task, answer in zip(pairs[::2], pairs[1::2], strict=True):
            call = {"name": "answer", "arguments": {"text": answer["content"]}}
            messages += [
                {"role": "user", "content": task["content"]},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"type": "function", "function": call}],
                },
                {"role": "tool", "name": "answer", "content": DEMO_REPLY},
            ]
    return messages


def environment_factory(
    base_url: str,
    *,
    reward_mode: str = "mean",
    submit_final: bool = True,
    config: dict[str, Any] | None = None,
    message_timeout_s: float = 300.0,
) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)`` whose instances play episodes on the
    OpenEnv server at ``base_url`` (``config``: env config sent with every reset)."""
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
    reset_config = dict(config or {})

    class MasOpenEnv:
        """One rollout = one episode on the server (see
        :mod:`adapters.integrations.trl_openenv`)."""

        def __init__(self) -> None:
            self._client = MasEnvClient(
                base_url=base_url, message_timeout_s=message_timeout_s
            ).sync()
            self._client.connect()
            self._result: Any = None
            self.episode: dict[str, Any] = {}  # the reset arguments of the current episode
            # what the env received, in order: agent, text, and "via": "tool" | "final"
            self.actions: list[dict[str, str]] = []
            self.reward_mode = reward_mode
            self.submit_final = submit_final

        def reset(self, **row: Any) -> str:
            kwargs: dict[str, Any] = {"seed": row.get("seed"), "split": row.get("split")}
            if row.get("instance") is not None:
                kwargs["instance"] = row["instance"]
            if reset_config:
                kwargs["config"] = reset_config
            self.episode = {k: v for k, v in kwargs.items() if v is not None}
            self._result = self._client.reset(**self.episode)
            self.actions = []
            # TRL appends this to the prompt's last message: set off from an instruction, or
            # alone in an empty user message (openenv_dataset with demonstrations)
            prompt = row.get("prompt")
            last = prompt[-1].get("content") if isinstance(prompt, list) and prompt else None
            return ("\n\n" if last else "") + self._result.observation.prompt

        def answer(self, text: str) -> str:
            """Submit your complete answer to the current task as the role that acts now.

            Args:
                text: Your complete answer, in the format the task asks for.

            Returns:
                The next role's task, or the outcome when the episode is over.
            """
            return self._answer(text, "tool")

        def _answer(self, text: str, via: str) -> str:
            obs = self._result.observation
            if self._result.done:
                raise ValueError("The episode is over: no further answers are accepted.")
            self._result = self._client.step(MasAction(completion=str(text), agent=obs.agent))
            self.actions.append({"agent": str(obs.agent), "text": str(text), "via": via})
            new = self._result.observation
            if self._result.done:
                return f"The episode is over (success: {new.success}). Stop calling tools."
            return new.prompt

        def _submit_final(self, text: str) -> None:
            if self.submit_final and self._result is not None and not self._result.done:
                self._answer(text, "final")

        @property
        def done(self) -> bool:
            return bool(self._result is not None and self._result.done)

        @property
        def returns(self) -> dict[str, float]:
            return {} if self._result is None else dict(self._result.observation.returns)

        @property
        def success(self) -> bool:
            return bool(self._result is not None and self._result.observation.success)

        def _episode_reward(self) -> float:
            if self.reward_mode == "success":
                return 1.0 if self.success else 0.0
            roles = self._result.observation.agents if self._result is not None else []
            total = float(sum(self.returns.get(a, 0.0) for a in roles))
            return total if self.reward_mode == "sum" else total / max(1, len(roles))

    return MasOpenEnv


def _final_text(completion: Any) -> str | None:
    """The last assistant message's text when it is not a tool call."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return None
    last = completion[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def env_reward(
    prompts: Any = None, completions: Any = None, environments: Any = None, **kwargs: Any
) -> list[float]:
    """TRL reward function: each rollout's episode reward as the server computed it (a final
    plain answer is submitted first; see the module docstring)."""
    if environments is None:
        raise ValueError(
            "env_reward needs GRPOTrainer(environment_factory=environment_factory(...))"
        )
    rewards = []
    for i, env in enumerate(environments):
        if completions is not None:
            text = _final_text(completions[i])
            if text is not None:
                env._submit_final(text)
        rewards.append(env._episode_reward())
    return rewards
