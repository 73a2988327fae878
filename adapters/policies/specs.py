"""Policies from spec strings, as the command lines take them (``--policy SPEC``).

Specs: ``oracle`` (the env's scripted correct answer), ``constant:TEXT`` (always answers ``TEXT``;
``constant:`` answers nothing: the trivial baselines), ``smollm2`` (the embedded model), ``tiny``
(random tiny model, for smoke tests), a local checkpoint directory or a LoRA adapter directory
written by the trainer (``adapter_config.json``; the base is loaded from the path it names),
``openai:BASE_URL[#MODEL]`` (any OpenAI-compatible server; without ``#MODEL`` the first model the
server lists; a server that does not answer within a few seconds is an error at once). A path
that does not exist is an error, never a hub download. :func:`build_policies` maps roles to
policies from ``SPEC`` / ``ROLE=SPEC`` values.

``chat_template_kwargs`` (``--chat-template-kwargs`` of both command lines) reaches every policy
that renders a chat template: a transformers model applies it itself, an ``openai:`` server
receives it as the request's ``chat_template_kwargs`` (vLLM's and SGLang's field; a strict API
may refuse it); scripted policies have no template. ``max_prompt_tokens`` is the length at which
a transformers model left-truncates a prompt (a server applies its own context limit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters.policies.base import Policy
from adapters.policies.chat import template_reads

__all__ = [
    "assign_roles",
    "build_policies",
    "check_policy_spec",
    "check_policy_specs",
    "constant_policy",
    "parse_policy_spec",
    "set_chat_template_kwargs",
    "split_role_spec",
]


def constant_policy(text: str) -> Policy:
    """A policy that answers ``text`` to every prompt (``constant:TEXT``; ``""``: the no-op).

    >>> p = constant_policy("[U]")
    >>> p.name, [c.text for c in p.generate(["any level"])[0]]
    ('constant:[U]', ['[U]'])
    """
    from adapters.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(lambda _prompt: text, name=f"constant:{text}")


def parse_policy_spec(
    spec: str,
    *,
    device: str | None = None,
    dtype: str | None = None,
    batch_size: int = 16,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    max_prompt_tokens: int | None = None,
    compile_decode: str = "off",
    quantize: str = "none",
) -> Policy:
    """Build a policy from a spec string (see the module docstring). ``compile_decode``
    and ``quantize`` apply to the model policies the transformers backend runs
    (:class:`~adapters.policies.transformers_policy.TransformersPolicy`)."""
    policy = _build(spec, device, dtype, batch_size, max_prompt_tokens, compile_decode, quantize)
    set_chat_template_kwargs(policy, chat_template_kwargs or {})
    return policy


def set_chat_template_kwargs(
    policy: Policy, kwargs: Mapping[str, Any], *, only_where_read: bool = False
) -> str:
    """Give ``kwargs`` to a policy that renders a chat template (module docstring) and say what
    was done, for a report (``""`` when there is nothing to say). ``only_where_read``: only when
    the policy's template reads every key (a paper's protocol switch such as Qwen3's
    ``enable_thinking``, which other templates do not know); an HTTP server's template cannot
    be read here, so it is then left alone.

    >>> p = constant_policy("x")
    >>> set_chat_template_kwargs(p, {"enable_thinking": False})
    ''
    """
    kwargs = dict(kwargs)
    name = getattr(policy, "name", type(policy).__name__)
    if not kwargs:
        return ""
    if hasattr(policy, "chat_template_kwargs"):  # renders the template itself
        missing = [k for k in kwargs if not template_reads(policy, k)]
        if only_where_read and missing:
            return f"{name}: its chat template has no {', '.join(missing)} switch (not set)"
        policy.chat_template_kwargs = {**policy.chat_template_kwargs, **kwargs}  # type: ignore[attr-defined]
        return f"{name}: chat template rendered with {kwargs}"
    if isinstance(getattr(policy, "extra_body", None), dict):  # a server renders it
        if only_where_read:
            return (
                f"{name}: the server's chat template cannot be read here, {kwargs} not sent "
                "(--chat-template-kwargs sends them)"
            )
        body = policy.extra_body  # type: ignore[attr-defined]
        body["chat_template_kwargs"] = {**body.get("chat_template_kwargs", {}), **kwargs}
        return f"{name}: chat_template_kwargs {kwargs} sent with every request"
    return ""  # a scripted policy renders no template


def _build(
    spec: str,
    device: str | None,
    dtype: str | None,
    batch_size: int,
    max_prompt_tokens: int | None,
    compile_decode: str = "off",
    quantize: str = "none",
) -> Policy:
    if spec.lstrip().startswith("constant:"):  # the text is kept exactly, spaces included
        return constant_policy(spec.lstrip()[len("constant:") :])
    spec = spec.strip()
    if not spec:
        raise ValueError("empty policy spec")
    if spec == "oracle":
        from adapters.policies.oracle import OraclePolicy

        return OraclePolicy()
    if spec.startswith("openai:"):
        from adapters.policies.openai_compat import OpenAIPolicy

        url, _, model = spec[len("openai:") :].partition("#")
        if not url:
            raise ValueError("openai: spec needs a base URL, e.g. openai:http://127.0.0.1:8000/v1")
        probe = OpenAIPolicy(url, model="?")
        probe.check_reachable()  # a wrong URL is an error in seconds, not after the retries
        if not model:
            listed = [m for m in probe.list_models() if m]
            if not listed:
                raise ValueError(f"{url} lists no models; name one: openai:{url}#MODEL")
            model = listed[0]
        return OpenAIPolicy(url, model=model, name=f"openai:{model}")
    from adapters.policies.models import check_model_source, load_policy_model, tiny_model
    from adapters.policies.transformers_policy import TransformersPolicy

    model_kw: dict[str, Any] = {
        "device": device,
        "batch_size": batch_size,
        "max_prompt_tokens": max_prompt_tokens,
        "compile_decode": compile_decode,
        "quantize": quantize,
    }
    if spec == "tiny":
        m, tok = tiny_model(device=device)
        return TransformersPolicy(m, tok, name="tiny", **model_kw)
    if spec.lower() in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
        m, tok = load_policy_model(None, device=device, dtype=dtype)
        return TransformersPolicy(m, tok, name="smollm2", **model_kw)
    path = Path(spec)
    if path.is_dir() and (path / "adapter_config.json").is_file():
        return _adapter_policy(path, dtype=dtype, **model_kw)
    if path.exists() or "/" in spec:
        check_model_source(spec)
        m, tok = load_policy_model(spec, device=device, dtype=dtype)
        return TransformersPolicy(m, tok, name=spec, **model_kw)
    check_policy_spec(spec)  # raises: the spec names no policy
    raise AssertionError(spec)


INIT_FILE = "init.json"
"""Beside a trainer's exported adapter: ``{"init": DIR}``, the ``--init`` adapter its base had
merged before training (:func:`adapters.training.checkpoints.export_policies`)."""


def _adapter_policy(path: Path, *, device: Any, dtype: Any, **model_kw: Any) -> Policy:
    """A LoRA adapter directory (peft ``save_pretrained``) on top of its base model."""
    from peft import PeftModel

    from adapters.policies.models import load_policy_model
    from adapters.policies.transformers_policy import TransformersPolicy

    meta = json.loads((path / "adapter_config.json").read_text())
    base_name = meta.get("base_model_name_or_path") or None
    if base_name and not Path(base_name).exists() and base_name.count("/") != 1:
        base_name = None  # a cache path from another machine: fall back to the embedded model
    model, tok = load_policy_model(base_name, device=device, dtype=dtype or "float32")
    if (path / INIT_FILE).is_file():  # trained on top of an --init adapter: merge it first
        init = Path(json.loads((path / INIT_FILE).read_text())["init"])
        if not (init / "adapter_config.json").is_file():
            raise ValueError(
                f"{path} was trained from the --init adapter {init}, which is not there: "
                "without it this adapter does not apply"
            )
        model = PeftModel.from_pretrained(model, str(init)).merge_and_unload()
    peft_model = PeftModel.from_pretrained(model, str(path))
    merged = peft_model.merge_and_unload()
    return TransformersPolicy(merged, tok, device=device, name=str(path), **model_kw)


def split_role_spec(raw: str) -> tuple[str | None, str]:
    """``"tool=oracle"`` -> ``("tool", "oracle")``; a plain spec -> ``(None, spec)`` (an ``=``
    inside an ``openai:`` URL, a ``constant:`` text or a path does not name a role).

    >>> split_role_spec("tool=constant:x=1"), split_role_spec("constant:x=1")
    (('tool', 'constant:x=1'), (None, 'constant:x=1'))
    """
    role, sep, spec = raw.partition("=")
    if sep and ":" not in role and "/" not in role:
        return role, spec
    return None, raw


def assign_roles(specs: Sequence[str], roles: Sequence[str]) -> dict[str, str]:
    """role -> spec from ``--policy`` values (``SPEC`` or ``ROLE=SPEC``); loads nothing.

    >>> assign_roles(["tool=oracle", "constant:x"], ["tool", "planner"])
    {'tool': 'oracle', 'planner': 'constant:x'}
    """
    default: str | None = None
    per_role: dict[str, str] = {}
    for raw in specs:
        role, spec = split_role_spec(raw)
        if role is not None:
            if role not in roles:
                raise ValueError(f"unknown role {role!r} in --policy {raw!r}; roles: {list(roles)}")
            per_role[role] = spec
        else:
            if default is not None:
                raise ValueError(
                    "more than one --policy without ROLE=; give ROLE=SPEC (to compare "
                    "policies, each playing every role, use --suite)"
                )
            default = raw
    missing = [r for r in roles if r not in per_role and default is None]
    if missing:
        raise ValueError(f"no policy for role(s) {missing}: add --policy SPEC or ROLE=SPEC")
    return {r: per_role.get(r, default or "") for r in roles}


def check_policy_spec(spec: str) -> None:
    """Raise ``ValueError`` (``OSError`` for a missing path or a server that does not answer)
    unless ``spec`` names a policy that can be built; loads no model. An ``openai:`` server
    must answer within a few seconds (:meth:`~adapters.policies.openai_compat.OpenAIPolicy.
    check_reachable`).

    >>> check_policy_spec("constant:#### [U]")
    >>> check_policy_spec("nosuch:thing")
    Traceback (most recent call last):
    ...
    ValueError: unknown policy spec 'nosuch:thing': use oracle, constant:TEXT, smollm2, tiny, a local model or adapter directory, or openai:BASE_URL[#MODEL]
    """  # noqa: E501
    if spec.lstrip().startswith("constant:"):
        return
    spec = spec.strip()
    if not spec:
        raise ValueError("empty policy spec")
    if spec in ("oracle", "tiny") or spec.lower() in (
        "smollm2",
        "smollm2-135m",
        "smollm2-135m-instruct",
    ):
        return
    if spec.startswith("openai:"):
        from adapters.policies.openai_compat import OpenAIPolicy

        url = spec[len("openai:") :].partition("#")[0]
        if not url:
            raise ValueError("openai: spec needs a base URL, e.g. openai:http://127.0.0.1:8000/v1")
        OpenAIPolicy(url, model="?").check_reachable()
        return
    path = Path(spec)
    if path.is_dir() and (path / "adapter_config.json").is_file():
        return
    if path.exists() or "/" in spec:
        from adapters.policies.models import check_model_source

        check_model_source(spec)
        return
    raise ValueError(
        f"unknown policy spec {spec!r}: use oracle, constant:TEXT, smollm2, tiny, a local model "
        "or adapter directory, or openai:BASE_URL[#MODEL]"
    )


def check_policy_specs(specs: Sequence[str], roles: Sequence[str] | None = None) -> None:
    """:func:`check_policy_spec` for every distinct spec of ``--policy`` values; with ``roles``
    the ``ROLE=SPEC`` assignment is checked too (:func:`assign_roles`)."""
    chosen = assign_roles(specs, roles).values() if roles is not None else specs
    for spec in dict.fromkeys(chosen):
        check_policy_spec(spec)


def build_policies(
    specs: Sequence[str],
    roles: Sequence[str],
    *,
    device: str | None = None,
    dtype: str | None = None,
    batch_size: int = 16,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    compile_decode: str = "off",
    quantize: str = "none",
) -> tuple[dict[str, Policy], dict[str, str]]:
    """``(policies, role_policy)`` from ``--policy`` values (``SPEC`` or ``ROLE=SPEC``)."""
    role_policy = assign_roles(specs, roles)
    built: dict[str, Policy] = {}
    for spec in role_policy.values():
        if spec not in built:
            built[spec] = parse_policy_spec(
                spec,
                device=device,
                dtype=dtype,
                batch_size=batch_size,
                chat_template_kwargs=chat_template_kwargs,
                compile_decode=compile_decode,
                quantize=quantize,
            )
    return built, role_policy
