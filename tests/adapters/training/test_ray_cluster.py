"""The trainer's Ray env pool on a multi-node Ray cluster (``env_pool: ray``, ``ray_address``).

A 2-node cluster is started on this machine with Ray's own test utility
(:class:`ray.cluster_utils.Cluster`: a head and a second raylet, each its own node with its own
object store), and the trainer connects to it like to a real cluster
(``ray.init(address=...)``). Its env actors are spread over both nodes, and the samples equal
those of the same run with the local thread pool (envs are deterministic given seed and actions).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
ray = pytest.importorskip("ray")

from .test_distributed import BASE  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    node = {"num_cpus": 1, "object_store_memory": 80 * 1024**2, "include_dashboard": False}
    c = Cluster(initialize_head=True, head_node_args=node)
    c.add_node(num_cpus=1, object_store_memory=80 * 1024**2)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def test_trainer_env_pool_on_a_two_node_ray_cluster(cluster, tmp_path):
    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

    from ..conftest import make_char_model  # noqa: F401  (the fixtures' thread settings)

    runs = {}
    for pool in ("ray", "local"):
        extra = {"env_pool": pool, "ray_address": cluster.address} if pool == "ray" else {}
        cfg = TrainConfig(
            **{**BASE, "steps": 1, "env_workers": 2, **extra}, output_dir=str(tmp_path / pool)
        )
        trainer = Trainer(cfg, log=lambda line: None)
        try:
            trainer.train()
            if pool == "ray":
                nodes = {s["node"] for s in trainer.run.pool.worker_stats()}
                assert len(nodes) == 2, nodes  # one env actor on each node
                assert {n["NodeID"] for n in ray.nodes() if n["Alive"]} == nodes
        finally:
            trainer.close()
        runs[pool] = [
            json.loads(x) for x in (tmp_path / pool / "trajectories.jsonl").read_text().splitlines()
        ]
    assert runs["ray"] == runs["local"] and runs["ray"]
