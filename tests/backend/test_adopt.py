"""Adopting our own job after a lost create response: `is_our_job` against stored objects as the API server returns
them (server metadata, the operator's defaults, a queue manager's webhook, pruning), and against another job under
the same name (a real Conflict)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import yaml

from backend_plugin.admission import SPEC_DIGEST_ANNOTATION, is_our_job, spec_digest, stamp
from backend_plugin.admission.crds import schema_for
from backend_plugin.admission.structural import prune
from tests.helpers.jobs import JOBS

PYTORCHJOB = yaml.safe_load((JOBS / "sdk_role_pod_templates.yaml").read_text())
TRAINJOB = yaml.safe_load((JOBS.parent / "trainjobs" / "pod_template.yaml").read_text())


def stored(sent: dict) -> dict:
    """`sent` as a GET returns it: pruned by the CRD, server metadata added, then defaulted by the kind's controller
    webhook (the training operator adds the `pytorchjob-port` to every `pytorch` container), a queue manager's
    webhook suspends it, and the controller has written a status."""
    job = prune(copy.deepcopy(sent), schema_for(sent["apiVersion"], sent["kind"]))
    job["metadata"].update(
        uid="5f1c2a9e-0000-4000-8000-000000000001",
        resourceVersion="123456",
        generation=1,
        creationTimestamp="2026-01-01T00:00:00Z",
        managedFields=[{"manager": "flytekitplugins-pytorch", "operation": "Update", "fieldsType": "FieldsV1"}],
    )
    job["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "default"
    if job["kind"] == "PyTorchJob":
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            for container in replica["template"]["spec"]["containers"]:
                if container["name"] == "pytorch":
                    container.setdefault("ports", []).append(
                        {"containerPort": 23456, "name": "pytorchjob-port", "protocol": "TCP"}
                    )
        job["spec"]["runPolicy"]["suspend"] = True
        job["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
    else:
        job["spec"]["suspend"] = True
        job["status"] = {"conditions": []}
    return job


def other_image(job: dict) -> None:
    if job["kind"] == "PyTorchJob":
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    else:
        job["spec"]["trainer"]["image"] = "other:1"


def other_label(job: dict) -> None:
    job["metadata"]["labels"]["execution-id"] = "another-execution"


@pytest.mark.parametrize("sent", [PYTORCHJOB, TRAINJOB], ids=["pytorchjob", "trainjob"])
@pytest.mark.parametrize("stamped", [True, False], ids=["digest", "no-digest"])
def test_our_stored_job_is_adopted(sent: dict, stamped: bool) -> None:
    job = stamp(sent) if stamped else sent
    assert is_our_job(stored(job), job)
    assert is_our_job(stored(job), sent)  # the digest ignores its own annotation


@pytest.mark.parametrize("sent", [PYTORCHJOB, TRAINJOB], ids=["pytorchjob", "trainjob"])
@pytest.mark.parametrize("stamped", [True, False], ids=["digest", "no-digest"])
@pytest.mark.parametrize("change", [other_image, other_label], ids=["other-image", "other-execution-label"])
def test_another_job_under_our_name_is_a_conflict(sent: dict, stamped: bool, change: Callable[[dict], None]) -> None:
    theirs = copy.deepcopy(sent)
    change(theirs)
    theirs = stamp(theirs) if stamped else theirs
    assert not is_our_job(stored(theirs), stamp(sent) if stamped else sent)


def test_a_job_the_server_pruned_is_still_ours() -> None:
    """Without the digest: a field the CRD does not declare was dropped by the server; the comparison prunes what
    we sent the same way, so the stored job is still ours."""
    sent = copy.deepcopy(PYTORCHJOB)
    sent["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["evictionResponders"] = [{"name": "x"}]
    back = stored(sent)
    assert "evictionResponders" not in back["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert is_our_job(back, sent)


def test_the_digest_is_stable_and_ignores_key_order() -> None:
    reordered = yaml.safe_load(yaml.safe_dump(PYTORCHJOB, sort_keys=True))
    assert spec_digest(reordered) == spec_digest(PYTORCHJOB)
    assert stamp(PYTORCHJOB)["metadata"]["annotations"][SPEC_DIGEST_ANNOTATION] == spec_digest(PYTORCHJOB)
    assert SPEC_DIGEST_ANNOTATION not in PYTORCHJOB["metadata"]["annotations"]  # stamp copies


def test_a_kind_mismatch_is_never_ours() -> None:
    assert not is_our_job(stored(TRAINJOB), PYTORCHJOB)


@pytest.mark.parametrize("sent", [PYTORCHJOB, TRAINJOB], ids=["pytorchjob", "trainjob"])
def test_a_job_stored_without_a_stamp_is_ours_when_we_send_one(sent: dict) -> None:
    """A job created before the stamp existed, met by a connector that stamps: our stamp is not held against it."""
    assert is_our_job(stored(sent), stamp(sent))
    theirs = copy.deepcopy(sent)
    other_image(theirs)
    assert not is_our_job(stored(theirs), stamp(sent))
