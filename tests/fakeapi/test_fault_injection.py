"""The fake API server's fault rules for reliability tests: a hung server, raw bodies with any status, 413."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.fakeapi.server import GROUP, PLURAL, VERSION

NS = "ns"


@pytest.fixture
def api(fake_api):
    server, api_client = fake_api
    server.on_create.clear()
    server.put_job(
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PyTorchJob", "metadata": {"name": "a", "namespace": NS}}
    )
    return server, client.CustomObjectsApi(api_client)


def test_hang_holds_the_request_until_released_and_then_serves_it(api):
    server, custom = api
    server.hang(verb="get", resource=PLURAL)
    answers: list[dict] = []
    reader = threading.Thread(
        target=lambda: answers.append(custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a"))
    )
    reader.start()
    time.sleep(0.3)
    assert reader.is_alive() and answers == [] and len(server.calls(verb="get")) == 1
    server.release()
    reader.join(timeout=10)
    assert answers and answers[0]["metadata"]["name"] == "a"


def test_a_hung_request_times_out_on_the_client_side(api):
    server, custom = api
    server.hang(verb="get", resource=PLURAL)
    start = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed? ?out"):
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", _request_timeout=(1.0, 0.3))
    assert time.monotonic() - start < 5


def test_answer_raw_sends_any_status_and_body_as_it_is(api):
    server, custom = api
    page = b"<html>502 Bad Gateway<pre>Authorization: Bearer abc.def</pre></html>"
    server.answer_raw(502, page, verb="get", content_type="text/html")
    with pytest.raises(ApiException) as caught:
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")
    assert (caught.value.status, caught.value.body) == (502, page.decode())
    server.answer_raw(200, b'["not", "a", "job"]', verb="get")
    response = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", _preload_content=False)
    assert (response.status, json.loads(response.data)) == (200, ["not", "a", "job"])
    assert custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")["metadata"]["name"] == "a"  # used up


def test_413_is_the_api_servers_request_entity_too_large(api):
    server, custom = api
    server.fail(413, verb="create")
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, {"metadata": {"name": "b"}})
    body = json.loads(caught.value.body)
    assert (caught.value.status, body["reason"], body["message"]) == (
        413,
        "RequestEntityTooLarge",
        "Request entity too large: limit is 3145728",
    )
