"""Builders for the objects the training operator and the kubelet would write: pods and job status."""

from __future__ import annotations

from typing import Any


def replica_pod(
    job: dict,
    replica_type: str,
    index: int,
    phase: str = "Running",
    start_time: str | None = "2025-01-01T00:00:00Z",
    container_state: dict[str, Any] | None = None,
    conditions: list[dict] | None = None,
    restart_count: int = 0,
) -> dict:
    """A pod as the training operator names and labels it for replica `replica_type`-`index` of `job`.

    Args:
        job: the PyTorchJob (name and namespace are read from it).
        replica_type: "Master" or "Worker".
        index: the replica index.
        phase: pod phase (Pending, Running, Succeeded, Failed).
        start_time: `status.startTime`; None leaves it out (pod not started).
        container_state: the `pytorch` container's `state` (e.g. {"terminated": {"reason": "OOMKilled", ...}}).
        conditions: `status.conditions` (e.g. PodScheduled False, reason Unschedulable).
        restart_count: the container's restart count.

    Returns:
        The pod dict.
    """
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    rtype = replica_type.lower()
    status: dict[str, Any] = {"phase": phase}
    if start_time:
        status["startTime"] = start_time
    if conditions:
        status["conditions"] = conditions
    if container_state is not None:
        status["containerStatuses"] = [
            {
                "name": "pytorch",
                "ready": "running" in container_state,
                "restartCount": restart_count,
                "image": "img",
                "imageID": "",
                "state": container_state,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{rtype}-{index}",
            "namespace": namespace,
            "labels": {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": rtype,
                "training.kubeflow.org/replica-index": str(index),
                **({"training.kubeflow.org/job-role": "master"} if rtype == "master" else {}),
            },
        },
        "spec": {"containers": [{"name": "pytorch", "image": "img"}]},
        "status": status,
    }


def node_pod(job: dict, index: int, phase: str = "Running", **state: Any) -> dict:
    """A pod as a TrainJob's JobSet names and labels node `index` of `job`.

    Args:
        job: the TrainJob (name and namespace are read from it; the namespace defaults to the tests' own).
        index: the node's completion index.
        phase: pod phase.
        **state: the `node` container's `state` (e.g. `terminated={...}`); running when none.

    Returns:
        The pod dict.
    """
    name = job["metadata"]["name"]
    return {
        "metadata": {
            "name": f"{name}-node-0-{index}-ab1c{index}",
            "namespace": job["metadata"].get("namespace") or "flytesnacks-development",
            "labels": {"jobset.sigs.k8s.io/jobset-name": name, "batch.kubernetes.io/job-completion-index": str(index)},
            "creationTimestamp": "2025-01-01T00:01:00Z",
        },
        "spec": {"containers": [{"name": "node", "image": "img"}]},
        "status": {
            "phase": phase,
            "startTime": "2025-01-01T00:01:05Z",
            "containerStatuses": [
                {
                    "name": "node",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": "img",
                    "imageID": "",
                    "state": state or {"running": {}},
                }
            ],
        },
    }


def condition(ctype: str, status: str = "True", reason: str = "", message: str = "", at: str = "") -> dict:
    """A PyTorchJob condition (`JobCondition`) as the operator writes it.

    Args:
        ctype: Created, Running, Restarting, Succeeded, Failed, Suspended.
        status: "True", "False" or "Unknown".
        reason: e.g. PyTorchJobRunning.
        message: the operator's message.
        at: lastTransitionTime (RFC 3339); "" leaves it out.

    Returns:
        The condition dict.
    """
    c = {"type": ctype, "status": status, "reason": reason or f"PyTorchJob{ctype}", "message": message}
    if at:
        c["lastTransitionTime"] = at
        c["lastUpdateTime"] = at
    return c


def failed_create_event(job: dict, message: str, at: str = "2025-01-01T00:00:30Z", kind: str = "PyTorchJob") -> dict:
    """The Warning event the training operator records on a job when the API server rejects one of its pods.

    Args:
        job: the job (name and namespace are read from it).
        message: the event's message, e.g. `Error creating: Pod "x-master-0" is invalid: ...`.
        at: lastTimestamp (RFC 3339).
        kind: the involved object's kind.

    Returns:
        The core/v1 Event dict.
    """
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{abs(hash((message, at))):x}", "namespace": namespace},
        "involvedObject": {"apiVersion": "kubeflow.org/v1", "kind": kind, "name": name, "namespace": namespace},
        "reason": "FailedCreatePod",
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "source": {"component": "pytorchjob-controller"},
    }
