"""The TrainJob kind (Kubeflow Trainer v2, `trainer.kubeflow.org/v1alpha1`): writer, status and log links.

`TARGET` is this kind's `JobTarget`; `backend_plugin.targets` registers it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.pods import placement_warnings
from backend_plugin.spec import TaskSpec
from backend_plugin.status import JobStatus
from backend_plugin.targets.base import JobTarget, Observed, PrimaryImage, Reads
from backend_plugin.targets.trainjob import links, status, writer
from pytorch_contract.k8s_names import JOBSET_NAME_LABEL

__all__ = ["TrainJobTarget", "TARGET"]


class TrainJobTarget(JobTarget):
    """A `pytorch` task as a Kubeflow Trainer v2 TrainJob."""

    kind = writer.KIND
    group = writer.GROUP
    version = writer.VERSION
    plural = writer.PLURAL
    config_name = "trainjob"
    description = "trainjobs.trainer.kubeflow.org (Kubeflow Trainer v2)"
    pod_label = JOBSET_NAME_LABEL
    status_keys = ("conditions", "jobsStatus")

    def write(self, spec: TaskSpec, metadata: ExecutionMetadata, config: Optional[BackendConfig]) -> dict[str, Any]:
        return writer.to_trainjob(spec, metadata, config)

    def warnings(self, spec: TaskSpec, config: BackendConfig) -> list[str]:
        return writer.dropped_defaults(spec, config) + placement_warnings(spec, config)

    def primary_images(self, job: Mapping[str, Any]) -> list[PrimaryImage]:
        # `spec.trainer.image`, the image of every node.
        trainer = (job.get("spec") or {}).get("trainer") or {}
        return [PrimaryImage(writer.NODE, "spec.trainer.image", str(trainer.get("image", "")))]

    def reads(self, job: Mapping[str, Any], config: BackendConfig, now: datetime.datetime) -> Reads:
        # pods to explain a failure or a stuck start, and to name log links (the JobSet's pod names end in a random
        # suffix); never events (a TrainJob without a JobSet is caught by `trainjob_pickup_timeout_s`).
        return Reads(
            pods=status.needs_pods(job) or bool(config.log_links),
            error_report=status.needs_error_report(job),
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
