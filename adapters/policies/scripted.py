"""A policy backed by a plain Python function, for tests and oracle / upper-bound baselines.

``ScriptedPolicy(fn)`` calls ``fn(prompt_text) -> completion_text`` once per requested sample.
``prompt_text`` is the prompt itself when the prompt is a string, else the content of the last
message (in this project's environments that is the observation the agent must answer). Pass
``pass_messages=True`` to receive the whole message list instead.

Stop strings are applied to the returned text (``finish_reason="stop"`` either way, since a
function has no length limit in tokens). There is no tokenizer, so ``token_ids``, ``logprobs`` and
``prompt_ids`` are empty: scripted completions cannot be used for policy-gradient updates.

>>> p = ScriptedPolicy(lambda text: text.upper() + ". done", name="shout")
>>> [c.text for c in p.generate(["hi"], SamplingParams(n=2, stop=(".",)))[0]]
['HI', 'HI']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from adapters.policies.base import Completion, Policy, SamplingParams, truncate_stop
from adapters.policies.chat import ChatPrompt, check_prompts


class ScriptedPolicy(Policy):
    """Wrap ``fn(prompt_text) -> str`` (or ``fn(messages) -> str`` with ``pass_messages=True``)."""

    def __init__(
        self,
        fn: Callable[[Any], str],
        *,
        name: str = "scripted",
        pass_messages: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"ScriptedPolicy needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name
        self.pass_messages = pass_messages
        self.tokenizer = None

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        params = params or SamplingParams()
        out: list[list[Completion]] = []
        for messages in check_prompts(prompts):
            arg: Any = messages if self.pass_messages else messages[-1]["content"]
            samples = []
            for _ in range(params.n):
                text = self.fn(arg)
                if not isinstance(text, str):
                    raise TypeError(
                        f"the scripted function must return a str, got {type(text).__name__}"
                    )
                text, _ = truncate_stop(text, params.stop)
                samples.append(Completion(text=text, finish_reason="stop"))
            out.append(samples)
        return out
