"""MarsRL training schedules side by side: synchronous vs agentic pipeline vs pipeline + segments.

Usage::

    python benchmarks/pipeline.py                  # about two minutes on two CPU cores
    python benchmarks/pipeline.py --quick          # fewer problems
    python benchmarks/pipeline.py --segment-tokens 64 --max-segments 4 --problems 8

The workload is the MarsRL setting (``solver_verifier_corrector``, Solver, V1, C1, V2, C2, K
candidates, adaptive selection of two outputs of the preceding agent) with the tiny random Llama
(``adapters.policies.models.tiny_model``, SmolLM2 tokenizer) decoding on CPU. The random model
cannot solve anything, so a scripted team decides what the agents *say* (the solver and the
corrector answer wrongly and the verifier rejects, so every trajectory runs all five stages and
every schedule trains the same samples), while the model really decodes every token: each completion's length is drawn from
its sampling seed with a long tail (``--tail-share`` of the completions take
``--long`` tokens, the others ``--short``), so a batch waits for its longest member as a
real long-reasoning batch does. Every training step runs a real policy-gradient update of the
same model on the step's samples.

Three schedules, the same problems (``--problems``, admitted ``--per-step`` at a time):

* ``synchronous``: each step rolls out its problems' whole trajectories (five waves), then trains;
* ``pipelined``: MarsRL section 3.3: each step decodes one agent stage of every trajectory in
  flight plus the Solver of the new problems, then trains on all of them
  (:class:`adapters.rollout.pipeline.AgentPipeline`);
* ``pipelined+segments``: the same, with UloRL's segment rollout inside each stage
  (``--segment-tokens L --max-segments M``): a step decodes at most ``L`` tokens per
  completion, finished completions go on at once (:mod:`adapters.rollout.segments`).

Columns: trained samples per second (all samples of all problems over the wall time, drain
included) and per CPU-second of this process (the same figure on an idle single-core machine:
decoding and training run in one thread, so the CPU time is the work done, and it does not
depend on other jobs sharing the machine); the wait between a sample's generation and the start of the update that trains it
(mean and max); the input age (policy versions between a trajectory's Solver and the stage
trained) and the token lag (versions between a sample's oldest token and its update), as
``value:count`` histograms. The ratio column is against the synchronous row of the same run.
A projection for the paper's scale follows the table, with its assumptions.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.policies.base import Completion, SamplingParams
from adapters.policies.transformers_policy import TransformersPolicy
from adapters.rollout import EpisodeSpec, RolloutConfig, RolloutEngine
from adapters.rollout.episodes import derive_seed
from adapters.rollout.pipeline import AgentPipeline
from adapters.rollout.records import Sample
from adapters.rollout.segments import SegmentConfig
from benchmarks._quick import parse_args

ENV = "solver_verifier_corrector"
REJECT = "Critical error: the final answer is wrong.\nVerdict: incorrect"


def scripted_text(prompt: str) -> str:
    """What an agent says (module docstring): the verifier always finds the (real) error, so
    every trajectory runs all five stages and every schedule trains the same number of samples."""
    if "You are the VERIFIER" in prompt:
        return REJECT
    if "You are the CORRECTOR" in prompt:
        return "Fixed the error.\n\\boxed{5}"
    return "\\boxed{7}"


def completion_length(seed: int, short: tuple[int, int], long: int, tail_share: float) -> int:
    """A completion's scripted length, a pure function of its sampling seed (long-tailed).

    >>> completion_length(3, (8, 16), 200, 0.0) in range(8, 17)
    True
    >>> completion_length(3, (8, 16), 200, 1.0)
    200
    """
    u = derive_seed(seed, "length") / (2**31 - 1)
    if u < tail_share:
        return long
    lo, hi = short
    return lo + int((u - tail_share) / (1 - tail_share) * (hi - lo + 1)) % (hi - lo + 1)


class LongTailPolicy(TransformersPolicy):
    """The tiny model decodes each row for exactly its scripted length (EOS cannot end it
    early); the completion's text is the scripted team's, its tokens and log-probs the model's."""

    def __init__(self, *args: Any, lengths: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lengths = lengths
        self.eos_ids = frozenset()  # the scripted length ends a row, not the random model

    def _target(self, seed: int) -> int:
        return completion_length(seed, **self.lengths)

    def _decode_chunk(  # type: ignore[override]
        self,
        prompts: list[list[int]],
        seeds: list[int],
        params: SamplingParams,
        prefixes: list[list[int]] | None = None,
        states: list[Any] | None = None,
        budget: int | Sequence[int] | None = None,
    ) -> list[tuple[list[int], list[float], str | None, Any]]:
        done = [len(p) for p in prefixes] if prefixes is not None else [0] * len(prompts)
        targets = [self._target(s) for s in seeds]
        cap = budget if isinstance(budget, int) else params.max_new_tokens
        rows = super()._decode_chunk(
            prompts,
            seeds,
            params,
            prefixes,
            states,
            [max(1, min(cap, t - d)) for t, d in zip(targets, done)],
        )
        out = []
        for t, d, (tokens, lps, finish, state) in zip(targets, done, rows):
            if d + len(tokens) >= min(t, params.max_new_tokens):
                finish = finish or "stop"
            out.append((tokens, lps, finish, state))
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
        return Completion(
            text=scripted_text(prompt),
            token_ids=tokens,
            logprobs=logprobs,
            prompt_ids=list(prompt_ids),
            finish_reason="stop",
        )


@dataclass
class Run:
    """What one schedule measured."""

    name: str
    samples: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time (robust to other jobs on the machine)
    waits: list[float] = field(default_factory=list)
    ages: Counter = field(default_factory=Counter)
    lags: Counter = field(default_factory=Counter)
    steps: int = 0
    train_seconds: float = 0.0


class Trainer:
    """A plain policy-gradient step on the samples (advantage = reward - batch mean)."""

    def __init__(self, policy: TransformersPolicy, lr: float = 1e-4) -> None:
        import torch

        self.policy = policy
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
        candidates=args.candidates,
        keep="adaptive",
        keep_n=2,
        keep_scope="instance",
        temperature=0.0,  # greedy: the tiny model's 49k-way sampling noise is not the point here
        max_new_tokens=args.long,
    )
    return RolloutEngine(ENV, policy, cfg, env_config={"max_steps": 5})


def specs(args: argparse.Namespace) -> list[EpisodeSpec]:
    return [
        EpisodeSpec(
            ENV,
            seed=i,
            config={"max_steps": 5},
            options={"instance": {"question": f"What is {i} + 1?", "answer": str(i + 1)}},
        )
        for i in range(args.problems)
    ]


def run_synchronous(policy: TransformersPolicy, args: argparse.Namespace) -> Run:
    import random

    engine, trainer, run = make_engine(policy, args), Trainer(policy), Run("synchronous")
    problems = specs(args)
    t0, c0 = time.perf_counter(), time.process_time()
    for step, start in enumerate(range(0, len(problems), args.per_step)):
        rng, sib = random.Random(step), random.Random(step * 31 + 7)
        live = engine._retire_done(
            engine._roots(problems[start : start + args.per_step], start, False), []
        )
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
    engine.close()
    return run


def run_pipelined(
    policy: TransformersPolicy, args: argparse.Namespace, segments: SegmentConfig | None
) -> Run:
    name = "pipelined" if segments is None else "pipelined+segments"
    engine, trainer, run = make_engine(policy, args), Trainer(policy), Run(name)
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
    engine.close()
    return run


def histogram(counts: Counter) -> str:
    return " ".join(f"{k}:{counts[k]}" for k in sorted(counts))


def table(runs: list[Run]) -> str:
    base_wall = runs[0].samples / runs[0].seconds
    base_cpu = runs[0].samples / runs[0].cpu_seconds
    head = (
        f"{'schedule':<19} {'steps':>5} {'samples':>7} {'wall s':>6} {'cpu s':>6} "
        f"{'train s':>7} {'samples/s':>9} {'ratio':>6} {'per cpu-s':>9} {'ratio':>6} "
        f"{'wait mean/max s':>15}  {'input age':<22} token lag"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        wall, cpu = r.samples / r.seconds, r.samples / r.cpu_seconds
        wait = f"{sum(r.waits) / max(1, len(r.waits)):.2f}/{max(r.waits, default=0):.2f}"
        lines.append(
            f"{r.name:<19} {r.steps:>5} {r.samples:>7} {r.seconds:>6.1f} {r.cpu_seconds:>6.1f} "
            f"{r.train_seconds:>7.1f} {wall:>9.2f} {wall / base_wall:>5.2f}x {cpu:>9.2f} "
            f"{cpu / base_cpu:>5.2f}x {wait:>15}  {histogram(r.ages):<22} {histogram(r.lags)}"
        )
    return "\n".join(lines)


def projection(stages: int = 5, max_tokens: int = 65536, segment: int = 16384) -> str:
    """Decode-bound projection for the paper's scale (see the printed assumptions)."""
    lines = [
        f"Projection, paper scale ({stages} stages, {max_tokens // 1024}k tokens, segments of "
        f"{segment // 1024}k). Assumptions: a stage's decode time D is set by its longest",
        "completion (some completion of a 128-problem x 8-candidate batch nearly always runs to",
        "the cap); per-sequence decode speed does not drop when the pipeline runs five stages'",
        "batches together (vLLM continuous batching below the KV-cache limit; beyond it the gain",
        "shrinks toward 1x); the update of a step's samples takes T = a * D.",
    ]
    for a in (0.25, 0.5, 1.0):
        sync = stages + a * 1.0  # five decodes, then one update, per trained batch
        piped = 1.0 + a  # one decode and one update per step, same samples in steady state
        seg = segment / max_tokens + a  # a step is one segment
        lines.append(
            f"  a = {a:<4}: pipelined {sync / piped:.2f}x, pipelined+segments up to "
            f"{sync / seg:.2f}x trained samples/s over synchronous"
        )
    lines.append(
        "  (segments: a step lasts one segment, so this needs the servers to also hold the "
        "long completions\n  of the last M steps without slowing down; the CPU run above has "
        "a = train s / (wall s - train s))"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=6)
    ap.add_argument("--per-step", type=int, default=1, help="new problems per step")
    ap.add_argument("--candidates", type=int, default=4, help="K (MarsRL: 8; keeps 2)")
    ap.add_argument("--short", type=int, nargs=2, default=(8, 24), metavar=("MIN", "MAX"))
    ap.add_argument("--long", type=int, default=160, help="length of a long-tail completion")
    ap.add_argument("--tail-share", type=float, default=0.03)
    ap.add_argument("--segment-tokens", type=int, default=32)
    ap.add_argument("--max-segments", type=int, default=5)
    args = parse_args(ap, argv, problems=3)
    if args.segment_tokens * args.max_segments < args.long:
        ap.error("--segment-tokens x --max-segments must cover --long")
    import torch

    from adapters.policies.models import tiny_model

    torch.set_num_threads(1)
    lengths = {"short": tuple(args.short), "long": args.long, "tail_share": args.tail_share}
    warm = argparse.Namespace(**{**vars(args), "problems": 1})
    model, tok = tiny_model(seed=0)  # warm-up (first-call allocations), not measured
    run_synchronous(LongTailPolicy(model, tok, device="cpu", batch_size=64, lengths=lengths), warm)
    runs = []
    for mode in ("synchronous", "pipelined", "pipelined+segments"):
        model, tok = tiny_model(seed=0)  # the same initial weights for every schedule
        policy = LongTailPolicy(model, tok, device="cpu", batch_size=64, lengths=lengths)
        if mode == "synchronous":
            runs.append(run_synchronous(policy, args))
        else:
            seg = SegmentConfig(args.segment_tokens, args.max_segments)
            runs.append(run_pipelined(policy, args, seg if "segments" in mode else None))
        print(f"{mode}: {runs[-1].seconds:.1f} s", file=sys.stderr, flush=True)
    expected = 1 - (1 - args.tail_share) ** (args.candidates * 2)
    print(
        f"MarsRL setting, tiny model on CPU, {args.problems} problems x {args.candidates} "
        f"candidates, {args.per_step} new per step; lengths: {args.short[0]}-{args.short[1]} "
        f"tokens, {args.tail_share:.0%} take {args.long} (a V/C stage of one problem has a long "
        f"member with probability {expected:.0%}); segments {args.segment_tokens} x "
        f"{args.max_segments}"
    )
    print(table(runs))
    print(
        f"load average during the run: {os.getloadavg()[0]:.1f} (wall-clock ratios are noisy "
        "on a shared machine; the CPU-time ratios count this process's work only)"
    )
    print()
    print(projection())


if __name__ == "__main__":
    main()
