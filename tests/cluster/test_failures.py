"""A failing rank and a hanging rank, named, on the real controllers.

Ported from the players (`tests/e2e/test_e2e.py`'s failing rank, `tests/faults/test_hang_drill.py`'s hang): the job's
error, as the connector reports it through GetTask, names the rank; what each controller does with the other pods is
read from the API (pod statuses, the job's conditions), as the real controllers do it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from tests.cluster.harness import (
    TASK_NS,
    THROUGH_PROPELLER,
    Execution,
    Propeller,
    RealCluster,
    blob_bytes,
    blob_keys,
    execute,
    kind_params,
)
from tests.cluster.test_run import assert_cpu_only, by_replica, terminated

JOB_TIMEOUT_S = 300.0


def dump(run: Execution) -> str:
    pods = {
        name: (p["spec"].get("nodeName"), p["status"].get("phase"), terminated(p))
        for name, p in by_replica(run).items()
    }
    job = run.job_object()
    return json.dumps(
        {"answers": [(a.name, a.message) for a in run.answers], "pods": pods, "status": (job or {}).get("status")},
        indent=1,
        default=str,
    )


def remaining(run: Execution, expected: list[str], timeout_s: float = 60.0) -> list[str]:
    """Wait until the job's pods left in the API are `expected` (by replica name); returns what is left."""
    from devcluster.kube import wait_for

    def left() -> list[str]:
        names = sorted(k for k, p in by_replica(run).items() if run.real.kube.get_or_none(
            f"/api/v1/namespaces/{TASK_NS}/pods/{p['metadata']['name']}") is not None)  # fmt: skip
        return names

    try:
        wait_for(f"pods of {run.job.job_name}: {expected}", lambda: left() == expected, timeout_s, 1.0)
    except TimeoutError:
        pass
    return left()


def _worker_failed(run: Execution, message: str) -> None:
    """The operator fails the job on the worker's failure (restartPolicy Never) and names the replica type;
    cleanPodPolicy Running: the replicas still waiting at the barrier are deleted, the failed one kept."""
    assert "Root cause: worker-1 (pytorch): exit code 1" in message, message
    assert "is failed because 1 Worker replica(s) failed." in message, message
    assert terminated(by_replica(run)["worker-1"]).get("exitCode") == 1
    assert remaining(run, ["worker-1"]) == ["worker-1"]


def _node_failed(run: Execution, message: str) -> None:
    """The torch runtime's node pods restart in place (`restartPolicy: OnFailure`, JobSet's webhook) until their
    Job's `backoffLimit` (6), then the Job fails (BackoffLimitExceeded), the JobSet fails (FailedJobs), and so does
    the TrainJob; the connector names node 2's pod and rank 2."""
    assert "failed (FailedJobs)" in message and "rank 2 (of 3) failed" in message, message
    node = by_replica(run)["node-2"]
    assert node["metadata"]["name"] in message, message
    status = node["status"]["containerStatuses"][0]
    last = status.get("lastState", {}).get("terminated") or terminated(node)
    assert status["restartCount"] >= 1 and last.get("exitCode") == 1, status
    assert "ValueError: rank 2 cannot read shard 7" in run.real.pod_log(node)
    jobs = run.real.kube.get(f"/apis/batch/v1/namespaces/{TASK_NS}/jobs",
                             labelSelector=f"jobset.sigs.k8s.io/jobset-name={run.job.job_name}")["items"]  # fmt: skip
    reasons = [c.get("reason") for j in jobs for c in j["status"].get("conditions") or [] if c["type"] == "Failed"]
    assert reasons == ["BackoffLimitExceeded"], reasons


def _jobset_worker_failed(run: Execution, message: str) -> None:
    """The worker Job fails at once (backoffLimit 0), its failure policy rule fails the JobSet without a restart; the
    other Jobs' pods are deleted with them, the failed one kept."""
    job = run.job_object()
    assert job is not None and job["status"].get("restarts", 0) == 0, job
    assert f"JobSet {TASK_NS}/" in message and "failed (FailJobSetFailurePolicyAction)" in message, message
    assert "Root cause: worker-1 (pytorch): exit code 1" in message, message
    assert terminated(by_replica(run)["worker-0-1"]).get("exitCode") == 1
    assert remaining(run, ["worker-0-1"]) == ["worker-0-1"]


RANK_TWO_FAILED: dict[str, Callable[[Execution, str], None]] = {
    "pytorchjob": _worker_failed,
    "trainjob": _node_failed,
    "jobset": _jobset_worker_failed,
}
"""What each kind shows of a job whose rank 2 raised."""


@pytest.mark.parametrize("kind", kind_params(ci=("trainjob", "jobset"), elsewhere="on trainjob and jobset, and on "
                         "pytorchjob " + THROUGH_PROPELLER.format("a failing rank")), indirect=True)  # fmt: skip
def test_a_rank_that_raises_fails_the_job_naming_it(real: RealCluster, propeller: Propeller, kind: str,
                                                    templates: dict) -> None:  # fmt: skip
    from tests.cluster.workflows import worker_raises

    iface = worker_raises.python_interface
    run = execute(real, propeller, kind, templates["worker_raises"], {"fail_rank": 2}, iface.inputs, "fail")
    try:
        run.poll(JOB_TIMEOUT_S)
        message = run.answers[-1].message
        print(f"\n[cluster] failing rank on {kind}: {[(a.name, a.message[:160]) for a in run.answers]}")
        # the contract's rule: rank 2's own error document (a ValueError, not recoverable) makes it a permanent
        # failure, and the message leads with the user's exception
        assert run.phases()[-1] == "FAILED", f"{message}\n{run.logs()}"
        assert "ValueError: rank 2 cannot read shard 7: checksum mismatch" in message, message
        RANK_TWO_FAILED[kind](run, message)
        assert_cpu_only(run)
        assert "outputs.pb" not in blob_keys(real.info, run.job.prefix)
        run.clock("failing rank, named")
    finally:
        run.finish()


def _seconds(stamp: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _starts(pod: dict) -> list[str]:
    """When the pod's main container started, each time."""
    status = (pod["status"].get("containerStatuses") or [{}])[0]
    states = (
        status.get("lastState", {}).get("terminated"),
        (status.get("state") or {}).get("running"),
        terminated(pod),
    )
    return [s["startedAt"] for s in states if s and s.get("startedAt")]


def _ends(pod: dict) -> list[str]:
    """When the pod's main container ended, each time (a container restarted in place ended before, in lastState)."""
    status = (pod["status"].get("containerStatuses") or [{}])[0]
    return [s["finishedAt"] for s in (status.get("lastState", {}).get("terminated"), terminated(pod)) if s]


@pytest.mark.parametrize("kind", kind_params(ci=("pytorchjob",)), indirect=True)
def test_a_hanging_rank_is_named_and_every_pod_ends_within_the_bound(real: RealCluster, propeller: Propeller,
                                                                      kind: str, templates: dict) -> None:  # fmt: skip
    """One replica's rank hangs outside a collective: the others wait in an all-reduce until the collective timeout,
    learn from the group's store which rank did not arrive, and fail naming it (rank, node, pod, where it was); the
    failure is not retried (the late rank was still running the task's code). Each pod is its own process group in
    its own network namespace, so the ranks share nothing but the store."""
    from backend_plugin.task_errors import parse_error_document
    from tests.cluster.workflows import HANG_TIMEOUT_S, rank_hangs

    # The player's bound was the collective timeout + 30 s from the job's start. Here each pod's pyflyte-execute
    # imports flytekit and torch before the collective starts, three at once on two cores: 15 to 30 s on a loaded
    # machine (measured 33 to 42 s to the first failure with the 10 s timeout). The bound's point is that the
    # drill's collective timeout, not torch's default of 30 minutes, ends every pod: + 60 s shows it with room.
    bound_s = HANG_TIMEOUT_S + 60
    iface = rank_hangs.python_interface
    run = execute(real, propeller, kind, templates["rank_hangs"], {"x": 1}, iface.inputs, "hang")
    try:
        run.poll(JOB_TIMEOUT_S)
        final = run.answers[-1]
        left = run.guard.gone(bound_s)
        all_gone = time.time()
        assert not left, left
        job = run.job_object()
        assert job is not None
        # the bound counts from the last rank's start (every pod's container running), not from the job's creation:
        # on a loaded machine, scheduling, the operator's init container and pyflyte-execute's imports take longer
        # than the drill's collective timeout, and none of that is the hang's detection
        created = _seconds(job["metadata"]["creationTimestamp"])
        started = max(_seconds(t) for p in by_replica(run).values() for t in _starts(p))
        culprit = next(p for name, p in by_replica(run).items() if name in ("worker-0", "node-1", "worker-0-0"))
        first_end = {name: min(_seconds(t) for t in _ends(p)) - started for name, p in by_replica(run).items()
                     if _ends(p)}  # fmt: skip
        deleted = [name for name, p in by_replica(run).items() if not _ends(p)]
        print(f"\n[cluster] hang on {kind}: every rank running {started - created:.1f} s after the job's creation; "
              f"first failures {first_end} s later, pods deleted before they ended {deleted}, every process gone "
              f"after {all_gone - started:.1f} s; {final.message[:300]}")  # fmt: skip
        assert final.phase == TaskExecution.FAILED, final.message
        lead = f"rank 1 (of 3) on node 1 (pod {culprit['metadata']['name']}) did not arrive: still running at "
        assert lead in final.message and "in _wait_for_nothing, outside torch.distributed" in final.message, (
            final.message
        )
        assert set(first_end) | set(deleted) == set(by_replica(run))
        assert first_end and all(s <= bound_s for s in first_end.values()), first_end
        assert all_gone - started <= bound_s + 1  # the stamps have whole seconds
        documents = [k for k in blob_keys(real.info, run.job.prefix) if k.startswith("error")]
        assert documents, "no error document"
        for name in documents:
            summary = parse_error_document(blob_bytes(real.info, f"{run.job.prefix}/{name}"), name).summary
            assert summary.startswith("HangError: rank 1 (of 3)"), summary
        run.clock("hanging rank, named")
    finally:
        run.finish()
