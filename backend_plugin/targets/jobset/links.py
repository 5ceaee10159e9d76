"""JobSet log links: one per configured template and pod of the current run, with the pods' real names (the Job
controller ends them in a random suffix, so the links exist once the pods are listed). Named `<role>-<index>`
(`worker-1`), as a PyTorchJob's replicas are. The variables are `backend_plugin.logs`'."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig
from backend_plugin.logs import link_templates, link_values, render_template
from backend_plugin.targets.jobset.status import current_pods, pod_role_index
from pytorch_contract.k8s_names import COMPLETION_INDEX_LABEL, JOBSET_REPLICATED_JOB_LABEL, JOBSET_RESTART_ATTEMPT_LABEL
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["pod_log_links", "POD_KEYS", "ROLE_ORDER"]

ROLE_ORDER = ("master", "worker")

POD_KEYS = (JOBSET_REPLICATED_JOB_LABEL, COMPLETION_INDEX_LABEL, JOBSET_RESTART_ATTEMPT_LABEL)
"""The labels (or annotations) these links read of a pod: its role and index (`pod_role_index`) and the run it belongs
to (`current_pods`)."""


def pod_log_links(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] | None,
    config: BackendConfig,
    now: datetime.datetime | None = None,
    task_config: Mapping[str, str] | None = None,
) -> list[TaskLog]:
    """One `TaskLog` per configured template and pod of the JobSet's current run.

    A role's pod is named by the Job controller (`<jobset>-<role>-0-<index>-<random>`), so links exist once the pods
    are listed; of several pods of one role and index (a pod being replaced), the newest one. `replicaType` is the
    role (`master`, `worker`), `replicaName` `<role>-<index>`, `containerName` the training container `pytorch`.

    Args:
        job: the JobSet.
        pods: its pods (None or empty: no links yet).
        config: supplies `log_links`.
        now: finish time of pods still running; the current time when None.
        task_config: the task template's config map, as for `log_links` (`link_type`, `{{ .taskConfig.<key> }}`).

    Returns:
        TaskLogs named "<template name> <role>-<index>", master first, then by index.

    Raises:
        ConfigError: a template is malformed (see `check_templates`).
    """
    templates = link_templates(config, task_config)
    if not templates or not pods:
        return []
    now = now or datetime.datetime.now(datetime.timezone.utc)
    meta = job.get("metadata") or {}
    job_name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    newest: dict[tuple[str, int], Mapping[str, Any]] = {}
    for pod in current_pods(job, pods):
        found = pod_role_index(pod)
        if found is None:
            continue
        seen = newest.get(found)
        created = str((pod.get("metadata") or {}).get("creationTimestamp", ""))
        if seen is None or created >= str((seen.get("metadata") or {}).get("creationTimestamp", "")):
            newest[found] = pod
    order = sorted(newest, key=lambda k: (ROLE_ORDER.index(k[0]) if k[0] in ROLE_ORDER else len(ROLE_ORDER), k))
    links = []
    for name, template, _ in templates:
        for role, index in order:
            pod = newest[(role, index)]
            pod_name = str((pod.get("metadata") or {}).get("name", ""))
            values = link_values(pod, pod_name, namespace, PRIMARY_CONTAINER, job_name, role, index, job, now)
            uri = render_template(template, values, task_config)
            if uri is not None:
                links.append(TaskLog(uri=uri, name=f"{name} {role}-{index}"))
    return links
