"""TrainJob log links: one per configured template and node, with the JobSet's real pod names (they end in a random
suffix, so the links exist once the pods are listed). The variables are `backend_plugin.logs`'."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig
from backend_plugin.logs import link_templates, link_values, render_template
from backend_plugin.targets.trainjob.status import node_index
from pytorch_contract.k8s_names import COMPLETION_INDEX_LABEL

__all__ = ["node_log_links", "NODE_CONTAINER", "POD_KEYS"]

POD_KEYS = (COMPLETION_INDEX_LABEL,)
"""The label (or annotation) these links read of a pod: its node's index (`node_index`)."""

NODE_CONTAINER = "node"
"""The torch runtime's training container, where a node's logs are."""


def node_log_links(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] | None,
    config: BackendConfig,
    now: datetime.datetime | None = None,
    task_config: Mapping[str, str] | None = None,
) -> list[TaskLog]:
    """One `TaskLog` per configured template and TrainJob node, with the JobSet's real pod names.

    A TrainJob's pods are named by the JobSet (`<job>-node-0-<index>-<random>`), so links exist once the pods are
    listed; a node with several pods (restarts) gets the newest one. `replicaType` is `node`, `replicaName` is
    `node-<index>`, `containerName` is the runtime's container `node`.

    Args:
        job: the TrainJob.
        pods: its pods (None or empty: no links yet).
        config: supplies `log_links`.
        now: finish time of nodes still running; the current time when None.
        task_config: the task template's config map, as for `log_links` (`link_type`, `{{ .taskConfig.<key> }}`).

    Returns:
        TaskLogs named "<template name> node-<index>", nodes in index order.

    Raises:
        ConfigError: a template is malformed (see `check_templates`).
    """
    templates = link_templates(config, task_config)
    if not templates or not pods:
        return []
    now = now or datetime.datetime.now(datetime.timezone.utc)
    meta = job.get("metadata") or {}
    job_name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    newest: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        if not isinstance(pod, Mapping):
            continue
        pmeta = pod.get("metadata") or {}
        index = node_index(pod)
        if index is None:
            continue
        seen = newest.get(index)
        if seen is None or str(pmeta.get("creationTimestamp", "")) >= str(
            (seen.get("metadata") or {}).get("creationTimestamp", "")
        ):
            newest[index] = pod
    links = []
    for name, template, _ in templates:
        for index, pod in sorted(newest.items()):
            pod_name = str((pod.get("metadata") or {}).get("name", ""))
            values = link_values(pod, pod_name, namespace, NODE_CONTAINER, job_name, "node", index, job, now)
            uri = render_template(template, values, task_config)
            if uri is not None:
                links.append(TaskLog(uri=uri, name=f"{name} node-{index}"))
    return links
