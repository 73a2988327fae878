"""Trainable policies: the models, their LoRA adapters, reference models and optimizers.

Layouts (the policy section: ``per_role`` / ``role_policies`` / ``per_role_models`` /
``lora_rank``):

* role sharing (default): one model, one LoRA adapter (or full fine-tuning), one optimizer; the
  policy id is ``"shared"`` and every role's samples train it.
* per-role LoRA adapters (``per_role=True``): one base model with one peft adapter per role
  (``add_adapter``); the rollout backend activates the role's adapter (``set_adapter``) before
  generating, and each adapter has its own optimizer over its own parameters.
* per-role models (``per_role=True, per_role_models="models"``, or full fine-tuning with
  ``per_role=True``): separate model copies, each with its own optimizer.
* M policies for N roles (AT-GRPO Eq. 2, ``role_policies={"challenger": "a", "planner": "a",
  ...}``): one adapter (or model) per named policy, shared by the roles mapped to it.

The reference policy for KL terms is the base with adapters disabled (``disable_adapter()``) for
LoRA, and a frozen copy of the initial model for full fine-tuning (created only when a KL
coefficient is positive). :func:`role_policy_map` says which policy trains on which role's
samples; :mod:`adapters.training.backends` turns these models into generating policies.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters.rollout import derive_seed
from adapters.training.config import TrainConfig
from adapters.training.sections import PolicyConfig

__all__ = ["SHARED", "PolicyModel", "build_policy_models", "role_policy_map"]

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
    dropout: bool = False  # LoRA dropout is on: the update runs the module in train mode

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


# ---------------------------------------------------------------------------------------------
# models


def _lora_config(u: PolicyConfig) -> Any:
    from peft import LoraConfig

    target: Any = u.lora_target
    if "," in target:
        target = [t.strip() for t in target.split(",") if t.strip()]
    return LoraConfig(
        r=u.lora_rank,
        lora_alpha=int(u.lora_alpha),
        lora_dropout=u.lora_dropout,
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
    """Role -> policy id (AT-GRPO Eq. 2's sigma): ``role_policies`` when given (M policies for N
    roles; roles it does not name get a policy of their own), else each role to itself
    (``per_role``), else every role to ``"shared"``.

    >>> from adapters.training.config import TrainConfig
    >>> cfg = TrainConfig(role_policies={"challenger": "a", "planner": "a", "solver": "b"})
    >>> role_policy_map(cfg, ["challenger", "planner", "solver", "critic"])
    {'challenger': 'a', 'planner': 'a', 'solver': 'b', 'critic': 'critic'}
    """
    unknown = sorted(set(cfg.policy.role_policies) - set(roles))
    if unknown:
        raise ValueError(f"role_policies names unknown role(s) {unknown}; roles: {list(roles)}")
    if cfg.policy.role_policies:
        return {r: cfg.policy.role_policies.get(r, r) for r in roles}
    return {r: (r if cfg.policy.per_role else SHARED) for r in roles}


def build_policy_models(
    cfg: TrainConfig, roles: Sequence[str], base: Any
) -> dict[str, PolicyModel]:
    """Create the trainable policies (see the module docstring) and their optimizers.

    ``base`` is the loaded base model (:func:`adapters.policies.models.load_base_model`); it is
    wrapped with LoRA adapters, or copied for per-role separate models. Each policy's ``roles``
    lists the roles whose samples train it (:func:`role_policy_map`).
    """
    import torch

    role_map = role_policy_map(cfg, roles)
    pids = sorted(set(role_map.values()))
    u = cfg.policy.filled()
    lora = u.lora
    out: dict[str, PolicyModel] = {}
    separate = len(pids) > 1 and (cfg.policy.per_role_models == "models" or not lora)
    if lora and not separate:
        from peft import get_peft_model

        lcfg = _lora_config(u)
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
                    peft_model = get_peft_model(model, _lora_config(u), adapter_name=pid)
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
        if not lora and cfg.update.needs_ref:
            ref = copy.deepcopy(base)  # all policies start from the same base: one reference
            ref.eval()
            for p in ref.parameters():
                p.requires_grad_(False)
            for pm in out.values():
                pm.ref_model = ref
    for pid, pm in out.items():
        pm.roles = [r for r in roles if role_map[r] == pid]
        pm.dropout = lora and u.lora_dropout > 0
        pm.model.eval()
        pm.optimizer = torch.optim.AdamW(
            pm.params,
            lr=cfg.update.lr,
            weight_decay=cfg.update.weight_decay,
            betas=(0.9, 0.999),
        )
    return out
