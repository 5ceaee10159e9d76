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
