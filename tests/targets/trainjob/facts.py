"""What the tests of every kind (`tests/targets/test_every_kind.py`, the connector's) need of the TrainJob kind: how its
JobSet names its pods, how the Trainer says a job succeeded and shows a job running steadily, and its validator."""

from __future__ import annotations

from typing import Any

from tests.fakeapi.objects import node_pod
from tests.kube_schema import assert_valid_trainjob

SUCCEEDED = "Complete"
"""The condition type of a job that succeeded."""

WARM_UP = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "warm-up"},
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "python:3.11"}},
}
"""A minimal TrainJob, validated once before any client call is timed (`tests.fakeapi.fixtures.warm_validators`)."""


def pod(job: dict, index: int, phase: str = "Running", **state: Any) -> dict:
    """Node `index` of `job` as the JobSet names and labels it."""
    return node_pod(job, index, phase, **state)


def running(job: dict) -> dict:
    """The status of `job` running steadily: its node Job active and ready, every node up (its status needs no pods).
    The Trainer counts child Jobs in `jobsStatus`, not nodes: the torch runtime's `node` is one Job of numNodes pods."""
    return {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}


def validate(job: dict) -> None:
    """The TrainJob CRD, the Trainer webhook's rules and the node pod the default runtime renders."""
    assert_valid_trainjob(job)
