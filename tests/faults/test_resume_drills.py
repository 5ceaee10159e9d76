"""Resume drills: rank 1 fails at step k under each restart layer, and training continues from step >= k to the
weights of an unbroken run, through one checkpoint API (flytekit's `current_context().checkpoint`, which the
launcher points at this attempt's own checkpoint when a restarted run of the attempt wrote one).

1. Elastic `max_restarts`: locally, and in a pod of the e2e harness (the agent restarts the ranks in place);
2. the operator's `OnFailure`: the harness restarts the failed containers in place; the error documents the
   crashed runs wrote are gone once the attempt succeeded;
3. a Flyte retry: attempt 1 (a new job, `--prev-checkpoint` = attempt 0's prefix) after attempt 0 failed with a
   recoverable error;
4. a JobSet restart (`FakeJobSet`): every pod of the JobSet is created again, after a crash under `OnFailure`
   (counted toward `maxRestarts`) and after a preemption (the pod's `DisruptionTarget`, not counted).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from tests.connector.helpers import execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import BlobStore, FakeJobSet, FakeOperator, JobSetRun
from tests.fakeapi.fixtures import running_fake_api
from tests.faults import resume_tasks

pytestmark = [pytest.mark.faults, pytest.mark.slow]

STEPS, FAIL_AT = 8, 5
JOB_TIMEOUT_S = float(os.environ.get("RESUME_DRILL_TIMEOUT_S", "240"))


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """The weights of a run without a fault (same world size, data and steps as every drill)."""
    marker = tmp_path_factory.mktemp("unbroken") / "marker"
    weights, start = resume_tasks.pod_restart_resume(steps=STEPS, fail_at=FAIL_AT, mode="none", marker=str(marker))
    assert start == 0
    return list(weights)


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1e-6 for x, y in zip(a, b, strict=True))


def test_elastic_max_restarts_locally(unbroken: list[float], tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    weights, start = resume_tasks.elastic_resume(steps=STEPS, fail_at=FAIL_AT, mode="kill", marker=str(marker))
    assert marker.exists()  # rank 1 was killed
    assert start >= FAIL_AT and _same(list(weights), unbroken), (start, weights, unbroken)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return harness.package_tasks(["tests.faults.resume_tasks"], tmp_path_factory.mktemp("package"))


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("task", "mode"),
    [
        pytest.param("elastic_resume", "kill", id="elastic-max-restarts"),
        pytest.param("pod_restart_resume", "kill", id="on-failure"),
    ],
)
def test_in_attempt_restart_on_the_harness(task: str, mode: str, templates, unbroken, tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    marker = tmp_path / "marker"
    interface = getattr(resume_tasks, task).python_interface
    with running_fake_api() as (server, client):
        with FakeOperator(server, tmp_path / "pods") as operator:
            connector = make_connector(client, api_timeout_s=5.0)
            prefix = blobs.uri("metadata", task[:6], "n0", "data", "0")
            inputs = {"steps": STEPS, "fail_at": FAIL_AT, "mode": mode, "marker": str(marker)}
            meta = connector.create(
                templates[task], prefix, harness.to_literal_map(inputs, interface.inputs), execution_metadata(task[:6])
            )
            seen = harness.poll_until_terminal(connector, meta, JOB_TIMEOUT_S)
            run = operator.run_for(meta.name)
        assert operator.errors == []
    assert seen[-1].phase == TaskExecution.SUCCEEDED, seen[-1].message
    assert marker.exists()
    outputs = harness.read_outputs(prefix, interface.outputs)
    print(f"\n[resume {task}] restarts {[r.restarts for r in run.replicas]}, resumed from step {outputs['o1']}")
    assert outputs["o1"] >= FAIL_AT and _same(outputs["o0"], unbroken), outputs
    if task == "pod_restart_resume":
        assert sum(r.restarts for r in run.replicas) >= 1  # the operator restarted containers in place
        assert [f for f in blobs.files(prefix) if f.startswith("error")] == []  # the recovered runs' documents


@pytest.mark.e2e
def test_flyte_retry_on_the_harness(templates, unbroken, tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    marker = tmp_path / "marker"
    interface = resume_tasks.flyte_retry_resume.python_interface
    inputs = harness.to_literal_map(
        {"steps": STEPS, "fail_at": FAIL_AT, "mode": "raise", "marker": str(marker)}, interface.inputs
    )
    phases = []
    with running_fake_api() as (server, client):
        with FakeOperator(server, tmp_path / "pods") as operator:
            connector = make_connector(client, api_timeout_s=5.0)
            for attempt in (0, 1):
                prefix = blobs.uri("metadata", "retry", "n0", "data", str(attempt))
                meta = connector.create(
                    templates["flyte_retry_resume"], prefix, inputs, execution_metadata("retry", attempt=attempt)
                )
                phases.append(harness.poll_until_terminal(connector, meta, JOB_TIMEOUT_S)[-1])
        assert operator.errors == []
    assert [p.phase for p in phases] == [TaskExecution.RETRYABLE_FAILED, TaskExecution.SUCCEEDED], phases[0].message
    outputs = harness.read_outputs(prefix, interface.outputs)
    print(f"\n[resume flyte retry] attempt 1 resumed from step {outputs['o1']}")
    assert outputs["o1"] >= FAIL_AT and _same(outputs["o0"], unbroken), outputs


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("task", "mode", "counted"),
    [
        pytest.param("pod_restart_resume", "kill", 1, id="on-failure-crash"),
        pytest.param("flyte_retry_resume", "preempt", 0, id="preempted"),
    ],
)
def test_a_jobset_restart_resumes_from_the_checkpoint(
    task: str, mode: str, counted: int, templates, unbroken, tmp_path: Path
) -> None:
    """The JobSet's failure policy recreates every pod; the new run reads this attempt's checkpoint. A crash of an
    `OnFailure` worker spends one restart of the budget; a preempted pod (restart policy `Never`) spends none."""
    blobs = BlobStore(tmp_path / "blobs")
    marker = tmp_path / "marker"
    interface = getattr(resume_tasks, task).python_interface
    with running_fake_api() as (server, client):
        with FakeJobSet(server, tmp_path / "pods", grace_s=2.0) as player:
            connector = make_connector(client, api_timeout_s=5.0, target="jobset")
            prefix = blobs.uri("metadata", f"js{mode[:4]}", "n0", "data", "0")
            inputs = {"steps": STEPS, "fail_at": FAIL_AT, "mode": mode, "marker": str(marker)}
            meta = connector.create(
                templates[task], prefix, harness.to_literal_map(inputs, interface.inputs), execution_metadata("jsres")
            )
            run = player.run_for(meta.name)
            if mode == "preempt":
                _wait_for(marker)
                player.preempt(run, "worker-0")
            seen = harness.poll_until_terminal(connector, meta, JOB_TIMEOUT_S)
        assert player.errors == []
    assert isinstance(run, JobSetRun)
    assert seen[-1].phase == TaskExecution.SUCCEEDED, seen[-1].message
    outputs = harness.read_outputs(prefix, interface.outputs)
    print(
        f"\n[resume jobset {mode}] restarts {run.restarts} ({run.counted} counted), resumed from step {outputs['o1']}"
    )
    assert (run.restarts, run.counted) == (1, counted)
    assert outputs["o1"] >= FAIL_AT and _same(outputs["o0"], unbroken), outputs
    assert [f for f in blobs.files(prefix) if f.startswith("error")] == []  # the recovered runs' documents


def _wait_for(path: Path, timeout_s: float = JOB_TIMEOUT_S) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)
