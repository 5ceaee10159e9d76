"""The JobSet kind's `JobTarget`: what it refuses, its writer, status and log links behind the interface."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.pods import PodPlan, placement_warnings
from backend_plugin.spec import TaskSpec
from backend_plugin.status import JobStatus
from backend_plugin.targets.base import JobTarget, Observed, PrimaryImage, Reads
from backend_plugin.targets.jobset import links, status, writer
from backend_plugin.targets.jobset.declaration import DECLARATION, role_of
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["JobSetTarget", "TARGET"]


class JobSetTarget(JobTarget):
    """A `pytorch` task as a JobSet: one replicated job per role."""

    declaration = DECLARATION

    def plan(self, spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
        return writer.plan_jobset(spec, metadata, config)

    def write(self, plan: PodPlan) -> dict[str, Any]:
        return writer.write(plan)

    def warnings(self, spec: TaskSpec, config: BackendConfig) -> list[str]:
        return writer.dropped_defaults(spec, config) + writer.overrides(spec) + placement_warnings(spec, config)

    def primary_images(self, job: Mapping[str, Any]) -> list[PrimaryImage]:
        # the `pytorch` container of every replicated job's pod template.
        out = []
        for i, rjob in enumerate((job.get("spec") or {}).get("replicatedJobs") or []):
            pod = (((rjob or {}).get("template") or {}).get("spec") or {}).get("template") or {}
            for j, container in enumerate((pod.get("spec") or {}).get("containers") or []):
                if container.get("name") == PRIMARY_CONTAINER:
                    where = f"spec.replicatedJobs[{i}].template.spec.template.spec.containers[{j}].image"
                    out.append(PrimaryImage(role_of(str(rjob.get("name"))), where, str(container.get("image", ""))))
        return out

    def reads(self, job: Mapping[str, Any], config: BackendConfig, now: datetime.datetime) -> Reads:
        # pods to explain a failure or a stuck start, and to name log links (the pods' names end in a random suffix).
        return Reads(
            pods=status.needs_pods(job) or bool(config.status.log_links),
            error_report=status.needs_error_report(job),
            events=status.needs_events(job, config, now),
        )

    def status(
        self, job: Mapping[str, Any], observed: Observed, config: BackendConfig, now: datetime.datetime
    ) -> JobStatus:
        return status.jobset_status(
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
        return links.pod_log_links(job, pods, config, now, task_config)


TARGET = JobSetTarget()
