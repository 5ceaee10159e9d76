"""The TrainJob kind's `JobTarget`: what it refuses, its writer, status and log links behind the interface."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.admission.installed import Fitted, InstalledCrd
from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.kinds.trainjob import DECLARATION, NODE
from backend_plugin.pods import PodPlan, placement_warnings
from backend_plugin.spec import TaskSpec
from backend_plugin.status import JobStatus
from backend_plugin.targets.base import JobTarget, Observed, PrimaryImage, Reads
from backend_plugin.targets.trainjob import links, status, versions, writer

__all__ = ["TrainJobTarget", "TARGET"]


class TrainJobTarget(JobTarget):
    """A `pytorch` task as a Kubeflow Trainer v2 TrainJob."""

    declaration = DECLARATION
    link_pod_keys = links.POD_KEYS

    def plan(self, spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
        return writer.plan_trainjob(spec, metadata, config)

    def write(self, plan: PodPlan) -> dict[str, Any]:
        return writer.write(plan)

    def warnings(self, spec: TaskSpec, config: BackendConfig) -> list[str]:
        return writer.dropped_defaults(spec, config) + placement_warnings(spec, config)

    def fit(self, job: dict[str, Any], plan: PodPlan, crd: InstalledCrd) -> Fitted:
        # runtimePatches as an older Trainer's override where that keeps its meaning; a deadline Flyte enforces
        # anyway dropped (versions.py).
        return versions.fit(job, plan, crd)

    def primary_images(self, job: Mapping[str, Any]) -> list[PrimaryImage]:
        # `spec.trainer.image`, the image of every node.
        trainer = (job.get("spec") or {}).get("trainer") or {}
        return [PrimaryImage(NODE, "spec.trainer.image", str(trainer.get("image", "")))]

    def reads(self, job: Mapping[str, Any], config: BackendConfig, now: datetime.datetime) -> Reads:
        # pods to explain a failure or a stuck start; for log links, the pods' names (the JobSet's end in a random
        # suffix), listed once per job status; never events (a TrainJob without a JobSet is caught by
        # `trainjob_pickup_timeout_s`).
        return Reads(
            pods=status.needs_pods(job),
            error_report=status.needs_error_report(job),
            link_pods=bool(config.status.log_links),
        )

    def status(
        self, job: Mapping[str, Any], observed: Observed, config: BackendConfig, now: datetime.datetime
    ) -> JobStatus:
        return status.trainjob_status(job, observed.pods, config, now, observed.errors)

    def links(
        self,
        job: Mapping[str, Any],
        pods: Optional[Sequence[Mapping[str, Any]]],
        config: BackendConfig,
        now: datetime.datetime,
        task_config: Mapping[str, str],
    ) -> list[TaskLog]:
        return links.node_log_links(job, pods, config, now, task_config)


TARGET = TrainJobTarget()
