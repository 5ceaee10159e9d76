"""What the TrainJob kind declares: API coordinates, its CRD, where its pod templates are, its env limit, its config
section."""

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
    GeneratedName,
    Limits,
    PodTemplates,
)
from backend_plugin.settings import Section, check_choice, check_seconds
from pytorch_contract.job_limits import LIMITS
from pytorch_contract.k8s_names import DNS1123_SUBDOMAIN, JOBSET_NAME_LABEL

__all__ = [
    "DECLARATION",
    "TrainJobSettings",
    "GROUP",
    "VERSION",
    "PLURAL",
    "KIND",
    "API_VERSION",
    "NODE",
    "ENV",
    "RUNTIME_KINDS",
    "MANAGED_BY",
    "POD_NAME_SUFFIX",
    "generated_names",
    "HISTORY",
    "RUNTIME_PATCHES",
    "POD_TEMPLATE_OVERRIDES",
    "POD_SPEC_OVERRIDES",
    "ACTIVE_DEADLINE",
]

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"

NODE = "node"
"""The torch runtime's replicated job and its container: the only ones `spec.trainer` overrides."""

ENV = ("spec", "trainer", "env")
"""The training container's environment, written outside the runtime patch's pod template."""

RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
"""`spec.runtimeRef.kind` values a TrainJob accepts (Kubeflow Trainer v2.3)."""

MANAGED_BY = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
"""`spec.managedBy` values the TrainJob CRD allows."""


RUNTIME_PATCHES = ("spec", "runtimePatches")
"""Where the writer patches the runtime's node pod: Trainer v2.2 added it (v2.0 and v2.1 had other fields)."""

POD_TEMPLATE_OVERRIDES = ("spec", "podTemplateOverrides")
"""Trainer v2.1's way to change a runtime job's pod template (labels, annotations and some pod spec fields), merged
into it as a strategic merge patch, as `runtimePatches` are; v2.2 replaced it."""

POD_SPEC_OVERRIDES = ("spec", "podSpecOverrides")
"""Trainer v2.0's way to change a runtime job's pod spec (some of its fields, no pod metadata), merged the same way;
v2.1 replaced it."""

ACTIVE_DEADLINE = ("spec", "activeDeadlineSeconds")
"""The task's deadline on the TrainJob: Trainer v2.2 added it."""

HISTORY = CrdHistory(
    controller="Kubeflow Trainer",
    releases=(
        CrdRelease("Trainer v2.2", (RUNTIME_PATCHES, ACTIVE_DEADLINE)),
        CrdRelease("Trainer v2.1", (POD_TEMPLATE_OVERRIDES,)),
        CrdRelease("Trainer v2.0", (POD_SPEC_OVERRIDES,)),
    ),
)
"""What each release's TrainJob CRD first declares (the upstream CRDs of v2.0.0, v2.1.0, v2.2.1 and v2.3.0)."""

POD_NAME_SUFFIX = "-xxxxx"
"""Stands for the 5 random characters a Job's controller ends each pod name with; JobSet's webhook checks a name
with a 5-character suffix in their place."""


def generated_names(job: Mapping[str, Any]) -> tuple[GeneratedName, ...]:
    """The name JobSet gives the last node pod of a TrainJob (the Trainer names the JobSet after the TrainJob, and
    the torch runtime's replicated job `node` has one Job of `numNodes` indexed pods): JobSet's webhook
    (`jobset_webhook.go`, `ValidateCreate`) refuses a JobSet whose `GenPodName(jobset, replicated job, job index, pod
    index)` plus a 5-character suffix is not a DNS-1035 label, so the TrainJob is admitted and never starts. A custom
    runtime's other replicated jobs are not known here.

    Args:
        job: a TrainJob.

    Returns:
        The last node pod's name, with what it names.
    """
    name = str((job.get("metadata") or {}).get("name") or "")
    trainer = (job.get("spec") or {}).get("trainer") or {}
    nodes = trainer.get("numNodes", 1) if isinstance(trainer, Mapping) else 1
    last = max(int(nodes) if isinstance(nodes, int) else 1, 1) - 1
    return ((f"{name}-{NODE}-0-{last}{POD_NAME_SUFFIX}", "node pod (JobSet names it <job>-node-0-<index>-<random>)"),)


@dataclass
class TrainJobSettings(Section):
    """The backend config's `trainjob` section: the runtime every TrainJob names, and how long its controller may
    take.

    Raises:
        ConfigError: a runtime name that is not a DNS-1123 subdomain, a runtime kind or `managedBy` the CRD does not
            accept, or a timeout that is not a non-negative number of seconds.
    """

    KEYS = {
        "runtime_name": "trainjob_runtime_name",
        "runtime_kind": "trainjob_runtime_kind",
        "managed_by": "trainjob_managed_by",
        "pickup_timeout_s": "trainjob_pickup_timeout_s",
    }
    VERBATIM = ("runtime_name",)

    runtime_name: str = "torch-distributed"
    """`spec.runtimeRef.name` of TrainJobs: the training runtime every node is rendered from. `torch-distributed`
    is the ClusterTrainingRuntime that every Trainer v2 install ships for PyTorch. Key: `trainjob_runtime_name`."""

    runtime_kind: str = "ClusterTrainingRuntime"
    """`spec.runtimeRef.kind`: `ClusterTrainingRuntime` (cluster-wide, what the default install provides) or
    `TrainingRuntime` (one in the job's namespace). Key: `trainjob_runtime_kind`."""

    managed_by: Optional[str] = None
    """`spec.managedBy` of TrainJobs; None leaves the CRD default (`trainer.kubeflow.org/trainjob-controller`).
    Set `kueue.x-k8s.io/multikueue` to dispatch TrainJobs to worker clusters with MultiKueue. Key:
    `trainjob_managed_by`."""

    pickup_timeout_s: float = 300.0
    """A TrainJob with no condition and no `jobsStatus` this long after creation is failed (permanently: it can
    never run). The Trainer controller writes `jobsStatus` within seconds of creating the JobSet; when the runtime
    is missing or the JobSet cannot be built it only records an Event, so without this the job would wait until
    Flyte's timeout. Five minutes tolerates a controller restart, as `operator_pickup_timeout_s` does for
    PyTorchJobs. Key: `trainjob_pickup_timeout_s`."""

    def __post_init__(self) -> None:
        if not isinstance(self.runtime_name, str) or not DNS1123_SUBDOMAIN.match(self.runtime_name):
            raise ConfigError(
                f"{self.key('runtime_name')}={self.runtime_name!r} is not a DNS-1123 subdomain "
                "(the name of a ClusterTrainingRuntime or TrainingRuntime, e.g. 'torch-distributed')"
            )
        check_choice(self.key("runtime_kind"), self.runtime_kind, RUNTIME_KINDS)
        check_choice(self.key("managed_by"), self.managed_by, MANAGED_BY, optional=True)
        check_seconds(self.key("pickup_timeout_s"), self.pickup_timeout_s, positive=False)


DECLARATION = Declaration(
    kind=KIND,
    group=GROUP,
    version=VERSION,
    plural=PLURAL,
    config_name="trainjob",
    description="trainjobs.trainer.kubeflow.org (Kubeflow Trainer v2)",
    pod_label=JOBSET_NAME_LABEL,
    status_keys=("conditions", "jobsStatus"),
    crd=Crd("trainer.kubeflow.org_trainjobs.yaml", "kubeflow/trainer v2.3.0"),
    pod_templates=(
        PodTemplates(
            (
                "spec",
                "runtimePatches",
                ANY,
                "trainingRuntimeSpec",
                "template",
                "spec",
                "replicatedJobs",
                ANY,
                "template",
                "spec",
                "template",
            ),
            "pod_template",
        ),
    ),  # fmt: skip
    primary_containers=(NODE,),
    limits=Limits(
        env_paths=(ENV,),
        env_max_items=LIMITS["trainjob"].env_max_items,
        resource_paths=(("spec", "trainer", "resourcesPerNode"),),
    ),
    settings=TrainJobSettings,
    package="backend_plugin.targets.trainjob",
    generated_names=generated_names,
    history=HISTORY,
    # Trainer v2.3's reconcile (pkg/controller/trainjob_controller.go, `Reconcile`) never looks at the TrainJob's
    # deletionTimestamp: while a foreground delete waits for the JobSet to go, it applies the JobSet again, which
    # starts a second set of pods. Deleted in the background, the TrainJob is gone at once, and the garbage collector
    # takes its JobSet, the JobSet's Jobs and their pods.
    delete_propagation="Background",
)
"""The TrainJob kind, as `backend_plugin.targets` registers it."""
