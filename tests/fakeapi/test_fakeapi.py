"""The fake API server answers the real kubernetes client like the API server does."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.fakeapi.objects import replica_pod
from tests.fakeapi.server import GROUP, PLURAL, VERSION, _Selector

NS = "ns"


def minimal_job(name: str) -> dict:
    """A small job (the server does not validate without the create hook)."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": {}}


@pytest.fixture
def api(fake_api):
    server, api_client = fake_api
    server.on_create.clear()  # these tests store minimal jobs
    return server, client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)


def error_of(fn, *args, **kwargs) -> ApiException:
    try:
        fn(*args, **kwargs)
    except ApiException as e:
        return e
    raise AssertionError("no ApiException raised")


def test_create_fills_metadata_and_conflicts_on_same_name(api):
    server, custom, _ = api
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, minimal_job("a"))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert created["metadata"]["creationTimestamp"].endswith("Z")
    err = error_of(custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, minimal_job("a"))
    assert err.status == 409
    assert json.loads(err.body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pytorchjobs.kubeflow.org "a" already exists', "reason": "AlreadyExists",
        "details": {"name": "a", "group": "kubeflow.org", "kind": "pytorchjobs"}, "code": 409,
    }  # fmt: skip
    assert len(server.calls(verb="create", name="a")) == 2


def test_get_and_delete_not_found_bodies(api):
    _, custom, _ = api
    err = error_of(custom.get_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "nope")
    body = json.loads(err.body)
    assert (err.status, body["reason"], body["message"]) == (
        404,
        "NotFound",
        'pytorchjobs.kubeflow.org "nope" not found',
    )
    err = error_of(custom.delete_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "nope")
    assert err.status == 404


@pytest.mark.parametrize(
    ("policy", "pods_left", "kind"),
    [("Foreground", 0, "PyTorchJob"), ("Background", 0, "Status"), ("Orphan", 1, "Status")],
    ids=["foreground-returns-object", "background-returns-status", "orphan-keeps-pods"],
)
def test_delete_honours_propagation_policy(api, policy, pods_left, kind):
    server, custom, _ = api
    job = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, minimal_job("d"))
    server.put_pod(replica_pod(job, "Master", 0))
    out = custom.delete_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "d", body=client.V1DeleteOptions(propagation_policy=policy)
    )
    assert out["kind"] == kind
    assert server.get_job(NS, "d") is None
    assert len(server.pods(NS)) == pods_left


def test_pod_list_filters_by_label_selector(api):
    server, custom, core = api
    for name in ("p", "q"):
        job = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, minimal_job(name))
        server.put_pod(replica_pod(job, "Master", 0))
        server.put_pod(replica_pod(job, "Worker", 0))
    pods = core.list_namespaced_pod(NS, label_selector="training.kubeflow.org/job-name=p").items
    assert sorted(p.metadata.name for p in pods) == ["p-master-0", "p-worker-0"]


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1,b=2", {"a": "1"}, False),
        ("a!=1", {"a": "2"}, True),
        ("a in (1, 2)", {"a": "2"}, True),
        ("a notin (1,2),b", {"a": "3", "b": ""}, True),
        ("!a", {"a": "1"}, False),
    ],
    ids=["eq", "eq-missing-second", "neq", "in", "notin-and-exists", "not-exists"],
)
def test_label_selector(selector, labels, expected):
    assert _Selector.parse(selector).matches(labels) is expected


@pytest.mark.parametrize(
    ("status", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")], ids=["500", "503"]
)
def test_injected_failures_then_recovery(api, status, reason):
    server, custom, _ = api
    server.fail(status, times=2, verb="get")
    for _ in range(2):
        err = error_of(custom.get_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "x")
        assert (err.status, json.loads(err.body)["reason"]) == (status, reason)
    assert error_of(custom.get_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "x").status == 404


def test_forbidden_carries_rbac_message(api):
    server, custom, _ = api
    server.forbid("create", PLURAL)
    err = error_of(custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, minimal_job("f"))
    assert err.status == 403
    assert json.loads(err.body)["message"] == (
        'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:flyte:pytorch-connector" cannot create '
        'resource "pytorchjobs" in API group "kubeflow.org" in the namespace "ns"'
    )
    assert server.get_job(NS, "f") is None


def test_delayed_create_still_happens_after_client_timeout(api):
    server, custom, _ = api
    server.delay(1.0, verb="create")
    with pytest.raises(Exception, match="(?i)timed? ?out"):
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, minimal_job("slow"), _request_timeout=0.2)
    assert server.get_job(NS, "slow") is not None


def test_create_hook_rejects_invalid_job_with_422(fake_api):
    server, api_client = fake_api
    custom = client.CustomObjectsApi(api_client)
    err = error_of(custom.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, minimal_job("bad"))
    assert (err.status, json.loads(err.body)["reason"]) == (422, "Invalid")
    assert server.get_job(NS, "bad") is None
    server.hook_errors.clear()  # expected here; the fixture fails tests that leave hook errors behind
