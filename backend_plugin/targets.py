"""The job kinds a `pytorch` task can become, and everything the connector needs to know per kind.

One `Target` per kind: its API coordinates, its pure writer (`TaskSpec` + execution + config -> job dict), its
status table, when its status needs pods, how its pods are selected and its log links. The connector picks one from
`BackendConfig.target` (`auto`: the first kind whose CRD the API server serves, asked once) and otherwise never
branches on the kind. Pure: nothing here talks to the API.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin import pytorchjob, status, trainjob, trainjob_status
from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.logs import log_links, node_log_links
from backend_plugin.status import JobStatus
from backend_plugin.template import TaskSpec

__all__ = ["Target", "PYTORCHJOB", "TRAINJOB", "BY_KIND", "BY_CONFIG", "target_for_config", "target_for_kind"]


@dataclass(frozen=True)
class Target:
    """One job kind.

    Attributes:
        kind: the object's `kind`.
        group: API group.
        version: API version.
        plural: resource name in URLs and RBAC.
        write: the pure writer.
        status: (job, pods, config, now, errors=, events=, events_problem=) -> `JobStatus`.
        needs_pods: whether `status` needs the job's pods for this job.
        needs_error_report: whether `status` needs the task's error documents (the job failed).
        needs_events: (job, config, now) -> whether `status` needs the job's events (a start that is overdue).
        pod_label: the pod label whose value is the job's name.
        links: (job, pods, config, now, task_config) -> log links.
        status_keys: `status` fields copied into the connector's `custom_info`.
    """

    kind: str
    group: str
    version: str
    plural: str
    write: Callable[[TaskSpec, ExecutionMetadata, Optional[BackendConfig]], dict[str, Any]]
    status: Callable[..., JobStatus]
    needs_pods: Callable[[dict], bool]
    needs_error_report: Callable[[dict], bool]
    needs_events: Callable[[dict, BackendConfig, datetime.datetime], bool]
    pod_label: str
    links: Callable[..., list[TaskLog]]
    status_keys: tuple[str, ...]

    @property
    def api_version(self) -> str:
        """`<group>/<version>`."""
        return f"{self.group}/{self.version}"

    def pod_selector(self, name: str) -> str:
        """The label selector of the job's pods.

        Args:
            name: the job's name.

        Returns:
            `<pod_label>=<name>`.
        """
        return f"{self.pod_label}={name}"


PYTORCHJOB = Target(
    kind=pytorchjob.KIND,
    group=pytorchjob.GROUP,
    version=pytorchjob.VERSION,
    plural=pytorchjob.PLURAL,
    write=pytorchjob.to_pytorchjob,
    status=status.job_status,
    needs_pods=status.needs_pods,
    needs_error_report=status.needs_error_report,
    needs_events=status.needs_events,
    pod_label="training.kubeflow.org/job-name",
    links=log_links,
    status_keys=("conditions", "replicaStatuses", "startTime", "completionTime", "lastReconcileTime"),
)

TRAINJOB = Target(
    kind=trainjob.KIND,
    group=trainjob.GROUP,
    version=trainjob.VERSION,
    plural=trainjob.PLURAL,
    write=trainjob.to_trainjob,
    status=trainjob_status.trainjob_status,
    needs_pods=trainjob_status.needs_pods,
    needs_error_report=trainjob_status.needs_error_report,
    needs_events=trainjob_status.needs_events,
    pod_label=trainjob_status.JOBSET_NAME_LABEL,
    links=node_log_links,
    status_keys=("conditions", "jobsStatus"),
)

BY_KIND = {t.kind: t for t in (PYTORCHJOB, TRAINJOB)}
BY_CONFIG = {"pytorchjob": PYTORCHJOB, "trainjob": TRAINJOB}
AUTO_ORDER = (PYTORCHJOB, TRAINJOB)
"""`target: auto` picks the first kind the API server serves: PyTorchJob first, so a cluster that still runs the
training operator keeps what it runs today."""


def target_for_config(value: str) -> Optional[Target]:
    """The target of `BackendConfig.target`; None for `auto` (the connector asks the API server).

    Args:
        value: `pytorchjob`, `trainjob` or `auto`.

    Returns:
        The target, or None for `auto`.
    """
    return BY_CONFIG.get(value)


def target_for_kind(kind: str) -> Target:
    """The target of a job kind (what the connector stored at create time).

    Args:
        kind: `PyTorchJob` or `TrainJob`.

    Returns:
        The target.

    Raises:
        ValueError: an unknown kind.
    """
    try:
        return BY_KIND[kind]
    except KeyError:
        raise ValueError(f"kind={kind!r} is not one of {sorted(BY_KIND)}") from None
