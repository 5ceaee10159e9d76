"""Regressions found by the end-to-end harness, pinned at unit level (fast; not marked e2e).

1. A rank that raised left its pod *succeeded*: pyflyte-execute writes error.pb and exits 0 unless
   FLYTE_FAIL_ON_ERROR is true, so the operator marked the job Succeeded and `get` said SUCCEEDED, while the
   replicas' error.pb files overwrote each other (the last one was a lost-peer error, not the root cause).
2. The failed pod's status carried no error text: pyflyte-execute never writes /dev/termination-log, so only
   `terminationMessagePolicy: FallbackToLogsOnError` puts the rank's traceback tail into the pod status.
"""

from __future__ import annotations

import pytest

from backend_plugin.config import BackendConfig
from tests.helpers.jobs import META, build_pytorchjob, load
from tests.kube_schema import assert_valid_pytorchjob

TEMPLATES = ["official_container", "official_pod_template", "official_elastic", "hand_pod_template"]


def _containers(job: dict) -> list[tuple[str, dict]]:
    return [
        (rtype, c)
        for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items()
        for c in spec["template"]["spec"]["containers"]
        if c["name"] == "pytorch"
    ]


@pytest.mark.parametrize("template", TEMPLATES, ids=TEMPLATES)
def test_every_replica_fails_its_pod_when_the_task_raises(template: str) -> None:
    job = build_pytorchjob(load(template), META, BackendConfig())
    assert_valid_pytorchjob(job)
    for rtype, container in _containers(job):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env.get("FLYTE_FAIL_ON_ERROR") == "true", rtype
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError", rtype


def test_a_template_env_or_policy_still_wins() -> None:
    template = load("hand_pod_template")
    pod = template["k8sPod"]["podSpec"]
    primary = template["config"].get("primary_container_name", "pytorch")
    main = next(c for c in pod["containers"] if c["name"] == primary)
    main["terminationMessagePolicy"] = "File"
    main.setdefault("env", []).append({"name": "FLYTE_FAIL_ON_ERROR", "value": "false"})
    job = build_pytorchjob(template, META, BackendConfig())
    for _, container in _containers(job):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["FLYTE_FAIL_ON_ERROR"] == "false"
        assert container["terminationMessagePolicy"] == "File"
