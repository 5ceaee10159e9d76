"""A task runs on every kind, on the real controllers: the connector creates the job, training-operator (PyTorchJob),
Trainer v2 and its JobSet (TrainJob), or the JobSet controller (JobSet) create the pods, the scheduler places them,
the node agent runs them, and the outputs are read back from the blob store."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flytekit.models.task import TaskTemplate

from tests.cluster.harness import TASK_NS, Propeller, RealCluster, blob_env, blob_keys, read_outputs, submit
from tests.e2e import harness as e2e

KINDS = ("pytorchjob", "trainjob", "jobset")
JOB_TIMEOUT_S = 300.0
SELECTORS = {
    "pytorchjob": "training.kubeflow.org/job-name={}",
    "trainjob": "jobset.sigs.k8s.io/jobset-name={}",
    "jobset": "jobset.sigs.k8s.io/jobset-name={}",
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskTemplate]:
    return e2e.package_tasks(["tests.e2e.workflows", "examples.mnist.workflow"], tmp_path_factory.mktemp("package"))


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def propeller(real: RealCluster, kind: str) -> Iterator[Propeller]:
    p = real.deploy_connector(kind)
    try:
        yield p
    finally:
        p.close()


def run(real: RealCluster, propeller: Propeller, template: TaskTemplate, inputs: dict[str, Any],
        types: dict[str, type], execution: str, env: dict[str, str] | None = None) -> tuple[list, Any]:  # fmt: skip
    started = time.monotonic()
    execution = f"{execution}-{uuid.uuid4().hex[:6]}"  # a cluster kept up between sessions holds earlier jobs
    literal_map = e2e.to_literal_map(inputs, types)
    job = submit(propeller, template, literal_map, execution, {**blob_env(real.info), **(env or {})})
    seen = propeller.poll(job.meta, JOB_TIMEOUT_S)
    print(f"\n[cluster] {execution}: {[a.name for a in seen]} in {time.monotonic() - started:.1f} s")
    return seen, job


def test_seed_decorator_allreduce_over_three_ranks(
    real: RealCluster, propeller: Propeller, kind: str, templates
) -> None:
    from tests.e2e.workflows import seed_allreduce

    iface = seed_allreduce.python_interface
    seen, job = run(real, propeller, templates["seed_allreduce"], {"x": 10}, iface.inputs, f"seed-{kind}")
    logs = real.logs_of(TASK_NS, SELECTORS[kind].format(job.job_name))
    assert seen[-1].name == "SUCCEEDED", f"{seen[-1].message}\n{logs}"
    # rank 0 wrote the outputs: world 3, sum of (10 + rank) over ranks 0..2
    assert read_outputs(real.info, job.prefix, iface.outputs) == {"o0": [0, 3, 33]}
    keys = blob_keys(real.info, job.prefix)
    assert keys.count("outputs.pb") == 1 and "inputs.pb" in keys and not [k for k in keys if k.startswith("error")]
