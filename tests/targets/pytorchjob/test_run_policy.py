"""Every run-policy value a user sets arrives in the job, 0 included: decorator -> template -> TaskSpec -> job.

Each case decorates a function with `pytorch_task`, serializes it with flytekit's real serializer (what `pyflyte
register` sends), builds the job the connector would create and validates it against the CRD. The backend config
used has non-zero defaults for every field, so a value that was lost on the way would show up as the default.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable
from google.protobuf import json_format

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata
from flytekitplugins_pytorch import ConfigError, Elastic, PyTorch, RunPolicy, pytorch_task
from tests.helpers.jobs import build_pytorchjob
from tests.kube_schema import assert_valid_pytorchjob

SETTINGS = SerializationSettings(
    image_config=ImageConfig(default_image=Image(name="default", fqn="ghcr.io/example/train", tag="1.0"))
)
META = ExecutionMetadata(namespace="ns", job_name="j-1")
# Non-zero, non-None defaults everywhere: a task value that does not arrive is visible as the default.
DEFAULTS = BackendConfig.from_dict(
    dict(
        backoff_limit=5,
        active_deadline_seconds=86400,
        ttl_seconds_after_finished=604800,
        clean_pod_policy="All",
        suspend=False,
        gang_scheduling=False,
    )
)


def train(x: int) -> int:
    """The decorated function (its body never runs here)."""
    return x


def job_of(task: Any, config: BackendConfig = DEFAULTS) -> dict[str, Any]:
    """Serialize `task` as flytekit does for registration, build its job and check it against the CRD."""
    template = json_format.MessageToDict(get_serializable(OrderedDict(), SETTINGS, task).template.to_flyte_idl())
    job = build_pytorchjob(template, META, config)
    assert_valid_pytorchjob(job)
    return job


def run_policy(**kwargs: Any) -> dict[str, Any]:
    return job_of(pytorch_task(**kwargs)(train))["spec"]["runPolicy"]


# (id, pytorch_task keywords, expected runPolicy entries)
CASES = [
    ("backoff-limit-0", {"backoff_limit": 0}, {"backoffLimit": 0}),
    ("backoff-limit-3", {"backoff_limit": 3}, {"backoffLimit": 3}),
    ("backoff-limit-unset", {}, {"backoffLimit": 5}),
    ("ttl-0", {"ttl_seconds_after_finished": 0}, {"ttlSecondsAfterFinished": 0}),
    ("ttl-3600", {"ttl_seconds_after_finished": 3600}, {"ttlSecondsAfterFinished": 3600}),
    ("ttl-unset", {}, {"ttlSecondsAfterFinished": 604800}),
    ("deadline-1", {"active_deadline_seconds": 1}, {"activeDeadlineSeconds": 1}),
    ("deadline-7200", {"active_deadline_seconds": 7200}, {"activeDeadlineSeconds": 7200}),
    ("deadline-unset", {}, {"activeDeadlineSeconds": 86400}),
    ("deadline-from-timeout", {"timeout": 600}, {"activeDeadlineSeconds": 600}),
    ("clean-none", {"clean_pod_policy": "None"}, {"cleanPodPolicy": "None"}),
    ("clean-running", {"clean_pod_policy": "Running"}, {"cleanPodPolicy": "Running"}),
    ("clean-all", {"clean_pod_policy": "All"}, {"cleanPodPolicy": "All"}),
    ("suspend-true", {"suspend": True}, {"suspend": True}),
    ("queue", {"queue": "research"}, {"schedulingPolicy": {"queue": "research"}}),
    ("priority-class", {"priority_class": "high"}, {"schedulingPolicy": {"priorityClass": "high"}}),
    ("min-available-1", {"min_available": 1}, {"schedulingPolicy": {"minAvailable": 1}}),
    ("gang", {"gang_scheduling": True, "workers_count": 3}, {"schedulingPolicy": {"minAvailable": 4}}),
    (
        "all-zeros-together",
        {"backoff_limit": 0, "ttl_seconds_after_finished": 0, "clean_pod_policy": "None"},
        {"backoffLimit": 0, "ttlSecondsAfterFinished": 0, "cleanPodPolicy": "None"},
    ),
]


@pytest.mark.parametrize(("keywords", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_run_policy_value_arrives(keywords: dict[str, Any], expected: dict[str, Any]) -> None:
    got = run_policy(**keywords)
    assert {k: got.get(k) for k in expected} == expected, got


def test_suspend_false_is_the_backend_default_not_an_override() -> None:
    # A bool the SDK defaults to False cannot say "explicitly False": only True is written, the backend decides else.
    assert "suspend" not in run_policy(suspend=False)
    assert (
        job_of(pytorch_task(train), BackendConfig.from_dict(dict(suspend=True)))["spec"]["runPolicy"]["suspend"] is True
    )


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (RunPolicy(backoff_limit=0, ttl_seconds_after_finished=0), {"backoffLimit": 0, "ttlSecondsAfterFinished": 0}),
        (RunPolicy(backoff_limit=2, active_deadline_seconds=60), {"backoffLimit": 2, "activeDeadlineSeconds": 60}),
    ],
    ids=["zeros", "typical"],
)
@pytest.mark.parametrize("kind", ["PyTorch", "Elastic"])
def test_config_objects_carry_the_same_values(kind: str, policy: RunPolicy, expected: dict[str, Any]) -> None:
    from flytekit import task

    config = PyTorch(run_policy=policy) if kind == "PyTorch" else Elastic(nnodes="1:2", run_policy=policy)
    got = job_of(task(task_config=config)(train))["spec"]["runPolicy"]
    assert {k: got.get(k) for k in expected} == expected, got


def test_zero_deadline_is_rejected_at_decoration_and_in_a_template() -> None:
    with pytest.raises(ConfigError, match=r"pytorch_task.active_deadline_seconds=0 is below 1"):
        pytorch_task(active_deadline_seconds=0)
    template = json_format.MessageToDict(
        get_serializable(OrderedDict(), SETTINGS, pytorch_task(train)).template.to_flyte_idl()
    )
    template["custom"]["runPolicy"] = {"activeDeadlineSeconds": 0}
    with pytest.raises(TemplateError, match=r"custom.runPolicy.activeDeadlineSeconds=0: must be >= 1"):
        build_pytorchjob(template, META)
