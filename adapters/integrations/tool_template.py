"""Tool calling for the project's own models (SmolLM2 and ``tiny``), in the format TRL parses.

TRL's tool paths (``GRPOTrainer(tools=...)`` and ``environment_factory``) need a chat template
that renders a whole tool exchange (the tool signatures, an assistant turn with ``tool_calls``,
the tool's answer) and a parser for the model's output. SmolLM2-135M-Instruct's own template
renders plain ``role: content`` turns only, so TRL refuses it ("The provided chat template does
not support tool calling"); ``tiny`` uses the same tokenizer. SmolLM2 speaks ChatML
(``<|im_start|>`` / ``<|im_end|>``), the format of Qwen's Hermes-style tool calls, so the
project's template (:func:`chatml_tool_template`) is ChatML with that convention:

* the tools go into the system turn, one JSON signature per line between ``<tools>`` and
  ``</tools>``, with the call format the model must write;
* an assistant's call is ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
* a tool's answer travels in a user turn, as ``NAME returned: TEXT`` (consecutive answers share
  one turn).

The model's output is parsed by TRL's own Qwen parser (``trl.chat_template_utils``'s
``qwen3_template``, or its older ``qwen3_schema``), which reads exactly that call format. The
template is prefix-preserving (a conversation renders as the start of any longer one), which
TRL's multi-turn tool loop requires, so TRL uses it as is.

The answers: Hermes wraps them in ``<tool_response>`` tags, and a model as small as SmolLM2-135M
copies the last tag it saw: shown a solved MarsRL turn before its own task, it wrote
``<tool_response>`` with the call's JSON inside on 8 of 8 instances (greedy), so TRL parsed no
call; with the answers as plain text, ``<tool_call>`` is the only tag it sees and it wrote a
well-formed call on 8 of 8. TRL never parses a tool's answer, so the choice costs nothing;
``hermes_replies=True`` gives the tagged form.

:func:`with_tool_calling` puts the template and the parser on a tokenizer whose own template
cannot render tools::

    from adapters.integrations.tool_template import with_tool_calling
    from adapters.policies.models import load_policy_model

    model, tok = load_policy_model("smollm2", dtype="float32")
    tok = with_tool_calling(tok)          # then GRPOTrainer(processing_class=tok, ...)

A tokenizer whose template already supports tools (Qwen2.5/3, Llama 3.1) is returned unchanged.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHATML_TOOL_TEMPLATE",
    "DEFAULT_SYSTEM",
    "chatml_tool_template",
    "supports_tools",
    "with_tool_calling",
]

DEFAULT_SYSTEM = "You are a helpful assistant."
"""The system turn's text when a conversation has none."""

_REPLY = {
    False: "{{- '\\n' + (message.name or 'the tool') + ' returned: ' + message.content }}",
    True: "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}",
}


def chatml_tool_template(hermes_replies: bool = False) -> str:
    """ChatML with Hermes/Qwen-style tool calls; tools' answers as plain text, or between
    ``<tool_response>`` tags (``hermes_replies``). See the module docstring."""
    return (
        "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' "
        "else '" + DEFAULT_SYSTEM + "' %}"
        "{{- '<|im_start|>system\\n' + system }}"
        "{%- if tools %}"
        "{{- '\\n\\nYou can call the functions below. Their signatures, one JSON object per "
        "line, are between <tools> and </tools>:\\n<tools>' }}"
        "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
        "{{- '\\n</tools>\\n\\nTo call a function, write its name and arguments as one JSON "
        "object between <tool_call> and </tool_call>:\\n<tool_call>\\n"
        '{"name": <function-name>, "arguments": <arguments-as-a-json-object>}'
        "\\n</tool_call>' }}"
        "{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- for message in messages %}"
        "{%- if message.role == 'system' and loop.first %}"
        "{%- elif message.role == 'tool' %}"
        "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
        "{{- '<|im_start|>user' }}{%- endif %}" + _REPLY[bool(hermes_replies)] + ""
        "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
        "{{- '<|im_end|>\\n' }}{%- endif %}"
        "{%- elif message.role == 'assistant' and message.tool_calls %}"
        "{{- '<|im_start|>assistant' }}"
        "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
        "{%- for call in message.tool_calls %}"
        "{%- set call = call.function if call.function is defined else call %}"
        "{%- set arguments = call.arguments if call.arguments is string "
        "else (call.arguments | tojson) %}"
        '{{- \'\\n<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' + arguments '
        "+ '}\\n</tool_call>' }}"
        "{%- endfor %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- else %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


CHATML_TOOL_TEMPLATE = chatml_tool_template()
"""The project's tool template (answers as plain text)."""


def supports_tools(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s chat template renders a whole tool exchange (TRL's own check)."""
    from trl.chat_template_utils import supports_tool_calling

    return bool(supports_tool_calling(tokenizer))


def with_tool_calling(tokenizer: Any, *, hermes_replies: bool = False) -> Any:
    """``tokenizer`` able to take part in TRL's tool calling: unchanged when its template already
    supports tools, else with :func:`chatml_tool_template` and TRL's parser of that format.

    Raises ``ValueError`` for a tokenizer without ChatML's ``<|im_start|>`` / ``<|im_end|>``
    tokens (the template would teach the model a format its vocabulary splits into pieces).
    """
    if tokenizer.chat_template is not None and supports_tools(tokenizer):
        return tokenizer
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocab]
    if missing:
        raise ValueError(
            f"the tokenizer has no {missing} token(s): the ChatML tool template fits ChatML "
            "models (SmolLM2, Qwen); give this model a tool-calling template of its own"
        )
    from trl import chat_template_utils as ctu

    tokenizer.chat_template = chatml_tool_template(hermes_replies)
    if getattr(ctu, "_SUPPORTS_RESPONSE_TEMPLATE", False):
        tokenizer.response_template = ctu.qwen3_template
    else:
        tokenizer.response_schema = ctu.qwen3_schema
    return tokenizer
