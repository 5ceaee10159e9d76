"""What the tests of every kind (`tests/targets/test_every_kind.py`, the connector's) need of the JobSet kind: how its
controllers name its pods, say a job succeeded and show a job running steadily, and its validator."""

from __future__ import annotations

from typing import Any

SUCCEEDED = "Completed"
"""The condition type of a job that succeeded."""

WARM_UP = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "warm-up"},
    "spec": {"replicatedJobs": [{"name": "master", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "pytorch", "image": "python:3.11"}], "restartPolicy": "Never"}}}}}]},
}  # fmt: skip
"""A minimal JobSet, validated once before any client call is timed (`tests.fakeapi.fixtures.warm_validators`)."""


def pod(job: dict, index: int, phase: str = "Running", role: str = "worker", attempt: int = 0, **state: Any) -> dict:
    """Pod `index` of `role` in `job`, as the JobSet and Job controllers name and label it.

    Args:
        job: the JobSet (name and namespace are read from it).
        index: the pod's completion index.
        phase: pod phase.
        role: its replicated job.
        attempt: the JobSet restart it belongs to.
        **state: the `pytorch` container's `state` (e.g. `terminated={...}`); running when none.

    Returns:
        The pod dict.
    """
    name = job["metadata"]["name"]
    labels = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/replicatedjob-name": role,
        "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/restart-attempt": str(attempt),
        "batch.kubernetes.io/job-name": f"{name}-{role}-0",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    return {
        "metadata": {
            "name": f"{name}-{role}-0-{index}-x{attempt}y{index}z",
            "namespace": job["metadata"].get("namespace") or "flytesnacks-development",
            "labels": labels,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "creationTimestamp": "2025-01-01T00:01:00Z",
        },
        "spec": {"containers": [{"name": "pytorch", "image": "img"}], "hostname": f"{name}-{role}-0-{index}"},
        "status": {
            "phase": phase,
            "startTime": "2025-01-01T00:01:05Z",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": "img",
                    "imageID": "",
                    "state": state or {"running": {}},
                }
            ],
        },
    }


def running(job: dict) -> dict:
    """The status of `job` running steadily, as the JobSet controller writes it: every child Job of every replicated
    job ready, no condition (its status needs no pods)."""
    entries = [
        {"name": r["name"], "ready": int(r.get("replicas", 1)), "succeeded": 0, "failed": 0,
         "active": int(r.get("replicas", 1)), "suspended": 0}
        for r in job["spec"]["replicatedJobs"]
    ]  # fmt: skip
    return {"conditions": [], "replicatedJobsStatus": entries, "restarts": 0}


def validate(job: dict) -> None:
    """The JobSet CRD, the typed models, the webhook's rules and the child Jobs."""
    from tests.targets.jobset.schema import assert_valid_jobset  # jsonschema and the models: the test extra only

    assert_valid_jobset(job)
