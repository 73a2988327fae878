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
returns the next acting role's observation (or the outcome once the episode is over). A final
message that is not a tool call is submitted as the acting role's completion too
(``submit_final=True``), so a one-step episode needs no tool call at all. :func:`env_reward`
returns each rollout's episode reward as the server computed it: ``reward_mode`` ``"mean"``
(default) or ``"sum"`` of the roles' returns, or ``"success"`` (1/0).

Rows of :func:`openenv_dataset` carry ``seed`` and ``split`` columns (TRL passes every column to
``reset``); ``num_generations`` copies of a row share the seed, hence the instance, as GRPO's
groups should. Each environment object holds one WebSocket session, and TRL keeps a pool of them
as large as a generation batch: start the server with ``--max-sessions`` at least that.

Limits: TRL requires a chat template that supports tool calling (Qwen2.5/3, Llama 3.1, ...);
one scalar advantage per rollout; for per-turn credit assignment use :mod:`adapters.rollout`.
"""

from __future__ import annotations

from typing import Any

from adapters.integrations.openenv import MasAction, MasEnvClient

__all__ = ["DEFAULT_INSTRUCTION", "env_reward", "environment_factory", "openenv_dataset"]

DEFAULT_INSTRUCTION = (
    "You play every role of a team, one turn at a time. The task of the role that acts now "
    "follows. Answer it by calling the `answer` tool with your complete answer; the tool returns "
    "the next task, until the episode is over."
)
REWARD_MODES = ("mean", "sum", "success")


def openenv_dataset(
    n: int, *, seed: int = 0, split: str = "train", instruction: str = DEFAULT_INSTRUCTION
):
    """A ``datasets.Dataset`` of ``n`` episodes: ``prompt`` (the instruction), ``seed`` (``seed +
    i``) and ``split`` columns, for :func:`environment_factory` rollouts."""
    import datasets

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    rows = [
        {"prompt": [{"role": "user", "content": instruction}], "seed": seed + i, "split": split}
        for i in range(n)
    ]
    return datasets.Dataset.from_list(rows)


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
        """One rollout = one episode on the server (see :mod:`adapters.integrations.trl_openenv`)."""

        def __init__(self) -> None:
            self._client = MasEnvClient(
                base_url=base_url, message_timeout_s=message_timeout_s
            ).sync()
            self._client.connect()
            self._result: Any = None
            self.episode: dict[str, Any] = {}  # the reset arguments of the current episode
            self.actions: list[dict[str, str]] = []  # what the env received, in order
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
            return "\n\n" + self._result.observation.prompt

        def answer(self, text: str) -> str:
            """Submit your complete answer to the current task as the role that acts now.

            Args:
                text: Your complete answer, in the format the task asks for.

            Returns:
                The next role's task, or the outcome when the episode is over.
            """
            obs = self._result.observation
            if self._result.done:
                raise ValueError("The episode is over: no further answers are accepted.")
            self._result = self._client.step(MasAction(completion=str(text), agent=obs.agent))
            self.actions.append({"agent": str(obs.agent), "text": str(text)})
            new = self._result.observation
            if self._result.done:
                return f"The episode is over (success: {new.success}). Stop calling tools."
            return new.prompt

        def _submit_final(self, text: str) -> None:
            if self.submit_final and self._result is not None and not self._result.done:
                self.answer(text)

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
