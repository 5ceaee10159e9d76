"""The validator itself must be able to fail: known-bad jobs are rejected, a minimal good one passes."""

import copy

import pytest

from tests.kube_schema import assert_valid_pytorchjob

GOOD = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "job-1", "namespace": "default"},
    "spec": {
        "pytorchReplicaSpecs": {
            "Master": {
                "replicas": 1,
                "restartPolicy": "Never",
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "python:3.11"}]}},
            }
        }
    },
}


def _mutate(path, value):
    job = copy.deepcopy(GOOD)
    node = job
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return job


MASTER = ("spec", "pytorchReplicaSpecs", "Master")


def test_good_job_passes():
    assert_valid_pytorchjob(GOOD)


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(_mutate(("metadata", "name"), "Job_1"), id="name-not-dns1035"),
        pytest.param(_mutate((*MASTER, "replicas"), 2), id="two-masters"),
        pytest.param(_mutate((*MASTER, "restartPolicy"), "Sometimes"), id="bad-restart-policy-enum"),
        pytest.param(
            _mutate((*MASTER, "template", "spec", "containers"), [{"name": "main", "image": "x"}]), id="no-pytorch"
        ),
        pytest.param(_mutate((*MASTER, "template", "spec", "containers"), [{"name": "pytorch"}]), id="no-image"),
        pytest.param(
            _mutate((*MASTER, "template", "spec", "containers"), [{"name": "pytorch", "image": "x", "bogus": 1}]),
            id="unknown-container-field",
        ),
        pytest.param(_mutate(("kind",), "TFJob"), id="wrong-kind"),
    ],
)
def test_bad_job_rejected(job):
    with pytest.raises(AssertionError):
        assert_valid_pytorchjob(job)
