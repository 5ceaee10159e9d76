"""Log links for every replica of a PyTorchJob, from configurable URL templates.

Templates use the variable syntax of Flyte's own task log links (`{{ .podName }}`), so a site can reuse the
templates it already has in propeller's config. `BackendConfig.log_links` is a list of `{name, template}`;
each template is rendered once per replica, in replica order (master-0, worker-0, worker-1, ...).

Variables:
    podName, namespace, containerName (always `pytorch`), podUID (when the pod was listed), jobName,
    replicaName (`master-0`), replicaType (`master`), replicaIndex, hostname (node, when known),
    podUnixStartTime, podUnixFinishTime, podRFC3339StartTime, podRFC3339FinishTime.

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
import re
from collections.abc import Mapping, Sequence
from typing import Any

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig, ConfigError
from backend_plugin.status import parse_time

CONTAINER_NAME = "pytorch"
VARIABLES = frozenset(
    {
        "podName",
        "namespace",
        "containerName",
        "podUID",
        "jobName",
        "replicaName",
        "replicaType",
        "replicaIndex",
        "hostname",
        "podUnixStartTime",
        "podUnixFinishTime",
        "podRFC3339StartTime",
        "podRFC3339FinishTime",
    }
)
_VAR = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
REPLICA_ORDER = ("Master", "Worker")


def check_templates(templates: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Validate `BackendConfig.log_links` entries.

    Args:
        templates: `{name, template}` mappings.

    Returns:
        (name, template) pairs.

    Raises:
        ConfigError: an entry is not a mapping with non-empty `name` and `template`, or uses an unknown variable.
    """
    out = []
    for i, entry in enumerate(templates or ()):
        if not isinstance(entry, Mapping) or not entry.get("name") or not entry.get("template"):
            raise ConfigError(f"log_links[{i}]={entry!r} must be a mapping with non-empty 'name' and 'template'")
        unknown = sorted({v for v in _VAR.findall(str(entry["template"])) if v not in VARIABLES})
        if unknown:
            raise ConfigError(
                f"log_links[{i}] ({entry['name']!r}) uses unknown variables {unknown}; allowed: {sorted(VARIABLES)}"
            )
        out.append((str(entry["name"]), str(entry["template"])))
    return out


def replica_names(job: dict) -> list[tuple[str, int]]:
    """(replica type, index) of every replica in the spec, master first.

    Args:
        job: the PyTorchJob dict.

    Returns:
        e.g. ``[("Master", 0), ("Worker", 0), ("Worker", 1)]``.
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
        if c.get("name") == CONTAINER_NAME
    ]
    finish = next((f for f in finished if f), None) or parse_time(job_status.get("completionTime")) or now
    return start, max(start, finish)


def _rfc3339(t: datetime.datetime) -> str:
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log_links(
    job: dict,
    pods: list[dict] | None,
    config: BackendConfig,
    now: datetime.datetime | None = None,
) -> list[TaskLog]:
    """One `TaskLog` per configured template and replica.

    Args:
        job: the PyTorchJob (names come from its spec, so links exist before pods do).
        pods: its pods when listed (for start/finish times, UID and node); None otherwise.
        config: supplies `log_links`.
        now: finish time of replicas still running; the current time when None.

    Returns:
        TaskLogs named "<template name> <replica>" (e.g. "Loki master-0"), replicas in order.

    Raises:
        ConfigError: a template is malformed (see `check_templates`).
    """
    templates = check_templates(config.log_links)
    if not templates:
        return []
    now = now or datetime.datetime.now(datetime.timezone.utc)
    meta = job.get("metadata") or {}
    job_name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods or []}
    links = []
    for name, template in templates:
        for rtype, index in replica_names(job):
            pod_name = f"{job_name}-{rtype.lower()}-{index}"
            pod = by_name.get(pod_name)
            start, finish = _pod_times(pod, job, now)
            values = {
                "podName": pod_name,
                "namespace": namespace,
                "containerName": CONTAINER_NAME,
                "podUID": str(((pod or {}).get("metadata") or {}).get("uid", "")),
                "jobName": job_name,
                "replicaName": f"{rtype.lower()}-{index}",
                "replicaType": rtype.lower(),
                "replicaIndex": str(index),
                "hostname": str(((pod or {}).get("spec") or {}).get("nodeName", "")),
                "podUnixStartTime": str(int(start.timestamp())),
                "podUnixFinishTime": str(int(finish.timestamp())),
                "podRFC3339StartTime": _rfc3339(start),
                "podRFC3339FinishTime": _rfc3339(finish),
            }
            uri = _VAR.sub(lambda m, v=values: v[m.group(1)], template)
            links.append(TaskLog(uri=uri, name=f"{name} {rtype.lower()}-{index}"))
    return links
