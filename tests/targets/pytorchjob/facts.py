"""What the tests of every kind (`tests/targets/test_every_kind.py`, the connector's) need of the PyTorchJob kind: how
its controller names its pods, says a job succeeded and shows a job running steadily, and its validator."""

from __future__ import annotations

from typing import Any

from tests.fakeapi.objects import condition, replica_pod
from tests.kube_schema import assert_valid_pytorchjob

SUCCEEDED = "Succeeded"
"""The condition type of a job that succeeded."""

WARM_UP = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "warm-up"},
    "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
        "containers": [{"name": "pytorch", "image": "python:3.11"}]}}}}},
}  # fmt: skip
"""A minimal PyTorchJob, validated once before any client call is timed (`tests.fakeapi.fixtures.warm_validators`)."""


def pod(job: dict, index: int, phase: str = "Running", **state: Any) -> dict:
    """Worker `index` of `job` as the training operator names and labels it."""
    return replica_pod(job, "Worker", index, phase=phase, container_state=state or {"running": {}})


def running(job: dict) -> dict:
    """The status of `job` running steadily: every replica active (its status needs no pods)."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    return {
        "conditions": [condition("Created"), condition("Running")],
        "replicaStatuses": {role: {"active": int(spec.get("replicas", 1))} for role, spec in specs.items()},
    }


def validate(job: dict) -> None:
    """The PyTorchJob CRD, the operator's webhook rules and core/v1 pod validation."""
    assert_valid_pytorchjob(job)
