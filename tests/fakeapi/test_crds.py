"""The test API server serves each job kind's CustomResourceDefinition as kube-apiserver does (the vendored one, or
the one a test installs: an older release), answers 403 where RBAC forbids the read and 404 for a CRD it does not
have, and decodes every create by the installed CRD's schema: Strict refuses what that CRD lacks, a CRD that does not
serve the version answers 404. Driven through the real kubernetes client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakeapi.fixtures import running_fake_api

DATA = Path(__file__).resolve().parents[1] / "data"
NS = "ml"


@pytest.fixture
def api():
    with running_fake_api(validate=False) as running:
        yield running


def read(api_client, name: str) -> dict:
    answer = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(name, _preload_content=False)
    return json.loads(answer.data)


def post(api_client, job: dict, plural: str):
    group, version = job["apiVersion"].split("/")
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        group, version, NS, plural, job, field_validation="Strict", _preload_content=False
    )


def trainjob() -> dict:
    job = yaml.safe_load((DATA / "trainjobs" / "cpu_only.yaml").read_text())
    job["metadata"]["namespace"] = NS
    return job


def test_the_vendored_crd_is_served_until_another_is_installed(api) -> None:
    server, api_client = api
    crd = read(api_client, "trainjobs.trainer.kubeflow.org")
    assert crd["kind"] == "CustomResourceDefinition" and crd["metadata"]["resourceVersion"]
    assert (
        "runtimePatches" in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    )
    older = yaml.safe_load((DATA / "crds" / "trainjobs-v2.1.0.yaml").read_text())
    stored = server.install_crd(older)
    assert read(api_client, "trainjobs.trainer.kubeflow.org") == stored and stored["metadata"]["generation"] == 1
    again = server.install_crd(older)  # an upgrade (or a re-apply) is a new resourceVersion and generation
    assert again["metadata"]["generation"] == 2
    assert again["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]
    assert [(r.verb, r.resource, r.namespace, r.status) for r in server.calls()] == [
        ("get", "customresourcedefinitions", "", 200),
        ("get", "customresourcedefinitions", "", 200),
    ]


def test_creates_are_decoded_by_the_installed_crd(api) -> None:
    server, api_client = api
    assert post(api_client, trainjob(), "trainjobs").status == 201
    server.install_crd(yaml.safe_load((DATA / "crds" / "trainjobs-v2.1.0.yaml").read_text()))
    job = trainjob()
    job["metadata"]["name"] += "-2"
    with pytest.raises(ApiException) as raised:
        post(api_client, job, "trainjobs")
    assert raised.value.status == 400
    assert 'strict decoding error: unknown field "spec.runtimePatches"' in json.loads(raised.value.body)["message"]


def test_a_crd_that_does_not_serve_the_version_answers_creates_404(api) -> None:
    server, api_client = api
    crd = yaml.safe_load((DATA / "crds" / "trainjobs-v2.2.1.yaml").read_text())
    crd["spec"]["versions"][0]["name"] = "v1beta1"
    server.install_crd(crd)
    with pytest.raises(ApiException) as raised:
        post(api_client, trainjob(), "trainjobs")
    assert raised.value.status == 404


def test_without_rbac_the_read_is_forbidden_and_another_crd_is_not_found(api) -> None:
    server, api_client = api
    with pytest.raises(ApiException) as missing:
        read(api_client, "widgets.example.com")
    assert missing.value.status == 404
    server.forbid("get", "customresourcedefinitions")
    with pytest.raises(ApiException) as denied:
        read(api_client, "pytorchjobs.kubeflow.org")
    assert denied.value.status == 403
    message = json.loads(denied.value.body)["message"]
    assert message.startswith('customresourcedefinitions.apiextensions.k8s.io "pytorchjobs.kubeflow.org" is forbidden')
    assert message.endswith('in API group "apiextensions.k8s.io" at the cluster scope')
