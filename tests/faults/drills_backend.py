"""Backend fault drills: the connector against a misbehaving Kubernetes API (the fake server).

Each drill returns one row for the fault report:
`{drill, injected, expected, observed, detect_s, leftover, data_lost}` where `detect_s` is how long the connector
took to surface (or ride out) the fault, `leftover` counts objects left behind that should not be, and `data_lost`
says whether a job was lost or duplicated.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobMetadata
from backend_plugin.errors import RBAC_MANIFEST, Conflict, Forbidden
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.template import template_to_dict
from tests.connector.helpers import execution_metadata, load_template, make_connector
from tests.fakeapi.fixtures import running_fake_api
from tests.fakeapi.objects import condition, replica_pod
from tests.helpers.jobs import build_pytorchjob

NS = "flytesnacks-development"
TERMINAL = {TaskExecution.SUCCEEDED, TaskExecution.FAILED, TaskExecution.ABORTED, TaskExecution.RETRYABLE_FAILED}
FAST_RETRIES = {"api_timeout_s": 0.5, "api_get_budget_s": 10.0, "api_create_budget_s": 10.0,
                "api_delete_budget_s": 10.0, "api_backoff_initial_s": 0.01, "api_backoff_max_s": 0.1}  # fmt: skip


def _row(drill: str, injected: str, expected: str, observed: dict, detect_s: float, leftover: int, lost: bool) -> dict:
    return {
        "drill": drill,
        "injected": injected,
        "expected": expected,
        "observed": observed,
        "detect_s": round(detect_s, 4),
        "leftover": leftover,
        "data_lost": lost,
    }


def drill_flaky_api(jobs: int = 5, seed: int = 6) -> dict[str, Any]:
    """Drill 6: 500/503 and slow answers at random during create and get.

    Expected: every job created exactly once (no duplicate creates), every poll answers after retries, and no
    terminal phase is reported before the server's job actually has a terminal condition.
    """
    rng = random.Random(seed)
    out = Path(tempfile.mkdtemp(prefix="drill6-"))
    with running_fake_api() as (server, client):
        connector = make_connector(client, **FAST_RETRIES)
        start = time.monotonic()
        metas: list[JobMetadata] = []
        for i in range(jobs):
            server.fail(rng.choice([500, 503]), times=rng.randint(1, 2), verb="create")
            if i % 2 == 0:
                server.delay(0.6, verb="create")  # served, answered after the client's 0.5 s timeout
            metas.append(connector.create(load_template(), str(out / str(i)), None, execution_metadata(f"ex{i}")))
        premature = 0
        polls = 0
        stages = [[condition("Created")], [condition("Created"), condition("Running")],
                  [condition("Running", "False"), condition("Succeeded", message="done")]]  # fmt: skip
        for stage in stages:
            for meta in metas:
                replicas = {"Master": {"active": 1}, "Worker": {"active": 2}}
                server.set_job_status(meta.namespace, meta.name, {"conditions": stage, "replicaStatuses": replicas})
                server.fail(rng.choice([500, 503]), times=rng.randint(0, 3), verb="get")
                phase = connector.get(meta).phase
                polls += 1
                terminal_on_server = stage[-1]["type"] in ("Succeeded", "Failed")
                premature += int(phase in TERMINAL and not terminal_on_server)
        elapsed = time.monotonic() - start
        creates_ok = len(server.calls(verb="create", status=201))
        on_server = len(server.jobs())
        errors = len([r for r in server.requests if r.status in (500, 503)])
        for meta in metas:
            connector.delete(meta)
        leftover = len(server.jobs())
    observed = {"jobs": jobs, "jobs_on_server": on_server, "creates_201": creates_ok, "injected_5xx": errors,
                "client_timeouts": jobs // 2 + jobs % 2, "polls": polls, "premature_terminal": premature}  # fmt: skip
    return _row(
        "6 flaky API (500/503/timeouts on create and get)",
        "random 500/503 (1-3 per call) and create answers slower than the client timeout",
        "retried with backoff within budget; one job per create; no terminal phase before the server has one",
        observed,
        elapsed,
        leftover,
        lost=on_server != jobs or creates_ok != jobs,
    )


def drill_conflict() -> dict[str, Any]:
    """Drill 7: AlreadyExists for our own job is adopted; for a different job it is a clear Conflict."""
    out = Path(tempfile.mkdtemp(prefix="drill7-"))
    with running_fake_api() as (server, client):
        connector = make_connector(client, **FAST_RETRIES)
        first = connector.create(load_template(), str(out), None, execution_metadata())
        start = time.monotonic()
        adopted = connector.create(load_template(), str(out), None, execution_metadata())
        job = server.get_job(NS, first.name)
        # Another job of the same name: a different spec, and not stamped by us. (Our own stamped job whose spec a
        # webhook or queue manager changed is ours, and is adopted: tests/connector/test_admission_create.py.)
        del job["metadata"]["annotations"]["pytorch.flyte.org/spec-sha256"]
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 7
        server.put_job(job)
        message = ""
        try:
            connector.create(load_template(), str(out), None, execution_metadata())
        except Conflict as e:
            message = str(e)
        detect = time.monotonic() - start
        jobs = len(server.jobs())
    observed = {"adopted_same_uid": adopted.uid == first.uid, "jobs_on_server": jobs, "conflict_message": message}
    return _row(
        "7 409 AlreadyExists",
        "create of a job whose name exists, first with the same spec, then with a different spec",
        "our own job adopted (same uid); a different job raises Conflict naming the job and the differing fields",
        observed,
        detect,
        leftover=jobs - 1,
        lost=not observed["adopted_same_uid"],
    )


def drill_deleted_behind_back() -> dict[str, Any]:
    """Drill 8: the PyTorchJob is deleted outside Flyte while running; the next get reports RETRYABLE_FAILED saying so
    (the task wrote neither outputs nor an error document, so a retry is the right answer)."""
    out = Path(tempfile.mkdtemp(prefix="drill8-"))
    with running_fake_api() as (server, client):
        connector = make_connector(client, **FAST_RETRIES)
        meta = connector.create(load_template(), str(out), None, execution_metadata())
        server.set_job_status(NS, meta.name, {"conditions": [condition("Running")]})
        before = connector.get(meta).phase
        server.remove_job(NS, meta.name)
        start = time.monotonic()
        resource = connector.get(meta)
        detect = time.monotonic() - start
    observed = {"phase_before": TaskExecution.Phase.Name(before), "phase": TaskExecution.Phase.Name(resource.phase),
                "message": resource.message}  # fmt: skip
    return _row(
        "8 job deleted behind our back",
        "kubectl delete of a running PyTorchJob",
        "next get: RETRYABLE_FAILED (as propeller reports a deleted pod) with a message saying the job was deleted "
        "outside Flyte",
        observed,
        detect,
        leftover=0,
        lost=False,
    )


def drill_many_jobs(n: int = 1000, seed: int = 9) -> dict[str, Any]:
    """Drill 9: n jobs tracked at once; every get answers; latency p50/p99 and API calls per get.

    Jobs are stored directly (the builder's output for distinct executions) in a mix of states: 70% steady
    running, 10% created with pending pods, 10% succeeded, 10% failed with a failed pod.
    """
    rng = random.Random(seed)
    template = template_to_dict(load_template())
    config = BackendConfig()
    with running_fake_api(validate=False) as (server, client):
        connector = make_connector(client, **FAST_RETRIES)
        metas = []
        for i in range(n):
            job = build_pytorchjob(template, ExecutionMetadata(namespace=NS, job_name=f"job-{i:05d}"), config)
            stored = server.put_job(job)
            roll = rng.random()
            if roll < 0.7:
                status = {"conditions": [condition("Created"), condition("Running")],
                          "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}}}  # fmt: skip
            elif roll < 0.8:
                status = {"conditions": [condition("Created")]}
                server.put_pod(replica_pod(stored, "Master", 0, phase="Pending", start_time=None))
            elif roll < 0.9:
                status = {"conditions": [condition("Succeeded", message="done")]}
            else:
                status = {"conditions": [condition("Failed", message="failed.")]}
                term = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:00:00Z"}}
                server.put_pod(replica_pod(stored, "Worker", 0, phase="Failed", container_state=term))
            server.set_job_status(NS, job["metadata"]["name"], status)
            metas.append(JobMetadata(NS, job["metadata"]["name"], stored["metadata"]["uid"]))
        server.reset_log()
        latencies = []
        answered = 0
        start = time.monotonic()
        for meta in metas:
            t = time.perf_counter()
            resource = connector.get(meta)
            latencies.append(time.perf_counter() - t)
            answered += int(resource.phase in (TaskExecution.QUEUED, TaskExecution.RUNNING, *TERMINAL))
        elapsed = time.monotonic() - start
        calls = len(server.requests)
    latencies.sort()
    observed = {
        "jobs": n,
        "answered": answered,
        "api_calls": calls,
        "calls_per_get": round(calls / n, 3),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(0.99 * (n - 1))] * 1000, 2),
        "polls_per_s": round(n / elapsed, 1),
    }
    return _row(
        "9 1,000 jobs tracked at once",
        f"{n} jobs: 70% running, 10% created+pending pod, 10% succeeded, 10% failed",
        "every get answers; 1 API call for steady jobs, 2 only where pods explain the state",
        observed,
        elapsed,
        leftover=0,
        lost=answered != n,
    )


def drill_forbidden() -> dict[str, Any]:
    """Drill 10: RBAC denies create; the error names the missing permission and the RBAC manifest."""
    out = Path(tempfile.mkdtemp(prefix="drill10-"))
    with running_fake_api() as (server, client):
        connector = make_connector(client, **FAST_RETRIES)
        server.forbid("create", "pytorchjobs")
        start = time.monotonic()
        message = ""
        try:
            connector.create(load_template(), str(out), None, execution_metadata())
        except Forbidden as e:
            message = str(e)
        detect = time.monotonic() - start
        attempts = len(server.calls(verb="create"))
        jobs = len(server.jobs())
    observed = {"message": message, "create_attempts": attempts, "names_manifest": RBAC_MANIFEST in message}
    return _row(
        "10 403 Forbidden",
        "RBAC denies create on pytorchjobs.kubeflow.org",
        "no retry; error names the verb, resource, API group, namespace and the RBAC manifest",
        observed,
        detect,
        leftover=jobs,
        lost=False,
    )


DRILLS = (drill_flaky_api, drill_conflict, drill_deleted_behind_back, drill_many_jobs, drill_forbidden)
"""Every backend drill, in report order (benchmarks/fault_report.py calls them)."""
