"""The shared admission rules in `pytorch_contract` (what the SDK calls at decoration and the backend before create):
one case per rule, each refused value next to the nearest value Kubernetes accepts, and every message starting
with the caller's own name for the setting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import pytest

from pytorch_contract.job_limits import (
    REQUEST_MAX_BYTES,
    STORED_MAX_BYTES,
    WRITER_ENV_ENTRIES,
    env_count_problem,
    job_size_problem,
)
from pytorch_contract.k8s_metadata import ANNOTATIONS_TOTAL_MAX_BYTES, annotation_problems, label_problems
from pytorch_contract.pod_rules import env_name_problems, node_selector_problems, toleration_problems

WHERE = "PyTorch.worker.pod_template"

# id -> (rule, value, expected text in the message; None when Kubernetes accepts the value)
CASES: dict[str, tuple[Callable[[Any, str], list[str]], Any, Optional[str]]] = {
    "label-value-63-ok": (label_problems, {"team": "x" * 63}, None),
    "label-value-64": (label_problems, {"team": "x" * 64}, "is not a valid label value"),
    "label-value-empty-ok": (label_problems, {"team": ""}, None),
    "label-value-space": (label_problems, {"team": "ml team"}, "is not a valid label value"),
    "label-value-leading-dash": (label_problems, {"team": "-ml"}, "is not a valid label value"),
    "label-key-prefixed-ok": (label_problems, {"example.com/team": "ml"}, None),
    "label-key-bad": (label_problems, {"bad key!": "ml"}, "is not a valid label key"),
    "label-key-name-64": (label_problems, {"a" * 64: "ml"}, "is not a valid label key"),
    "label-key-upper-prefix": (label_problems, {"Example.com/team": "ml"}, "is not a valid label key"),
    "annotation-key-upper-ok": (annotation_problems, {"Example.com/Owner": "x"}, None),
    "annotation-key-bad": (annotation_problems, {"a b": "x"}, "is not a valid annotation key"),
    "annotations-at-limit-ok": (annotation_problems, {"k": "v" * (ANNOTATIONS_TOTAL_MAX_BYTES - 1)}, None),
    "annotations-over-limit": (
        annotation_problems,
        {"k": "v" * ANNOTATIONS_TOTAL_MAX_BYTES},
        "mount a ConfigMap or Secret",
    ),
    "annotations-counted-in-utf8-bytes": (
        annotation_problems,
        {"k": "é" * (ANNOTATIONS_TOTAL_MAX_BYTES // 2)},
        "over Kubernetes' limit",
    ),
    "toleration-equal-ok": (toleration_problems, [{"key": "gpu", "operator": "Equal", "value": "a100"}], None),
    "toleration-exists-no-key-ok": (toleration_problems, [{"operator": "Exists"}], None),
    "toleration-exists-with-value": (
        toleration_problems,
        [{"key": "gpu", "operator": "Exists", "value": "yes"}],
        "operator 'Exists' takes no value",
    ),
    "toleration-no-key-equal": (toleration_problems, [{"value": "x"}], "must use operator 'Exists'"),
    "toleration-bad-operator": (toleration_problems, [{"key": "k", "operator": "In"}], "is not one of"),
    "toleration-bad-effect": (toleration_problems, [{"key": "k", "effect": "NoRun"}], "effect 'NoRun'"),
    "toleration-seconds-noexecute-ok": (
        toleration_problems,
        [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}],
        None,
    ),
    "toleration-seconds-noschedule": (
        toleration_problems,
        [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}],
        "tolerationSeconds applies only",
    ),
    "toleration-value-space": (toleration_problems, [{"key": "k", "value": "a b"}], "not a valid taint value"),
    "toleration-key-bad": (toleration_problems, [{"key": "a b", "operator": "Exists"}], "not a valid toleration key"),
    "node-selector-ok": (node_selector_problems, {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, None),
    "node-selector-space": (node_selector_problems, {"pool": "gpu pool"}, "is not a valid label value"),
    "env-names-ok": (env_name_problems, ["LOG_LEVEL", "my.var", "1STARTS_WITH_DIGIT"], None),
    "env-name-equals": (env_name_problems, ["A=B"], "is not an environment variable name"),
    "env-name-empty": (env_name_problems, [""], "is not an environment variable name"),
    "env-name-non-ascii": (env_name_problems, ["ÄPFEL"], "is not an environment variable name"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rule(case: str) -> None:
    rule, value, expected = CASES[case]
    messages = rule(value, WHERE)
    if expected is None:
        assert messages == []
        return
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"{WHERE}") and expected in messages[0], messages[0]


LIMIT = 128 - WRITER_ENV_ENTRIES


@pytest.mark.parametrize(
    ("entries", "target", "refused"),
    [
        pytest.param(LIMIT, "trainjob", False, id="trainjob-at-limit"),
        pytest.param(LIMIT + 1, "trainjob", True, id="trainjob-over-limit"),
        pytest.param(1000, "pytorchjob", False, id="pytorchjob-no-limit"),
    ],
)
def test_env_count(entries: int, target: str, refused: bool) -> None:
    problem = env_count_problem(entries, target, "environment")
    assert (problem is not None) == refused
    if problem:
        assert problem.startswith("environment: ") and f"keep at most {LIMIT}" in problem


@pytest.mark.parametrize(
    ("size", "target", "refused"),
    [
        pytest.param(800_000, "trainjob", False, id="trainjob-800k-once"),
        pytest.param(800_000, "pytorchjob", True, id="pytorchjob-800k-twice"),
        pytest.param(STORED_MAX_BYTES // 2, "pytorchjob", False, id="pytorchjob-half-limit-twice"),
        pytest.param(REQUEST_MAX_BYTES, "trainjob", True, id="trainjob-3MiB"),
    ],
)
def test_job_size(size: int, target: str, refused: bool) -> None:
    problem = job_size_problem(size, target, "environment['CONFIG_JSON']")
    assert (problem is not None) == refused
    if problem:
        assert problem.startswith("environment['CONFIG_JSON']: ") and "ConfigMap or Secret" in problem
