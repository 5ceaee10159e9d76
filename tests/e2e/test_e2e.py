"""End to end: packaged task -> connector -> PyTorchJob -> real replica processes -> outputs read through flytekit.

See `tests.e2e.harness` for what is real and what the fake operator plays. Every case starts real
`pyflyte-execute` processes (a few seconds each on 2 cores); the module is marked `e2e`, so a quick local run skips
it with::

    pytest -m "not e2e"

and `pytest tests/e2e` (or `-m e2e`) runs only these.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate

from tests.connector.helpers import execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import BlobStore, FakeOperator, JobRun
from tests.fakeapi.fixtures import running_fake_api
from tests.mnist_data import require_mnist

pytestmark = pytest.mark.e2e

NS = "flytesnacks-development"
JOB_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskTemplate]:
    """Every e2e task, packaged once by `pyflyte package`."""
    modules = ["tests.e2e.workflows", "tests.e2e.workflows_official", "examples.mnist.workflow"]
    return harness.package_tasks(modules, tmp_path_factory.mktemp("package"))


class Cluster:
    """The fake API server, the fake operator, a connector wired to the server, and the blob store."""

    def __init__(self, server: Any, client: Any, operator: FakeOperator, blobs: BlobStore) -> None:
        self.server = server
        self.operator = operator
        self.blobs = blobs
        self.connector = make_connector(client, api_timeout_s=5.0, watch_cache=True)  # as deployed: the cache on

    def submit(
        self,
        template: TaskTemplate,
        inputs: dict[str, Any],
        types: dict[str, type],
        execution: str,
        env: Optional[dict[str, str]] = None,
    ) -> Any:
        """Create the job through the connector (it writes inputs.pb) and return (metadata, output prefix).

        `env` plays the execution's environment variables (`pyflyte run --envvars`, `FlyteRemote.execute(envs=)`).
        """
        prefix = self.blobs.uri("metadata", execution, "n0", "data", "0")
        literal_map = harness.to_literal_map(inputs, types)
        meta = execution_metadata(execution=execution)
        if env:
            meta = TaskExecutionMetadata(
                task_execution_id=meta.task_execution_id,
                namespace=meta.namespace,
                labels=meta.labels,
                annotations=meta.annotations,
                k8s_service_account=meta.k8s_service_account,
                environment_variables={**meta.environment_variables, **env},
                identity=None,
            )
        return self.connector.create(template, prefix, literal_map, meta), prefix

    def run(
        self,
        template: TaskTemplate,
        inputs: dict[str, Any],
        types: dict[str, type],
        execution: str,
        env: Optional[dict[str, str]] = None,
    ):
        """Submit and poll `get` to a terminal phase; returns (resources seen, output prefix, the operator's run)."""
        meta, prefix = self.submit(template, inputs, types, execution, env)
        seen = harness.poll_until_terminal(self.connector, meta, JOB_TIMEOUT_S)
        return seen, prefix, self.operator.run_for(meta.name)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A fresh fake cluster per test; fails the test if the operator hit an error or left a process behind."""
    with running_fake_api() as (server, client):
        operator = FakeOperator(server, tmp_path / "pods", extra_env={"E2E_MARKER_DIR": str(tmp_path)})
        (tmp_path / "pods").mkdir()
        with operator:
            cluster = Cluster(server, client, operator, BlobStore(tmp_path / "blobs"))
            try:
                yield cluster
            finally:
                cluster.connector.close()  # its watches, before the server goes
        leftovers = [pid for run in operator.runs.values() for pid in run.pids() if harness.process_group_alive(pid)]
    assert not operator.errors, "\n".join(operator.errors)
    assert not leftovers, f"replica processes left behind: {leftovers}"


def _logs(run: JobRun) -> str:
    return "\n".join(f"----- {r.pod_name} (exit {r.exit_code})\n{r.log()[-3000:]}" for r in run.replicas)


def test_seed_decorator_allreduce_over_master_and_two_workers(cluster: Cluster, templates) -> None:
    from tests.e2e.workflows import seed_allreduce

    iface = seed_allreduce.python_interface
    seen, prefix, run = cluster.run(templates["seed_allreduce"], {"x": 10}, iface.inputs, "seed1")
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    assert [r.label for r in run.replicas] == ["master-0", "worker-0", "worker-1"]
    # The job succeeds when the master does (Kubeflow semantics); cleanPodPolicy Running then deletes a worker that is
    # still shutting down, so a worker either exited 0 or was cleaned up after the success -- it never failed.
    assert run.replica("master-0").exit_code == 0, _logs(run)
    assert all(r.exit_code == 0 or (r.exit_code is None and r.deleted) for r in run.replicas), _logs(run)
    outputs = harness.read_outputs(prefix, iface.outputs)
    # rank 0 wrote them: world 3, sum of (10 + rank) over ranks 0..2
    assert outputs == {"o0": [0, 3, 33]}
    written = cluster.blobs.files(prefix)
    assert written.count("outputs.pb") == 1 and "inputs.pb" in written
    assert not [f for f in written if f.startswith("error")], written
    assert seen[-1].message.endswith("successfully completed.")
    env = run.replica("worker-1").env
    assert (env["RANK"], env["WORLD_SIZE"], env["PET_NODE_RANK"], env["PET_NNODES"]) == ("2", "3", "2", "3")


def test_mnist_example_on_a_slice_of_real_data(cluster: Cluster, templates) -> None:
    from examples.mnist.workflow import train_mnist

    iface = train_mnist.python_interface
    inputs = {"epochs": 1, "batch_size": 64, "test_batch_size": 500, "train_limit": 1536, "test_limit": 500}
    inputs = {name: inputs.get(name, default) for name, (_, default) in iface.inputs_with_defaults.items()}
    env = {"MNIST_DATA_DIR": str(require_mnist())}  # fails with how to provide the data when there is none
    seen, prefix, run = cluster.run(templates["train_mnist"], inputs, iface.inputs, "mnist1", env=env)
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    # As in the seed test: a worker still shutting down when the master succeeds is cleaned up, never failed.
    assert run.replica("master-0").exit_code == 0, _logs(run)
    assert all(r.exit_code == 0 or (r.exit_code is None and r.deleted) for r in run.replicas), _logs(run)
    outputs = harness.read_outputs(prefix, iface.outputs)
    accuracies, weights, summary = outputs["accuracies"], outputs["weights"], outputs["summary"]
    assert len(accuracies) == 1 and 50.0 < accuracies[0] <= 100.0, accuracies  # chance is 10%
    assert summary.world_size == 3 and summary.backend == "gloo" and summary.test_examples == 500
    import torch

    state = torch.load(weights.download(), map_location="cpu", weights_only=True)
    assert state and all(isinstance(v, torch.Tensor) for v in state.values())
    assert cluster.blobs.files(prefix).count("outputs.pb") == 1


def test_worker_that_raises_fails_the_job_naming_that_worker(cluster: Cluster, templates) -> None:
    from tests.e2e.workflows import worker_raises

    iface = worker_raises.python_interface
    seen, prefix, run = cluster.run(templates["worker_raises"], {"fail_rank": 2}, iface.inputs, "fail1")
    message = seen[-1].message
    assert harness.phase_names(seen)[-1] == "FAILED", _logs(run) + "\n" + message
    assert "Root cause: worker-1 (pytorch): exit code 1" in message, message
    assert "ValueError: rank 2 cannot read shard 7: checksum mismatch" in message, message
    assert run.replica("worker-1").exit_code == 1
    # cleanPodPolicy Running: the replicas still waiting at the barrier were deleted, their processes killed
    assert [p["metadata"]["name"] for p in cluster.server.pods(NS)] == [run.replica("worker-1").pod_name]
    assert cluster.operator.wait_processes_gone(run) == []
    assert "outputs.pb" not in cluster.blobs.files(prefix)


def test_elastic_one_to_two_nodes(cluster: Cluster, templates) -> None:
    from tests.e2e.workflows import elastic_allreduce

    iface = elastic_allreduce.python_interface
    seen, prefix, run = cluster.run(templates["elastic_allreduce"], {"x": 1}, iface.inputs, "elastic1")
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    assert [r.label for r in run.replicas] == ["worker-0", "worker-1"]
    env = run.replica("worker-1").env
    assert env["PET_NNODES"] == "1:2" and env["PET_RDZV_BACKEND"] == "c10d" and "RANK" not in env
    outputs = harness.read_outputs(prefix, iface.outputs)
    rank, world, total = outputs["o0"]
    # both pods joined the rendezvous (max 2 nodes), or only one did (min 1); either way rank 0 answered
    assert rank == 0 and world in (1, 2) and total == sum(1 + r for r in range(world))
    assert cluster.blobs.files(prefix).count("outputs.pb") == 1


def test_delete_while_running_kills_every_replica(cluster: Cluster, templates, tmp_path: Path) -> None:
    from tests.e2e.workflows import sleeps

    iface = sleeps.python_interface
    meta, prefix = cluster.submit(templates["sleeps"], {"seconds": 600}, iface.inputs, "delete1")
    run = cluster.operator.run_for(meta.name)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(list(tmp_path.glob("rank-*.pid"))) < 2 and time.monotonic() < deadline:
        assert all(r.exit_code is None for r in run.replicas), _logs(run)
        time.sleep(0.2)
    assert harness.phase_names([cluster.connector.get(meta)]) == ["RUNNING"]
    cluster.connector.delete(meta)
    assert cluster.operator.wait_processes_gone(run) == []
    assert cluster.server.get_job(NS, meta.name) is None and cluster.server.pods(NS) == []
    # gone: reported, not an exception (retryable, or as the task's own error document says if a replica wrote one)
    assert harness.phase_names([cluster.connector.get(meta)]) in (["RETRYABLE_FAILED"], ["FAILED"])
    cluster.connector.delete(meta)  # deleting again is success


@pytest.mark.filterwarnings("ignore:Configuring shared memory:UserWarning")
def test_task_from_flytekits_official_kfpytorch_plugin(cluster: Cluster, templates) -> None:
    from tests.e2e.workflows_official import official_allreduce

    iface = official_allreduce.python_interface
    seen, prefix, run = cluster.run(templates["official_allreduce"], {"x": 5}, iface.inputs, "official1")
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    assert [r.label for r in run.replicas] == ["master-0", "worker-0"]
    assert harness.read_outputs(prefix, iface.outputs) == {"o0": [2, 11]}
