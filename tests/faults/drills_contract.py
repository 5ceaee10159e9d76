"""Drills 12 and 13: is a failed job retried by Flyte, and does it say why? (issue 11, item 1)

Three failures, each run two ways:

- **12 (fake API)**: the connector against the fake Kubernetes API server (`tests.fakeapi`); the job's status and
  pods are written as the training operator and the kubelet would, and the error documents under the (local)
  output prefix are written by flytekit itself (`pyflyte-execute` of tasks that raise, with the per-replica error
  strategy our writer sets).
- **13 (e2e)**: the task `tests.faults.contract_tasks.rank_fails` packaged by `pyflyte package`, created by the
  connector, run as real replica processes by the e2e harness's fake operator (`tests.e2e.harness`), polled to a
  terminal phase.

The failures: rank 1 raises a non-recoverable error (`ValueError`), rank 1 raises `FlyteRecoverableException`, and
rank 1's replica is OOM-killed (the whole container SIGKILLed; the harness's kubelet reports it as `OOMKilled`).
Expected: FAILED (Flyte does not retry), RETRYABLE_FAILED, RETRYABLE_FAILED; the message leads with the user's
exception, or names the killed replica.

Each drill returns one row for the fault report: `{drill, injected, expected, observed, detect_s, leftover,
data_lost}`; `observed` has the phase, whether Flyte would retry, and the message's first line.
"""

from __future__ import annotations

import datetime
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from flyteidl.core import errors_pb2
from flyteidl.core.execution_pb2 import TaskExecution

from tests.connector.helpers import execution_metadata, load_template, make_connector, write_flytekit_error
from tests.fakeapi.fixtures import running_fake_api
from tests.fakeapi.objects import condition, replica_pod

NS = "flytesnacks-development"
CASES = ("non-recoverable", "recoverable", "oom-killed")
EXPECTED = {
    "non-recoverable": TaskExecution.FAILED,
    "recoverable": TaskExecution.RETRYABLE_FAILED,
    "oom-killed": TaskExecution.RETRYABLE_FAILED,
}
INJECTED = {
    "non-recoverable": "rank 1 raises ValueError (a non-recoverable user error); rank 0 loses its peer",
    "recoverable": "rank 1 raises FlyteRecoverableException; rank 0 loses its peer",
    "oom-killed": "rank 1's replica is OOM-killed (no error document); rank 0 loses its peer and raises",
}
E2E_TIMEOUT_S = 180.0


def _row(drill: str, case: str, resource: Any, detect_s: Optional[float], leftover: int) -> dict[str, Any]:
    phase = TaskExecution.Phase.Name(resource.phase)
    expected = TaskExecution.Phase.Name(EXPECTED[case])
    observed = {
        "phase": phase,
        "flyte_retries": resource.phase == TaskExecution.RETRYABLE_FAILED,
        "message": resource.message.splitlines()[0] if resource.message else "",
        "full_message": resource.message,
    }
    return {
        "drill": f"{drill} {case}",
        "injected": INJECTED[case],
        "expected": f"{expected}; the message leads with the user's exception or names the killed replica",
        "observed": observed,
        "detect_s": None if detect_s is None else round(detect_s, 3),
        "leftover": leftover,
        "data_lost": False,  # the task failed: no output was to be written
    }


# --------------------------------------------------------------------------------------------------------------
# 12: the connector against the fake API, flytekit's own error documents


def _document(source: Path, target: Path, worker: str, at: datetime.datetime) -> None:
    doc = errors_pb2.ErrorDocument()
    doc.ParseFromString(source.read_bytes())
    doc.error.worker = worker
    doc.error.timestamp.FromDatetime(at.replace(tzinfo=None))
    target.write_bytes(doc.SerializeToString())


def drill_fake_api(case: str, work: Optional[Path] = None) -> dict[str, Any]:
    """Drill 12: one failure case through the connector against the fake API server.

    Args:
        case: one of `CASES`.
        work: a directory to work in (a temporary one when None).

    Returns:
        The report row.
    """
    work = work or Path(tempfile.mkdtemp(prefix="drill12-"))
    sources = work / "sources"
    user = write_flytekit_error("raises_value_error", sources / "user", worker="w")
    recoverable = write_flytekit_error("raises_recoverable", sources / "recoverable", worker="w")
    failed_at = datetime.datetime(2025, 1, 1, 0, 1, 0, tzinfo=datetime.timezone.utc)
    with running_fake_api() as (server, client):
        connector = make_connector(client)
        prefix = work / "prefix" / "0"
        meta = connector.create(load_template(), str(prefix), None, execution_metadata(execution=f"d12{case[:3]}"))
        job = server.get_job(NS, meta.name)
        later = failed_at + datetime.timedelta(seconds=0.4)
        if case == "oom-killed":
            worker = {"exitCode": 137, "reason": "OOMKilled"}
        else:
            worker = {"exitCode": 1, "reason": "Error"}
            source = user if case == "non-recoverable" else recoverable
            _document(source, prefix / f"error-{'1' * 32}.pb", f"{meta.name}-worker-1", failed_at)
        # rank 0 loses its peer and fails with a (non-recoverable) error of its own, a moment later
        _document(user, prefix / f"error-{'0' * 32}.pb", f"{meta.name}-master-0", later)
        stamp = failed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        for rtype, index, term in (("Worker", 1, worker), ("Master", 0, {"exitCode": 1, "reason": "Error"})):
            state = {"terminated": {"finishedAt": stamp, **term}}
            server.put_pod(replica_pod(job, rtype, index, phase="Failed", container_state=state))
        server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="PyTorchJob failed.")]})
        start = time.monotonic()
        resource = connector.get(meta)
        detect = time.monotonic() - start
    return _row("12 fake API", case, resource, detect, leftover=0)


# --------------------------------------------------------------------------------------------------------------
# 13: end to end, real replica processes


_PACKAGED: dict[str, Any] = {}


def _template(work: Path) -> Any:
    from tests.e2e import harness

    if "rank_fails" not in _PACKAGED:
        _PACKAGED.update(harness.package_tasks(["tests.faults.contract_tasks"], work / "package"))
    return _PACKAGED["rank_fails"]


def drill_e2e(case: str, work: Optional[Path] = None) -> dict[str, Any]:
    """Drill 13: one failure case end to end (packaged task, connector, replica processes of the fake operator).

    Args:
        case: one of `CASES`.
        work: a directory to work in (a temporary one when None).

    Returns:
        The report row; `observed` also lists the error documents the replicas wrote.
    """
    from tests.e2e import harness
    from tests.e2e.harness import BlobStore, FakeOperator
    from tests.faults.contract_tasks import REPLICA_ENV, rank_fails

    work = work or Path(tempfile.mkdtemp(prefix="drill13-"))
    template = _template(work)
    pods = work / f"pods-{case}"
    pods.mkdir(parents=True, exist_ok=True)
    blobs = BlobStore(work / f"blobs-{case}")
    with running_fake_api() as (server, client):
        operator = FakeOperator(server, pods, extra_env={REPLICA_ENV: "1"}, oom_on_sigkill=True)
        with operator:
            connector = make_connector(client, api_timeout_s=5.0)
            prefix = blobs.uri("metadata", case, "n0", "data", "0")
            inputs = harness.to_literal_map({"mode": case}, rank_fails.python_interface.inputs)
            meta = connector.create(template, prefix, inputs, execution_metadata(execution=f"d13{case[:3]}"))
            seen = harness.poll_until_terminal(connector, meta, E2E_TIMEOUT_S)
            done = time.time()
            run = operator.run_for(meta.name)
            alive = operator.wait_processes_gone(run)
            finished = [r.finished_at for r in run.replicas if r.exit_code not in (None, 0) and r.finished_at]
        errors = list(operator.errors)
    first = min((datetime.datetime.fromisoformat(f.replace("Z", "+00:00")).timestamp() for f in finished), default=None)
    row = _row("13 e2e", case, seen[-1], None if first is None else max(0.0, done - first), leftover=len(alive))
    row["observed"]["error_documents"] = [f for f in blobs.files(prefix) if f.startswith("error")]
    row["observed"]["replica_exits"] = {r.label: r.exit_code for r in run.replicas}
    if errors:
        row["observed"]["operator_errors"] = errors
    return row


DRILLS = tuple(
    [(f"12 fake API {case}", drill_fake_api, case) for case in CASES]
    + [(f"13 e2e {case}", drill_e2e, case) for case in CASES]
)
"""(label, drill function, case) in report order (benchmarks/fault_report.py runs them)."""
