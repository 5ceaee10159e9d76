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


def test_vendored_schemas_match_their_recorded_sha256():
    """Every vendored CRD is the upstream file PROVENANCE.md names: same sha256, and no file without a row; every
    registered kind's CRD is among them."""
    import hashlib
    import re

    from backend_plugin.kinds import DECLARED
    from tests.kube_schema import SCHEMA_DIR

    rows = re.findall(
        r"^\| `([^`]+\.yaml)` \|.*\| `([0-9a-f]{64})` \|$", (SCHEMA_DIR / "PROVENANCE.md").read_text(), re.M
    )
    recorded = dict(rows)
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in SCHEMA_DIR.glob("*.yaml")}
    assert {d.crd.file for d in DECLARED} <= set(recorded)
    assert on_disk == recorded
