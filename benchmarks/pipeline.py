"""MarsRL training schedules side by side, compared fairly: synchronous loops vs the agentic
pipeline, with and without segment rollouts.

Usage::

    python benchmarks/pipeline.py                   # about 2 minutes on 2 idle cores
    python benchmarks/pipeline.py --quick           # a smoke run of seconds
    python benchmarks/pipeline.py --accept-rate 0.2 --problems 20 --per-step 2

**Workload.** The MarsRL setting (``solver_verifier_corrector``: Solver, V1, C1, V2, C2; K
candidates per input, adaptive selection of two outputs of the preceding agent) with the tiny
random Llama (``adapters.policies.models.tiny_model``, SmolLM2 tokenizer) decoding every token
on CPU and a real policy-gradient update of it after every step. The random model cannot solve
anything, so a scripted team decides what the agents *say* while the model decides nothing but
the tokens:

* the solver and the corrector answer wrongly, and the verifier accepts a solution with
  probability ``--accept-rate`` (default 0.5, an assumption: MarsRL reports no acceptance rate;
  with adaptive selection a trajectory goes on while any of its pool's candidates rejects, so
  the rate mostly decides how many candidates end early);
* each completion's length is drawn from a log-normal distribution whose mean depends on the
  agent, truncated at ``--max-tokens`` (MarsRL's 64k cap, scaled): the Solver's mean is 19/64 of
  the cap and the Verifier's and Corrector's 5/64 (MarsRL 4.3: initial response lengths of 19k
  and 5k tokens; 4.1: 64k maximum), with log-space deviation ``--sigma`` (default 0.75, an
  assumption: the long tail, about 4% of Solver completions reach the cap);
* lengths and verdicts are a pure function of the prompt and of how many completions of that
  prompt came before, so every schedule decodes the same completions (the ``gen tokens``
  column says so) whatever order it decodes them in.

**Schedules**, the same ``--problems``:

* ``sync, N/step``: each step rolls out the whole trajectories of ``N`` new problems (five
  waves, each one ``generate`` call), then trains on all their samples. Two rows: ``N =
  --per-step`` (the pipeline's admission rate), and ``N = 5 x --per-step``, which admits as many
  problems per step as the pipeline holds in flight in steady state (*equal admission*: its
  waves batch as many sequences as a pipeline step does);
* ``pipelined``: MarsRL 3.3: each step decodes one agent stage of every trajectory in flight
  plus the Solver of ``--per-step`` new problems, then trains on all of them
  (:class:`adapters.rollout.pipeline.AgentPipeline`);
* ``pipelined+segments``: the same with UloRL's segment rollout inside each stage
  (``--segment-tokens L --max-segments M``): a step decodes at most ``L`` tokens per completion,
  and a group enters the batch in the step its last member finishes.

**Columns**: trained samples per second of wall time (all samples of all problems, drain
included) and per CPU-second of this process (decoding and training run in one thread, so CPU
time counts this process's work only: the robust figure on a shared machine), each with its
ratio to the equal-admission synchronous row of the same run (the pipeline's gain beyond
batching) and to the per-step one; the wait between a sample's generation and the update that
trains it; the input age (policy versions between a trajectory's Solver and the stage trained)
and the token lag (versions between a sample's oldest token and its update), as
``value:count`` histograms.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.policies.base import Completion, GenerationConfig, SamplingParams
from adapters.policies.transformers_policy import TransformersPolicy
from adapters.rollout import EpisodeSpec, RolloutConfig, RolloutEngine
from adapters.rollout.episodes import derive_seed
from adapters.rollout.pipeline import AgentPipeline
from adapters.rollout.records import Sample
from adapters.rollout.segments import SegmentConfig
from adapters.training.sections import UpdateConfig
from benchmarks._quick import parse_args

ENV = "solver_verifier_corrector"
STAGES = 5  # Solver, V1, C1, V2, C2 (MarsRL 3.1)
REJECT = "Critical error: the final answer is wrong.\nVerdict: incorrect"
ACCEPT = "Every step holds.\nVerdict: correct"
MEAN_SHARE = {"solver": 19 / 64, "verifier": 5 / 64, "corrector": 5 / 64}  # MarsRL 4.3, 4.1


def role_of(prompt: str) -> str:
    for role in ("VERIFIER", "CORRECTOR"):
        if f"You are the {role}" in prompt:
            return role.lower()
    return "solver"


def draw_length(key: int, role: str, cap: int, sigma: float) -> int:
    """A completion's length: log-normal with the role's mean (``MEAN_SHARE`` of ``cap``), log
    deviation ``sigma``, truncated to ``[1, cap]``; a pure function of ``key``.

    >>> [draw_length(k, "solver", 128, 0.75) for k in range(3)] == [
    ...     draw_length(k, "solver", 128, 0.75) for k in range(3)]
    True
    >>> import statistics
    >>> s = statistics.mean(draw_length(k, "solver", 128, 0.75) for k in range(4000))
    >>> v = statistics.mean(draw_length(k, "verifier", 128, 0.75) for k in range(4000))
    >>> 30 < s < 40 and 8 < v < 12
    True
    """
    mean = MEAN_SHARE[role] * cap
    mu = math.log(mean) - sigma**2 / 2  # the mean of exp(N(mu, sigma)) is the role's mean
    z = random.Random(key).gauss(0.0, 1.0)
    return max(1, min(cap, round(math.exp(mu + sigma * z))))


class ScriptedLengthPolicy(TransformersPolicy):
    """The tiny model decodes each row for exactly its drawn length (EOS cannot end it early);
    the text is the scripted team's, the tokens and log-probs the model's. A row's length and
    verdict are keyed by its prompt and the number of rows of that prompt seen before."""

    def __init__(self, *args: Any, cap: int, sigma: float, accept: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cap, self.sigma, self.accept = cap, sigma, accept
        self.eos_ids = frozenset()  # the drawn length ends a row, not the random model
        self._started: Counter = Counter()  # prompt -> rows started
        self._finished: Counter = Counter()  # prompt -> rows finished
        self._target: dict[int, int] = {}  # row seed -> its length
        self.tokens = 0

    def _key(self, prompt_ids: Sequence[int], counter: Counter, what: str) -> int:
        prompt = tuple(prompt_ids)
        counter[prompt] += 1
        return derive_seed(0, what, hash(prompt) & 0xFFFFFFFF, counter[prompt])

    def _decode_chunk(  # type: ignore[override]
        self,
        prompts: list[list[int]],
        seeds: list[int],
        params: SamplingParams,
        prefixes: list[list[int]] | None = None,
        budget: int | Sequence[int] | None = None,
    ) -> list[tuple[list[int], list[float], str | None]]:
        done = [len(p) for p in prefixes] if prefixes is not None else [0] * len(prompts)
        for p, s, d in zip(prompts, seeds, done):
            if s not in self._target or d == 0:
                role = role_of(self.tokenizer.decode(p))
                key = self._key(p, self._started, "length")
                self._target[s] = draw_length(key, role, self.cap, self.sigma)
        targets = [self._target[s] for s in seeds]
        cap = budget if isinstance(budget, int) else params.max_new_tokens
        rows = super()._decode_chunk(
            prompts,
            seeds,
            params,
            prefixes,
            [max(1, min(cap, t - d)) for t, d in zip(targets, done)],
        )
        out = []
        for t, d, (tokens, lps, finish) in zip(targets, done, rows):
            self.tokens += len(tokens)
            if d + len(tokens) >= min(t, params.max_new_tokens):
                finish = finish or "stop"
            out.append((tokens, lps, finish))
        return out

    def _finish(
        self,
        prompt_ids: list[int],
        tokens: list[int],
        logprobs: list[float],
        finish: str,
        params: SamplingParams,
    ) -> Completion:
        prompt = self.tokenizer.decode(prompt_ids)
        role = role_of(prompt)
        if role == "verifier":
            u = random.Random(self._key(prompt_ids, self._finished, "verdict")).random()
            text = ACCEPT if u < self.accept else REJECT
        else:
            text = "Fixed the error.\n\\boxed{5}" if role == "corrector" else "\\boxed{7}"
        return Completion(
            text=text,
            token_ids=tokens,
            logprobs=logprobs,
            prompt_ids=list(prompt_ids),
            finish_reason="stop",
        )


@dataclass
class Run:
    """What one schedule measured."""

    name: str
    admit: int = 0
    samples: int = 0
    tokens: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time (robust to other jobs on the machine)
    waits: list[float] = field(default_factory=list)
    ages: Counter = field(default_factory=Counter)
    lags: Counter = field(default_factory=Counter)
    steps: int = 0
    train_seconds: float = 0.0


class Trainer:
    """A plain policy-gradient step on the samples (advantage = reward - batch mean)."""

    def __init__(self, policy: TransformersPolicy, lr: float | None = None) -> None:
        import torch

        self.policy = policy
        lr = lr or UpdateConfig().filled().lr  # the update section's default
        self.optimizer = torch.optim.SGD(policy.model.parameters(), lr=lr)

    def train(self, samples: Sequence[Sample]) -> None:
        from adapters.training.logprobs import completion_logprobs
        from adapters.training.masking import length_mask

        items = [s for s in samples if s.completion_ids]
        if not items:
            return
        mean = sum(s.reward for s in items) / len(items)
        model = self.policy.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = sum(len(s.completion_ids) for s in items)
        for i in range(0, len(items), 32):
            chunk = items[i : i + 32]
            lp = completion_logprobs(
                model,
                [s.prompt_ids for s in chunk],
                [s.completion_ids for s in chunk],
                pad_id=self.policy.pad_id,
            )
            mask = length_mask([len(s.completion_ids) for s in chunk], lp.shape[1])
            adv = lp.new_tensor([s.reward - mean for s in chunk])[:, None]
            (-(adv * lp * mask).sum() / total).backward()
        self.optimizer.step()
        model.eval()


def make_engine(policy: TransformersPolicy, args: argparse.Namespace) -> RolloutEngine:
    cfg = RolloutConfig(
        candidates=args.candidates, keep="adaptive", keep_n=2, keep_scope="instance"
    )
    # greedy: the tiny model's 49k-way sampling noise is not the point here
    gen = GenerationConfig(temperature=0.0, max_new_tokens=args.max_tokens)
    return RolloutEngine(ENV, policy, cfg, generation=gen, env_config={"max_steps": STAGES})


def specs(args: argparse.Namespace) -> list[EpisodeSpec]:
    return [
        EpisodeSpec(
            ENV,
            seed=i,
            config={"max_steps": STAGES},
            options={"instance": {"question": f"What is {i} + 1?", "answer": str(i + 1)}},
        )
        for i in range(args.problems)
    ]


def run_synchronous(policy: ScriptedLengthPolicy, args: argparse.Namespace, admit: int) -> Run:
    engine, trainer = make_engine(policy, args), Trainer(policy)
    run = Run(f"sync, {admit}/step", admit=admit)
    problems = specs(args)
    t0, c0 = time.perf_counter(), time.process_time()
    for step, start in enumerate(range(0, len(problems), admit)):
        rng, sib = random.Random(step), random.Random(step * 31 + 7)
        live = engine._retire_done(engine._roots(problems[start : start + admit], start, False), [])
        samples: list[Sample] = []
        born: list[float] = []
        wave = 0
        while live:  # engine.run's loop, timed per wave
            completions = engine._generate(live, args.candidates, seed=step * 7919 + wave)
            live = engine._finish_wave(live, completions, step, wave, rng, sib, samples, [])
            born += [time.perf_counter()] * (len(samples) - len(born))
            wave += 1
        t_train = time.perf_counter()
        run.waits += [t_train - b for b in born]
        run.ages.update({0: len(samples)})
        run.lags.update({0: len(samples)})
        trainer.train(samples)
        run.train_seconds += time.perf_counter() - t_train
        run.samples += len(samples)
        run.steps += 1
    run.seconds, run.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    run.tokens = policy.tokens
    engine.close()
    return run


def run_pipelined(
    policy: ScriptedLengthPolicy, args: argparse.Namespace, segments: SegmentConfig | None
) -> Run:
    name = "pipelined" if segments is None else "pipelined+segments"
    engine, trainer = make_engine(policy, args), Trainer(policy)
    run = Run(name, admit=args.per_step)
    pipe = AgentPipeline(engine, segments=segments)
    problems = specs(args)
    t0, c0 = time.perf_counter(), time.process_time()
    start = 0
    step_end: list[float] = []
    while start < len(problems) or pipe.in_flight:
        new = problems[start : start + args.per_step]
        start += len(new)
        batch = pipe.step(new, seed=run.steps)
        step_end.append(time.perf_counter())
        t_train = time.perf_counter()
        # a completion that finished w steps ago (segments) waited since that step's end
        run.waits += [t_train - step_end[-1 - w] for w in batch.waits]
        run.ages.update(batch.ages)
        run.lags.update(batch.lags)
        trainer.train(batch.samples)
        run.train_seconds += time.perf_counter() - t_train
        run.samples += len(batch.samples)
        run.steps += 1
    run.seconds, run.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    run.tokens = policy.tokens
    engine.close()
    return run


def histogram(counts: Counter) -> str:
    return " ".join(f"{k}:{counts[k]}" for k in sorted(counts))


def table(runs: list[Run], equal: Run, single: Run) -> str:
    head = (
        f"{'schedule':<19} {'steps':>5} {'samples':>7} {'gen tokens':>10} {'wall s':>6} "
        f"{'cpu s':>6} {'train s':>7} {'samples/s':>9} {'vs equal':>8} {'vs 1/step':>9} "
        f"{'per cpu-s':>9} {'vs equal':>8} {'wait mean/max s':>15}  {'input age':<22} token lag"
    )
    lines = [head, "-" * len(head)]
    eq_wall, eq_cpu = equal.samples / equal.seconds, equal.samples / equal.cpu_seconds
    one_wall = single.samples / single.seconds
    for r in runs:
        wall, cpu = r.samples / r.seconds, r.samples / r.cpu_seconds
        wait = f"{sum(r.waits) / max(1, len(r.waits)):.2f}/{max(r.waits, default=0):.2f}"
        lines.append(
            f"{r.name:<19} {r.steps:>5} {r.samples:>7} {r.tokens:>10} {r.seconds:>6.1f} "
            f"{r.cpu_seconds:>6.1f} {r.train_seconds:>7.1f} {wall:>9.2f} {wall / eq_wall:>7.2f}x "
            f"{wall / one_wall:>8.2f}x {cpu:>9.2f} {cpu / eq_cpu:>7.2f}x {wait:>15}  "
            f"{histogram(r.ages):<22} {histogram(r.lags)}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=20)
    ap.add_argument("--per-step", type=int, default=1, help="new problems per pipeline step")
    ap.add_argument("--candidates", type=int, default=4, help="K (MarsRL: 8; keeps 2)")
    ap.add_argument("--max-tokens", type=int, default=128, help="the length cap (MarsRL: 64k)")
    ap.add_argument("--sigma", type=float, default=0.75, help="log-normal deviation of lengths")
    ap.add_argument("--accept-rate", type=float, default=0.5, help="verifier acceptance rate")
    ap.add_argument("--segment-tokens", type=int, default=32)
    ap.add_argument("--max-segments", type=int, default=4)
    args = parse_args(
        ap, argv, problems=2, candidates=2, max_tokens=24, segment_tokens=8, max_segments=3
    )
    if args.segment_tokens * args.max_segments < args.max_tokens:
        ap.error("--segment-tokens x --max-segments must cover --max-tokens")
    if not 0 <= args.accept_rate <= 1:
        ap.error("--accept-rate must lie in [0, 1]")
    import torch

    from adapters.policies.models import tiny_model

    torch.set_num_threads(1)
    draw = {"cap": args.max_tokens, "sigma": args.sigma, "accept": args.accept_rate}

    def policy() -> ScriptedLengthPolicy:
        model, tok = tiny_model(seed=0)  # the same initial weights for every schedule
        return ScriptedLengthPolicy(model, tok, device="cpu", batch_size=64, **draw)

    warm = argparse.Namespace(**{**vars(args), "problems": 1})
    run_synchronous(policy(), warm, 1)  # warm-up (first-call allocations), not measured
    equal_admit = STAGES * args.per_step
    runs = []
    for mode in ("sync-1", "sync-equal", "pipelined", "pipelined+segments"):
        if mode.startswith("sync"):
            admit = args.per_step if mode == "sync-1" else equal_admit
            runs.append(run_synchronous(policy(), args, admit))
        else:
            seg = SegmentConfig(args.segment_tokens, args.max_segments)
            runs.append(run_pipelined(policy(), args, seg if "segments" in mode else None))
        print(f"{runs[-1].name}: {runs[-1].seconds:.1f} s", file=sys.stderr, flush=True)
    print(
        f"MarsRL setting, tiny model on CPU, {args.problems} problems x {args.candidates} "
        f"candidates; pipeline admits {args.per_step} per step, equal-admission sync "
        f"{equal_admit}; lengths log-normal (sigma {args.sigma}) with means "
        f"{MEAN_SHARE['solver'] * args.max_tokens:.0f} (Solver) and "
        f"{MEAN_SHARE['verifier'] * args.max_tokens:.0f} (V, C) tokens, cap {args.max_tokens}; "
        f"verifier acceptance {args.accept_rate:.0%}; segments {args.segment_tokens} x "
        f"{args.max_segments}"
    )
    print(table(runs, equal=runs[1], single=runs[0]))
    print(
        f"load average during the run: {os.getloadavg()[0]:.1f} (wall-clock ratios are noisy "
        "on a shared machine; the CPU-time ratios count this process's work only)"
    )


if __name__ == "__main__":
    main()
