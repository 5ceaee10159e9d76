"""What the PyTorchJob kind declares: API coordinates, its CRD, where its pod templates are, its config section."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from backend_plugin.kinds.declaration import (
    ANY,
    Crd,
    CrdHistory,
    CrdRelease,
    Declaration,
    GeneratedName,
    Limits,
    Path,
    PodTemplates,
)
from backend_plugin.settings import Section, check_seconds
from pytorch_contract.k8s_names import JOB_NAME_LABEL
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = [
    "DECLARATION",
    "PyTorchJobSettings",
    "GROUP",
    "VERSION",
    "PLURAL",
    "KIND",
    "API_VERSION",
    "HISTORY",
    "NATIVE_SIDECAR",
]

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PyTorchJob"

NATIVE_SIDECAR = ("spec", "pytorchReplicaSpecs", ANY, "template", "spec", "initContainers", ANY, "restartPolicy")
"""An init container's `restartPolicy` (`Always`: a native sidecar, Kubernetes 1.28+): the training operator v1.8
CRD added it; an older CRD would prune it and turn the sidecar into a blocking init container."""

HISTORY = CrdHistory(
    controller="the training operator",
    releases=(
        CrdRelease("training operator v1.9", (("spec", "runPolicy", "managedBy"),)),
        CrdRelease("training operator v1.8", (NATIVE_SIDECAR,)),
    ),
    before="training operator v1.7 or earlier",
)
"""What each release's PyTorchJob CRD first declares (the upstream CRDs of v1.7.0, v1.8.1 and v1.9.4; every field the
writer itself writes is in all of them, only pod template fields differ)."""


@dataclass
class PyTorchJobSettings(Section):
    """The backend config's `pytorchjob` section: how long the training operator may take.

    Raises:
        ConfigError: a timeout that is not a non-negative number of seconds.
    """

    KEYS = {"pickup_timeout_s": "operator_pickup_timeout_s", "start_timeout_s": "job_start_timeout_s"}

    pickup_timeout_s: float = 300.0
    """A job with no conditions this long after creation is failed with a message saying the Kubeflow training
    operator may not be installed (or not watching the namespace), or, when the job's events hold the operator's
    `FailedCreate` warnings, naming them: training-operator v1.9 writes no condition while the API server refuses its
    pods. The operator adds `Created` within seconds; five minutes tolerates an operator restart. Key:
    `operator_pickup_timeout_s`."""

    start_timeout_s: Optional[float] = 600.0
    """A job the operator has seen (it has a condition) but not started this long after creation is failed, with
    the job's warning events (e.g. `FailedCreatePod: ... is invalid`) as the reason. Not started: the API server
    rejects its pods (an invalid pod spec, an exhausted ResourceQuota, an admission webhook's denial). Operators
    before v1.9 set `status.startTime` once the pods are created, so a job without one has not started;
    training-operator v1.9 sets it at its first reconcile either way, so with one the job has not started when
    fewer pods than its replicas exist and the operator recorded a refused create (a `FailedCreate` event). Its
    events are read only for a job still `Created` past this timeout. The operator retries with backoff and a webhook or
    quota blip heals within minutes, so ten minutes; a suspended job is never counted, and a gang-scheduled one only
    when its events show a failure (it may wait for its PodGroup). None turns the check off. Flyte's Go plugin has the
    same check (`kf-operator.timeout`, one minute). Key: `job_start_timeout_s`."""

    def __post_init__(self) -> None:
        check_seconds(self.key("pickup_timeout_s"), self.pickup_timeout_s, positive=False)
        check_seconds(self.key("start_timeout_s"), self.start_timeout_s, positive=False, optional=True)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def setting_names(path: Path) -> Optional[str]:
    """The user's setting behind a PyTorchJob path outside its pod templates: `Worker.restart_policy`,
    `RunPolicy.backoff_limit`.

    Args:
        path: a path into a PyTorchJob.

    Returns:
        The setting, or None for a path the backend writes on its own.
    """
    if path[:2] == ("spec", "pytorchReplicaSpecs") and len(path) >= 4:
        return f"{path[2]}.{_snake(str(path[3]))}"
    if path[:2] == ("spec", "runPolicy") and len(path) >= 3:
        return f"RunPolicy.{_snake(str(path[-1] if path[2] == 'schedulingPolicy' else path[2]))}"
    return None


def generated_names(job: Mapping[str, Any]) -> tuple[GeneratedName, ...]:
    """The names the training operator gives a PyTorchJob's pods and Services: `GenGeneralName` (training operator
    v1.9, `pkg/common/util`), `<job>-<replica type, lower case>-<index>`, one pair per replica; a Service name must be
    a DNS-1035 label of at most 63 characters (`ValidateServiceName`), so the last index of each role bounds the job's
    name.

    Args:
        job: a PyTorchJob.

    Returns:
        The last replica's name of each role, with what it names.
    """
    name = str((job.get("metadata") or {}).get("name") or "")
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    out = []
    for role, replica_spec in specs.items() if isinstance(specs, Mapping) else ():
        replicas = replica_spec.get("replicas", 1) if isinstance(replica_spec, Mapping) else 1
        last = max(int(replicas) if isinstance(replicas, int) else 1, 1) - 1
        out.append((f"{name}-{str(role).lower()}-{last}", f"{role} pod and Service"))
    return tuple(out)


DECLARATION = Declaration(
    kind=KIND,
    group=GROUP,
    version=VERSION,
    plural=PLURAL,
    config_name="pytorchjob",
    description="pytorchjobs.kubeflow.org (Kubeflow training operator)",
    pod_label=JOB_NAME_LABEL,
    status_keys=("conditions", "replicaStatuses", "startTime", "completionTime", "lastReconcileTime"),
    crd=Crd("kubeflow.org_pytorchjobs.yaml", "kubeflow/trainer v1.9.4 (training operator)"),
    pod_templates=(PodTemplates(("spec", "pytorchReplicaSpecs", ANY, "template"), "{0}.pod_template"),),
    primary_containers=(PRIMARY_CONTAINER,),
    # the container env has no maxItems; the pod template is written once per role
    limits=Limits(copies_note="a PyTorchJob holds the pod template once per role, so its values count twice"),
    settings=PyTorchJobSettings,
    package="backend_plugin.targets.pytorchjob",
    setting_names=setting_names,
    generated_names=generated_names,
    history=HISTORY,
)
"""The PyTorchJob kind, as `backend_plugin.targets` registers it."""
