"""What the JobSet kind declares: API coordinates, its CRD, where its pod templates are, its own admission rules (the
webhook's, `webhook.py`), its config section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from backend_plugin.errors import ConfigError
from backend_plugin.kinds.declaration import (
    ANY,
    Crd,
    CrdHistory,
    CrdRelease,
    Declaration,
    Limits,
    Path,
    PodTemplates,
)
from backend_plugin.kinds.jobset_webhook import domain_prefixed_path_problem, generated_names, webhook_checks
from backend_plugin.settings import Section, check_int, check_seconds
from pytorch_contract.k8s_names import JOBSET_NAME_LABEL
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = [
    "DECLARATION",
    "JobSetSettings",
    "GROUP",
    "VERSION",
    "PLURAL",
    "KIND",
    "API_VERSION",
    "replicated_job_name",
    "role_of",
]

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "JobSet"


def replicated_job_name(role: str) -> str:
    """The replicated job of a role (`Master` -> `master`): a DNS-1035 label, part of every child Job and pod name.

    Args:
        role: `Master` or `Worker`.

    Returns:
        The role in lower case.
    """
    return role.lower()


def role_of(replicated_job: str) -> str:
    """The role a replicated job runs, in the user's terms (`worker` -> `Worker`).

    Args:
        replicated_job: a replicated job's name.

    Returns:
        The role's name.
    """
    return replicated_job[:1].upper() + replicated_job[1:]


@dataclass
class JobSetSettings(Section):
    """The backend config's `jobset` section: the restart budget of roles that restart, `managedBy`, and how long the
    JobSet controller may take.

    Raises:
        ConfigError: a restart budget that is not a whole number >= 0, a `managedBy` that is not a domain-prefixed
            path of at most 63 characters, or a timeout that is not a non-negative number of seconds.
    """

    KEYS = {
        "max_restarts": "jobset_max_restarts",
        "managed_by": "jobset_managed_by",
        "pickup_timeout_s": "jobset_pickup_timeout_s",
        "start_timeout_s": "jobset_start_timeout_s",
    }
    VERBATIM = ("managed_by",)

    max_restarts: int = 6
    """`spec.failurePolicy.maxRestarts` of a JobSet with a role that restarts (`restart_policy` OnFailure, Always or
    ExitCode) when neither the task nor `backoff_limit` sets one. A PyTorchJob without `backoffLimit` restarts such a
    replica without end; a JobSet restarts all its pods each time, so a task that fails on every start would hold its
    nodes until Flyte's timeout. Six is what a Kubernetes Job gives a pod when its `backoffLimit` is unset. Restarts
    after a preemption or host maintenance never count. Key: `jobset_max_restarts`."""

    managed_by: Optional[str] = None
    """`spec.managedBy` of JobSets; None leaves it unset (the JobSet controller reconciles them). MultiKueue sets
    `kueue.x-k8s.io/multikueue` on the manager cluster itself; set it here only to dispatch JobSets to another
    controller. Key: `jobset_managed_by`."""

    pickup_timeout_s: float = 300.0
    """A JobSet with no status this long after creation is failed (permanently: it can never run) with a message
    saying the JobSet controller may not be installed or not watching the namespace. The controller writes
    `replicatedJobsStatus` on its first reconcile, within seconds; five minutes tolerates a controller restart, as
    `operator_pickup_timeout_s` does for PyTorchJobs. Key: `jobset_pickup_timeout_s`."""

    start_timeout_s: Optional[float] = 600.0
    """A JobSet the controller has seen but with no pod active, ready or finished this long after creation (and not
    suspended) is failed with the JobSet's warning events as the reason (`JobCreationFailed`: the API server refused
    a child Job). The controller retries with backoff, and a webhook or quota blip heals within minutes, so ten
    minutes, as `job_start_timeout_s` for PyTorchJobs; None turns the check off. Key: `jobset_start_timeout_s`."""

    def __post_init__(self) -> None:
        check_int(self.key("max_restarts"), self.max_restarts, low=0, high=2**31 - 1)
        if self.managed_by is not None:
            problem = domain_prefixed_path_problem(self.managed_by)
            if problem is not None:
                raise ConfigError(
                    f"{self.key('managed_by')}={self.managed_by!r}: {problem} (e.g. 'kueue.x-k8s.io/multikueue')"
                )
        check_seconds(self.key("pickup_timeout_s"), self.pickup_timeout_s, positive=False)
        check_seconds(self.key("start_timeout_s"), self.start_timeout_s, positive=False, optional=True)


_REPLICATED_JOB_FIELDS = {"replicas": "replicas", "parallelism": "replicas", "completions": "replicas"}


def setting_names(path: Path) -> Optional[str]:
    """The user's setting behind a JobSet path outside its pod templates (`RunPolicy.backoff_limit` for
    `spec.failurePolicy.maxRestarts`).

    Args:
        path: a path into a JobSet.

    Returns:
        The setting, or None for a path the backend writes on its own.
    """
    spec = path[1:] if path[:1] == ("spec",) else ()
    if spec[:2] == ("failurePolicy", "maxRestarts"):
        return "RunPolicy.backoff_limit (or the backend's jobset_max_restarts)"
    if spec[:1] == ("ttlSecondsAfterFinished",):
        return "RunPolicy.ttl_seconds_after_finished"
    if spec[:1] == ("managedBy",):
        return "the backend's jobset_managed_by"
    if spec[:1] == ("replicatedJobs",) and len(spec) >= 5 and spec[2:4] == ("template", "spec"):
        field = _REPLICATED_JOB_FIELDS.get(str(spec[4]))
        if spec[4] == "activeDeadlineSeconds":
            return "RunPolicy.active_deadline_seconds (or the task's timeout)"
        return f"replicatedJobs[{spec[1]}] {field}" if field else None
    return None


def _pod_template_setting(job: Mapping[str, Any], matched: tuple[Any, ...]) -> str:
    """`Master.pod_template`, `Worker.pod_template`: the role of the replicated job a pod template is in."""
    jobs = (job.get("spec") or {}).get("replicatedJobs") or []
    (index,) = matched
    entry = jobs[index] if isinstance(index, int) and index < len(jobs) else {}
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"{role_of(name)}.pod_template" if isinstance(name, str) and name else "pod_template"


MESSAGE_PATTERNS = ("spec", "failurePolicy", "rules", ANY, "onJobFailureMessagePatterns")
"""A failure-policy rule's message patterns (JobSet v0.10 added them): the `Preempted` rule tells a preemption from
the task's own failure by them (`writer.failure_policy`)."""

HISTORY = CrdHistory(
    controller="JobSet",
    releases=(CrdRelease("JobSet v0.10", (MESSAGE_PATTERNS,)),),
    before="JobSet v0.9 or earlier",
)
"""What each release's JobSet CRD first declares that the writer writes (the upstream CRDs of v0.9.1, v0.10.0 and
v0.12.0)."""

DECLARATION = Declaration(
    kind=KIND,
    group=GROUP,
    version=VERSION,
    plural=PLURAL,
    config_name="jobset",
    description="jobsets.jobset.x-k8s.io (the JobSet controller)",
    pod_label=JOBSET_NAME_LABEL,
    status_keys=("conditions", "replicatedJobsStatus", "restarts", "restartsCountTowardsMax", "terminalState"),
    crd=Crd("jobset.x-k8s.io_jobsets.yaml", "kubernetes-sigs/jobset v0.12.0"),
    history=HISTORY,
    pod_templates=(
        PodTemplates(("spec", "replicatedJobs", ANY, "template", "spec", "template"), _pod_template_setting),
    ),
    primary_containers=(PRIMARY_CONTAINER,),
    # the container env has no maxItems; the pod template is written once per role
    limits=Limits(copies_note="a JobSet holds the pod template once per role, so its values count twice"),
    settings=JobSetSettings,
    package="backend_plugin.targets.jobset",
    setting_names=setting_names,
    checks=webhook_checks,
    generated_names=generated_names,
)
"""The JobSet kind, as `backend_plugin.targets` registers it."""
