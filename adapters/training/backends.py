"""Rollout backends: how the trainer's models generate (transformers in place, or vLLM).

:func:`make_backend` is the one place that turns trainable models
(:class:`~adapters.training.policy_models.PolicyModel`) into
:class:`~adapters.policies.Policy` objects for the rollout engine (``compute.backend``):

* ``transformers`` (:class:`TransformersBackend`): generation with
  :class:`~adapters.policies.TransformersPolicy`, from a merged copy of each policy
  (:class:`GenerationCopy`, refreshed after every update) or on the training modules
  themselves (``generation_model: train``).
* ``vllm`` (:class:`VLLMBackend`): generation in a vLLM engine
  (:class:`~adapters.policies.vllm_policy.VLLMPolicy`), weights or LoRA adapters pushed into it
  after every update.
* ``vllm-server`` (:class:`VLLMServerBackend`): generation on separately started ``vllm serve``
  replicas (``compute.vllm_servers``; :mod:`adapters.policies.vllm_server`), adapters or
  weights pushed to them over HTTP after every update. Needs no vllm package in the trainer's
  environment.

Under torchrun (:mod:`adapters.training.distributed`) a :class:`WeightSync` says who pushes:
every rank into its own colocated engine, rank 0 alone to the shared servers; FSDP2-sharded
weights are gathered first, by every rank.

A backend provides ``policies()`` (rollout id -> Policy), ``role_policy`` (role -> rollout id),
``train_pid`` (rollout id -> trainable policy id), ``timer`` (a
:class:`~adapters.policies.wrappers.GenerationTimer`), ``sync(pids)`` after each update, and
``close()``. Rollout ids are the trainable policy id, or ``"<pid>/<role>"`` when roles sharing
one trainable policy get different prompt prefixes (demonstrations); the trainer routes samples
back to the trainable policy with ``train_pid``. Every role's prompts start with
:func:`prompt_prefix` (the system prompt, then ``TrainConfig.prompt_prefix``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.policies.base import Policy
from adapters.policies.wrappers import GenerationTimer, ManagedPolicy
from adapters.training.config import TrainConfig
from adapters.training.policy_models import PolicyModel

if TYPE_CHECKING:  # pragma: no cover
    from adapters.policies.vllm_policy import VLLMPolicy

__all__ = [
    "TransformersBackend",
    "VLLMBackend",
    "VLLMServerBackend",
    "WeightSync",
    "make_backend",
    "prompt_prefix",
]


def _state_dict(pm: Any) -> dict[str, Any]:
    return pm.model.state_dict()


@dataclass
class WeightSync:
    """How updated weights reach the generating engines.

    pushes: this process sends them (False on ranks other than 0 with shared vLLM servers).
    full_state: a policy's whole state dict (gathers FSDP2 shards; every rank calls it).
    """

    pushes: bool = True
    full_state: Callable[[Any], dict[str, Any]] = field(default=_state_dict)


def role_map_of(models: Mapping[str, PolicyModel], roles: Sequence[str]) -> dict[str, str]:
    """Role -> trainable policy id, from each policy's ``roles``."""
    owner = {r: pid for pid, pm in models.items() for r in pm.roles}
    missing = [r for r in roles if r not in owner]
    if missing:
        raise ValueError(f"no trainable policy serves role(s) {missing}")
    return {r: owner[r] for r in roles}


def prompt_prefix(cfg: TrainConfig) -> list[dict[str, str]]:
    """The messages placed before every env prompt: the system prompt, then ``prompt_prefix``."""
    out = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    return out + [dict(m) for m in cfg.prompt_prefix]


class _RolePolicies:
    """What both backends expose: rollout policies per rollout id and the maps around them."""

    timer: GenerationTimer
    role_policy: dict[str, str]
    train_pid: dict[str, str]
    _policies: dict[str, Policy]

    def _wrap(
        self,
        cfg: TrainConfig,
        pairs: Sequence[tuple[str | None, str]],
        inner: Mapping[str, Policy],
        activate: Mapping[str, Any],
        role_prefix: Mapping[str, list[dict[str, str]]] | None,
    ) -> None:
        """One :class:`ManagedPolicy` per rollout id over ``inner[pid]`` for each (role, pid)."""
        base_prefix = prompt_prefix(cfg)
        prefixes = dict(role_prefix or {})
        self.timer = GenerationTimer()
        self.role_policy, self.train_pid, self._policies = {}, {}, {}
        for role, pid in pairs:
            rid = f"{pid}/{role}" if role is not None and prefixes and pid != role else pid
            if role is not None:
                self.role_policy[role] = rid
            self.train_pid[rid] = pid
            if rid not in self._policies:
                self._policies[rid] = ManagedPolicy(
                    inner[pid],
                    activate=activate[pid],
                    prefix=base_prefix + (prefixes.get(role, []) if role is not None else []),
                    timer=self.timer,
                    name=pid,
                )

    def policies(self) -> dict[str, Policy]:
        """Rollout id -> the policy the rollout engine calls."""
        return dict(self._policies)


class GenerationCopy:
    """A plain copy of one trainable policy that only generates: its LoRA deltas merged into the
    weights (``W + scale * B A``, computed in the training dtype and then cast, never peft's
    in-place merge and unmerge, which drifts in low precision), in ``dtype``, refreshed from the
    training module when :meth:`refresh` is called after an update.

    Generating with it skips peft's per-layer Python work and the two extra small products of
    every adapted layer, and can run in a faster dtype than the update (bfloat16 where the device
    has it), or with float16-weight or int8 linear layers on a CPU without it
    (``compute.generation_quant``, :mod:`adapters.policies.quantize`: the policy packs the copy's
    layers when it is built, :meth:`refresh` packs them again). Its log-probs are close to, not
    equal to, the training model's: the update then recomputes the PPO ratio's denominator
    (``old_logprobs``) and clips the ratio.
    """

    def __init__(self, pm: PolicyModel, dtype: Any) -> None:
        import torch

        self.pm = pm
        self.dtype = dtype
        with torch.no_grad():
            if pm.peft is not None:
                from peft.tuners.lora import LoraLayer

                model = copy.deepcopy(pm.peft).unload()  # the base without adapter layers
                self._lora = [
                    (name, mod)
                    for name, mod in pm.model.named_modules()
                    if isinstance(mod, LoraLayer) and str(pm.adapter) in mod.lora_A
                ]
            else:
                model = copy.deepcopy(pm.model)
                self._lora = []
            self.model = model.to(dtype=dtype)
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self._targets = dict(self.model.named_modules())
        self.refresh()

    def refresh(self) -> None:
        """Copy the training module's current weights in (merging the policy's adapter)."""
        import torch

        from adapters.policies.quantize import repack

        with torch.no_grad():
            if self.pm.peft is None:
                for p, q in zip(self.pm.model.parameters(), self.model.parameters()):
                    q.copy_(p)
            else:
                adapter = self.pm.adapter
                for name, mod in self._lora:
                    w = mod.base_layer.weight + mod.get_delta_weight(adapter)  # type: ignore[attr-defined]
                    self._targets[name].weight.copy_(w)
        repack(self.model)  # a quantized copy (adapters.policies.quantize) packs the new weights


def generation_dtype(cfg: TrainConfig, device: Any) -> Any:
    """The dtype of generation copies: bfloat16 where the device computes it natively (CUDA
    with bf16, a CPU with AVX512-BF16 or AMX), else the training dtype."""
    import torch

    from adapters.policies.models import native_bf16

    return torch.bfloat16 if native_bf16(device) else getattr(torch, cfg.policy.dtype)


class TransformersBackend(_RolePolicies):
    """Generation with :class:`~adapters.policies.TransformersPolicy`.

    ``generation_model: merged`` (the default): each trainable policy generates from a
    :class:`GenerationCopy` (adapter merged, bfloat16 where native), refreshed lazily before the
    first generation after an update (:meth:`sync` marks it stale); ``train``: generation runs on
    the training modules themselves (per-role adapters switched with ``set_adapter``). Sharded
    (FSDP) runs always generate on the training modules.

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
        *,
        copies: bool | None = None,
    ) -> None:
        from adapters.policies.transformers_policy import TransformersPolicy

        batch_size = cfg.generation.gen_batch_size
        assert batch_size is not None, "TrainConfig.resolved() sets gen_batch_size"
        if copies is None:
            copies = cfg.compute.generation_model == "merged"
        self.copies: dict[str, GenerationCopy] = {}
        self._stale: set[str] = set()
        dtype = generation_dtype(cfg, device) if copies else None

        def policy(module: Any, name: str) -> TransformersPolicy:
            return TransformersPolicy(
                module,
                tokenizer,
                device=device,
                batch_size=batch_size,
                name=name,
                chat_template_kwargs=cfg.policy.chat_template_kwargs,
                compile_decode=cfg.compute.compile_decode,
                quantize=cfg.compute.generation_quant if copies else "none",
            )

        by_module: dict[int, Policy] = {}  # policies sharing one module share one generator
        inner: dict[str, Policy] = {}
        activate: dict[str, Any] = {}
        for pid, pm in models.items():
            if copies:
                self.copies[pid] = GenerationCopy(pm, dtype)
                self._stale.add(pid)  # refreshed before its first generation (after a resume)
                inner[pid] = policy(self.copies[pid].model, pid)
                activate[pid] = functools.partial(self._fresh, pid)
                continue
            if id(pm.model) not in by_module:
                by_module[id(pm.model)] = policy(pm.model, pid)
            inner[pid] = by_module[id(pm.model)]
            activate[pid] = pm.activate
        pairs = list(role_map_of(models, roles).items())
        self._wrap(cfg, pairs, inner, activate, role_prefix)

    def _fresh(self, pid: str) -> None:
        if pid in self._stale:
            self.copies[pid].refresh()
            self._stale.discard(pid)

    def sync(self, policy_ids: Sequence[str]) -> None:
        """Mark the generation copies of updated policies stale (refreshed before their next
        generation); without copies generation runs on the updated modules already."""
        self._stale.update(p for p in policy_ids if p in self.copies)

    def close(self) -> None:
        self._policies.clear()
        self.copies.clear()


class VLLMBackend(_RolePolicies):
    """Rollout backend with generation in vLLM (``compute.backend = "vllm"``).

    The transformers models stay the trainable ones; vLLM only generates. LoRA runs (shared or
    per role, adapters or separate models: the frozen bases are identical) use one engine with one
    vLLM adapter per trainable policy id, re-saved with peft and reloaded after every update. Full
    fine-tuning uses one engine per distinct model and :meth:`VLLMPolicy.update_weights`. Every
    policy is synchronised lazily before its first generation (which also covers a resumed
    checkpoint), and :meth:`sync` pushes the updated ones after each optimizer step.

    Same interface as the trainer's ``TransformersBackend``: ``policies()`` keyed by rollout id
    (the policy id, or ``"<pid>/<role>"`` when roles sharing a policy get different prompt
    prefixes), ``role_policy`` (role -> rollout id), ``train_pid`` (rollout id -> policy id),
    ``timer``, ``sync(pids)``, ``close()``. Without ``roles`` the rollout ids are the policy ids.
    ``engine`` injects an existing :class:`VLLMPolicy` (tests); it must match the layout.
    """

    name = "vllm"
    keep_sync_dir = False

    def __init__(
        self,
        cfg: Any,
        models: Mapping[str, Any],
        tokenizer: Any,
        device: Any,
        roles: Sequence[str] | None = None,
        role_prefix: Mapping[str, list[dict[str, str]]] | None = None,
        *,
        engine: VLLMPolicy | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        sync: WeightSync | None = None,
    ) -> None:
        self.cfg = cfg
        self.models = dict(models)
        self.weight_sync = sync or WeightSync()
        self._tmp = self._sync_dir()
        self._versions: dict[str, int] = {}
        self._dirty = set(self.models)
        self._owned: list[Any] = []
        self.lora = any(pm.peft is not None for pm in self.models.values())
        kw = dict(engine_kwargs or {})
        kw.setdefault("dtype", cfg.policy.dtype)
        kw.setdefault("seed", cfg.seed)
        if getattr(device, "type", str(device)) == "cuda":
            # the trainer's model and optimizer share the GPU
            kw.setdefault("gpu_memory_utilization", 0.4)
        self.engines: dict[str, Any] = {}  # VLLMPolicy, or VLLMServerPolicy
        inner: dict[str, Policy] = {}
        if self.lora:
            rank = max(int(pm.peft.peft_config[pm.adapter].r) for pm in self.models.values())
            if engine is None:
                first = next(iter(self.models.values()))
                engine = self._new_engine(first, tokenizer, kw, lora_rank=rank)
                self._owned.append(engine)
            for pid in self.models:
                self.engines[pid] = engine
                inner[pid] = engine.for_adapter(pid)
        else:
            by_module: dict[int, Any] = {}
            for pid, pm in self.models.items():
                eng = by_module.get(id(pm.model))
                if eng is None:
                    if engine is not None and not by_module:
                        eng = engine
                    else:
                        eng = self._new_engine(pm, tokenizer, kw)
                        self._owned.append(eng)
                    by_module[id(pm.model)] = eng
                self.engines[pid] = eng
                inner[pid] = eng
        pairs: list[tuple[str | None, str]]
        if roles is None:
            pairs = [(None, pid) for pid in self.models]
        else:
            pairs = list(role_map_of(self.models, roles).items())
        activate = {pid: functools.partial(self._ensure_synced, pid) for pid in self.models}
        self._wrap(cfg, pairs, inner, activate, role_prefix)

    def _sync_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="mas-vllm-sync-"))

    def _new_engine(
        self, pm: Any, tokenizer: Any, kw: dict[str, Any], lora_rank: int | None = None
    ) -> Any:
        """A vLLM engine for ``pm``'s (frozen) base: with LoRA slots for ``lora_rank``."""
        from adapters.policies.vllm_policy import VLLMPolicy  # needs vllm (setup_vllm.sh)

        model_dir = self._base_checkpoint(pm, tokenizer)
        if lora_rank is None:
            return VLLMPolicy(model_dir, **kw)
        return VLLMPolicy(
            model_dir,
            enable_lora=True,
            max_lora_rank=lora_rank,
            max_loras=max(len(self.models), 1),
            **kw,
        )

    def _base_checkpoint(self, pm: Any, tokenizer: Any) -> str | None:
        """A directory vLLM can load the (frozen) base from: the configured model when it is a
        checkpoint, else the trainer's current weights exported once (a random-weight model, or
        any base that ``--init`` merged an adapter into: the configured checkpoint is not the
        base the LoRA deltas apply to)."""
        spec = str(self.cfg.policy.model)
        merged_init = self.cfg.policy.init not in (None, "none")
        if spec == "smollm2" and not merged_init:
            return None
        if not (spec == "tiny" or spec.startswith("config:") or merged_init):
            return spec
        out = self._tmp / "base"
        if not (out / "config.json").is_file():
            sd = {}
            for n, t in pm.model.state_dict().items():
                if "lora_" in n:
                    continue
                sd[n.replace(".base_layer.", ".")] = t.detach().clone()
            pm.model.save_pretrained(str(out), state_dict=sd)
            tokenizer.save_pretrained(str(out))
        return str(out)

    def _ensure_synced(self, pid: str) -> None:
        if pid in self._dirty:
            self._push(pid)
        pm = self.models[pid]
        if pm.peft is not None:
            pm.activate()  # keep the trainer's active adapter consistent with the transformers path

    def _push(self, pid: str) -> None:
        pm = self.models[pid]
        engine = self.engines[pid]
        if pm.peft is not None and not self.weight_sync.pushes:
            pass  # another rank loads the adapter into the shared servers
        elif pm.peft is not None:
            version = self._versions.get(pid, 0) + 1
            target = self._tmp / f"{pid}-v{version}"
            pm.peft.save_pretrained(str(target), selected_adapters=[pm.adapter])
            # peft writes non-default adapters into a sub-directory named after the adapter
            adapter_dir = target / pm.adapter if (target / pm.adapter).is_dir() else target
            engine.update_adapter(pid, adapter_dir)
            old = self._tmp / f"{pid}-v{version - 1}"
            shutil.rmtree(old, ignore_errors=True)
            self._versions[pid] = version
        else:
            state = self.weight_sync.full_state(pm)  # every rank: FSDP2 gathers the shards
            if self.weight_sync.pushes:
                engine.update_weights(state)
        self._dirty.discard(pid)

    def sync(self, policy_ids: Sequence[str]) -> None:
        """Push the weights of the policies that an optimizer step just changed."""
        pushed: set[int] = set()
        for pid in policy_ids:
            pm = self.models[pid]
            if pm.peft is None and id(pm.model) in pushed:
                self._dirty.discard(pid)
                continue
            self._push(pid)
            pushed.add(id(pm.model))

    def close(self) -> None:
        for pid, eng in self.engines.items():
            if eng not in self._owned and pid in eng.adapters and self.models[pid].peft is not None:
                eng.remove_adapter(pid)  # an injected engine outlives this backend
        for eng in self._owned:
            eng.close()
        self.engines.clear()
        self._owned.clear()
        self._policies.clear()
        if self.weight_sync.pushes and not self.keep_sync_dir:
            shutil.rmtree(self._tmp, ignore_errors=True)


class VLLMServerBackend(VLLMBackend):
    """Rollout backend on running ``vllm serve`` replicas (``backend: vllm-server``).

    Like :class:`VLLMBackend` (same adapters, same sync after every update), with
    :class:`~adapters.policies.vllm_server.VLLMServerPolicy` engines over the URLs of
    ``compute.vllm_servers``: LoRA runs (shared or per role) use every listed server with one
    adapter per policy; full fine-tuning uses them for the shared policy, and per-role models
    need one server group per policy (entries ``POLICY=URL``). Adapters and weight files go to
    ``vllm_sync_dir`` (default ``<output_dir>/vllm-sync``), which the servers must be able to
    read. When this process pushes, :meth:`check_logprobs` first compares the servers'
    log-probs with the trainer's on a short sample, so that a server with other weights or
    vLLM's default raw log-probs fails the run at start instead of biasing every PPO ratio.
    After the run the servers keep the last adapters or weights (the sync directory keeps the
    last adapter versions): they serve the trained policies, e.g. for ``adapters.evaluate``.
    """

    name = "vllm-server"
    probe_tolerance = 0.1  # mean |log-prob difference| per token (bfloat16 servers included)
    keep_sync_dir = True  # the servers keep serving the last adapters (and may reload them)

    def _sync_dir(self) -> Path:
        where = self.cfg.compute.vllm_sync_dir or str(
            Path(self.cfg.output.output_dir or ".") / "vllm-sync"
        )
        path = Path(where).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _servers_for(self, pid: str | None) -> list[str]:
        tagged: dict[str, list[str]] = {}
        plain: list[str] = []
        for entry in self.cfg.compute.vllm_servers:
            key, sep, url = entry.partition("=")
            if sep and not key.startswith("http"):
                tagged.setdefault(key.strip(), []).append(url.strip())
            else:
                plain.append(entry)
        if pid is not None and pid in tagged:
            return tagged[pid]
        if not plain:
            raise ValueError(
                f"vllm_servers has no server for policy {pid!r} "
                f"(entries: {self.cfg.compute.vllm_servers})"
            )
        return plain

    def _new_engine(
        self, pm: Any, tokenizer: Any, kw: dict[str, Any], lora_rank: int | None = None
    ) -> Any:
        from adapters.policies.vllm_server import VLLMServerPolicy

        engine = VLLMServerPolicy(
            self._servers_for(None if lora_rank is not None else pm.pid),
            tokenizer=tokenizer,
            sync_dir=self._tmp,
            chat_template_kwargs=self.cfg.policy.chat_template_kwargs,
        )
        if self.weight_sync.pushes:
            self.check_logprobs(engine, pm, tokenizer, lora=lora_rank is not None)
        return engine

    def check_logprobs(self, engine: Any, pm: Any, tokenizer: Any, lora: bool) -> float:
        """Sample 8 tokens at temperature 2 from the servers' base model and compare their
        log-probs with the trainer's (adapters disabled); returns the mean difference."""
        import torch

        from adapters.policies.base import SamplingParams
        from adapters.training.logprobs import completion_logprobs

        probe = [{"role": "user", "content": "Name three colours."}]
        c = engine.generate([probe], SamplingParams(temperature=2.0, max_new_tokens=8, seed=1))
        c = c[0][0]
        if not c.token_ids:
            return 0.0
        ctx = pm.reference() if lora else contextlib.nullcontext()
        with torch.no_grad(), ctx:
            ours = completion_logprobs(
                pm.model,
                [c.prompt_ids],
                [c.token_ids],
                pad_id=int(tokenizer.pad_token_id),
                temperature=2.0,
            )[0]
        diff = float((ours.float().cpu() - torch.tensor(c.logprobs)).abs().mean())
        if not diff < self.probe_tolerance:
            raise RuntimeError(
                f"the vLLM servers {engine.servers} return log-probs that differ from the "
                f"trainer's by {diff:.3f} per token on a probe sample: start them with "
                "--logprobs-mode processed_logprobs, the trainer's initial weights (the same "
                "model and checkpoint) and a matching --dtype"
            )
        return diff


def make_backend(
    cfg: TrainConfig,
    models: dict[str, PolicyModel],
    tokenizer: Any,
    device: Any,
    roles: Sequence[str],
    role_prefix: dict[str, list[dict[str, str]]] | None = None,
    *,
    sync: WeightSync | None = None,
    sharded: bool = False,
) -> TransformersBackend | VLLMBackend:
    """The rollout backend named by ``cfg.compute.backend`` (see the module docstring); ``sharded``:
    the policies are FSDP-sharded (the transformers backend then generates on them)."""
    if cfg.compute.backend == "transformers":
        return TransformersBackend(
            cfg, models, tokenizer, device, roles, role_prefix, copies=False if sharded else None
        )
    if cfg.compute.backend == "vllm":  # generation in vLLM, weights synced after every update
        return VLLMBackend(cfg, models, tokenizer, device, roles, role_prefix, sync=sync)
    if cfg.compute.backend == "vllm-server":  # generation on running vLLM servers
        return VLLMServerBackend(cfg, models, tokenizer, device, roles, role_prefix, sync=sync)
    raise ValueError(
        f"unknown rollout backend {cfg.compute.backend!r}; "
        "available: transformers, vllm, vllm-server"
    )
