"""The core/v1 pod-spec rules that a job's CRD does not check but the API server applies to every pod a controller
creates from it (`k8s.io/kubernetes/pkg/apis/core/validation`): tolerations, node selector values, environment
variable names.

A pod template that breaks one is admitted with its job, and then every pod create fails: a job that can never
start. The SDK (at decoration) and the backend (before create, and in `pytorchjob render --check`) call these
functions with `where`, their own name for the setting (`PyTorch.worker tolerations`, `environment`); each message
names it, the value, what is allowed and what to do. Only rules every supported Kubernetes version enforces are
refusals here (first rule: no false positives on what the API server accepts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pytorch_contract.k8s_metadata import label_problems
from pytorch_contract.k8s_names import is_label_value

__all__ = [
    "TOLERATION_OPERATORS",
    "TAINT_EFFECTS",
    "toleration_problems",
    "node_selector_problems",
    "env_name_problems",
]

TOLERATION_OPERATORS = ("Equal", "Exists")
"""`core.TolerationOperator` values (an empty operator means Equal)."""

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
"""`core.TaintEffect` values (an empty effect matches every effect)."""

# Every API server since RelaxedEnvironmentVariableValidation (on by default from 1.32) accepts any printable ASCII
# but '='; what none accepts is refused here. The stricter older rule is `k8s_names.ENV_VAR_NAME`.
_ENV_ANY_VERSION = re.compile(r"^[ -<>-~]+\Z")


def toleration_problems(tolerations: Sequence[Mapping[str, object]], where: str) -> list[str]:
    """Problems of a pod's tolerations (`validateTolerations`).

    Args:
        tolerations: the `tolerations` list, in the API's camelCase keys.
        where: the caller's name for the setting, e.g. `PyTorch.worker tolerations`.

    Returns:
        One message per broken rule; empty when the API server accepts them.
    """
    out = []
    for i, tol in enumerate(tolerations):
        at = f"{where}[{i}]"
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        value = tol.get("value") or ""
        effect = tol.get("effect") or ""
        if key:
            out += [p.replace(" label key", " toleration key") for p in label_problems({str(key): ""}, at)]
        elif operator != "Exists":
            out.append(
                f"{at}: a toleration without a key must use operator 'Exists' (it tolerates every taint); "
                f"got operator {operator!r}: give the taint's key, or use operator='Exists' with no value"
            )
        if operator == "Exists" and value:
            out.append(
                f"{at}: operator 'Exists' takes no value, got value {value!r}: drop the value (Exists matches any "
                "value of the key) or use operator='Equal'"
            )
        elif operator == "Equal" and not is_label_value(value):
            out.append(
                f"{at}: value {value!r} is not a valid taint value: at most 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        elif operator not in TOLERATION_OPERATORS:
            out.append(f"{at}: operator {operator!r} is not one of {list(TOLERATION_OPERATORS)}")
        if effect and effect not in TAINT_EFFECTS:
            out.append(f"{at}: effect {effect!r} is not one of {list(TAINT_EFFECTS)} (or empty: every effect)")
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            out.append(
                f"{at}: tolerationSeconds applies only to effect 'NoExecute', got effect {effect!r}: set "
                "effect='NoExecute' or drop tolerationSeconds"
            )
    return out


def node_selector_problems(node_selector: Mapping[str, object], where: str) -> list[str]:
    """Problems of a pod's `nodeSelector`: its keys and values follow the label rules.

    Args:
        node_selector: key -> value.
        where: the caller's name for the setting, e.g. `pod_template nodeSelector`.

    Returns:
        One message per bad key or value; empty when the API server accepts them.
    """
    return label_problems(node_selector, where)


def env_name_problems(names: Sequence[object], where: str) -> list[str]:
    """Names no Kubernetes version accepts as a container environment variable: empty, not printable ASCII, or
    holding '='.

    Args:
        names: the variable names, in order.
        where: the caller's name for the setting, e.g. `environment`.

    Returns:
        One message per bad name; empty when the API server accepts them all.
    """
    out = []
    for name in names:
        if not isinstance(name, str) or not _ENV_ANY_VERSION.match(name):
            out.append(
                f"{where}: {name!r} is not an environment variable name Kubernetes accepts: use printable ASCII "
                "without '=' (portable: letters, digits and '_', not starting with a digit)"
            )
    return out
