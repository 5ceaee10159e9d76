"""Log links for every replica of a PyTorchJob, from configurable URL templates.

Templates use the variable syntax of Flyte's own task log links (`{{ .podName }}`), so a site can reuse the
templates it already has in propeller's config. `BackendConfig.log_links` is a list of `{name, template}`;
each template is rendered once per replica, in replica order (master-0, worker-0, worker-1, ...). An entry with a
`link_type` is a dynamic link, shown only for tasks whose template config lists that type under `link_type`;
`{{ .taskConfig.<key> }}` is filled from the task template's config (see `log_templates`).

Variables:
    podName, namespace, containerName (always `pytorch`), podUID (when the pod was listed), jobName,
    replicaName (`master-0`), replicaType (`master`), replicaIndex, hostname (node, when known),
    podUnixStartTime, podUnixFinishTime, podRFC3339StartTime, podRFC3339FinishTime, and taskConfig.<key>.

Examples, one per common log store (the templates are used verbatim; shown shortened here)::

    # Kubernetes dashboard
    https://dash.example.com/#/log/{{ .namespace }}/{{ .podName }}/pod?container={{ .containerName }}
    # CloudWatch (fluent-bit's default stream naming)
    https://console.aws.amazon.com/cloudwatch/home?region=us-east-1#logEventViewer:group=/eks/flyte;
        stream=var.log.containers.{{ .podName }}_{{ .namespace }}_{{ .containerName }}
    # Stackdriver / Cloud Logging
    https://console.cloud.google.com/logs/viewer?project=p&advancedFilter=resource.labels.pod_name%3D{{ .podName }}
    # Grafana / Loki (times in ms)
    https://grafana.example.com/explore?left={"queries":[{"expr":"{pod=\\"{{ .podName }}\\"}"}],
        "range":{"from":"{{ .podUnixStartTime }}000","to":"{{ .podUnixFinishTime }}000"}}
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig
from backend_plugin.log_templates import VARIABLES, LogTemplate, check_templates, link_types, render_template
from backend_plugin.timestamps import parse_time, rfc3339
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["log_links", "node_log_links", "replica_names", "check_templates", "VARIABLES", "REPLICA_ORDER"]

REPLICA_ORDER = ("Master", "Worker")


def replica_names(job: dict) -> list[tuple[str, int]]:
    """Every replica the job's spec asks for, master first.

    Args:
        job: the PyTorchJob.

    Returns:
        (replica type, index) pairs, e.g. `[("Master", 0), ("Worker", 0), ("Worker", 1)]`.
    """
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    order = [t for t in REPLICA_ORDER if t in specs] + sorted(t for t in specs if t not in REPLICA_ORDER)
    return [(rtype, i) for rtype in order for i in range(int((specs[rtype] or {}).get("replicas", 1)))]


def _pod_times(pod: dict | None, job: dict, now: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime]:
    status = (pod or {}).get("status") or {}
    job_status = job.get("status") or {}
    start = (
        parse_time(status.get("startTime"))
        or parse_time(job_status.get("startTime"))
        or parse_time((job.get("metadata") or {}).get("creationTimestamp"))
        or now
    )
    finished = [
        parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in status.get("containerStatuses") or []
        if c.get("name") == PRIMARY_CONTAINER
    ]
    finish = next((f for f in finished if f), None) or parse_time(job_status.get("completionTime")) or now
    return start, max(start, finish)


def _templates(config: BackendConfig, task_config: Mapping[str, str] | None) -> list[LogTemplate]:
    """The configured templates that apply to a task: static ones, and dynamic ones of a `link_type` it asks for."""
    wanted = link_types(task_config)
    return [t for t in check_templates(config.log_links) if not t.link_type or t.link_type in wanted]


def _values(
    pod: dict | None,
    pod_name: str,
    namespace: str,
    container: str,
    job_name: str,
    replica_type: str,
    index: int,
    start: datetime.datetime,
    finish: datetime.datetime,
) -> dict[str, str]:
    """The template variables of one replica's (or node's) link; `pod` is None for a replica without a pod yet."""
    return {
        "podName": pod_name,
        "namespace": namespace,
        "containerName": container,
        "podUID": str(((pod or {}).get("metadata") or {}).get("uid", "")),
        "jobName": job_name,
        "replicaName": f"{replica_type}-{index}",
        "replicaType": replica_type,
        "replicaIndex": str(index),
        "hostname": str(((pod or {}).get("spec") or {}).get("nodeName", "")),
        "podUnixStartTime": str(int(start.timestamp())),
        "podUnixFinishTime": str(int(finish.timestamp())),
        "podRFC3339StartTime": rfc3339(start),
        "podRFC3339FinishTime": rfc3339(finish),
    }


def log_links(
    job: dict,
    pods: list[dict] | None,
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
    templates = _templates(config, task_config)
    if not templates:
        return []
    now = now or datetime.datetime.now(datetime.timezone.utc)
    meta = job.get("metadata") or {}
    job_name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods or []}
    links = []
    for name, template, _ in templates:
        for rtype, index in replica_names(job):
            pod_name = f"{job_name}-{rtype.lower()}-{index}"
            pod = by_name.get(pod_name)
            start, finish = _pod_times(pod, job, now)
            values = _values(pod, pod_name, namespace, PRIMARY_CONTAINER, job_name, rtype.lower(), index, start, finish)
            uri = render_template(template, values, task_config)
            if uri is not None:
                links.append(TaskLog(uri=uri, name=f"{name} {rtype.lower()}-{index}"))
    return links


def node_log_links(
    job: dict,
    pods: list[dict] | None,
    config: BackendConfig,
    now: datetime.datetime | None = None,
    task_config: Mapping[str, str] | None = None,
    container: str = "node",
    index_label: str = "batch.kubernetes.io/job-completion-index",
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
        container: the container the logs are read from.
        index_label: the pod label holding the node index.

    Returns:
        TaskLogs named "<template name> node-<index>", nodes in index order.

    Raises:
        ConfigError: a template is malformed (see `check_templates`).
    """
    templates = _templates(config, task_config)
    if not templates or not pods:
        return []
    now = now or datetime.datetime.now(datetime.timezone.utc)
    meta = job.get("metadata") or {}
    job_name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    newest: dict[int, dict] = {}
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        raw = (pmeta.get("labels") or {}).get(index_label) or (pmeta.get("annotations") or {}).get(index_label)
        if raw is None or not str(raw).isdigit():
            continue
        index = int(raw)
        seen = newest.get(index)
        if seen is None or str(pmeta.get("creationTimestamp", "")) >= str(
            (seen.get("metadata") or {}).get("creationTimestamp", "")
        ):
            newest[index] = pod
    links = []
    for name, template, _ in templates:
        for index, pod in sorted(newest.items()):
            start, finish = _pod_times(pod, job, now)
            pod_name = str((pod.get("metadata") or {}).get("name", ""))
            values = _values(pod, pod_name, namespace, container, job_name, "node", index, start, finish)
            uri = render_template(template, values, task_config)
            if uri is not None:
                links.append(TaskLog(uri=uri, name=f"{name} node-{index}"))
    return links
