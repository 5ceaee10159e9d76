"""The PyTorchJob kind's `JobTarget`: its writer, status table and log links behind the interface."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.admission.installed import Fitted, InstalledCrd
from backend_plugin.config import BackendConfig
from backend_plugin.kinds.pytorchjob import DECLARATION
from backend_plugin.pods import PodPlan, placement_warnings
from backend_plugin.spec import TaskSpec
from backend_plugin.status import JobStatus
from backend_plugin.targets.base import JobTarget, Observed, PrimaryImage, Reads
from backend_plugin.targets.pytorchjob import links, status, versions, writer
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["PyTorchJobTarget", "TARGET"]


class PyTorchJobTarget(JobTarget):
    """A `pytorch` task as a Kubeflow PyTorchJob."""

    declaration = DECLARATION
    link_pod_keys = links.POD_KEYS

    def write(self, plan: PodPlan) -> dict[str, Any]:
        return writer.write(plan)

    def warnings(self, spec: TaskSpec, config: BackendConfig) -> list[str]:
        # a PyTorchJob expresses every backend default: only a placement no node can match.
        return placement_warnings(spec, config)

    def fit(self, job: dict[str, Any], plan: PodPlan, crd: InstalledCrd) -> Fitted:
        # only pod template fields differ between releases, and none can be dropped: advice, no change.
        return versions.fit(job, crd)

    def primary_images(self, job: Mapping[str, Any]) -> list[PrimaryImage]:
        # the `pytorch` container of every replica spec.
        out = []
        for role, replica in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
            containers = (((replica or {}).get("template") or {}).get("spec") or {}).get("containers") or []
            for i, container in enumerate(containers):
                if container.get("name") == PRIMARY_CONTAINER:
                    where = f"spec.pytorchReplicaSpecs.{role}.template.spec.containers[{i}].image"
                    out.append(PrimaryImage(str(role), where, str(container.get("image", ""))))
        return out

    def reads(self, job: Mapping[str, Any], config: BackendConfig, now: datetime.datetime) -> Reads:
        return Reads(
            pods=status.needs_pods(job),
            error_report=status.needs_error_report(job),
            events=status.needs_events(job, config, now),
        )

    def status(
        self, job: Mapping[str, Any], observed: Observed, config: BackendConfig, now: datetime.datetime
    ) -> JobStatus:
        return status.job_status(
            job, observed.pods, config, now, observed.errors, observed.events, observed.events_problem
        )

    def links(
        self,
        job: Mapping[str, Any],
        pods: Optional[Sequence[Mapping[str, Any]]],
        config: BackendConfig,
        now: datetime.datetime,
        task_config: Mapping[str, str],
    ) -> list[TaskLog]:
        return links.log_links(job, pods, config, now, task_config)


TARGET = PyTorchJobTarget()
