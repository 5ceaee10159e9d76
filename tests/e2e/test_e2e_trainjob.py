"""End to end on the Trainer v2 target: packaged task -> connector -> TrainJob -> one process per node -> outputs.

The fake Trainer (`tests.e2e.harness.FakeTrainer`) gives each node exactly the five `PET_*` variables the torch
runtime sets and nothing else from the operator; our launcher must turn them into ranks. Marked `e2e` like
`test_e2e.py`; each case prints its wall time (`pytest -s`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.models.task import TaskTemplate

from backend_plugin.targets.trainjob.declaration import PLURAL as TRAINJOBS
from tests.connector.helpers import execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import TRAINJOB_PET_ENV, BlobStore, FakeTrainer, JobRun
from tests.fakeapi.fixtures import running_fake_api
from tests.mnist_data import require_mnist

pytestmark = pytest.mark.e2e

NS = "flytesnacks-development"
JOB_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskTemplate]:
    """Every task these cases run, packaged once by `pyflyte package`."""
    modules = ["tests.e2e.workflows", "tests.e2e.workflows_trainjob", "examples.mnist.workflow"]
    return harness.package_tasks(modules, tmp_path_factory.mktemp("package"))


class TrainerCluster:
    """The fake API server, the fake Trainer, a TrainJob connector wired to the server, and the blob store."""

    def __init__(self, server: Any, client: Any, trainer: FakeTrainer, blobs: BlobStore) -> None:
        self.server = server
        self.trainer = trainer
        self.blobs = blobs
        self.connector = make_connector(client, api_timeout_s=5.0, target="trainjob", watch_cache=True)

    def run(self, template: TaskTemplate, inputs: dict[str, Any], types: dict[str, type], execution: str, env=None):
        """Create through the connector, poll `get` to a terminal phase; returns (resources, prefix, run, seconds)."""
        started = time.monotonic()
        prefix = self.blobs.uri("metadata", execution, "n0", "data", "0")
        meta = execution_metadata(execution=execution)
        if env:
            meta.environment_variables.update(env)
        created = self.connector.create(template, prefix, harness.to_literal_map(inputs, types), meta)
        assert created.kind == "TrainJob"
        seen = harness.poll_until_terminal(self.connector, created, JOB_TIMEOUT_S)
        elapsed = time.monotonic() - started
        print(f"\n[e2e trainjob] {execution}: {harness.phase_names(seen)} in {elapsed:.1f}s")
        return seen, prefix, self.trainer.run_for(created.name), elapsed


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TrainerCluster]:
    """A fresh fake Trainer v2 cluster per test; fails the test on a trainer error or a process left behind."""
    with running_fake_api() as (server, client):
        (tmp_path / "pods").mkdir()
        trainer = FakeTrainer(server, tmp_path / "pods", extra_env={"E2E_MARKER_DIR": str(tmp_path)})
        with trainer:
            cluster = TrainerCluster(server, client, trainer, BlobStore(tmp_path / "blobs"))
            try:
                yield cluster
            finally:
                cluster.connector.close()  # its watches, before the server goes
        leftovers = [pid for run in trainer.runs.values() for pid in run.pids() if harness.process_group_alive(pid)]
    assert not trainer.errors, "\n".join(trainer.errors)
    assert not leftovers, f"node processes left behind: {leftovers}"


def _logs(run: JobRun) -> str:
    return "\n".join(f"----- {r.pod_name} (exit {r.exit_code})\n{r.log()[-3000:]}" for r in run.replicas)


def _only_pet_from_the_operator(run: JobRun) -> None:
    for replica in run.replicas:
        assert {k for k in replica.env if k.startswith("PET_")} == set(TRAINJOB_PET_ENV)
        assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"} & set(replica.env)


def test_seed_decorator_allreduce_over_three_nodes(cluster: TrainerCluster, templates) -> None:
    from tests.e2e.workflows import seed_allreduce

    iface = seed_allreduce.python_interface
    seen, prefix, run, _ = cluster.run(templates["seed_allreduce"], {"x": 10}, iface.inputs, "tjseed")
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    assert [r.index for r in run.replicas] == [0, 1, 2] and all(r.exit_code == 0 for r in run.replicas), _logs(run)
    assert all(r.pod_name.startswith(f"{run.name}-node-0-{r.index}-") for r in run.replicas)
    _only_pet_from_the_operator(run)
    # rank 0 wrote the outputs: world 3, sum of (10 + rank) over ranks 0..2
    assert harness.read_outputs(prefix, iface.outputs) == {"o0": [0, 3, 33]}
    written = cluster.blobs.files(prefix)
    assert written.count("outputs.pb") == 1 and not [f for f in written if f.startswith("error")], written
    job = cluster.server.get_job(NS, run.name, plural=TRAINJOBS)
    assert job["spec"]["trainer"]["numNodes"] == 3 and job["spec"]["trainer"]["numProcPerNode"] == 1


def test_mnist_example_on_a_slice_of_real_data(cluster: TrainerCluster, templates) -> None:
    from examples.mnist.workflow import train_mnist

    iface = train_mnist.python_interface
    inputs = {"epochs": 1, "batch_size": 64, "test_batch_size": 500, "train_limit": 1536, "test_limit": 500}
    inputs = {name: inputs.get(name, default) for name, (_, default) in iface.inputs_with_defaults.items()}
    env = {"MNIST_DATA_DIR": str(require_mnist())}  # fails with how to provide the data when there is none
    seen, prefix, run, _ = cluster.run(templates["train_mnist"], inputs, iface.inputs, "tjmnist", env=env)
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    assert [r.exit_code for r in run.replicas] == [0, 0, 0]
    _only_pet_from_the_operator(run)
    outputs = harness.read_outputs(prefix, iface.outputs)
    accuracies, summary = outputs["accuracies"], outputs["summary"]
    assert len(accuracies) == 1 and 50.0 < accuracies[0] <= 100.0, accuracies  # chance is 10%
    assert summary.world_size == 3 and summary.backend == "gloo" and summary.test_examples == 500
    assert cluster.blobs.files(prefix).count("outputs.pb") == 1


def test_failing_node_fails_the_job_naming_it(cluster: TrainerCluster, templates) -> None:
    from tests.e2e.workflows import worker_raises

    iface = worker_raises.python_interface
    seen, prefix, run, _ = cluster.run(templates["worker_raises"], {"fail_rank": 2}, iface.inputs, "tjfail")
    message = seen[-1].message
    # the contract's rule: node 2's own error document (a ValueError, not recoverable) makes it a permanent failure,
    # and the message leads with the user's exception
    assert harness.phase_names(seen)[-1] == "FAILED", _logs(run) + "\n" + message
    assert "ValueError: rank 2 cannot read shard 7" in message and "failed (FailedJobs)" in message, message
    assert run.replicas[2].exit_code == 1
    assert "ValueError: rank 2 cannot read shard 7" in run.replicas[2].log()
    assert cluster.trainer.wait_processes_gone(run) == []
    assert "outputs.pb" not in cluster.blobs.files(prefix)


@pytest.mark.parametrize(
    "task, setting",
    [
        ("elastic_allreduce", "Elastic(nnodes="),
        ("per_role", "Worker(requests/limits=...) differs from Master(requests/limits=...)"),
    ],
    ids=["elastic", "per-role"],
)
def test_refused_tasks_name_the_setting_and_the_alternative(
    cluster: TrainerCluster, templates, task: str, setting: str
) -> None:
    # the contract's rule: a task that can never run is recorded at create (no request, no exception for propeller
    # to retry) and reported as a permanent FAILED by the first get
    meta = cluster.connector.create(templates[task], cluster.blobs.uri("x"), None, execution_metadata(execution="tjno"))
    resource = cluster.connector.get(meta)
    assert resource.phase == TaskExecution.FAILED
    assert setting in resource.message and "target: pytorchjob" in resource.message
    assert cluster.server.jobs(TRAINJOBS) == [] and cluster.server.requests == []
