"""PyTorchJob log links: one per configured template and replica, named from the job's spec so they exist before the
pods do (the operator names pods `<job>-<replica type>-<index>`). The variables are `backend_plugin.logs`'."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig
from backend_plugin.logs import link_templates, link_values, render_template
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["log_links", "replica_names", "POD_KEYS", "REPLICA_ORDER"]

REPLICA_ORDER = ("Master", "Worker")

POD_KEYS: tuple[str, ...] = ()
"""The labels these links read of a pod: none (a pod is found by the name its replica gives it)."""


def replica_names(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Every replica the job's spec asks for, master first.

    Args:
        job: the PyTorchJob.

    Returns:
        (replica type, index) pairs, e.g. `[("Master", 0), ("Worker", 0), ("Worker", 1)]`.
    """
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    order = [t for t in REPLICA_ORDER if t in specs] + sorted(t for t in specs if t not in REPLICA_ORDER)
    return [(rtype, i) for rtype in order for i in range(int((specs[rtype] or {}).get("replicas", 1)))]


def log_links(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] | None,
    config: BackendConfig,
    now: datetime.datetime | None = None,
    task_config: Mapping[str, str] | None = None,
) -> list[TaskLog]:
    """One `TaskLog` per configured template and replica.

    Args:
        job: the PyTorchJob (names come from its spec, so links exist before pods do).
        pods: its pods when listed (for start/finish times, UID and node); None otherwise.
        config: supplies `log_links`.
        now: finish time of replicas still running; the current time when None.
        task_config: the task template's config map: its `link_type` selects the dynamic links (entries with a
            `link_type`) and its entries fill `{{ .taskConfig.<key> }}`.

    Returns:
        TaskLogs named "<template name> <replica>" (e.g. "Loki master-0"), replicas in order; a link whose
        `taskConfig` key the task does not set is left out.

    Raises:
        ConfigError: a template is malformed (see `check_templates`).
    """
    templates = link_templates(config, task_config)
    if not templates:
        return []
    now = now or datetime.datetime.now(datetime.timezone.utc)
    meta = job.get("metadata") or {}
    job_name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods or [] if isinstance(p, Mapping)}
    links = []
    for name, template, _ in templates:
        for rtype, index in replica_names(job):
            pod_name = f"{job_name}-{rtype.lower()}-{index}"
            pod = by_name.get(pod_name)
            values = link_values(pod, pod_name, namespace, PRIMARY_CONTAINER, job_name, rtype.lower(), index, job, now)
            uri = render_template(template, values, task_config)
            if uri is not None:
                links.append(TaskLog(uri=uri, name=f"{name} {rtype.lower()}-{index}"))
    return links
