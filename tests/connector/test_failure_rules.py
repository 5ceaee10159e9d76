"""Retryable or permanent, and why: the target-neutral failure rules of `status` (issue 11, items 1 and 3).

Error documents are the ones flytekit itself writes (`pyflyte-execute` of tasks that raise, see `flytekit_errors`);
pods and events are built as the kubelet and the training operator write them.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
from flyteidl.core.execution_pb2 import TaskExecution as TE

from backend_plugin.config import BackendConfig
from backend_plugin.status import failed_job_status, never_started_status, replica_failures, start_explanation
from backend_plugin.targets.pytorchjob.status import job_status, needs_error_report, needs_events, replica_name
from backend_plugin.task_errors import ErrorReport, TaskError, is_error_file, parse_error_document, report_of
from tests.connector.error_tasks import RECOVERABLE, VALUE_ERROR
from tests.fakeapi.objects import condition, failed_create_event, replica_pod

T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
JOB = {"metadata": {"name": "job", "namespace": "ns", "creationTimestamp": "2025-01-01T00:00:00Z"},
       "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}}}  # fmt: skip


def at(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def dead(rtype: str, index: int, seconds: float, **term) -> dict:
    """A replica pod whose container terminated `seconds` after T0."""
    state = {"terminated": {"finishedAt": at(seconds), **term}}
    return replica_pod(JOB, rtype, index, phase="Failed", container_state=state)


def doc(path: Path, seconds: float | None = None, worker: str | None = None) -> TaskError:
    """A real flytekit error document, with its timestamp (and worker) moved for the scenario."""
    error = parse_error_document(path.read_bytes(), path.name)
    changes: dict = {}
    if seconds is not None:
        changes["timestamp"] = T0 + datetime.timedelta(seconds=seconds)
    if worker is not None:
        changes["worker"] = worker
    return dataclasses.replace(error, **changes)


# --- the documents flytekit writes ---------------------------------------------------------------------------


def test_flytekit_documents_parse_with_kind_worker_and_summary(flytekit_errors):
    user = parse_error_document(flytekit_errors["user"].read_bytes(), "error.pb")
    assert flytekit_errors["user"].name == "error.pb"
    assert (user.kind, user.origin, user.worker, user.recoverable) == ("NON_RECOVERABLE", "USER", "", False)
    assert user.summary == f"ValueError: {VALUE_ERROR}"
    assert "error_tasks.py" in user.trace_tail and user.timestamp is not None
    named = flytekit_errors["user_worker"]
    assert is_error_file(named.name) and named.name.startswith("error-")  # _F_DES: one file per replica
    assert parse_error_document(named.read_bytes(), named.name).worker == "job-worker-1"
    recoverable = parse_error_document(flytekit_errors["recoverable_worker"].read_bytes())
    assert (recoverable.kind, recoverable.recoverable) == ("RECOVERABLE", True)
    assert recoverable.summary.startswith("FlyteRecoverableException: ") and RECOVERABLE in recoverable.summary


@pytest.mark.parametrize("name", ["outputs.pb", "error.pb.tmp", "error-xyz.pb", "errors.pb", "error-.pb"])
def test_only_flytekits_error_file_names_count(name):
    assert not is_error_file(name)


def test_garbage_documents_are_a_reading_problem_not_an_exception(flytekit_errors):
    report = report_of([("error-" + "0" * 32 + ".pb", b"\xff\xfe not a proto"),
                        ("error.pb", flytekit_errors["user"].read_bytes())])  # fmt: skip
    assert len(report.errors) == 1 and "not a flyteidl.core.ErrorDocument" in report.problem


# --- a job that ran and failed ---------------------------------------------------------------------------------


def test_non_recoverable_user_error_is_permanent_and_the_message_is_the_users_exception(flytekit_errors):
    pods = [dead("Worker", 1, 10, exitCode=1, reason="Error"), dead("Master", 0, 12, exitCode=1, reason="Error")]
    errors = ErrorReport((doc(flytekit_errors["user_worker"], 9.5, "job-worker-1"),))
    status = failed_job_status("PyTorchJob ns/job has failed.", replica_failures(pods, replica_name), errors)
    assert status.phase == TE.FAILED
    assert status.message.startswith(f"worker-1 failed: ValueError: {VALUE_ERROR} (a non-recoverable user error")
    assert "Root cause: worker-1 (pytorch): exit code 1 (first of 2 failed replicas)" in status.message
    assert "--- traceback (worker-1, error-" in status.message and "raise ValueError" in status.message


def test_recoverable_error_is_retryable(flytekit_errors):
    pods = [dead("Worker", 0, 10, exitCode=1, reason="Error")]
    errors = ErrorReport((doc(flytekit_errors["recoverable_worker"], 9.8, "job-worker-0"),))
    status = failed_job_status("failed.", replica_failures(pods, replica_name), errors)
    assert status.phase == TE.RETRYABLE_FAILED
    assert status.message.startswith("worker-0 failed: FlyteRecoverableException: ")
    assert f"{RECOVERABLE} (a recoverable error: Flyte retries the task while it has retries left)" in status.message


def test_earliest_document_is_the_root_cause(flytekit_errors):
    late_collateral = doc(flytekit_errors["user_worker"], 20, "job-master-0")
    early_recoverable = doc(flytekit_errors["recoverable_worker"], 10, "job-worker-0")
    pods = [dead("Worker", 0, 10, exitCode=1), dead("Master", 0, 21, exitCode=1)]
    status = failed_job_status(
        "failed.", replica_failures(pods, replica_name), ErrorReport((late_collateral, early_recoverable))
    )
    assert status.phase == TE.RETRYABLE_FAILED and status.message.startswith("worker-0 failed: FlyteRecoverable")


def test_oom_killed_replica_wins_over_its_peers_lost_peer_errors(flytekit_errors):
    # worker-1 is OOM-killed at 10 s and writes nothing; master-0 then fails with a (non-recoverable) peer error.
    pods = [dead("Worker", 1, 10, exitCode=137, reason="OOMKilled"), dead("Master", 0, 11, exitCode=1)]
    collateral = doc(flytekit_errors["user_worker"], 10.4, "job-master-0")
    status = failed_job_status("failed.", replica_failures(pods, replica_name), ErrorReport((collateral,)))
    assert status.phase == TE.RETRYABLE_FAILED
    assert "Root cause: worker-1 (pytorch): OOMKilled, exit code 137" in status.message
    assert "worker-1 was stopped by the system before any task error" in status.message
    assert f"then failed with: ValueError: {VALUE_ERROR}" in status.message


def test_a_kill_long_after_the_users_error_does_not_hide_it(flytekit_errors):
    pods = [dead("Worker", 0, 10, exitCode=1), dead("Master", 0, 60, exitCode=137, reason="OOMKilled")]
    error = doc(flytekit_errors["user_worker"], 9.9, "job-worker-0")
    assert failed_job_status("failed.", replica_failures(pods, replica_name), ErrorReport((error,))).phase == TE.FAILED


@pytest.mark.parametrize(
    ("pod", "system"),
    [
        (dead("Worker", 0, 10, exitCode=137, reason="OOMKilled"), True),
        (dead("Worker", 0, 10, exitCode=143), True),  # SIGTERM from the node (drain, spot reclaim)
        (dead("Worker", 0, 10, exitCode=1, reason="Error"), False),
        ({**replica_pod(JOB, "Worker", 0, phase="Failed"), "status": {"phase": "Failed", "reason": "Evicted"}}, True),
        ({**replica_pod(JOB, "Worker", 0, phase="Failed"), "status": {"phase": "Failed", "reason": "Unknown"}}, False),
    ],
    ids=["oom-killed", "sigterm", "exit-1", "evicted", "failed-other"],
)
def test_what_counts_as_stopped_by_the_system(pod, system):
    (failure,) = replica_failures([pod], replica_name)
    assert failure.system is system


def test_a_pod_being_deleted_is_not_a_system_kill():
    pod = dead("Worker", 0, 10, exitCode=143)
    pod["metadata"]["deletionTimestamp"] = at(9)
    assert replica_failures([pod], replica_name)[0].system is False


@pytest.mark.parametrize(
    ("errors", "phase", "text"),
    [
        (ErrorReport(), TE.RETRYABLE_FAILED, "no error document: the replicas stopped before the task could report"),
        (ErrorReport(problem="PermissionError: 403 on s3://b/p"), TE.RETRYABLE_FAILED,
         "could not be read: PermissionError: 403 on s3://b/p"),
        (None, TE.RETRYABLE_FAILED, "the task's error document was not read"),
    ],
    ids=["none-written", "unreadable", "not-read"],
)  # fmt: skip
def test_without_a_readable_document_a_failed_job_is_retryable(errors, phase, text):
    status = failed_job_status("failed.", replica_failures([dead("Worker", 0, 10, exitCode=1)], replica_name), errors)
    assert status.phase == phase and text in status.message
    assert "Root cause: worker-0 (pytorch): exit code 1" in status.message


def test_the_pytorchjob_table_reads_the_report_only_for_failed_jobs(flytekit_errors):
    failed = {**JOB, "status": {"conditions": [condition("Failed", message="PyTorchJob ns/job failed.")]}}
    running = {**JOB, "status": {"conditions": [condition("Running")]}}
    assert needs_error_report(failed) and not needs_error_report(running)
    errors = ErrorReport((doc(flytekit_errors["user"]),))
    status = job_status(failed, [dead("Master", 0, 10, exitCode=1)], BackendConfig(), T0, errors=errors)
    assert (status.phase, status.condition) == (TE.FAILED, "Failed")
    assert status.message.startswith("master-0 failed: ValueError")  # one failed replica names the worker


# --- a job that never starts -----------------------------------------------------------------------------------

CONFIG = BackendConfig.from_dict(dict(job_start_timeout_s=600))
REJECTED = failed_create_event(
    JOB, 'Error creating: Pod "job-master-0" is invalid: spec.containers[0].env[0].name: Invalid value: "A=B"'
)


def created(start_time: str = "", scheduling: bool = False, suspended: bool = False) -> dict:
    job = {**JOB, "status": {"conditions": [condition("Created")]}}
    if suspended:
        job["status"]["conditions"].append(condition("Suspended"))
    if start_time:
        job["status"]["startTime"] = start_time
    if scheduling:
        job["spec"] = {**JOB["spec"], "runPolicy": {"schedulingPolicy": {"minAvailable": 3}}}
    return job


@pytest.mark.parametrize(
    ("job", "seconds", "config", "expected"),
    [
        (created(), 599, CONFIG, False),
        (created(), 600, CONFIG, True),
        (created(start_time=at(5)), 6000, CONFIG, True),  # v1.9 sets it at once: the pods and events decide
        (created(suspended=True), 6000, CONFIG, False),  # waiting for admission on purpose
        (created(), 6000, BackendConfig.from_dict(dict(job_start_timeout_s=None)), False),
    ],
    ids=["before-timeout", "at-timeout", "started", "suspended", "check-off"],
)
def test_when_a_job_counts_as_never_started(job, seconds, config, expected):
    assert needs_events(job, config, T0 + datetime.timedelta(seconds=seconds)) is expected


def test_an_operator_that_sets_the_start_time_at_once_still_times_out_on_refused_pods():
    """training-operator v1.9 sets `status.startTime` at its first reconcile, before its pod creates are refused: the
    missing pods and its `FailedCreate` event say the job never started."""
    now = T0 + datetime.timedelta(seconds=700)
    v19 = created(start_time=at(1))
    assert needs_events(v19, CONFIG, now)
    status = job_status(v19, [], CONFIG, now, events=[REJECTED])
    assert (status.phase, status.condition) == (TE.FAILED, "Created")
    assert status.message.startswith("PyTorchJob ns/job has not started 700s after creation (job_start_timeout_s=600)")
    assert 'Invalid value: "A=B"' in status.message


@pytest.mark.parametrize("why", ["pods-created", "no-refusal-recorded", "events-unread"])
def test_a_started_job_waiting_for_nodes_is_never_failed_by_the_start_timeout(why):
    """Its pods exist (Pending: no node fits yet, which may change), or the operator recorded no refused create (a pod
    missing for the moment it takes to create it again; events that could not be read): it waits, for any time."""
    now = T0 + datetime.timedelta(seconds=6000)
    v19 = created(start_time=at(1))
    pending = [replica_pod(v19, "Master", 0, phase="Pending", start_time=None),
               *(replica_pod(v19, "Worker", i, phase="Pending", start_time=None) for i in range(2))]  # fmt: skip
    pods, events = {"pods-created": (pending, [REJECTED]), "no-refusal-recorded": (pending[:1], []),
                    "events-unread": (pending[:1], None)}[why]  # fmt: skip
    status = job_status(v19, pods, CONFIG, now, events=events)
    assert status.phase != TE.FAILED and "has not started" not in status.message, status.message


def test_never_started_job_fails_permanently_with_the_operators_event():
    status = job_status(created(), [], CONFIG, T0 + datetime.timedelta(seconds=700), events=[REJECTED])
    assert (status.phase, status.condition) == (TE.FAILED, "Created")
    assert status.message.startswith("PyTorchJob ns/job has not started 700s after creation (job_start_timeout_s=600)")
    assert 'FailedCreatePod: Error creating: Pod "job-master-0" is invalid' in status.message
    assert 'Invalid value: "A=B"' in status.message


def test_without_permission_to_read_events_the_message_says_so():
    problem = 'events is forbidden: User "x" cannot list resource "events"'
    status = job_status(created(), [], CONFIG, T0 + datetime.timedelta(seconds=700), events_problem=problem)
    assert status.phase == TE.FAILED
    assert f"The job's events could not be read ({problem})" in status.message


def test_no_events_says_where_to_look():
    text = start_explanation([], [])
    assert "No warning events were recorded" in text and "ResourceQuotas" in text


def test_a_gang_job_waits_for_its_podgroup_unless_events_show_a_failure():
    now = T0 + datetime.timedelta(seconds=700)
    waiting = job_status(created(scheduling=True), [], CONFIG, now, events=[])
    assert waiting.phase == TE.QUEUED and "waiting for the gang scheduler" in waiting.message
    rejected = job_status(created(scheduling=True), [], CONFIG, now, events=[REJECTED])
    assert rejected.phase == TE.FAILED


def test_events_are_deduplicated_newest_first_and_bounded():
    events = [failed_create_event(JOB, f"quota exceeded #{i % 5}", at=at(i)) for i in range(20)]
    events.append({**REJECTED, "type": "Normal"})  # not a warning: ignored
    text = start_explanation(events, [])
    assert text.count("FailedCreatePod") == 3 and "(and 2 more)" in text
    assert text.index("#4") < text.index("#3")


def test_never_started_status_is_target_neutral():
    status = never_started_status("TrainJob ns/t", 900, 600, "Events: x.", "Created")
    assert status.phase == TE.FAILED and status.message.startswith("TrainJob ns/t has not started 900s after creation")


def test_the_replica_that_wrote_the_error_leads_the_root_cause_line(flytekit_errors):
    # both exited within the same second; the document says worker-1 raised first
    pods = [dead("Master", 0, 10, exitCode=1), dead("Worker", 1, 10, exitCode=1)]
    error = doc(flytekit_errors["user_worker"], 9.5, "job-worker-1")
    status = failed_job_status("failed.", replica_failures(pods, replica_name), ErrorReport((error,)))
    assert "Root cause: worker-1 (pytorch): exit code 1 (first of 2 failed replicas)" in status.message


def test_refused_pods_and_no_condition_fail_after_the_pickup_timeout_naming_the_events():
    """training-operator v1.9 writes no condition at all while the API server refuses its pod creates (seen on the
    real operator with a ResourceQuota): past `operator_pickup_timeout_s` its FailedCreate events say the operator is
    there and the pods are refused, not that it is missing."""
    config = BackendConfig.from_dict(dict(operator_pickup_timeout_s=300, job_start_timeout_s=600))
    bare = {**JOB, "status": {}}
    assert not needs_events(bare, config, T0 + datetime.timedelta(seconds=299))
    now = T0 + datetime.timedelta(seconds=301)
    assert needs_events(bare, config, now)
    status = job_status(bare, [], config, now, events=[REJECTED])
    assert status.phase == TE.FAILED
    assert status.message.startswith("PyTorchJob ns/job has not started 301s after creation (operator_pickup_timeout")
    assert 'Invalid value: "A=B"' in status.message
    missing = job_status(bare, [], config, now, events=[])  # no operator: no events; the message says so, as before
    assert "may not be installed" in missing.message and "could not create its pods" not in missing.message
