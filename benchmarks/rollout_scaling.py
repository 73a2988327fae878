"""Rollout scaling: oracle-policy episodes/s, LocalEnvPool (threads) vs RayEnvPool (actors).

Usage::

    python benchmarks/rollout_scaling.py                 # sokoban and plan_path, 1 and 2 workers
    python benchmarks/rollout_scaling.py --quick         # 4 episodes, one repeat (a smoke run)
    python benchmarks/rollout_scaling.py --envs sokoban --episodes 64 --workers 1 2 4

Every row runs the same episodes (seeds ``0..episodes-1``, one parallel-sampling episode per
seed) through ``RolloutEngine`` with the oracle policy, so all the work is env work: instance
generation at reset, the oracle's answers, and stepping, where the tool agent's program runs in
the sandbox (sokoban's oracle program is a solver, so it is the sandbox-heavy case). Local pools
step clones on ``N`` threads of this process and share its sandbox; Ray pools use ``N`` actors
with ``--threads-per-worker`` threads each and a sandbox per actor. Each figure is the best of
``--repeat`` runs after a warm-up run (sandbox start, imports in the actors); the ratio column is
against the local 1-worker row of the same env, measured in the same run. Ray start-up and actor
start-up are reported separately, not counted. The machine may be shared: expect noise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.policies import OraclePolicy
from adapters.rollout import EpisodeSpec, LocalEnvPool, RolloutConfig, RolloutEngine
from benchmarks._quick import parse_args

ENV_CONFIGS: dict[str, dict] = {
    "sokoban": {},  # paper setting: 6 x 6, 2 boxes
    "plan_path": {},  # 10 x 10
    "sudoku": {},  # 4 x 4
}


def make_engine(pool, env_id: str) -> RolloutEngine:
    config = RolloutConfig(candidates=1, sampling="parallel")
    return RolloutEngine(env_id, OraclePolicy(), config, pool=pool)


def measure(pools: dict, env_id: str, episodes: int, repeat: int) -> dict:
    """Best episodes/s and success rate per pool. Repeats are interleaved across pools (run r
    of every pool before run r + 1 of any), so drifting load hits them alike."""
    specs = [EpisodeSpec(env_id, seed=s, config=ENV_CONFIGS[env_id]) for s in range(episodes)]
    engines = {name: make_engine(pool, env_id) for name, pool in pools.items()}
    for engine in engines.values():  # warm-up: sandbox start, imports, first instances
        engine.run(specs[: max(2, episodes // 8)], seed=0)
    best = dict.fromkeys(pools, 0.0)
    success = dict.fromkeys(pools, 0.0)
    for r in range(repeat):
        for name, engine in engines.items():
            t = time.perf_counter()
            result = engine.run(specs, seed=r)
            dt = time.perf_counter() - t
            best[name] = max(best[name], len(result.episodes) / dt)
            success[name] = result.metrics()["success_rate"]
    return {name: (best[name], success[name]) for name in pools}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", nargs="+", default=["sokoban", "plan_path"], choices=ENV_CONFIGS)
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--episodes", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads-per-worker", type=int, default=1)
    args = parse_args(ap, argv, episodes=4, repeat=1)

    import ray

    from adapters.rollout.ray_pool import RayEnvPool

    t = time.perf_counter()
    ray.init(
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    ray_start = time.perf_counter() - t
    print(
        f"# {os.cpu_count()} cores, {args.episodes} episodes/run, best of {args.repeat}; "
        f"ray.init {ray_start:.1f} s; Ray pools: {args.threads_per_worker} thread(s)/actor"
    )
    rows = []
    try:
        for env_id in args.envs:
            pools, startup = {}, {}
            for kind in ("local", "ray"):
                for n in args.workers:
                    t = time.perf_counter()
                    if kind == "local":
                        pools[kind, n] = LocalEnvPool(workers=n)
                    else:
                        pools[kind, n] = RayEnvPool(
                            num_workers=n, threads_per_worker=args.threads_per_worker
                        )
                    startup[kind, n] = time.perf_counter() - t
            try:
                measured = measure(pools, env_id, args.episodes, args.repeat)
            finally:
                for pool in pools.values():
                    pool.close()
            base = measured.get(("local", 1), (float("nan"), 0))[0]
            for (kind, n), (rate, success) in measured.items():
                rows.append((env_id, kind, n, rate, rate / base, success, startup[kind, n]))
                print(f"  {env_id:10s} {kind:5s} x{n}: {rate:7.1f} ep/s", flush=True)
    finally:
        ray.shutdown()

    print()
    print(
        f"{'env':10s} {'pool':12s} {'workers':>7s} {'episodes/s':>10s} {'vs local x1':>11s} "
        f"{'success':>7s} {'start s':>7s}"
    )
    for env_id, kind, n, rate, ratio, success, startup in rows:
        name = "LocalEnvPool" if kind == "local" else "RayEnvPool"
        print(
            f"{env_id:10s} {name:12s} {n:7d} {rate:10.1f} {ratio:10.2f}x {success:7.2f} "
            f"{startup:7.2f}"
        )


if __name__ == "__main__":
    main()
