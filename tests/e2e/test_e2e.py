"""End to end, for every job kind: packaged task -> connector -> the kind's job -> real replica processes -> outputs
read through flytekit.

See `tests.e2e.harness` for what is real and what the fake controllers play: `FakeOperator` (the training operator
of a PyTorchJob: each replica gets the operator's `RANK`, `WORLD_SIZE`, `MASTER_*` and `PET_*` variables),
`FakeTrainer` (Kubeflow Trainer v2 with its JobSet: each node gets exactly the five `PET_*` variables the torch runtime
sets, which our launcher must turn into ranks) and `FakeJobSet` (the JobSet and Job controllers: each pod gets its
pod template's variables and its completion index, which our launcher must turn into its rank). The cases every kind
runs the same way are parametrized over the registry (`kind`); each kind's own cases pick it. Every case starts real
`pyflyte-execute` processes (a few seconds each on 2 cores); the module is marked `e2e`, so a quick local run skips it
with::

    pytest -m "not e2e"

and `pytest tests/e2e` (or `-m e2e`) runs only these.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate

from backend_plugin.targets.registry import BY_CONFIG, KINDS, JobTarget
from tests.connector.helpers import Propeller, execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import TRAINJOB_PET_ENV, BlobStore, FakeJobSet, FakeOperator, FakeTrainer, JobRun, JobSetRun
from tests.fakeapi.fixtures import running_fake_api
from tests.mnist_data import require_mnist

pytestmark = pytest.mark.e2e

NS = "flytesnacks-development"
JOB_TIMEOUT_S = 120.0

CONTROLLERS: dict[str, type[FakeOperator]] = {"pytorchjob": FakeOperator, "trainjob": FakeTrainer, "jobset": FakeJobSet}
"""The fake controller that runs each kind's jobs (a new kind brings its own)."""


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskTemplate]:
    """Every e2e task, packaged once by `pyflyte package`."""
    modules = ["tests.e2e.workflows", "tests.e2e.workflows_official", "tests.e2e.workflows_trainjob",
               "examples.mnist.workflow"]  # fmt: skip
    return harness.package_tasks(modules, tmp_path_factory.mktemp("package"))


class Cluster:
    """The fake API server, the kind's fake controller, a connector creating that kind wired to the server, and the
    blob store."""

    def __init__(self, server: Any, client: Any, controller: FakeOperator, blobs: BlobStore, kind: JobTarget) -> None:
        self.server = server
        self.controller = controller
        self.blobs = blobs
        self.kind = kind
        # as deployed: the watch cache on
        self.connector = make_connector(client, api_timeout_s=5.0, target=kind.config_name, watch_cache=True)

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
        created = self.connector.create(template, prefix, literal_map, meta)
        assert created.kind == self.kind.kind
        return created, prefix

    def run(
        self,
        template: TaskTemplate,
        inputs: dict[str, Any],
        types: dict[str, type],
        execution: str,
        env: Optional[dict[str, str]] = None,
    ):
        """Submit and poll `get` to a terminal phase; returns (resources seen, output prefix, the controller's run)."""
        started = time.monotonic()
        meta, prefix = self.submit(template, inputs, types, execution, env)
        seen = harness.poll_until_terminal(self.connector, meta, JOB_TIMEOUT_S)
        print(f"\n[e2e {self.kind.config_name}] {execution}: {harness.phase_names(seen)} in "
              f"{time.monotonic() - started:.1f}s")  # fmt: skip
        return seen, prefix, self.controller.run_for(meta.name)


@pytest.fixture(params=[t.config_name for t in KINDS])
def kind(request: pytest.FixtureRequest) -> JobTarget:
    """Each registered job kind in turn (a kind's own case picks one with `indirect` parametrization)."""
    return BY_CONFIG[request.param]


@pytest.fixture
def cluster(tmp_path: Path, kind: JobTarget) -> Iterator[Cluster]:
    """A fresh fake cluster of the kind per test; fails the test if the controller hit an error or left a process
    behind."""
    with running_fake_api() as (server, client):
        controller = CONTROLLERS[kind.config_name](
            server, tmp_path / "pods", extra_env={"E2E_MARKER_DIR": str(tmp_path)}
        )
        (tmp_path / "pods").mkdir()
        with controller:
            cluster = Cluster(server, client, controller, BlobStore(tmp_path / "blobs"), kind)
            try:
                yield cluster
            finally:
                cluster.connector.close()  # its watches, before the server goes
        runs = controller.runs.values()
        leftovers = [pid for run in runs for pid in run.pids() if harness.process_group_alive(pid)]
    assert not controller.errors, "\n".join(controller.errors)
    assert not leftovers, f"replica processes left behind: {leftovers}"


def _logs(run: JobRun) -> str:
    return "\n".join(f"----- {r.pod_name} (exit {r.exit_code})\n{r.log()[-3000:]}" for r in run.replicas)


def _only_pet_from_the_operator(run: JobRun) -> None:
    for replica in run.replicas:
        assert {k for k in replica.env if k.startswith("PET_")} == set(TRAINJOB_PET_ENV)
        assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"} & set(replica.env)


def _kubeflow_ranks_succeeded(cluster: Cluster, run: JobRun, seen: list) -> None:
    """A PyTorchJob succeeds when its master does (Kubeflow semantics); cleanPodPolicy Running then deletes a worker
    that is still shutting down, so a worker either exited 0 or was cleaned up after the success: it never failed."""
    assert [r.label for r in run.replicas] == ["master-0", "worker-0", "worker-1"]
    assert run.replica("master-0").exit_code == 0, _logs(run)
    assert all(r.exit_code == 0 or (r.exit_code is None and r.deleted) for r in run.replicas), _logs(run)
    assert seen[-1].message.endswith("successfully completed.")
    env = run.replica("worker-1").env
    assert (env["RANK"], env["WORLD_SIZE"], env["PET_NODE_RANK"], env["PET_NNODES"]) == ("2", "3", "2", "3")


def _trainer_nodes_succeeded(cluster: Cluster, run: JobRun, seen: list) -> None:
    """Every node of a TrainJob exits 0, named as its JobSet names it, with only the torch runtime's variables."""
    assert [r.index for r in run.replicas] == [0, 1, 2] and all(r.exit_code == 0 for r in run.replicas), _logs(run)
    assert all(r.pod_name.startswith(f"{run.name}-node-0-{r.index}-") for r in run.replicas)
    _only_pet_from_the_operator(run)
    job = cluster.server.get_job(NS, run.name, plural=cluster.kind.plural)
    assert job["spec"]["trainer"]["numNodes"] == 3 and job["spec"]["trainer"]["numProcPerNode"] == 1


def _jobset_pods_succeeded(cluster: Cluster, run: JobRun, seen: list) -> None:
    """A JobSet succeeds when its master's Job does (its success policy), then deletes the Jobs still active: a worker
    still shutting down is deleted, never failed. Each pod had the operator's variables from its pod template and its
    completion index from the Job controller, no RANK: the launcher derived it (the outputs prove three distinct
    ranks)."""
    assert isinstance(run, JobSetRun)
    pods = run.current()
    assert [p.label for p in pods] == ["master-0", "worker-0", "worker-1"] and run.restarts == 0
    assert pods[0].exit_code == 0, _logs(run)
    assert all(p.exit_code == 0 or (p.exit_code is None and p.deleted) for p in pods), _logs(run)
    assert seen[-1].message == "jobset completed successfully"
    env = pods[2].env
    assert "RANK" not in env and "PET_NODE_RANK" not in env
    assert (env["FLYTE_PYTORCH_NODE_RANK_OFFSET"], env["JOB_COMPLETION_INDEX"]) == ("1", "1")
    assert (env["WORLD_SIZE"], env["PET_NNODES"], env["MASTER_ADDR"]) == ("3", "3", "127.0.0.1")
    assert pods[2].pod_name.startswith(f"{run.name}-worker-0-1-")


SUCCEEDED_WITH_THREE_RANKS: dict[str, Callable[[Cluster, JobRun, list], None]] = {
    "pytorchjob": _kubeflow_ranks_succeeded,
    "trainjob": _trainer_nodes_succeeded,
    "jobset": _jobset_pods_succeeded,
}
"""What each kind's controller shows of a job whose 3 ranks succeeded."""


def _worker_failed(cluster: Cluster, run: JobRun, message: str) -> None:
    assert "Root cause: worker-1 (pytorch): exit code 1" in message, message
    assert run.replica("worker-1").exit_code == 1
    # cleanPodPolicy Running: the replicas still waiting at the barrier were deleted, their processes killed
    assert [p["metadata"]["name"] for p in cluster.server.pods(NS)] == [run.replica("worker-1").pod_name]


def _node_failed(cluster: Cluster, run: JobRun, message: str) -> None:
    assert "failed (FailedJobs)" in message, message
    assert run.replicas[2].exit_code == 1
    assert "ValueError: rank 2 cannot read shard 7" in run.replicas[2].log()


def _jobset_worker_failed(cluster: Cluster, run: JobRun, message: str) -> None:
    """The worker Job fails (backoffLimit 0), its rule `NoRestart` fails the JobSet without a restart; the other pods
    are deleted with their Jobs, the failed one kept."""
    assert isinstance(run, JobSetRun) and run.restarts == 0
    assert "JobSet flytesnacks-development/" in message and "failed (FailJobSetFailurePolicyAction)" in message
    _worker_failed(cluster, run, message)


RANK_TWO_FAILED: dict[str, Callable[[Cluster, JobRun, str], None]] = {
    "pytorchjob": _worker_failed,
    "trainjob": _node_failed,
    "jobset": _jobset_worker_failed,
}
"""What each kind shows of a job whose rank 2 raised."""


# --- every kind ------------------------------------------------------------------------------------------------------


def test_seed_decorator_allreduce_over_three_ranks(cluster: Cluster, templates) -> None:
    from tests.e2e.workflows import seed_allreduce

    iface = seed_allreduce.python_interface
    seen, prefix, run = cluster.run(templates["seed_allreduce"], {"x": 10}, iface.inputs, "seed1")
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    SUCCEEDED_WITH_THREE_RANKS[cluster.kind.config_name](cluster, run, seen)
    # rank 0 wrote the outputs: world 3, sum of (10 + rank) over ranks 0..2
    assert harness.read_outputs(prefix, iface.outputs) == {"o0": [0, 3, 33]}
    written = cluster.blobs.files(prefix)
    assert written.count("outputs.pb") == 1 and "inputs.pb" in written
    assert not [f for f in written if f.startswith("error")], written


def test_mnist_example_on_a_slice_of_real_data(cluster: Cluster, templates) -> None:
    from examples.mnist.workflow import train_mnist

    iface = train_mnist.python_interface
    inputs = {"epochs": 1, "batch_size": 64, "test_batch_size": 500, "train_limit": 1536, "test_limit": 500}
    inputs = {name: inputs.get(name, default) for name, (_, default) in iface.inputs_with_defaults.items()}
    env = {"MNIST_DATA_DIR": str(require_mnist())}  # fails with how to provide the data when there is none
    seen, prefix, run = cluster.run(templates["train_mnist"], inputs, iface.inputs, "mnist1", env=env)
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    if cluster.kind.config_name == "trainjob":
        assert [r.exit_code for r in run.replicas] == [0, 0, 0]
        _only_pet_from_the_operator(run)
    else:  # the job succeeds with its master: a worker still shutting down is cleaned up, never failed
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


def test_a_rank_that_raises_fails_the_job_naming_it(cluster: Cluster, templates) -> None:
    from tests.e2e.workflows import worker_raises

    iface = worker_raises.python_interface
    seen, prefix, run = cluster.run(templates["worker_raises"], {"fail_rank": 2}, iface.inputs, "fail1")
    message = seen[-1].message
    # the contract's rule: rank 2's own error document (a ValueError, not recoverable) makes it a permanent failure,
    # and the message leads with the user's exception
    assert harness.phase_names(seen)[-1] == "FAILED", _logs(run) + "\n" + message
    assert "ValueError: rank 2 cannot read shard 7: checksum mismatch" in message, message
    RANK_TWO_FAILED[cluster.kind.config_name](cluster, run, message)
    assert cluster.controller.wait_processes_gone(run) == []
    assert "outputs.pb" not in cluster.blobs.files(prefix)


def test_gettask_carries_the_live_progress_while_the_job_runs(cluster: Cluster, templates, tmp_path: Path) -> None:
    """Rank 0 of a pod writes the progress record beside the outputs; the served connector, asked by GetTask as
    propeller asks it, adds its line to the RUNNING message, and drops it when the job ends."""
    from tests.e2e.workflows import reports_progress

    iface = reports_progress.python_interface
    env = {"FLYTE_PYTORCH_PROGRESS_INTERVAL_S": "1"}  # rank 0 writes every second (10 s by default)
    meta, prefix = cluster.submit(
        templates["reports_progress"], {"steps": 10, "hold_at": 4}, iface.inputs, "live1", env
    )
    run = cluster.controller.run_for(meta.name)
    record = Path(prefix) / "pytorch-progress.json"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (record.exists() and b'"step":4,' in record.read_bytes()):
        assert time.monotonic() < deadline, _logs(run)
        assert all(r.exit_code is None for r in run.replicas), _logs(run)
        time.sleep(0.2)
    served = make_connector(cluster.connector.api().api_client, served=True, watch_cache=True,
                            target=cluster.kind.config_name)  # fmt: skip
    propeller = Propeller(cluster.server, served)
    try:
        answers = [propeller.get(meta.encode())]
        while answers[-1].name != "RUNNING" and time.monotonic() < deadline:  # the nodes may still be starting
            time.sleep(0.2)
            answers.append(propeller.get(meta.encode()))
        running = answers[-1]
        print(f"\n[e2e {cluster.kind.config_name}] live1: GetTask {running.name}: {running.message}")
        assert running.name == "RUNNING", answers
        assert re.fullmatch(r"running.*; step 4/10 \(40%\)(, ETA [0-9dhms]+)?, loss 0\.25", running.message), running
        (tmp_path / "release").touch()
        seen = harness.poll_until_terminal(cluster.connector, meta, JOB_TIMEOUT_S)
        assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
        done = propeller.get(meta.encode())
        assert done.name == "SUCCEEDED" and "step" not in done.message, done
        assert served.progress.stats()["attempts"] == 0
    finally:
        (tmp_path / "release").touch()
        served.close()
    assert harness.read_outputs(prefix, iface.outputs) == {"o0": 10}
    final = json.loads(record.read_bytes())
    assert (final["step"], final["total"], final["done"]) == (10, 10, True)


# --- the PyTorchJob kind ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pytorchjob"], indirect=True)
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


@pytest.mark.parametrize("kind", ["pytorchjob"], indirect=True)
def test_delete_while_running_kills_every_replica(cluster: Cluster, templates, tmp_path: Path) -> None:
    from tests.e2e.workflows import sleeps

    iface = sleeps.python_interface
    meta, prefix = cluster.submit(templates["sleeps"], {"seconds": 600}, iface.inputs, "delete1")
    run = cluster.controller.run_for(meta.name)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(list(tmp_path.glob("rank-*.pid"))) < 2 and time.monotonic() < deadline:
        assert all(r.exit_code is None for r in run.replicas), _logs(run)
        time.sleep(0.2)
    assert harness.phase_names([cluster.connector.get(meta)]) == ["RUNNING"]
    cluster.connector.delete(meta)
    assert cluster.controller.wait_processes_gone(run) == []
    assert cluster.server.get_job(NS, meta.name) is None and cluster.server.pods(NS) == []
    # gone: reported, not an exception (retryable, or as the task's own error document says if a replica wrote one)
    assert harness.phase_names([cluster.connector.get(meta)]) in (["RETRYABLE_FAILED"], ["FAILED"])
    cluster.connector.delete(meta)  # deleting again is success


@pytest.mark.parametrize("kind", ["pytorchjob"], indirect=True)
@pytest.mark.filterwarnings("ignore:Configuring shared memory:UserWarning")
def test_task_from_flytekits_official_kfpytorch_plugin(cluster: Cluster, templates) -> None:
    from tests.e2e.workflows_official import official_allreduce

    iface = official_allreduce.python_interface
    seen, prefix, run = cluster.run(templates["official_allreduce"], {"x": 5}, iface.inputs, "official1")
    assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
    assert [r.label for r in run.replicas] == ["master-0", "worker-0"]
    assert harness.read_outputs(prefix, iface.outputs) == {"o0": [2, 11]}


# --- the TrainJob kind -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["trainjob"], indirect=True)
@pytest.mark.parametrize(
    "task, setting",
    [
        ("elastic_allreduce", "Elastic(nnodes="),
        ("per_role", "Worker(requests/limits=...) differs from Master(requests/limits=...)"),
    ],
    ids=["elastic", "per-role"],
)
def test_refused_tasks_name_the_setting_and_the_alternative(
    cluster: Cluster, templates, task: str, setting: str
) -> None:
    # the contract's rule: a task that can never run is recorded at create (no request, no exception for propeller
    # to retry) and reported as a permanent FAILED by the first get
    meta = cluster.connector.create(templates[task], cluster.blobs.uri("x"), None, execution_metadata(execution="tjno"))
    resource = cluster.connector.get(meta)
    assert resource.phase == TaskExecution.FAILED
    assert setting in resource.message and "target: pytorchjob" in resource.message
    assert cluster.server.jobs(cluster.kind.plural) == [] and cluster.server.requests == []
