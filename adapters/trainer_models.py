"""Trainable policies for :mod:`adapters.trainer`: models, LoRA adapters, optimizers, backends.

Layouts (``TrainConfig.per_role`` / ``per_role_models`` / ``lora_rank``):

* role sharing (default): one model, one LoRA adapter (or full fine-tuning), one optimizer; the
  policy id is ``"shared"`` and every role's samples train it.
* per-role LoRA adapters (``per_role=True``): one base model with one peft adapter per role
  (``add_adapter``); a thin policy wrapper activates the role's adapter (``set_adapter``) before
  generating, and each adapter has its own optimizer over its own parameters.
* per-role models (``per_role=True, per_role_models="models"``, or full fine-tuning with
  ``per_role=True``): separate model copies, each with its own optimizer.

The reference policy for KL terms is the base with adapters disabled (``disable_adapter()``) for
LoRA, and a frozen copy of the initial model for full fine-tuning (created only when a KL
coefficient is positive).

Rollout backends: :func:`make_backend` is the one place that turns trainable models into
:class:`~adapters.policies.Policy` objects for the rollout engine. The ``transformers`` backend
generates with the training modules themselves (nothing to synchronise after an update). A
backend with its own copy of the weights (vLLM) implements ``sync(policy_ids)``, called after each
update with the ids of the policies that changed.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters.config import TrainConfig
from adapters.policies.base import ChatPrompt, Completion, Policy, SamplingParams, check_prompts

__all__ = [
    "PolicyModel",
    "ManagedPolicy",
    "GenerationTimer",
    "TransformersBackend",
    "load_base_model",
    "build_policy_models",
    "make_backend",
    "role_policy_map",
    "build_demos",
]

SHARED = "shared"


@dataclass
class PolicyModel:
    """One trainable policy: the module to run, its parameters and its optimizer."""

    pid: str
    model: Any  # the module forward passes use (with LoRA layers injected, if any)
    params: list[Any]
    optimizer: Any = None
    peft: Any = None  # the PeftModel wrapper (LoRA only)
    adapter: str | None = None  # the peft adapter name (LoRA only)
    ref_model: Any = None  # frozen copy for KL terms (full fine-tuning only)
    roles: list[str] = field(default_factory=list)

    def activate(self) -> None:
        """Make this policy's adapter the active one (no-op without adapters)."""
        if self.peft is not None and self.adapter is not None:
            self.peft.set_adapter(self.adapter)  # also makes only this adapter trainable

    def reference(self) -> contextlib.AbstractContextManager[Any]:
        """Context in which ``ref_forward_model`` gives the reference policy."""
        if self.peft is not None:
            return self.peft.disable_adapter()
        return contextlib.nullcontext()

    @property
    def ref_forward_model(self) -> Any:
        return self.model if self.peft is not None else self.ref_model

    def trainable_state(self) -> dict[str, Any]:
        """The weights that training changes (the adapter, or the whole model)."""
        if self.peft is not None:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.peft, adapter_name=self.adapter or "default")
        return self.model.state_dict()

    def load_trainable_state(self, state: dict[str, Any]) -> None:
        if self.peft is not None:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.peft, state, adapter_name=self.adapter)
        else:
            self.model.load_state_dict(state)


class GenerationTimer:
    """Accumulates wall time spent inside ``generate`` calls."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def reset(self) -> float:
        s, self.seconds = self.seconds, 0.0
        return s


class ManagedPolicy(Policy):
    """Wraps a policy: activates an adapter, prepends messages, and times generation."""

    def __init__(
        self,
        inner: Policy,
        *,
        activate: Callable[[], None] | None = None,
        prefix: Sequence[dict[str, str]] = (),
        timer: GenerationTimer | None = None,
        name: str | None = None,
    ) -> None:
        self.inner = inner
        self.activate = activate
        self.prefix = [dict(m) for m in prefix]
        self.timer = timer
        self.name = name or inner.name
        self.tokenizer = inner.tokenizer
        self.env_aware = bool(getattr(inner, "env_aware", False))

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        messages = [self.prefix + m for m in check_prompts(prompts)]
        if self.activate is not None:
            self.activate()
        t0 = time.perf_counter()
        try:
            return self.inner.generate(messages, params)
        finally:
            if self.timer is not None:
                self.timer.seconds += time.perf_counter() - t0


def prompt_prefix(cfg: TrainConfig) -> list[dict[str, str]]:
    """The messages placed before every env prompt: the system prompt, then ``prompt_prefix``."""
    out = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    return out + [dict(m) for m in cfg.prompt_prefix]


# ---------------------------------------------------------------------------------------------
# models


def resolve_torch_device(device: str) -> Any:
    from adapters.models import resolve_device

    return resolve_device(None if device == "auto" else device)


def load_base_model(spec: str, device: Any, dtype: str, seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a model spec: ``smollm2`` | ``tiny`` | ``config:PATH`` | path."""
    import torch

    from adapters.models import load_policy_model, model_from_config, tiny_model

    torch_dtype = getattr(torch, dtype)
    if spec == "tiny":
        model, tok = tiny_model(seed=seed, device=device)
        model.to(torch_dtype)
    elif spec.startswith("config:"):
        model, tok = model_from_config(spec[len("config:") :], device=device, dtype=torch_dtype)
    else:
        model, tok = load_policy_model(
            None if spec == "smollm2" else spec, device=device, dtype=torch_dtype
        )
    model.eval()
    return model, tok


def _lora_config(cfg: TrainConfig) -> Any:
    from peft import LoraConfig

    target: Any = cfg.lora_target
    if "," in target:
        target = [t.strip() for t in target.split(",") if t.strip()]
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=int(cfg.lora_alpha or 2 * cfg.lora_rank),
        lora_dropout=cfg.lora_dropout,
        target_modules=target,
        bias="none",
        task_type="CAUSAL_LM",
    )


def _seeded(seed: int) -> contextlib.AbstractContextManager[Any]:
    import torch

    @contextlib.contextmanager
    def ctx():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield

    return ctx()


def _adapter_params(peft_model: Any, adapter: str) -> list[Any]:
    marker = f".{adapter}."
    return [p for n, p in peft_model.named_parameters() if marker in n and "lora_" in n]


def role_policy_map(cfg: TrainConfig, roles: Sequence[str]) -> dict[str, str]:
    """Role -> policy id: every role to ``"shared"``, or each role to itself (``per_role``)."""
    return {r: (r if cfg.per_role else SHARED) for r in roles}


def build_policy_models(
    cfg: TrainConfig, roles: Sequence[str], device: Any, models: Any = None
) -> tuple[dict[str, PolicyModel], Any]:
    """Create the trainable policies (see the module docstring) and their optimizers.

    ``models`` optionally injects an already built ``(model, tokenizer)`` (tests, notebooks); it
    is used as the base (copied for per-role separate models).
    """
    import torch

    from adapters.config import derive_seed

    if models is not None:
        base, tok = models
        base.to(device)
    else:
        base, tok = load_base_model(cfg.model, device, cfg.dtype, seed=cfg.seed)
    pids = sorted(set(role_policy_map(cfg, roles).values()))
    lora = cfg.lora_rank > 0
    out: dict[str, PolicyModel] = {}
    separate = cfg.per_role and (cfg.per_role_models == "models" or not lora)
    if lora and not separate:
        from peft import get_peft_model

        lcfg = _lora_config(cfg)
        peft_model = None
        for pid in pids:
            with _seeded(derive_seed(cfg.seed, "lora", pid)):
                if peft_model is None:
                    peft_model = get_peft_model(base, lcfg, adapter_name=pid)
                else:
                    peft_model.add_adapter(pid, lcfg)
        assert peft_model is not None
        inner = peft_model.get_base_model()
        for pid in pids:
            out[pid] = PolicyModel(
                pid, inner, _adapter_params(peft_model, pid), peft=peft_model, adapter=pid
            )
        out[pids[0]].activate()
    else:
        for i, pid in enumerate(pids):
            model = base if i == len(pids) - 1 else copy.deepcopy(base)
            if lora:
                from peft import get_peft_model

                with _seeded(derive_seed(cfg.seed, "lora", pid)):
                    peft_model = get_peft_model(model, _lora_config(cfg), adapter_name=pid)
                out[pid] = PolicyModel(
                    pid,
                    peft_model.get_base_model(),
                    _adapter_params(peft_model, pid),
                    peft=peft_model,
                    adapter=pid,
                )
            else:
                for p in model.parameters():
                    p.requires_grad_(True)
                out[pid] = PolicyModel(pid, model, list(model.parameters()))
        if not lora and (cfg.kl_loss_coef > 0 or cfg.kl_reward_coef > 0):
            ref = copy.deepcopy(base)  # all policies start from the same base: one reference
            ref.eval()
            for p in ref.parameters():
                p.requires_grad_(False)
            for pm in out.values():
                pm.ref_model = ref
    role_map = role_policy_map(cfg, roles)
    for pid, pm in out.items():
        pm.roles = [r for r in roles if role_map[r] == pid]
        pm.model.eval()
        pm.optimizer = torch.optim.AdamW(
            pm.params, lr=cfg.lr or 1e-4, weight_decay=cfg.weight_decay, betas=(0.9, 0.999)
        )
    return out, tok


# ---------------------------------------------------------------------------------------------
# rollout backends


class TransformersBackend:
    """Generation with :class:`~adapters.policies.TransformersPolicy` on the training modules.

    Rollout policies are keyed by *rollout ids*: the trainable policy id, or ``"<pid>/<role>"``
    when roles sharing one trainable policy get different prompt prefixes (demonstrations).
    ``role_policy`` maps roles to rollout ids and ``train_pid`` maps rollout ids back to the
    trainable policy (the trainer routes samples with it).
    """

    name = "transformers"

    def __init__(
        self,
        cfg: TrainConfig,
        models: dict[str, PolicyModel],
        tokenizer: Any,
        device: Any,
        roles: Sequence[str],
        role_prefix: dict[str, list[dict[str, str]]] | None = None,
    ) -> None:
        from adapters.policies.transformers_policy import TransformersPolicy

        self.timer = GenerationTimer()
        base_prefix = prompt_prefix(cfg)
        role_prefix = role_prefix or {}
        self._policies: dict[str, Policy] = {}
        self.role_policy: dict[str, str] = {}
        self.train_pid: dict[str, str] = {}
        inner_by_module: dict[int, Any] = {}
        for role, pid in role_policy_map(cfg, roles).items():
            pm = models[pid]
            rid = f"{pid}/{role}" if role_prefix and pid != role else pid
            self.role_policy[role] = rid
            self.train_pid[rid] = pid
            if rid in self._policies:
                continue
            inner = inner_by_module.get(id(pm.model))
            if inner is None:
                inner = TransformersPolicy(
                    pm.model,
                    tokenizer,
                    device=device,
                    batch_size=cfg.gen_batch_size or 16,
                    name=pid,
                    chat_template_kwargs=cfg.chat_template_kwargs,
                )
                inner_by_module[id(pm.model)] = inner
            self._policies[rid] = ManagedPolicy(
                inner,
                activate=pm.activate,
                prefix=base_prefix + role_prefix.get(role, []),
                timer=self.timer,
                name=pid,
            )

    def policies(self) -> dict[str, Policy]:
        return dict(self._policies)

    def sync(self, policy_ids: Sequence[str]) -> None:
        """Nothing to do: generation runs on the very modules the optimizer updates."""

    def close(self) -> None:
        self._policies.clear()


def make_backend(
    cfg: TrainConfig,
    models: dict[str, PolicyModel],
    tokenizer: Any,
    device: Any,
    roles: Sequence[str],
    role_prefix: dict[str, list[dict[str, str]]] | None = None,
) -> TransformersBackend:
    """The rollout backend named by ``cfg.backend`` (extension point for other backends).

    A backend provides ``policies()`` (rollout id -> Policy), ``role_policy`` (role -> rollout
    id), ``train_pid`` (rollout id -> trainable policy id), ``timer`` (a
    :class:`GenerationTimer`), ``sync(pids)`` after each update, and ``close()``.
    """
    if cfg.backend == "transformers":
        return TransformersBackend(cfg, models, tokenizer, device, roles, role_prefix)
    if cfg.backend == "vllm":  # generation in vLLM, weights synced after every update
        from adapters.policies.vllm_policy import VLLMBackend

        return VLLMBackend(cfg, models, tokenizer, device, roles, role_prefix)  # type: ignore[return-value]
    raise ValueError(f"unknown rollout backend {cfg.backend!r}; available: transformers, vllm")


# ---------------------------------------------------------------------------------------------
# demonstrations


def build_demos(
    env_id: str,
    env_config: dict[str, Any],
    roles: Sequence[str],
    n: int,
    seed: int,
    fits: Callable[[str], bool] | None = None,
) -> dict[str, list[dict[str, str]]]:
    """In-context demonstrations from the setting's oracle: per role, ``n`` pairs of messages
    (the role's first prompt in a train-split episode, the oracle's answer to it).

    Earlier agents in each demo episode act with the oracle too. A role whose oracle answer does
    not pass ``fits`` (e.g. longer than ``max_new_tokens``: the policy could never write it)
    gets no demonstration. Settings without an oracle give none (a warning is logged).
    """
    import logging

    import envs
    from adapters.config import derive_seed
    from adapters.envpool import flush_dead_steps

    out: dict[str, list[dict[str, str]]] = {r: [] for r in roles}
    if n <= 0:
        return {}
    for j in range(n):
        raw = envs.make(env_id, **env_config).unwrapped
        raw.reset(seed=derive_seed(seed, "demo", j), options={"split": "train"})
        flush_dead_steps(raw)
        seen: set[str] = set()
        try:
            while raw.agents and len(seen) < len(roles):
                agent = raw.agent_selection
                answer = raw.oracle(agent)
                if agent not in seen:
                    seen.add(agent)
                    prompt = raw.observe(agent)["prompt"]
                    out.setdefault(agent, []).extend(
                        [
                            {"role": "user", "content": prompt},
                            {"role": "assistant", "content": answer},
                        ]
                    )
                raw.step(answer)
                flush_dead_steps(raw)
        except NotImplementedError:
            logging.getLogger(__name__).warning(
                "%s has no oracle: training without demonstrations", env_id
            )
            return {}
    return {
        r: msgs
        for r, msgs in out.items()
        if msgs and (fits is None or all(fits(m["content"]) for m in msgs[1::2]))
    }
