"""RayEnvPool: same rollouts as LocalEnvPool, placement and batching, replay-based recovery.

One local Ray instance (2 CPUs, no dashboard) serves the whole module. Rollouts use scripted
policies (the oracle, and a seeded function of the prompt that mixes right, wrong and garbage
answers so episodes branch and run several turns) on small plan_path and sudoku instances.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import Counter
from dataclasses import asdict

import pytest

from adapters.policies import OraclePolicy
from adapters.policies.scripted import ScriptedPolicy
from adapters.rollout import EpisodeSpec, LocalEnvPool, RayEnvPool, RolloutConfig, RolloutEngine

ENVS = {
    "plan_path": {"height": 5, "width": 5, "min_distance": 3},
    "sudoku": {"size": 4},
}


@pytest.fixture(scope="module")
def ray_session():
    import ray  # the `ray` extra; these tests run for real on a clean machine, no cluster

    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            object_store_memory=100 * 1024**2,
        )
    yield ray
    if started:
        ray.shutdown()


def kill_now(actor) -> None:
    """``ray.kill`` is asynchronous: a call sent right after it may still be served. Return only
    once the actor is seen dead, so the tests exercise the pool's recovery every time."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    ray.kill(actor, no_restart=True)
    for _ in range(100):
        try:
            ray.get(actor.ping.remote(), timeout=5)
        except (RayActorError, GetTimeoutError):
            return
        time.sleep(0.05)
    raise AssertionError("the actor still answers after ray.kill")


@pytest.fixture(scope="module")
def shared_pool(ray_session):
    with RayEnvPool(num_workers=2) as pool:
        yield pool


def random_answer(env_id: str, rng: random.Random) -> str:
    """A proposal: a move list (plan_path) or fill steps (sudoku), often wrong."""
    if env_id == "plan_path":
        return "[" + ",".join(rng.choices("UDLR", k=rng.randint(1, 5))) + "]"
    steps = [[rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4)] for _ in range(3)]
    return str(steps).replace(" ", "")


def scripted_policy(env_id: str, seed: int) -> ScriptedPolicy:
    """Deterministic in (seed, prompt, how often this prompt was answered before)."""
    seen: Counter[str] = Counter()

    def fn(prompt: str) -> str:
        k = seen[prompt]
        seen[prompt] += 1
        digest = hashlib.sha256(f"{seed}|{k}|{prompt}".encode()).digest()
        rng = random.Random(digest)
        roll = rng.random()
        if roll < 0.1:
            return "I am not sure what to do here."
        if roll < 0.2:
            return "```python\nraise SystemExit(3)\n```\n#### []"
        tool, final = random_answer(env_id, rng), random_answer(env_id, rng)
        return f"```python\nprint('{tool}')\n```\nChecked.\n#### {final}"

    return ScriptedPolicy(fn, name="seeded")


# keep_n = 2 needs a setting without award lookahead: the grid tool's team term taken from its
# own proposal (tool_team="proposal") instead of the turn's value (AT-GRPO A.1.3-A.1.5)
KEEP_TWO_ENV = {"tool_team": "proposal"}


def rollout(pool, env_id: str, policy_kind: str, sampling: str, env_extra=None, **cfg):
    policy = OraclePolicy() if policy_kind == "oracle" else scripted_policy(env_id, seed=3)
    config = RolloutConfig(candidates=3, sampling=sampling, max_steps=8, **cfg)
    env_config = {**ENVS[env_id], **(env_extra or {})}
    engine = RolloutEngine(env_id, policy, config, env_config=env_extra, pool=pool)
    specs = [EpisodeSpec(env_id, seed=s, config=env_config) for s in range(3)]
    result = engine.run(specs, seed=11)
    return (
        [s.to_dict() for s in result.samples],
        [asdict(e) for e in result.episodes],
    )


_baselines: dict[tuple, tuple] = {}


def local_rollout(env_id: str, policy_kind: str, sampling: str, env_extra=None, **cfg):
    key = (env_id, policy_kind, sampling, tuple(sorted({**cfg, **(env_extra or {})}.items())))
    if key not in _baselines:
        with LocalEnvPool(workers=2) as pool:
            _baselines[key] = rollout(pool, env_id, policy_kind, sampling, env_extra, **cfg)
            assert len(pool) == 0
    return _baselines[key]


# ---------------------------------------------------------------------------- same results
@pytest.mark.parametrize("env_id", sorted(ENVS))
@pytest.mark.parametrize("policy_kind", ["oracle", "scripted"])
@pytest.mark.parametrize("sampling", ["tree", "parallel"])
def test_same_samples_as_local_pool(shared_pool, env_id, policy_kind, sampling):
    expected = local_rollout(env_id, policy_kind, sampling)
    got = rollout(shared_pool, env_id, policy_kind, sampling)
    assert got == expected
    samples, episodes = got
    assert len(episodes) == 3 * (3 if sampling == "parallel" else 1)
    if policy_kind == "scripted":  # the seeded policy really branches and runs several turns
        assert len({s["reward"] for s in samples}) > 3
        assert max(s["step"] for s in samples) >= 3
    else:
        assert all(e["success"] for e in episodes)
    assert len(shared_pool) == 0
    assert sum(w["envs"] for w in shared_pool.worker_stats()) == 0  # actors freed every branch


def test_keep_two_random_same_as_local(shared_pool):
    cfg = {"keep": "random", "keep_n": 2, "max_branches": 4}
    expected = local_rollout("plan_path", "scripted", "tree", KEEP_TWO_ENV, **cfg)
    assert rollout(shared_pool, "plan_path", "scripted", "tree", KEEP_TWO_ENV, **cfg) == expected
    assert len({s["branch"] for s in expected[0]}) > 3


# ---------------------------------------------------------------------------- placement
def test_round_robin_roots_clones_stay_and_one_call_per_worker_per_wave(ray_session):
    with RayEnvPool(num_workers=2, threads_per_worker=1) as pool:
        specs = [EpisodeSpec("plan_path", seed=s, config=ENVS["plan_path"]) for s in range(5)]
        views = pool.reset(specs)
        assert [v.branch_id for v in views] == [0, 1, 2, 3, 4]
        assert [pool.worker_of(v.branch_id) for v in views] == [0, 1, 0, 1, 0]
        more = pool.reset(specs[:1])  # the round-robin counter goes on across calls
        assert pool.worker_of(more[0].branch_id) == 1

        before = [w["calls"].get("expand", 0) for w in pool.worker_stats()]
        texts = pool.oracle([v.branch_id for v in views])
        rows = pool.expand([(v.branch_id, [t, "nonsense"]) for v, t in zip(views, texts)])
        after = [w["calls"]["expand"] for w in pool.worker_stats()]
        assert [a - b for a, b in zip(after, before)] == [1, 1]
        ids = [o.branch.branch_id for row in rows for o in row]
        assert ids == list(range(6, 16))  # allocated in request order, like LocalEnvPool
        for v, row in zip(views, rows):
            for o in row:
                assert pool.worker_of(o.branch.branch_id) == pool.worker_of(v.branch_id)
        assert pool.lineage(rows[2][1].branch.branch_id) == (specs[2], ("nonsense",))
        assert rows[0][0].reward > rows[0][1].reward  # the oracle beats nonsense

        pool.release([v.branch_id for v in views])
        with pytest.raises(KeyError, match="unknown branch id"):
            pool.expand([(views[0].branch_id, ["x"])])
        with pytest.raises(TypeError, match="must be str"):
            pool.expand([(rows[0][0].branch.branch_id, [None])])
    with pytest.raises(RuntimeError, match="closed"):
        pool.reset(specs)


def test_bad_arguments(ray_session):
    with pytest.raises(ValueError, match="num_workers"):
        RayEnvPool(num_workers=0)
    with pytest.raises(ValueError, match="max_retries"):
        RayEnvPool(max_retries=-1)


# ---------------------------------------------------------------------------- recovery
class KillingPool:
    """Delegates to a RayEnvPool and kills one of its actors around the n-th call of a method:
    ``when="before"`` kills it before the call is sent; ``"during"`` slows that actor's steps
    and kills it from a timer thread while the call runs."""

    def __init__(self, pool: RayEnvPool, method: str, n: int, worker: int, when: str) -> None:
        self.pool, self.method, self.n, self.worker, self.when = pool, method, n, worker, when
        self.calls = 0
        self.killed = 0

    def __getattr__(self, name):
        attr = getattr(self.pool, name)
        if name != self.method:
            return attr

        def wrapped(*args, **kwargs):
            self.calls += 1
            if self.calls == self.n:
                import ray

                victim = self.pool.workers[self.worker]
                self.killed += 1
                if self.when == "before":
                    kill_now(victim)
                else:
                    self.pool.inject_fault(self.worker, step_delay_s=1.0)
                    threading.Timer(0.2, ray.kill, [victim]).start()
            return attr(*args, **kwargs)

        return wrapped


@pytest.mark.parametrize(
    ("env_id", "policy_kind", "sampling", "method", "n", "when"),
    [
        ("plan_path", "scripted", "tree", "expand", 4, "before"),
        ("sudoku", "scripted", "parallel", "expand", 3, "during"),
        ("plan_path", "oracle", "tree", "oracle", 2, "before"),
    ],
)
def test_killed_actor_is_replaced_and_rollout_unchanged(
    ray_session, env_id, policy_kind, sampling, method, n, when
):
    expected = local_rollout(env_id, policy_kind, sampling)
    with RayEnvPool(num_workers=2) as pool:
        killer = KillingPool(pool, method, n, worker=1, when=when)
        old = pool.workers[1]
        got = rollout(killer, env_id, policy_kind, sampling)
        assert killer.killed == 1
        assert pool.recoveries == 1
        assert pool.workers[1] != old and pool.workers[0] is not None
        assert got == expected  # nothing lost, nothing stepped twice
        assert len(pool) == 0


def test_crash_inside_a_step_is_recovered(ray_session):
    cfg = {"keep": "random", "keep_n": 2, "max_branches": 4}
    expected = local_rollout("plan_path", "scripted", "tree", KEEP_TWO_ENV, **cfg)
    with RayEnvPool(num_workers=2) as pool:
        pids = [w["pid"] for w in pool.worker_stats()]
        pool.inject_fault(0, crash_after_steps=20)  # os._exit inside the 21st step
        got = rollout(pool, "plan_path", "scripted", "tree", KEEP_TWO_ENV, **cfg)
        assert pool.recoveries == 1
        assert got == expected
        stats = pool.worker_stats()
        assert stats[0]["pid"] != pids[0] and stats[1]["pid"] == pids[1]
        assert stats[0]["calls"]["rebuild"] == 1


def test_replayed_branches_match_the_originals(ray_session):
    """Kill both actors while they host a small tree (shared prefixes, identical siblings, a
    dead end): every branch is rebuilt and answers and steps exactly like the local pool's."""
    specs = [EpisodeSpec("sudoku", seed=s, config=ENVS["sudoku"]) for s in range(3)]
    with RayEnvPool(num_workers=2) as pool, LocalEnvPool(workers=1) as local:
        frontier = [
            (r.branch_id, lv.branch_id) for r, lv in zip(pool.reset(specs), local.reset(specs))
        ]
        everything = list(frontier)
        for _ in range(3):  # expand the leaves with [right, right, wrong]; go on with the wrong one
            texts = local.oracle([lb for _, lb in frontier])
            assert pool.oracle([rb for rb, _ in frontier]) == texts
            rrows = pool.expand([(rb, [t, t, "no"]) for (rb, _), t in zip(frontier, texts)])
            lrows = local.expand([(lb, [t, t, "no"]) for (_, lb), t in zip(frontier, texts)])
            assert [[asdict(o) for o in row] for row in rrows] == [
                [asdict(o) for o in row] for row in lrows
            ]
            pairs = [
                (ro.branch.branch_id, lo.branch.branch_id)
                for rrow, lrow in zip(rrows, lrows)
                for ro, lo in zip(rrow, lrow)
            ]
            everything += pairs
            frontier = pairs[2::3]
        assert max(len(pool.lineage(rb)[1]) for rb, _ in everything) == 3
        for w in range(2):
            kill_now(pool.workers[w])
        live = [(rb, lb) for rb, lb in everything if local.raw(lb).agents]
        assert len(live) > 10
        assert pool.oracle([rb for rb, _ in live]) == local.oracle([lb for _, lb in live])
        assert pool.recoveries == 2
        rrows = pool.expand([(rb, ["#### [[1,1,1]]"]) for rb, _ in live])
        lrows = local.expand([(lb, ["#### [[1,1,1]]"]) for _, lb in live])
        assert [asdict(r[0]) for r in rrows] == [asdict(r[0]) for r in lrows]
        assert sum(w["envs"] for w in pool.worker_stats()) == len(pool) == len(local)


def test_hung_actor_times_out_and_is_replaced(ray_session):
    expected = local_rollout("sudoku", "oracle", "parallel")
    # 10 s: far below the injected 60 s, far above a healthy call on a loaded 2-core machine
    # (3 s timed out healthy calls too while other jobs shared the cores)
    with RayEnvPool(num_workers=2, call_timeout_s=10.0) as pool:
        pool.inject_fault(1, step_delay_s=60.0)
        got = rollout(pool, "sudoku", "oracle", "parallel")
        assert pool.recoveries == 1
        assert got == expected


def test_gives_up_after_max_retries(ray_session):
    with RayEnvPool(num_workers=1, max_retries=0) as pool:
        views = pool.reset([EpisodeSpec("plan_path", seed=0, config=ENVS["plan_path"])])
        kill_now(pool.workers[0])
        with pytest.raises(RuntimeError, match="failed 1 times in a row running 'oracle'"):
            pool.oracle([views[0].branch_id])
