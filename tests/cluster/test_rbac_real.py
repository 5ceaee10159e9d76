"""The connector's RBAC (`backend_plugin/deploy/rbac.yaml`) on the real API server: every permission it grants is one
the connector's operations use, and taking any one away makes the operation that needs it fail, or say what it could
not read, naming the verb and the resource.

The connector runs in this process as flytekit's service runs it (CreateTask, GetTask, DeleteTask), authenticating as
a ServiceAccount bound to the shipped ClusterRole, or to the same role less one permission, with a token from the
TokenRequest API. Its jobs never start (their pods select a node label no node has), so nothing runs on the nodes; the
jobs are real, and so are their controllers' pods and events.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flyteidl.admin.agent_pb2 import CreateTaskRequest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.connector import ServedJobConnector
from devcluster.kube import wait_for
from tests.cluster.harness import TASK_NS, RealCluster
from tests.cluster.realapi_rbac import Accounts, Permission, permissions, rules_without, shipped_role
from tests.connector.helpers import TEMPLATES, GrpcContext, Propeller, execution_metadata, template_of

KINDS = {"pytorchjob": ("kubeflow.org", "pytorchjobs"), "trainjob": ("trainer.kubeflow.org", "trainjobs"),
         "jobset": ("jobset.x-k8s.io", "jobsets")}  # fmt: skip
VERSIONS = {"pytorchjob": "v1", "trainjob": "v1alpha1", "jobset": "v1alpha2"}
FAST = {"api_backoff_initial_s": 0.05, "api_backoff_max_s": 0.2, "api_create_budget_s": 20.0,
        "api_get_budget_s": 10.0, "api_delete_budget_s": 10.0}  # fmt: skip


def pending_template() -> Any:
    """A task whose pods select a node label no node has: its job is created and never starts."""
    data = json.loads((TEMPLATES / "sdk_pod_template.json").read_text())
    data["k8sPod"]["podSpec"]["nodeSelector"] = {"devcluster.test/rbac-probe": "never"}
    data["k8sPod"]["podSpec"].pop("tolerations", None)
    return template_of(data)


class Run:
    """A connector of one kind acting with given rights."""

    def __init__(self, accounts: Accounts, name: str, missing: Permission | None, target: str, **config: Any) -> None:
        client = accounts.client(name, rules_without(shipped_role(), missing))
        settings = BackendConfig.from_dict({"target": target, "watch_cache": False, **FAST, **config})
        self.connector = ServedJobConnector(config=settings, api_client_factory=lambda: client)
        self.propeller = Propeller(None, self.connector)

    def close(self) -> None:
        self.connector.close()


@pytest.fixture(scope="module")
def accounts(real: RealCluster) -> Iterator[Accounts]:
    real.ensure_namespace("flyte")
    made = Accounts(real.info, real.kube)
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture(scope="module")
def jobs(real: RealCluster, accounts: Accounts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, bytes]]:
    """One pending job of each kind, created by the connector with the shipped role, and a JobSet that can create no
    pod; deleted at the end."""
    tmp = tmp_path_factory.mktemp("rbac")
    made: dict[str, bytes] = {}

    def create(key: str, target: str, service_account: str = "default") -> None:
        """CreateTask as propeller sends it, the pods to run as `service_account` (Flyte's `k8s_service_account`)."""
        run = Run(accounts, f"full-{target}", None, target)
        execution = f"rbac{uuid.uuid4().hex[:8]}"
        meta = execution_metadata(execution)
        meta._k8s_service_account = service_account
        request = CreateTaskRequest(template=pending_template().to_flyte_idl(), output_prefix=str(tmp / execution),
                                    task_execution_metadata=meta.to_flyte_idl())  # fmt: skip
        try:
            context = GrpcContext()
            created = run.propeller._run(run.propeller.service.CreateTask(request, context))
            assert context.code is None, context.details
            made[key] = bytes(created.resource_meta)
        finally:
            run.close()

    try:
        for target in KINDS:
            create(target, target)
        # its pods name a ServiceAccount that does not exist, which the ServiceAccount admission plugin refuses
        create("jobset-no-pods", "jobset", "rbac-probe-missing")
        name = job_name(made["jobset-no-pods"])

        def refused_pod() -> bool:
            events = real.kube.get(f"/api/v1/namespaces/{TASK_NS}/events", fieldSelector="reason=FailedCreate")
            return any(e["involvedObject"]["name"].startswith(name) for e in events["items"])

        wait_for("a pod create refused", refused_pod, 90)
        yield made
    finally:
        for key, meta in made.items():
            target = key.split("-")[0]
            group, plural = KINDS[target]
            real.kube.delete(f"/apis/{group}/{VERSIONS[target]}/namespaces/{TASK_NS}/{plural}/{job_name(meta)}")


def job_name(meta: bytes) -> str:
    data = json.loads(meta)
    return str(data.get("name") or data.get("job_name"))


def names(message: str, permission: Permission) -> bool:
    """Whether the message names the permission as the connector words it (`needs permission to list pods`)."""
    return f"needs permission to {permission.verb} {permission.resource}" in message


def test_the_shipped_role_runs_every_operation(real: RealCluster, accounts: Accounts, jobs: dict[str, bytes],
                                                tmp_path: Path) -> None:  # fmt: skip
    """With rbac.yaml as shipped, per kind: CreateTask (the fixture's jobs), GetTask with and without the watch cache,
    DeleteTask; the pods of a pending job and the events of a job that never started are read."""
    for target in KINDS:
        for cache in (False, True):
            run = Run(accounts, f"full-{target}", None, target, watch_cache=cache)
            try:
                answer = run.propeller.get(jobs[target])
                assert answer.error == "" and answer.phase not in FINAL, (target, answer)
            finally:
                run.close()
    run = Run(accounts, "full-pytorchjob", None, "pytorchjob")
    try:
        answer = run.propeller.get(jobs["pytorchjob"])
        assert "Unschedulable" in answer.message, answer  # from the pods
    finally:
        run.close()
    run = Run(accounts, "full-jobset", None, "jobset", jobset_start_timeout_s=1)
    try:
        answer = run.propeller.get(jobs["jobset-no-pods"])
        # read (the JobSet's own events: its child Jobs hold the FailedCreate, which the message points at)
        assert "has not started" in answer.message and "could not be read" not in answer.message, answer
    finally:
        run.close()
    for target in KINDS:
        run = Run(accounts, f"full-{target}", None, target)
        try:
            meta = run.propeller.create(tmp_path, execution=f"rbac{uuid.uuid4().hex[:8]}", template=pending_template())
            context = run.propeller.delete(meta)
            assert context.code is None, context.details
            group, plural = KINDS[target]
            gone = f"/apis/{group}/{VERSIONS[target]}/namespaces/{TASK_NS}/{plural}/{job_name(meta)}"
            wait_for(f"{target} deleted", lambda: real.kube.get_or_none(gone) is None, 60)  # noqa: B023
        finally:
            run.close()


FINAL = (TaskExecution.SUCCEEDED, TaskExecution.FAILED, TaskExecution.RETRYABLE_FAILED, TaskExecution.ABORTED)


def _one(accounts: Accounts, jobs: dict[str, bytes], tmp: Path, p: Permission, caplog: pytest.LogCaptureFixture
         ) -> tuple[str, str]:  # fmt: skip
    """Run the operation that needs `p` as an account without it: (what happened, the message or log said)."""
    target = next((t for t, (g, r) in KINDS.items() if r == p.resource), "pytorchjob")
    name = f"no-{p.verb}-{p.resource.split('.')[0]}"
    if p.resource in ("pytorchjobs", "trainjobs", "jobsets"):
        if p.verb == "create":
            run = Run(accounts, name, p, target)
            try:
                meta, context = run.propeller.try_create(tmp, execution=f"rbac{uuid.uuid4().hex[:8]}",
                                                         template=pending_template())  # fmt: skip
                if context.code is not None:
                    return "create failed", context.details
                return "create failed", run.propeller.get(meta).message if meta else ""
            finally:
                run.close()
        if p.verb in ("list", "watch"):
            run = Run(accounts, name, p, target, watch_cache=True)
            try:
                caplog.clear()
                with caplog.at_level(logging.INFO):
                    answer = run.propeller.get(jobs[target])
                    time.sleep(2.0)  # the watch's first LIST and WATCH
                log = "\n".join(r.getMessage() for r in caplog.records)
                return f"get answered {answer.name}", log
            finally:
                run.close()
        run = Run(accounts, name, p, target)
        try:
            if p.verb == "get":
                answer = run.propeller.get(jobs[target])
                return f"get answered {answer.name}", answer.error or answer.message
            context = run.propeller.delete(jobs[target])
            return "delete failed" if context.code is not None else "delete answered", context.details
        finally:
            run.close()
    if p.resource == "customresourcedefinitions":
        run = Run(accounts, name, p, target)
        try:
            caplog.clear()
            with caplog.at_level(logging.INFO):
                meta = run.propeller.create(tmp, execution=f"rbac{uuid.uuid4().hex[:8]}", template=pending_template())
            log = "\n".join(r.getMessage() for r in caplog.records)
            run.propeller.delete(meta)
            return "create succeeded", log
        finally:
            run.close()
    if p.resource == "pods":
        # the pods of a job whose replicas are pending: the status explains them from the pods
        run = Run(accounts, name, p, "pytorchjob")
        try:
            answer = run.propeller.get(jobs["pytorchjob"])
            return f"get answered {answer.name}", answer.error or answer.message
        finally:
            run.close()
    # events: read for a job that has not started past its start timeout. A PyTorchJob's never are on the real
    # training operator (it sets status.startTime at its first reconcile, before any pod exists); a JobSet whose
    # Jobs cannot create a pod (a ResourceQuota of 0 pods) has none past `jobset_start_timeout_s`
    run = Run(accounts, name, p, "jobset", jobset_start_timeout_s=1)
    try:
        answer = run.propeller.get(jobs["jobset-no-pods"])
        return f"get answered {answer.name}", answer.error or answer.message
    finally:
        run.close()


def test_each_permission_is_needed_and_its_absence_is_named(real: RealCluster, accounts: Accounts,
                                                            jobs: dict[str, bytes], tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    results: dict[Permission, tuple[str, str]] = {}
    for p in permissions(shipped_role()):
        results[p] = _one(accounts, jobs, tmp_path, p, caplog)
    print("\nRBAC, one permission removed at a time:")
    for p, (what, said) in results.items():
        print(f"  - {p}: {what}: {said[:400]!r}")
    # each removal changes what the connector does (a failed call, or a poorer answer or log naming the permission):
    # rbac.yaml holds no rule no operation needs (least privilege)
    unnamed = {str(p): said for p, (what, said) in results.items() if not names(said, p)}
    assert unnamed == {}
    assert len(results) == len(permissions(shipped_role())) == 18
