"""Log links: what every kind's links share (the templates that apply to a task, a pod's times, the variables of one
replica's link). Each kind renders its own links (`backend_plugin.targets.<kind>.links`), from configurable URL
templates.

Templates use the variable syntax of Flyte's own task log links (`{{ .podName }}`), so a site can reuse the
templates it already has in propeller's config. `BackendConfig.log_links` is a list of `{name, template}`;
each template is rendered once per replica, in replica order (master-0, worker-0, worker-1, ...). An entry with a
`link_type` is a dynamic link, shown only for tasks whose template config lists that type under `link_type`;
`{{ .taskConfig.<key> }}` is filled from the task template's config (see `log_templates`).

Variables:
    podName, namespace, containerName (the kind's training container), podUID (when the pod was listed), jobName,
    replicaName (`master-0`, `node-0`), replicaType (`master`, `node`), replicaIndex, hostname (node, when known),
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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from backend_plugin.config import BackendConfig
from backend_plugin.kube.timestamps import parse_time, rfc3339
from backend_plugin.log_templates import VARIABLES, LogTemplate, check_templates, link_types, render_template
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["link_templates", "pod_times", "link_values", "check_templates", "render_template", "VARIABLES"]


def pod_times(
    pod: Mapping[str, Any] | None,
    job: Mapping[str, Any],
    now: datetime.datetime,
    container: str = PRIMARY_CONTAINER,
) -> tuple[datetime.datetime, datetime.datetime]:
    """A replica's start and finish for its links: the pod's, else the job's, else now (finish >= start).

    Args:
        pod: the replica's pod, None when it was not listed (or does not exist yet).
        job: the job.
        now: the finish of a replica still running.
        container: the training container, whose end is the replica's finish (a TrainJob's is `node`).

    Returns:
        (start, finish).
    """
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
        if c.get("name") == container
    ]
    finish = next((f for f in finished if f), None) or parse_time(job_status.get("completionTime")) or now
    return start, max(start, finish)


def link_templates(config: BackendConfig, task_config: Mapping[str, str] | None) -> list[LogTemplate]:
    """The configured templates that apply to a task: static ones, and dynamic ones of a `link_type` it asks for.

    Args:
        config: supplies `log_links`.
        task_config: the task template's config map (its `link_type`).

    Returns:
        The checked templates.

    Raises:
        ConfigError: a template is malformed (see `check_templates`).
    """
    wanted = link_types(task_config)
    return [t for t in config.status.checked_log_links if not t.link_type or t.link_type in wanted]


def link_values(
    pod: Mapping[str, Any] | None,
    pod_name: str,
    namespace: str,
    container: str,
    job_name: str,
    replica_type: str,
    index: int,
    job: Mapping[str, Any],
    now: datetime.datetime,
) -> Mapping[str, str]:
    """The template variables of one replica's (or node's) link, each made when a template reads it: a link that
    names only the pod reads no time (`pod_times` runs for the first time variable read).

    Args:
        pod: the replica's pod; None for a replica without a listed pod yet.
        pod_name: its pod's name.
        namespace: the job's namespace.
        container: the container the logs are read from.
        job_name: the job's name.
        replica_type: `master`, `worker`, `node`.
        index: the replica's index.
        job: the job (the replica's times when its pod has none).
        now: the finish of a replica still running.

    Returns:
        Variable name -> value, one entry per `VARIABLES` name.
    """
    times: list[tuple[datetime.datetime, datetime.datetime]] = []

    def start() -> datetime.datetime:
        if not times:
            times.append(pod_times(pod, job, now, container))
        return times[0][0]

    def finish() -> datetime.datetime:
        start()
        return times[0][1]

    return _LinkValues(
        {
            "podName": lambda: pod_name,
            "namespace": lambda: namespace,
            "containerName": lambda: container,
            "podUID": lambda: str(((pod or {}).get("metadata") or {}).get("uid", "")),
            "jobName": lambda: job_name,
            "replicaName": lambda: f"{replica_type}-{index}",
            "replicaType": lambda: replica_type,
            "replicaIndex": lambda: str(index),
            "hostname": lambda: str(((pod or {}).get("spec") or {}).get("nodeName", "")),
            "podUnixStartTime": lambda: str(int(start().timestamp())),
            "podUnixFinishTime": lambda: str(int(finish().timestamp())),
            "podRFC3339StartTime": lambda: rfc3339(start()),
            "podRFC3339FinishTime": lambda: rfc3339(finish()),
        }
    )


class _LinkValues(Mapping[str, str]):
    """A link's variables, each made on first read."""

    __slots__ = ("_made", "_makers")

    def __init__(self, makers: dict[str, Callable[[], str]]) -> None:
        self._makers = makers
        self._made: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        if name not in self._made:
            self._made[name] = self._makers[name]()
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)
