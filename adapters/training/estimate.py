"""A rough estimate of a training run's wall time, for its header: measured here, scaled up.

``python -m adapters.train`` prints, after the run header, a line such as (the CPU default,
``--env sokoban``; docs/scaling.md compares it with the run's measured times)::

    expected wall time (rough estimate): ~50 min to ~1.9 h = 2 evaluations x ~14 min + 6
    training steps x ~3.6 to ~14 min (timed here in 2.5 s; every completion as long as
    max_new_tokens allows; a step's episodes as short as the oracle's, 2 agent steps, to their
    full 8; every sample trained)

Right after the model is loaded, :func:`time_model` times the forward passes a run is made of,
on random token ids, keeping nothing: the model that generates (the transformers backend's
generation copy, else the training module) prefills one prompt as long as the setting's first
prompt into the CPU decoder's cache (:func:`~adapters.policies.decoding.decode_cache`) and then
decodes one step over as many copies of it as the run decodes together (an evaluation's
episodes; a rollout's ``gen_batch_size``); the training module runs a forward pass over
:data:`PROMPT_TOKENS` tokens under the update's autocast. That takes a second or two on a CPU.
:func:`estimate` scales the times by what the run will do (:class:`RunShape`, from
:func:`run_shape`):

* an evaluation: its episodes are decoded together, a wave per agent step, until the last one
  ends; that is taken to be the step budget (``env.step_budget()``: turns x agents; for a setting
  without one, the steps of an oracle episode), each wave prefilling every live episode's prompt
  and decoding ``max_new_tokens`` steps;
* a training step: the same waves over ``instances_per_step x K`` rows, decoded
  ``gen_batch_size`` at a time, then an update over every sample's prompt and completion at
  :data:`UPDATE_PASSES` forward passes per token (forward and backward). A step's few episodes
  often end long before the budget (a team that solves a level in its first turn), so a step is
  given as a range: its episodes as short as the setting's oracle's, to their full budget.

It is rough, and the line says what it assumed: completions that stop before ``max_new_tokens``
and samples the update leaves out (a group whose rewards are all equal) make a run faster;
prompts that grow with the episode's history make it slower; scripted references, cold starts,
checkpoints and exports are not counted. A run whose generation runs elsewhere (``--backend
vllm``, ``vllm-server``) gets no estimate, nor does a run on several ranks (torchrun): only rank
0 prints the header, and its timed forwards would keep the other ranks waiting at their first
collective (past ``dist_timeout_s`` on a slow machine), or deadlock a sharded module's forward.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PROMPT_TOKENS",
    "UPDATE_PASSES",
    "Estimate",
    "RunShape",
    "Timing",
    "estimate",
    "estimate_line",
    "run_shape",
    "time_model",
]

PROMPT_TOKENS = 128  # the length of the training module's timed forward pass
UPDATE_PASSES = 3  # an update's forward and backward cost about three forward passes


@dataclass(frozen=True)
class Timing:
    """What the forward passes of the run's models cost on this machine (:func:`time_model`)."""

    prefill_s: float  # seconds per prompt token of a prefill (the generating model)
    step_s: Mapping[int, float]  # rows -> seconds of one decode step over that many rows
    update_s: float  # seconds per token of a forward pass of the training module
    spent_s: float = 0.0  # how long measuring took

    def decode_step(self, rows: int) -> float:
        """Seconds of a decode step over ``rows`` rows: measured, or scaled linearly from the
        nearest measured row count (on a CPU a step's cost grows with its rows).

        >>> Timing(prefill_s=0.0, step_s={16: 0.1}, update_s=0.0).decode_step(32)
        0.2
        """
        if rows in self.step_s:
            return self.step_s[rows]
        near = min(self.step_s, key=lambda r: abs(r - rows))
        return self.step_s[near] * rows / near


@dataclass(frozen=True)
class RunShape:
    """What a training run generates and trains on (:func:`run_shape`)."""

    episode_steps: int  # agent steps (waves) of a full episode: its step budget
    short_steps: int  # agent steps of a short episode: the oracle's
    prompt_tokens: int  # tokens of a prompt (the first one, with its demonstrations)
    new_tokens: int  # max_new_tokens: an evaluation's completion length at most
    train_new_tokens: float  # a training completion's at most, the mean over the agents' turns
    eval_episodes: int
    evaluations: int  # evaluations still to run (before, every eval_every steps, after)
    steps: int  # training steps still to run
    rows: int  # sequences a training step's wave generates (instances x K, this rank's)
    batch: int  # sequences decoded together in a training rollout (gen_batch_size)


@dataclass(frozen=True)
class Estimate:
    """The estimated wall time of a run, in seconds; a step and the total as a range."""

    evaluation_s: float  # one evaluation
    step_s: tuple[float, float]  # one training step: short episodes, full episodes
    total_s: tuple[float, float]


def time_model(
    generator: Any,
    trainer: Any,
    prompt_tokens: int,
    rows: Iterable[int],
    update_scope: Callable[[], Any] | None = None,
) -> Timing:
    """Time the forward passes the run is made of (module docstring): ``generator`` prefills one
    prompt of ``prompt_tokens`` tokens into a cache, then decodes one step over each count of
    ``rows`` copies of it; ``trainer`` (the training module) runs a forward pass over
    :data:`PROMPT_TOKENS` tokens inside ``update_scope()`` (the update's autocast). A decode
    step and the training forward run twice, the second is kept (the first pays for allocation
    and kernel selection). The token ids are random (the cost does not depend on them), drawn
    from a generator of their own, and the global random state is restored afterwards, so the
    run samples what it would have sampled without the estimate."""
    import contextlib
    import inspect

    import torch

    from adapters.policies.decoding import decode_cache
    from adapters.policies.models import cache_keyword

    device = next(generator.parameters()).device
    # as the policy calls it: the cache under its keyword, logits of the last position only
    kw = cache_keyword(generator)
    takes_keep = "logits_to_keep" in inspect.signature(generator.forward).parameters
    keep = {"logits_to_keep": 1} if takes_keep else {}
    vocab = int(generator.config.get_text_config().vocab_size)
    draw = torch.Generator().manual_seed(0)

    def ids(batch: int, length: int) -> Any:
        return torch.randint(0, vocab, (batch, length), generator=draw).to(device)

    def timed(model: Any, repeat: int = 2, **inputs: Any) -> float:
        """Seconds of ``model(**inputs)``, the last of ``repeat`` runs."""
        spent = 0.0
        for _ in range(repeat):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            model(**inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            spent = time.perf_counter() - t0
        return spent

    t0 = time.perf_counter()
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.inference_mode():
        generator(input_ids=ids(1, 8), use_cache=False)  # warm-up
        prompt, cache = ids(1, prompt_tokens), decode_cache(generator.config)
        prefill_s = timed(generator, 1, input_ids=prompt, **{kw: cache}, **keep)
        step_s = {}
        for r in sorted(set(rows)):
            copies = copy.deepcopy(cache)
            copies.reorder_cache(torch.zeros(r, dtype=torch.long, device=device))
            step_s[r] = timed(generator, input_ids=ids(r, 1), **{kw: copies}, **keep)
        with (update_scope or contextlib.nullcontext)():
            update = timed(trainer, input_ids=ids(1, PROMPT_TOKENS), use_cache=False)
    return Timing(
        prefill_s=prefill_s / prompt_tokens,
        step_s=step_s,
        update_s=update / PROMPT_TOKENS,
        spent_s=time.perf_counter() - t0,
    )


def estimate(shape: RunShape, timing: Timing) -> Estimate:
    """The run's wall time from ``timing`` scaled by ``shape`` (module docstring).

    >>> t = Timing(prefill_s=0.001, step_s={64: 0.2, 16: 0.05}, update_s=0.001)
    >>> s = RunShape(episode_steps=8, short_steps=2, prompt_tokens=500, new_tokens=100,
    ...              train_new_tokens=100, eval_episodes=64, evaluations=2, steps=6, rows=16,
    ...              batch=16)
    >>> e = estimate(s, t)  # a wave: 100 decode steps over 64 rows (20 s) + 32,000 prompt tokens
    >>> round(e.evaluation_s), [round(x) for x in e.step_s], [round(x) for x in e.total_s]
    (416, [84, 334], [1334, 2838])
    """
    evaluation = shape.episode_steps * (
        shape.new_tokens * timing.decode_step(max(1, shape.eval_episodes))
        + shape.eval_episodes * shape.prompt_tokens * timing.prefill_s
    )
    batch = max(1, min(shape.batch, shape.rows))
    wave = (
        math.ceil(shape.rows / batch) * shape.train_new_tokens * timing.decode_step(batch)
        + shape.rows * shape.prompt_tokens * timing.prefill_s
    )
    per_sample = (shape.prompt_tokens + shape.train_new_tokens) * UPDATE_PASSES * timing.update_s
    low, high = (waves * (wave + shape.rows * per_sample) for waves in _waves(shape))
    evaluations = evaluation * shape.evaluations if shape.eval_episodes else 0.0
    return Estimate(
        evaluation_s=evaluation,
        step_s=(low, high),
        total_s=(evaluations + low * shape.steps, evaluations + high * shape.steps),
    )


def _waves(shape: RunShape) -> tuple[int, int]:
    """A training rollout's waves: short episodes, full episodes."""
    return min(shape.short_steps, shape.episode_steps), shape.episode_steps


def run_shape(trainer: Any) -> RunShape:
    """The :class:`RunShape` of a :class:`~adapters.training.trainer.Trainer` that is about to
    :meth:`~adapters.training.trainer.Trainer.train` (a resumed one counts what is left)."""
    import envs

    run = trainer.run
    cfg = run.cfg
    raw = envs.make(cfg.env, **{**run.env_config, **run.shared}).unwrapped
    raw.reset(seed=cfg.seed)
    agent, agents = raw.agent_selection, list(raw.possible_agents)
    demos = "\n".join(m["content"] for m in run.demos.get(agent, []))
    prompt_tokens = len(run.tokenizer(raw.observe(agent)["prompt"] + demos)["input_ids"])
    cap = int(cfg.rollout.max_steps)
    budget = raw.step_budget()
    short = _oracle_steps(raw, cap)  # plays the episode: after the prompt is read
    done, last = trainer.step, cfg.schedule.steps
    steps = max(0, last - done)
    every = cfg.eval.eval_every
    between = (last - 1) // every - done // every if every and steps else 0  # done < s < last
    evaluations = int(not (run.out / "eval_before.json").exists()) + int(steps > 0) + between
    return RunShape(
        episode_steps=min(budget, cap) if budget is not None else short,
        short_steps=short,
        prompt_tokens=prompt_tokens,
        new_tokens=int(cfg.generation.max_new_tokens),  # evaluations: one length for all roles
        train_new_tokens=sum(cfg.generation.params(a, 1, None).max_new_tokens for a in agents)
        / len(agents),
        eval_episodes=int(cfg.eval.eval_episodes),
        evaluations=evaluations,
        steps=steps,
        rows=max(1, cfg.schedule.instances_per_step // run.dist.world_size)
        * int(cfg.rollout.candidates),
        batch=int(cfg.generation.gen_batch_size),
    )


def _oracle_steps(raw: Any, cap: int) -> int:
    """The agent steps of the episode ``raw`` was reset to when the oracle plays it (at most
    ``cap``, the engine's ``max_steps``)."""
    steps = 0
    while raw.agents and steps < cap:
        agent = raw.agent_selection
        done = raw.terminations[agent] or raw.truncations[agent]
        raw.step(None if done else raw.oracle(agent))
        steps += 0 if done else 1
    return max(1, steps)


def generating_model(run: Any) -> Any | None:
    """The module the run generates with: the first generation copy of the transformers
    backend, or the first training module when it generates on those; ``None`` when generation
    runs elsewhere (vLLM)."""
    if run.cfg.compute.backend != "transformers":
        return None
    copies = getattr(run.backend, "copies", None) or {}
    if copies:
        return next(iter(copies.values())).model
    return next(iter(run.models.values())).model


def _duration(seconds: float) -> str:
    """``seconds`` rounded for a person.

    >>> _duration(42), _duration(150), _duration(2040), _duration(3 * 3600 + 1200)
    ('~42 s', '~2.5 min', '~34 min', '~3.3 h')
    """
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 600:
        return f"~{seconds / 60:.1f} min"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def _count(n: int, what: str) -> str:
    """``n`` and ``what``, plural unless one.

    >>> _count(1, "training step"), _count(2, "evaluation")
    ('1 training step', '2 evaluations')
    """
    return f"{n} {what}{'' if n == 1 else 's'}"


def _span(low: float, high: float) -> str:
    """A range of durations, one value when they round alike.

    >>> _span(120, 500), _span(120, 121)
    ('~2.0 to ~8.3 min', '~2.0 min')
    """
    a, b = _duration(low), _duration(high)
    if a == b:
        return a
    unit_a, unit_b = a.split()[-1], b.split()[-1]
    return f"{a.rsplit(' ', 1)[0] if unit_a == unit_b else a} to {b}"


def estimate_line(trainer: Any) -> str | None:
    """The header's line for ``trainer``'s run (module docstring), or ``None`` when its
    generation is not timed here, it runs on several ranks (only rank 0 prints the header: a
    forward there alone would keep the others waiting at their first collective, and a sharded
    module's forward is itself a collective) or nothing is left to run."""
    from adapters.training.update import precision

    if trainer.run.dist.enabled:
        return None
    model = generating_model(trainer.run)
    if model is None:
        return None
    shape = run_shape(trainer)
    if not shape.steps and not (shape.eval_episodes and shape.evaluations):
        return None  # nothing left to do
    rows = {max(1, shape.eval_episodes), max(1, min(shape.batch, shape.rows))}
    training = next(iter(trainer.run.models.values())).model
    timing = time_model(
        model,
        training,
        shape.prompt_tokens,
        rows,
        update_scope=functools.partial(precision, trainer.run.cfg.update, training),
    )
    est = estimate(shape, timing)
    parts = []
    if shape.eval_episodes and shape.evaluations:
        parts.append(f"{_count(shape.evaluations, 'evaluation')} x {_duration(est.evaluation_s)}")
    if shape.steps:
        parts.append(f"{_count(shape.steps, 'training step')} x {_span(*est.step_s)}")
    short, full = _waves(shape)
    return (
        f"expected wall time (rough estimate): {_span(*est.total_s)}"
        + (f" = {' + '.join(parts)}" if parts else "")
        + f" (timed here in {timing.spent_s:.1f} s; every completion as long as max_new_tokens "
        f"allows; a step's episodes as short as the oracle's, {short} agent steps, to their "
        f"full {full}; every sample trained)"
    )
