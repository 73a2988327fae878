"""A Ray-backed env worker pool: env steps and sandboxed code run in actors, generation stays here.

``RayEnvPool`` implements the :class:`adapters.rollout.envpool.LocalEnvPool` interface (``reset`` /
``expand`` / ``oracle`` / ``release`` / ``close``, context manager, same return types), so
``RolloutEngine(env_id, policy, config, pool=RayEnvPool(num_workers=4))`` works unchanged. The
driver keeps the policies (GPU workers, batched generation); each actor hosts raw env instances
and its own sandbox (``sandboxes.default()`` created inside the actor process on first use) and
steps clones on a few threads, like the local pool does.

Placement. Branch ids are allocated by the driver, in the same order as ``LocalEnvPool`` does.
Root branches go to actors round-robin (a counter over the pool's lifetime, so the placement is
a deterministic function of the call sequence); a clone lives in the actor of its parent. Every
wave sends one remote call per involved actor (``expand`` and ``oracle`` requests are grouped
per actor) and all calls of a wave run in parallel. ``release`` is not a remote call: released
ids are queued per actor and travel with that actor's next call.

Recovery by replay. For every live branch the driver keeps its lineage: the ``EpisodeSpec`` of
its root and the completions applied since reset. Envs are deterministic given seed and actions
(and the sandbox is for deterministic programs), so this is enough to rebuild any branch. When a
call finds its actor dead (``RayActorError``: killed, crashed, node lost, or a call that passed
``call_timeout_s``), the pool starts a replacement actor, has it rebuild every branch the dead
one hosted (lineages sorted so that shared prefixes are replayed once: reset, then clone-and-step
along the path, the same operations that produced the branch), and re-runs the interrupted call
there. The other actors' results of the same wave are kept, so no episode is lost or stepped
twice. ``max_retries`` bounds consecutive failures of one call on one actor (a completion that
deterministically kills its actor raises ``RuntimeError`` instead of looping).

Limits: replay re-executes tool programs, so programs whose output depends on time or randomness
may differ after a recovery; run-wide shared objects (``create_shared``, e.g. question pools)
are copied into each actor, not shared between them. On a multi-node cluster pass
``actor_options`` (e.g. ``{"num_cpus": 1, "scheduling_strategy": "SPREAD"}``) and make the
project importable on every node (``runtime_env={"working_dir": ...}`` in ``ray.init``).

Test hooks: ``workers`` (the actor handles, e.g. for ``ray.kill``), ``inject_fault(worker,
crash_after_steps=..., step_delay_s=...)`` (an actor that hard-exits inside a step, or slow
steps), ``worker_stats()`` and ``recoveries``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from adapters.rollout.envpool import (
    BranchView,
    EpisodeSpec,
    StepOutcome,
    flush_dead_steps,
    make_raw_env,
    step_clone,
    view_of,
)

__all__ = ["RayEnvPool"]


def _outcome(bid: int, clone: Any, agent: str, info: dict, awards: list) -> StepOutcome:
    parts = info.get("reward_parts") or {}
    return StepOutcome(
        branch=view_of(bid, clone),
        agent=agent,
        reward=float(parts.get("reward", 0.0)),
        reward_parts=parts,
        info=info,
        awards=awards,
    )


class _EnvWorker:
    """The actor body (wrapped with ``ray.remote`` by the pool). Holds ``branch id -> raw env``."""

    def __init__(self, threads: int, sandbox_factory: Callable[[], Any] | None) -> None:
        self._envs: dict[int, Any] = {}
        self._executor = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="env")
        self._sandbox = sandbox_factory() if sandbox_factory is not None else None
        self._lock = threading.Lock()
        self._crash_after: int | None = None
        self._step_delay = 0.0
        self._steps = 0
        self._calls: dict[str, int] = {}

    # -- bookkeeping -------------------------------------------------------------------------
    def _begin(self, method: str, release: Sequence[int]) -> None:
        self._calls[method] = self._calls.get(method, 0) + 1
        for b in release:
            self._envs.pop(b, None)

    def _get(self, bid: int) -> Any:
        try:
            return self._envs[bid]
        except KeyError:
            raise KeyError(
                f"branch {bid} is not hosted by this worker (pid {os.getpid()})"
            ) from None

    def _step(self, raw: Any, completion: str) -> tuple[Any, str, dict, list]:
        with self._lock:
            self._steps += 1
            crash = self._crash_after is not None and self._steps > self._crash_after
        if crash:
            os._exit(17)  # test hook: the process dies inside a step, like a segfault would
        if self._step_delay:
            time.sleep(self._step_delay)
        return step_clone(raw, completion)

    # -- remote methods ----------------------------------------------------------------------
    def ping(self) -> int:
        return os.getpid()

    def reset(self, release: Sequence[int], items: Sequence[tuple[int, EpisodeSpec]]) -> list:
        self._begin("reset", release)
        raws = list(self._executor.map(lambda it: make_raw_env(it[1], self._sandbox), items))
        views = []
        for (bid, _), raw in zip(items, raws):
            flush_dead_steps(raw)
            self._envs[bid] = raw
            views.append(view_of(bid, raw))
        return views

    def expand(
        self, release: Sequence[int], items: Sequence[tuple[int, Sequence[tuple[int, str]]]]
    ) -> list[list[StepOutcome]]:
        self._begin("expand", release)
        jobs = [(self._get(parent), cid, text) for parent, kids in items for cid, text in kids]
        results = list(self._executor.map(lambda j: self._step(j[0], j[2]), jobs))
        outs = []
        for (_, cid, _), (clone, agent, info, awards) in zip(jobs, results):
            self._envs[cid] = clone
            outs.append(_outcome(cid, clone, agent, info, awards))
        rows, it = [], iter(outs)
        for _, kids in items:
            rows.append([next(it) for _ in kids])
        return rows

    def oracle(self, release: Sequence[int], bids: Sequence[int]) -> list[str]:
        self._begin("oracle", release)
        raws = [self._get(b) for b in bids]
        return [raw.oracle(raw.agent_selection) for raw in raws]

    def release(self, release: Sequence[int]) -> int:
        self._begin("release", release)
        return len(self._envs)

    def rebuild(self, items: Sequence[tuple[int, int, EpisodeSpec, tuple[str, ...]]]) -> int:
        """Re-create branches from ``(branch id, root id, root spec, completions)`` by replay.

        Items of one root are replayed in lexicographic order of their completions with a stack
        of the envs along the current path, so a prefix shared by several branches is stepped
        once (the same reset + clone-and-step operations that created the branches)."""
        self._begin("rebuild", ())
        by_root: dict[int, list] = {}
        for bid, root, spec, actions in items:
            by_root.setdefault(root, []).append((tuple(actions), bid, spec))

        def replay(group: list) -> list[tuple[int, Any]]:
            group.sort(key=lambda g: g[0])
            root = make_raw_env(group[0][2], self._sandbox)
            flush_dead_steps(root)
            stack: list[Any] = [root]  # stack[i]: the env after path[:i]
            path: tuple[str, ...] = ()
            done: list[tuple[int, Any]] = []
            taken: set[int] = set()
            for actions, bid, _ in group:
                k = 0
                while k < min(len(path), len(actions)) and path[k] == actions[k]:
                    k += 1
                del stack[k + 1 :]
                for text in actions[k:]:
                    stack.append(step_clone(stack[-1], text)[0])
                path = actions
                raw = stack[-1]
                if id(raw) in taken:  # identical lineages (e.g. K equal candidates): own copy
                    raw = raw.clone()
                taken.add(id(raw))
                done.append((bid, raw))
            return done

        for rebuilt in self._executor.map(replay, by_root.values()):
            for bid, raw in rebuilt:
                self._envs[bid] = raw
        return len(self._envs)

    def inject_fault(self, crash_after_steps: int | None, step_delay_s: float) -> None:
        with self._lock:
            self._crash_after = (
                None if crash_after_steps is None else self._steps + crash_after_steps
            )
            self._step_delay = float(step_delay_s)

    def stats(self, release: Sequence[int]) -> dict[str, Any]:
        import ray

        self._begin("stats", release)
        return {
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "envs": len(self._envs),
            "steps": self._steps,
            "calls": dict(self._calls),
        }


@dataclass(frozen=True)
class _Lineage:
    """How to rebuild a branch: reset ``spec`` and apply ``actions`` (clone-and-step each)."""

    root: int
    spec: EpisodeSpec
    actions: tuple[str, ...]
    worker: int


class RayEnvPool:
    """Env pool over ``num_workers`` Ray actors (see the module docstring).

    threads_per_worker: threads stepping clones inside each actor (overlaps sandbox runs).
    sandbox_factory: called inside each actor to build its sandbox (default: envs use
        ``sandboxes.default()`` of the actor process). Must be picklable.
    actor_options: passed to ``.options()`` of the actor class (``num_cpus``, ``resources``,
        ``scheduling_strategy``, ``runtime_env``...).
    max_retries: consecutive failed attempts of one call on one actor before giving up.
    call_timeout_s: a call running longer counts as a dead actor (None: wait forever).
    start_timeout_s: how long a replacement actor may take to start and replay its branches
        (process start-up is slow on a loaded machine; it is not a hung call).
    init_kwargs: for ``ray.init`` when Ray is not initialised yet (default: a local instance
        without dashboard).
    """

    def __init__(
        self,
        num_workers: int = 2,
        *,
        threads_per_worker: int = 2,
        sandbox_factory: Callable[[], Any] | None = None,
        actor_options: dict[str, Any] | None = None,
        max_retries: int = 3,
        call_timeout_s: float | None = None,
        start_timeout_s: float = 120.0,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if call_timeout_s is not None and call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s must be positive or None, got {call_timeout_s!r}")
        if sandbox_factory is not None and not callable(sandbox_factory):
            raise TypeError("sandbox_factory must be a callable returning a sandbox")
        import ray

        if not ray.is_initialized():
            ray.init(**{"include_dashboard": False, **(init_kwargs or {})})
        self._ray = ray
        self._threads = threads_per_worker
        self._sandbox_factory = sandbox_factory
        self._actor_cls = ray.remote(_EnvWorker).options(
            **{"max_restarts": 0, "max_task_retries": 0, **(actor_options or {})}
        )
        self.max_retries = max_retries
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self.recoveries = 0
        self._ids = itertools.count()
        self._next_root_worker = 0
        self._lineage: dict[int, _Lineage] = {}
        self._releases: list[list[int]] = [[] for _ in range(num_workers)]
        self._closed = False
        self._actors = [self._spawn() for _ in range(num_workers)]
        try:
            ray.get([a.ping.remote() for a in self._actors])  # surface start-up errors here
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ introspection
    @property
    def num_workers(self) -> int:
        return len(self._actors)

    @property
    def workers(self) -> list[Any]:
        """The current actor handles (a replaced actor gets a new handle)."""
        return list(self._actors)

    def worker_of(self, branch_id: int) -> int:
        """Index of the actor hosting ``branch_id``."""
        return self._lin(branch_id).worker

    def lineage(self, branch_id: int) -> tuple[EpisodeSpec, tuple[str, ...]]:
        """The root spec and the completions applied since reset (what a replay uses)."""
        lin = self._lin(branch_id)
        return lin.spec, lin.actions

    def __len__(self) -> int:
        return len(self._lineage)

    def worker_stats(self) -> list[dict[str, Any]]:
        """Per actor: pid, Ray node id, hosted envs, steps taken, remote calls by method (sends
        queued releases first, so ``envs`` counts only live branches)."""
        out = self._call("stats", {w: None for w in range(self.num_workers)}, no_payload=True)
        return [out[w] for w in range(self.num_workers)]

    def inject_fault(
        self, worker: int, *, crash_after_steps: int | None = None, step_delay_s: float = 0.0
    ) -> None:
        """Test hook: actor ``worker`` hard-exits (``os._exit``) when it starts its
        ``crash_after_steps + 1``-th step from now, and/or sleeps ``step_delay_s`` per step. A
        replacement actor starts without faults."""
        self._ray.get(self._actors[worker].inject_fault.remote(crash_after_steps, step_delay_s))

    # ------------------------------------------------------------------ pool interface
    def reset(self, specs: Sequence[EpisodeSpec]) -> list[BranchView]:
        self._check_open()
        for s in specs:
            if not isinstance(s, EpisodeSpec):
                raise TypeError(f"reset() takes EpisodeSpec objects, got {type(s).__name__}")
        placed: dict[int, list[tuple[int, EpisodeSpec]]] = {}
        order: list[tuple[int, int]] = []  # (worker, position in its payload)
        for spec in specs:
            w = self._next_root_worker
            self._next_root_worker = (w + 1) % self.num_workers
            bid = next(self._ids)
            placed.setdefault(w, []).append((bid, spec))
            order.append((w, len(placed[w]) - 1))
        results = self._call("reset", placed)
        for w, items in placed.items():
            for bid, spec in items:
                self._lineage[bid] = _Lineage(root=bid, spec=spec, actions=(), worker=w)
        return [results[w][i] for w, i in order]

    def expand(self, requests: Sequence[tuple[int, Sequence[str]]]) -> list[list[StepOutcome]]:
        self._check_open()
        placed: dict[int, list[tuple[int, list[tuple[int, str]]]]] = {}
        order: list[tuple[int, int]] = []
        for bid, texts in requests:
            w = self._lin(bid).worker
            kids = []
            for text in texts:
                if not isinstance(text, str):
                    raise TypeError(f"completions must be str, got {type(text).__name__}")
                kids.append((next(self._ids), text))
            placed.setdefault(w, []).append((bid, kids))
            order.append((w, len(placed[w]) - 1))
        try:
            results = self._call("expand", placed)
        except BaseException:
            for w, items in placed.items():  # children some actors may have created
                self._releases[w].extend(cid for _, kids in items for cid, _ in kids)
            raise
        for w, items in placed.items():
            for parent, kids in items:
                lin = self._lineage[parent]
                for cid, text in kids:
                    self._lineage[cid] = _Lineage(lin.root, lin.spec, (*lin.actions, text), w)
        return [results[w][i] for w, i in order]

    def oracle(self, branch_ids: Sequence[int]) -> list[str]:
        self._check_open()
        placed: dict[int, list[int]] = {}
        order: list[tuple[int, int]] = []
        for bid in branch_ids:
            w = self._lin(bid).worker
            placed.setdefault(w, []).append(bid)
            order.append((w, len(placed[w]) - 1))
        results = self._call("oracle", placed)
        return [results[w][i] for w, i in order]

    def release(self, branch_ids: Sequence[int]) -> None:
        for b in branch_ids:
            lin = self._lineage.pop(b, None)
            if lin is not None:
                self._releases[lin.worker].append(b)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for a in self._actors:
            self._kill(a)
        self._lineage.clear()
        self._releases = [[] for _ in self._actors]

    def __enter__(self) -> RayEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this RayEnvPool is closed")

    def _lin(self, bid: int) -> _Lineage:
        try:
            return self._lineage[bid]
        except KeyError:
            raise KeyError(f"unknown branch id {bid!r} (released, or never created)") from None

    def _kill(self, actor: Any) -> None:
        with contextlib.suppress(Exception):  # already dead, or Ray already shut down
            self._ray.kill(actor, no_restart=True)

    def _spawn(self) -> Any:
        return self._actor_cls.remote(self._threads, self._sandbox_factory)

    def _call(
        self, method: str, payloads: dict[int, Any], no_payload: bool = False
    ) -> dict[int, Any]:
        """Run ``method`` on every actor in ``payloads`` in parallel; replace dead actors,
        rebuild their branches and re-run their part until it succeeds (or retries run out)."""
        from ray.exceptions import GetTimeoutError, RayActorError

        results: dict[int, Any] = {}
        pending = dict(payloads)
        failures = dict.fromkeys(pending, 0)
        while pending:
            refs = {}
            for w, payload in pending.items():
                release, self._releases[w] = self._releases[w], []
                fn = getattr(self._actors[w], method)
                refs[w] = fn.remote(release) if no_payload else fn.remote(release, payload)
            deadline = (
                None if self.call_timeout_s is None else time.monotonic() + self.call_timeout_s
            )
            dead: dict[int, BaseException] = {}
            for w, ref in refs.items():
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    results[w] = self._ray.get(ref, timeout=timeout)
                except (RayActorError, GetTimeoutError) as e:
                    dead[w] = e
            for w, err in dead.items():
                failures[w] += 1
                if failures[w] > self.max_retries:
                    raise RuntimeError(
                        f"env worker {w} failed {failures[w]} times in a row running {method!r} "
                        f"(max_retries={self.max_retries}); last error: {err}"
                    ) from err
                self._replace(w)
            pending = {w: pending[w] for w in dead}
        return results

    def _replace(self, w: int) -> None:
        """Start a new actor for slot ``w`` and replay every branch the old one hosted."""
        from ray.exceptions import GetTimeoutError, RayActorError

        self.recoveries += 1
        self._kill(self._actors[w])
        self._releases[w] = []
        items = [
            (bid, lin.root, lin.spec, lin.actions)
            for bid, lin in self._lineage.items()
            if lin.worker == w
        ]
        for attempt in range(self.max_retries + 1):
            self._actors[w] = self._spawn()
            try:
                timeout = (
                    None
                    if self.call_timeout_s is None
                    else max(self.call_timeout_s, self.start_timeout_s)
                )
                self._ray.get(self._actors[w].rebuild.remote(items), timeout=timeout)
                return
            except (RayActorError, GetTimeoutError) as err:
                self._kill(self._actors[w])
                if attempt == self.max_retries:
                    raise RuntimeError(
                        f"could not rebuild env worker {w} ({len(items)} branches): {err}"
                    ) from err
