"""Launch planning (``_plan.py``): config + environment -> LaunchPlan. Pure: no processes, no torch, table-driven."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from pytorch_core._plan import (
    LOCAL_MONITOR_INTERVAL_S,
    RDZV_BACKEND,
    ExecutionKind,
    LaunchPlan,
    direct_view,
    indexed_pod_env,
    node_view,
    plan_launch,
    resolve_nproc,
)
from pytorch_core.config import Elastic, PyTorch, Worker

POD = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "m", "MASTER_PORT": "23456", "PET_NNODES": "2"}
ELASTIC_POD = {"PET_RDZV_ENDPOINT": "job-worker-0:29400", "PET_NNODES": "1:4"}


PLAN_CASES = [
    pytest.param(PyTorch(worker=Worker(replicas=2)), {}, True, (ExecutionKind.LOCAL, 3, 3), id="local-1+2-workers"),
    pytest.param(PyTorch(worker=Worker(replicas=0)), {}, True, (ExecutionKind.LOCAL, 1, 1), id="local-master-only"),
    pytest.param(
        PyTorch(worker=Worker(replicas=1), nproc_per_node=2), {}, True, (ExecutionKind.LOCAL, 4, 4), id="local-2x2"
    ),
    pytest.param(
        PyTorch(worker=Worker(replicas=3), nproc_per_node=2),
        {"FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE": "4"},
        True,
        (ExecutionKind.LOCAL, 4, 8),
        id="cap-reduces-nodes-first",
    ),
    pytest.param(
        PyTorch(worker=Worker(replicas=1), nproc_per_node=4),
        {"FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE": "3"},
        True,
        (ExecutionKind.LOCAL, 3, 8),
        id="cap-below-nproc",
    ),
    pytest.param(
        Elastic(nnodes="2:3", nproc_per_node=2), {}, True, (ExecutionKind.LOCAL, 4, 4), id="elastic-min-nodes"
    ),
    pytest.param(PyTorch(), {"FLYTE_PYTORCH_INPROCESS": "1"}, True, (ExecutionKind.IN_PROCESS, 1, 1), id="in-process"),
    pytest.param(
        PyTorch(),
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m"},
        True,
        (ExecutionKind.LOCAL, 2, 2),
        id="local-ignores-operator-vars",
    ),
    pytest.param(
        PyTorch(),
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "23456"},
        False,
        (ExecutionKind.CLUSTER_DIRECT, 2, 2),
        id="pod-direct",
    ),
    pytest.param(
        PyTorch(nproc_per_node=2),
        {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "m", "PET_NNODES": "2", "PET_NODE_RANK": "1"},
        False,
        (ExecutionKind.CLUSTER_FANOUT, 4, 4),
        id="pod-fanout",
    ),
    pytest.param(
        Elastic(nnodes="1:4", nproc_per_node=1),
        {"PET_RDZV_ENDPOINT": "job-worker-0:29400", "PET_NNODES": "1:4", "PET_MAX_RESTARTS": "2"},
        False,
        (ExecutionKind.CLUSTER_ELASTIC, 1, 1),
        id="pod-elastic",
    ),
    pytest.param(PyTorch(), {}, False, (ExecutionKind.LOCAL, 2, 2), id="no-operator-vars-runs-locally"),
]


@pytest.mark.parametrize(("config", "environ", "local", "expected"), PLAN_CASES)
def test_plan_launch(config, environ, local, expected) -> None:
    plan = plan_launch(config, environ, local=local, cuda_devices=0, cpu_count=8)
    assert (plan.kind, plan.world_size, plan.declared_world_size) == expected


def test_plan_details_for_a_fanout_pod() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "m", "MASTER_PORT": "23456", "PET_NNODES": "2"}
    plan = plan_launch(PyTorch(nproc_per_node=2), env, local=False, cpu_count=8)
    assert (plan.rdzv_backend, plan.rdzv_endpoint, plan.rdzv_configs, plan.node_rank) == (
        "static",
        "m:23456",
        {"rank": 1},
        1,
    )
    assert plan.rank_env["PET_NODE_RANK"] == "1" and plan.rank_env["PET_NPROC_PER_NODE"] == "2"


def test_local_threads_are_an_even_share_of_the_cores() -> None:
    plan = plan_launch(PyTorch(worker=Worker(replicas=2)), {}, local=True, cpu_count=8)
    assert plan.threads == 2


@pytest.mark.parametrize(
    ("value", "local", "cuda", "cpus", "expected"),
    [
        pytest.param(3, True, 0, 8, 3, id="int"),
        pytest.param("auto", True, 0, 8, 1, id="auto-no-gpu"),
        pytest.param("gpu", False, 4, 8, 4, id="gpu-4"),
        pytest.param("cpu", True, 0, 8, 1, id="cpu-local-is-1"),
        pytest.param("cpu", False, 0, 8, 8, id="cpu-pod-is-cpu-count"),
    ],
)
def test_resolve_nproc(value, local, cuda, cpus, expected) -> None:
    assert resolve_nproc(value, local=local, cuda_devices=cuda, cpu_count=cpus) == expected


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        pytest.param({"FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE": "0"}, "FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE='0'", id="cap"),
        pytest.param({"FLYTE_PYTORCH_LOCAL_THREADS": "x"}, "FLYTE_PYTORCH_LOCAL_THREADS='x'", id="threads"),
    ],
)
def test_bad_environment_is_rejected_with_the_variable_named(environ, match) -> None:
    with pytest.raises(ValueError, match=match):
        plan_launch(PyTorch(), environ, local=True)


# ---------------------------------------------------------------- what the plan carries from the config ------------


@pytest.mark.parametrize(
    ("config", "environ", "local"),
    [
        pytest.param(PyTorch(), {}, True, id="local"),
        pytest.param(PyTorch(), {"FLYTE_PYTORCH_INPROCESS": "1"}, True, id="in-process"),
        pytest.param(PyTorch(nproc_per_node=2), POD, False, id="fanout-pod"),
        pytest.param(Elastic(nnodes="1:4"), ELASTIC_POD, False, id="elastic-pod"),
    ],
)
def test_start_method_and_collective_timeout_come_from_the_config(config, environ, local) -> None:
    configured = dataclasses.replace(config, start_method="spawn", collective_timeout=datetime.timedelta(seconds=42))
    plan = plan_launch(configured, environ, local=local, cpu_count=8)
    assert (plan.start_method, plan.collective_timeout_s) == ("spawn", 42.0)
    default = plan_launch(config, environ, local=local, cpu_count=8)
    assert (default.start_method, default.collective_timeout_s) == (PyTorch().start_method, None)


def test_elastic_rendezvous_settings_are_the_configs_own() -> None:
    config = Elastic(
        nnodes="2:3",
        max_restarts=2,
        monitor_interval=3.0,
        rdzv_join_timeout=60,
        rdzv_last_call_timeout=5,
        rdzv_close_timeout=7,
    )
    expected = {"join_timeout": 60, "last_call_timeout": 5, "close_timeout": 7}
    for plan in (
        plan_launch(config, {}, local=True, cpu_count=8),
        plan_launch(config, ELASTIC_POD, local=False, cpu_count=8),
    ):
        assert plan.rdzv_configs == expected
        assert (plan.max_restarts, plan.monitor_interval) == (2, 3.0)


def test_elastic_defaults_are_the_dataclass_defaults() -> None:
    """The launcher states no default of its own for an elastic job: Elastic() is the only source."""
    defaults = Elastic()
    plan = plan_launch(Elastic(nnodes="1:4"), ELASTIC_POD, local=False, cpu_count=8)
    assert plan.rdzv_configs == {
        "join_timeout": defaults.rdzv_join_timeout,
        "last_call_timeout": defaults.rdzv_last_call_timeout,
        "close_timeout": defaults.rdzv_close_timeout,
    }
    assert (plan.max_restarts, plan.monitor_interval) == (defaults.max_restarts, defaults.monitor_interval)


def test_a_pytorch_task_in_an_elastic_pod_gets_elastics_defaults() -> None:
    plan = plan_launch(PyTorch(), {"PET_RDZV_ENDPOINT": "w-0:29400"}, local=False, cpu_count=8)
    defaults = Elastic()
    assert plan.kind is ExecutionKind.CLUSTER_ELASTIC
    assert plan.rank_env["PET_NNODES"] == "1" and plan.rank_env["PET_MAX_RESTARTS"] == "0"
    assert plan.rdzv_configs["join_timeout"] == defaults.rdzv_join_timeout
    assert plan.monitor_interval == defaults.monitor_interval


@pytest.mark.parametrize(
    ("environ", "endpoint", "nnodes", "restarts", "backend"),
    [
        pytest.param(ELASTIC_POD, "job-worker-0:29400", "1:4", "0", RDZV_BACKEND, id="operator-variables"),
        pytest.param(
            {**ELASTIC_POD, "PET_MAX_RESTARTS": "3", "PET_RDZV_BACKEND": "etcd-v2"},
            "job-worker-0:29400",
            "1:4",
            "3",
            "etcd-v2",
            id="variables-win-over-the-config",
        ),
        pytest.param(
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "m"}, "m:29400", "2:3", "0", RDZV_BACKEND, id="no-endpoint"
        ),
    ],
)
def test_elastic_pod_plan(environ, endpoint, nnodes, restarts, backend) -> None:
    plan = plan_launch(Elastic(nnodes="2:3", nproc_per_node=2), environ, local=False, cpu_count=8)
    assert plan.kind is ExecutionKind.CLUSTER_ELASTIC
    assert (plan.rdzv_endpoint, plan.rank_env["PET_NNODES"], plan.rank_env["PET_MAX_RESTARTS"]) == (
        endpoint,
        nnodes,
        restarts,
    )
    assert plan.rdzv_backend == plan.rank_env["PET_RDZV_BACKEND"] == backend
    low, _, high = nnodes.partition(":")
    assert (plan.min_nodes, plan.max_nodes, plan.world_size) == (int(low), int(high), int(low) * 2)


def test_local_plan_runs_every_declared_node_in_one_agent() -> None:
    plan = plan_launch(PyTorch(worker=Worker(replicas=1), nproc_per_node=2), {}, local=True, cpu_count=8)
    assert (plan.min_nodes, plan.max_nodes, plan.nproc_per_node, plan.procs_per_node) == (1, 1, 4, 2)
    # One agent, fixed size: a static rendezvous (the port is picked when the agent starts).
    assert plan.virtual_nodes and plan.rdzv_endpoint == "127.0.0.1:0" and plan.rdzv_backend == "static"
    assert plan.rdzv_configs == {"rank": 0}
    assert plan.rank_env == {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_MASTER_ADDR": "127.0.0.1"}
    assert plan.monitor_interval == LOCAL_MONITOR_INTERVAL_S and plan.max_restarts == 0
    assert list(plan.local_ranks) == [0, 1, 2, 3]


def test_local_elastic_plan_keeps_the_c10d_rendezvous() -> None:
    plan = plan_launch(Elastic(nnodes="1:2"), {}, local=True, cpu_count=8)
    assert plan.rdzv_backend == plan.rank_env["PET_RDZV_BACKEND"] == RDZV_BACKEND


def test_local_elastic_plan_publishes_the_node_range() -> None:
    plan = plan_launch(Elastic(nnodes="2:3", max_restarts=1), {}, local=True, cpu_count=8)
    # As the operator sets them on an elastic job: no PET_MASTER_* and no PET_NODE_RANK (the rendezvous assigns nodes).
    assert plan.rank_env == {
        "PET_NNODES": "2:3",
        "PET_NPROC_PER_NODE": "1",
        "PET_RDZV_BACKEND": RDZV_BACKEND,
        "PET_MAX_RESTARTS": "1",
    }


def test_local_elastic_plan_with_a_fixed_node_count_writes_it_as_a_range() -> None:
    plan = plan_launch(Elastic(nnodes=2), {}, local=True, cpu_count=8)
    assert plan.rank_env["PET_NNODES"] == "2:2"


@pytest.mark.parametrize(
    ("rank", "elastic", "expected"),
    [
        pytest.param(0, False, {"LOCAL_RANK": "0", "GROUP_RANK": "0", "PET_NODE_RANK": "0"}, id="node0-first"),
        pytest.param(3, False, {"LOCAL_RANK": "1", "GROUP_RANK": "1", "PET_NODE_RANK": "1"}, id="node1-second"),
        pytest.param(2, True, {"LOCAL_RANK": "0", "GROUP_RANK": "1"}, id="elastic-no-node-rank"),
    ],
)
def test_node_view_is_the_rank_within_its_node(rank: int, elastic: bool, expected: dict) -> None:
    view = node_view(rank, 4, 2, elastic=elastic)
    assert view == {**expected, "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2"}


@pytest.mark.parametrize(
    ("cuda", "visible", "expected"),
    [
        pytest.param(4, "", ("0,1", "2,3"), id="one-gpu-per-rank"),
        pytest.param(4, "4,5,6,7", ("4,5", "6,7"), id="slices-of-the-visible-list"),
        pytest.param(3, "", (), id="too-few-gpus-left-alone"),
        pytest.param(0, "", (), id="cpu"),
    ],
)
def test_local_nodes_get_disjoint_gpus_when_there_is_one_per_rank(cuda: int, visible: str, expected: tuple) -> None:
    environ = {"CUDA_VISIBLE_DEVICES": visible} if visible else {}
    plan = plan_launch(PyTorch(worker=Worker(replicas=1), nproc_per_node=2), environ, local=True, cuda_devices=cuda)
    assert plan.node_gpus == expected


def test_direct_view_is_an_agent_with_one_process() -> None:
    assert direct_view(2, 3) == {
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "2",
        "GROUP_WORLD_SIZE": "3",
        "ROLE_RANK": "2",
        "ROLE_WORLD_SIZE": "3",
        "ROLE_NAME": "default",
    }


@pytest.mark.parametrize(
    ("environ", "node_rank", "ranks"),
    [
        pytest.param({**POD, "PET_NODE_RANK": "1"}, 1, [2, 3], id="pet-node-rank"),
        pytest.param({**POD, "RANK": "0"}, 0, [0, 1], id="rank-when-no-pet-node-rank"),
    ],
)
def test_a_fanout_pod_runs_its_block_of_global_ranks(environ, node_rank, ranks) -> None:
    plan = plan_launch(PyTorch(nproc_per_node=2), environ, local=False, cpu_count=8)
    assert plan.node_rank == node_rank and list(plan.local_ranks) == ranks


def test_nnodes_from_world_size_when_the_operator_sets_no_pet_nnodes() -> None:
    environ = {"RANK": "2", "WORLD_SIZE": "6", "MASTER_ADDR": "m"}
    plan = plan_launch(PyTorch(nproc_per_node=2), environ, local=False, cpu_count=8)
    assert (plan.min_nodes, plan.world_size, plan.rdzv_endpoint) == (3, 6, "m:23456")


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        pytest.param({**POD, "PET_NODE_RANK": "one"}, "PET_NODE_RANK='one'", id="node-rank"),
        pytest.param({**POD, "PET_NNODES": "0"}, "PET_NNODES='0'", id="nnodes-zero"),
        pytest.param({**ELASTIC_POD, "PET_NNODES": "a:b"}, "PET_NNODES='a:b'", id="elastic-nnodes"),
        pytest.param({**ELASTIC_POD, "PET_MAX_RESTARTS": "-1"}, "PET_MAX_RESTARTS='-1'", id="max-restarts"),
    ],
)
def test_a_malformed_operator_variable_is_named(environ, match) -> None:
    with pytest.raises(ValueError, match=match):
        plan_launch(PyTorch(nproc_per_node=2), environ, local=False, cpu_count=8)


def test_the_plan_is_frozen() -> None:
    plan = plan_launch(PyTorch(), {}, local=True)
    assert isinstance(plan, LaunchPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.world_size = 9  # type: ignore[misc]


# --- a JobSet pod: RANK from the role's offset plus the completion index ----------------------------------------------

JOBSET_POD = {"WORLD_SIZE": "3", "MASTER_ADDR": "j-master-0-0.j", "MASTER_PORT": "23456", "PET_NNODES": "3"}


@pytest.mark.parametrize(
    "offset, index, rank",
    [("0", "0", "0"), ("1", "0", "1"), ("1", "1", "2")],
    ids=["master-0", "worker-0", "worker-1"],
)
def test_a_jobset_pods_rank_is_its_offset_plus_its_completion_index(offset: str, index: str, rank: str) -> None:
    env = {**JOBSET_POD, "FLYTE_PYTORCH_NODE_RANK_OFFSET": offset, "JOB_COMPLETION_INDEX": index}
    derived = indexed_pod_env(env)
    assert derived == {"RANK": rank, "PET_NODE_RANK": rank}
    # with them, the pod is a PyTorchJob replica of that rank: the same plan as the operator's variables give
    plan = plan_launch(PyTorch(worker=Worker(replicas=2)), {**env, **derived}, local=False)
    operator = plan_launch(
        PyTorch(worker=Worker(replicas=2)), {**JOBSET_POD, "RANK": rank, "PET_NODE_RANK": rank}, local=False
    )
    assert plan == operator and plan.kind is ExecutionKind.CLUSTER_DIRECT and plan.node_rank == int(rank)


def test_a_pod_without_an_offset_derives_nothing() -> None:
    assert indexed_pod_env({**POD, "JOB_COMPLETION_INDEX": "1"}) == {}
    assert indexed_pod_env({}) == {}


@pytest.mark.parametrize(
    "environ, match",
    [
        ({"FLYTE_PYTORCH_NODE_RANK_OFFSET": "1"}, "JOB_COMPLETION_INDEX is not"),
        ({"FLYTE_PYTORCH_NODE_RANK_OFFSET": "x", "JOB_COMPLETION_INDEX": "0"}, "FLYTE_PYTORCH_NODE_RANK_OFFSET='x'"),
        ({"FLYTE_PYTORCH_NODE_RANK_OFFSET": "1", "JOB_COMPLETION_INDEX": "-1"}, "JOB_COMPLETION_INDEX='-1'"),
        (
            {"FLYTE_PYTORCH_NODE_RANK_OFFSET": "1", "JOB_COMPLETION_INDEX": "2", "PET_NNODES": "3"},
            "not a node rank below PET_NNODES=3",
        ),
    ],
    ids=["no-index", "bad-offset", "negative-index", "past-the-last-node"],
)
def test_a_malformed_jobset_variable_is_named(environ: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        indexed_pod_env(environ)
