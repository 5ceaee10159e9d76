"""Launch planning in a Kubeflow Trainer v2 TrainJob node: the five `PET_*` variables and nothing else."""

from __future__ import annotations

import pytest

from pytorch_core._plan import ExecutionKind, is_trainjob_node, plan_launch
from pytorch_core.config import Elastic, PyTorch

# Exactly what the torch runtime's plugin sets in node 1 of a 3-node job.
NODE = {
    "PET_NNODES": "3",
    "PET_NPROC_PER_NODE": "2",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "job-node-0-0.job",
    "PET_MASTER_PORT": "29500",
}


@pytest.mark.parametrize(
    "env, expected",
    [
        pytest.param(NODE, True, id="trainjob-node"),
        pytest.param({**NODE, "RANK": "1", "WORLD_SIZE": "6", "MASTER_ADDR": "m"}, False, id="pytorchjob-replica"),
        pytest.param({**NODE, "PET_RDZV_ENDPOINT": "w-0:29400"}, False, id="pytorchjob-elastic"),
        pytest.param({k: v for k, v in NODE.items() if k != "PET_MASTER_PORT"}, False, id="incomplete"),
        pytest.param({}, False, id="nothing"),
    ],
)
def test_is_trainjob_node(env: dict, expected: bool):
    assert is_trainjob_node(env) is expected


def test_node_plan_static_rendezvous_and_global_ranks():
    plan = plan_launch(PyTorch(), NODE, local=False, cpu_count=8)
    assert plan.kind is ExecutionKind.CLUSTER_FANOUT
    assert (plan.rdzv_backend, plan.rdzv_endpoint) == ("static", "job-node-0-0.job:29500")
    assert (plan.world_size, plan.nproc_per_node, plan.node_rank) == (6, 2, 1)
    assert list(plan.local_ranks) == [2, 3]
    assert plan.rank_env == NODE


@pytest.mark.parametrize("cuda, expected", [(0, 1), (4, 4)], ids=["cpu", "4-gpus"])
def test_auto_is_the_visible_gpus(cuda: int, expected: int):
    plan = plan_launch(PyTorch(), {**NODE, "PET_NPROC_PER_NODE": "auto"}, local=False, cuda_devices=cuda)
    assert plan.nproc_per_node == expected and plan.world_size == 3 * expected


def test_one_process_per_node_still_runs_an_agent():
    # Nothing sets RANK/WORLD_SIZE in a TrainJob node: the function must not run in the pod process directly.
    plan = plan_launch(PyTorch(), {**NODE, "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "0"}, local=False)
    assert plan.kind is ExecutionKind.CLUSTER_FANOUT and list(plan.local_ranks) == [0]


def test_elastic_config_in_a_node_is_planned_static():
    plan = plan_launch(Elastic(nnodes="1:3"), NODE, local=False)
    assert plan.rdzv_backend == "static" and plan.world_size == 6


def test_local_run_ignores_the_node_variables():
    assert plan_launch(PyTorch(), NODE, local=True).kind is ExecutionKind.LOCAL


@pytest.mark.parametrize(
    "override, named",
    [
        ({"PET_NODE_RANK": "3"}, "PET_NODE_RANK=3"),
        ({"PET_NPROC_PER_NODE": "many"}, "PET_NPROC_PER_NODE='many'"),
        ({"PET_MASTER_PORT": "http"}, "PET_MASTER_PORT='http'"),
        ({"PET_NNODES": "1:3"}, "PET_NNODES='1:3'"),
    ],
    ids=["rank-out-of-range", "nproc", "port", "elastic-range"],
)
def test_malformed_variables_are_named(override: dict, named: str):
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        plan_launch(PyTorch(), {**NODE, **override}, local=False)
