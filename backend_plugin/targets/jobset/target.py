"""The JobSet kind's `JobTarget`: what it refuses, its writer, status and log links behind the interface."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.admission.installed import Fitted, InstalledCrd, undeclared
from backend_plugin.admission.structural import format_path
from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.kinds.declaration import ANY
from backend_plugin.kinds.jobset import DECLARATION, MESSAGE_PATTERNS, role_of
from backend_plugin.pods import PodPlan, placement_warnings
from backend_plugin.spec import TaskSpec
from backend_plugin.status import JobStatus
from backend_plugin.targets.base import JobTarget, Observed, PrimaryImage, Reads
from backend_plugin.targets.jobset import links, status, writer
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["JobSetTarget", "TARGET"]


_PATTERNS_ADVICE = (
    "the rule that restarts the JobSet after a preemption without spending maxRestarts tells a preemption from the "
    "task's own failure by the child Job's failure message; without it every pod-failure-policy failure would restart "
    "the JobSet for free: upgrade JobSet to v0.10 or later, or run the task on the PyTorchJob target (backend config "
    "`target: pytorchjob`)"
)


class JobSetTarget(JobTarget):
    """A `pytorch` task as a JobSet: one replicated job per role."""

    declaration = DECLARATION
    link_pod_keys = links.POD_KEYS

    def plan(self, spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
        return writer.plan_jobset(spec, metadata, config)

    def write(self, plan: PodPlan) -> dict[str, Any]:
        return writer.write(plan)

    def fit(self, job: dict[str, Any], plan: PodPlan, crd: InstalledCrd) -> Fitted:
        # Nothing is written otherwise. Without message patterns the Preempted rule would restart the JobSet, for
        # free, after any pod-failure-policy failure (the task's own exit code under ExitCode included), so they are
        # never dropped: the admission model refuses them with these words.
        advice = {
            format_path(path): _PATTERNS_ADVICE
            for path in undeclared(job, crd)
            if len(path) == len(MESSAGE_PATTERNS)
            and all(p == ANY or p == q for p, q in zip(MESSAGE_PATTERNS, path, strict=True))
        }
        return Fitted(job, advice=advice)

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
        # pods to explain a failure or a stuck start; for log links, the pods' names (they end in a random suffix),
        # listed once per job status.
        return Reads(
            pods=status.needs_pods(job),
            error_report=status.needs_error_report(job),
            events=status.needs_events(job, config, now),
            link_pods=bool(config.status.log_links),
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
