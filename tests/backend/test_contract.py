"""`pytorch_contract`: the Kubernetes name grammars both the SDK and the backend check with."""

from __future__ import annotations

import re

import pytest

from pytorch_contract.k8s_names import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    EXTENDED_RESOURCE_NAME,
    LABEL_VALUE,
    QUALIFIED_NAME,
    is_label_value,
)

CASES = [
    (DNS1123_LABEL, "flyte-dev", True),
    (DNS1123_LABEL, "a" * 63, True),
    (DNS1123_LABEL, "a" * 64, False),
    (DNS1123_LABEL, "-a", False),
    (DNS1035_LABEL, "f3a8c-n0", True),
    (DNS1035_LABEL, "3a8c", False),
    (DNS1123_SUBDOMAIN, "high.priority-1", True),
    (DNS1123_SUBDOMAIN, "a" * 253, True),
    (DNS1123_SUBDOMAIN, "a" * 254, False),
    (DNS1123_SUBDOMAIN, "a..b", False),
    (DNS1123_SUBDOMAIN, "A", False),
    (LABEL_VALUE, "nvidia-tesla-a100", True),
    (LABEL_VALUE, "A100", True),
    (LABEL_VALUE, "", False),
    (LABEL_VALUE, "a" * 64, False),
    (LABEL_VALUE, "flyte\n", False),
    (LABEL_VALUE, "\u0661", False),  # an Arabic-Indic digit: Kubernetes takes ASCII only
    (QUALIFIED_NAME, "cpu", True),
    (QUALIFIED_NAME, "app.kubernetes.io/managed-by", True),
    (QUALIFIED_NAME, "nvidia.com/" + "a" * 64, False),
    (EXTENDED_RESOURCE_NAME, "nvidia.com/gpu", True),
    (EXTENDED_RESOURCE_NAME, "nvidia.com/mig-1g.5gb", True),
    (EXTENDED_RESOURCE_NAME, "gpu", False),
    (EXTENDED_RESOURCE_NAME, "Nvidia.com/gpu", False),
]


@pytest.mark.parametrize(("pattern", "value", "ok"), CASES, ids=[f"{v[:20]!r}-{ok}" for _, v, ok in CASES])
def test_name_grammars(pattern: re.Pattern, value: str, ok: bool) -> None:
    assert bool(pattern.match(value)) is ok
    assert bool(pattern.fullmatch(value)) is ok  # anchored: match and fullmatch agree


def test_label_values_may_be_empty_on_objects_but_not_as_names() -> None:
    assert is_label_value("") and not is_label_value("", allow_empty=False) and not is_label_value(3)


def test_replica_bound_and_the_job_name_budget_agree() -> None:
    """The SDK bounds replicas and the backend names jobs with the contract's one budget: the longest pod fits."""
    from backend_plugin.execution import job_name
    from pytorch_contract.k8s_names import JOB_NAME_MAX_LENGTH, MAX_REPLICAS_PER_ROLE, REPLICA_INDEX_DIGITS

    assert len(job_name("p" * 80, "d", "e" * 80, "n" * 80, 3)) == JOB_NAME_MAX_LENGTH
    longest_pod = "j" * JOB_NAME_MAX_LENGTH + f"-worker-{MAX_REPLICAS_PER_ROLE - 1}"
    assert len(longest_pod) == 63 and DNS1123_LABEL.match(longest_pod)
    assert len(str(MAX_REPLICAS_PER_ROLE)) == REPLICA_INDEX_DIGITS + 1


@pytest.mark.parametrize(
    ("name", "accepted"),
    [("MY_VAR", True), ("my.env-name", True), ("-x", True), ("A=B", False), ("1X", False), ("CL\u00c9", False),
     ("..x", False), (".", False), ("", False), ("A\nB", False)],
)  # fmt: skip
def test_env_var_names(name: str, accepted: bool) -> None:
    from pytorch_contract.k8s_names import env_var_name_problem

    assert (env_var_name_problem(name) is None) is accepted


@pytest.mark.parametrize(
    ("value", "problem"),
    [("1", None), ("auto", None), ("gpu", None), (2, None), ("0", "not positive"), (0, "not positive"),
     ("GPU", "not a process count"), ("\uff14", "not a process count"), (True, "not a process count"),
     ("2147483648", "above 2147483647"), (1.0, "not a process count")],
)  # fmt: skip
def test_one_nproc_per_node_rule_and_message_for_both_sides(value: object, problem: object) -> None:
    from flytekitplugins_pytorch.config import ConfigError, check_nproc_per_node
    from pytorch_contract.template_keys import NPROC_PER_NODE_ALLOWED, nproc_per_node_message, nproc_per_node_problem

    assert nproc_per_node_problem(value) == problem
    message = nproc_per_node_message("f", value)
    assert message == (None if problem is None else f"f={value!r} is {problem}; {NPROC_PER_NODE_ALLOWED}")
    if isinstance(value, str) and value.isdigit():
        return  # the SDK's field takes an int, not the template's digits
    if value == "GPU":  # the SDK lower-cases words; the template carries them as the SDK wrote them
        assert check_nproc_per_node("f", value) == "gpu"
        return
    if problem is None:
        assert check_nproc_per_node("f", value) == value
    else:
        with pytest.raises(ConfigError) as caught:
            check_nproc_per_node("f", value)
        assert str(caught.value) == message
