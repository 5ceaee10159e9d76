"""The core/v1 pod-spec rules that a job's CRD does not check but the API server applies to every pod a controller
creates from it (`k8s.io/kubernetes/pkg/apis/core/validation`): tolerations (`ValidateTolerations`), node selectors
(`ValidateLabels`), environment variable names (`ValidateEnv`: `IsRelaxedEnvVarName` / `IsEnvVarName`), container
names (`validateContainers`, `validateInitContainers`: `IsDNS1123Label`, unique in the pod).

A pod template that breaks one is admitted with its job, and then every pod create fails: a job that can never
start. The SDK (at decoration) and the backend (before create, and in `pytorchjob render --check`) call these
functions with `where`, their own name for the setting (`PyTorch.worker tolerations`, `environment`); each message
names it, the value, what is allowed and what to do.

Two kinds of verdict (first rule: no false positives on what the API server accepts):

- `*_problems`: what no supported Kubernetes version accepts, with its default feature gates. Callers refuse these.
- `*_warnings`: what some versions or feature-gate settings accept and others refuse (an environment variable name
  that clusters before 1.32 refuse; a toleration operator behind an alpha gate). Callers warn and name the version
  or gate; only a caller that knows the cluster (the connector can read its version) may refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytorch_contract.k8s_metadata import label_problems
from pytorch_contract.k8s_names import (
    RELAXED_ENV_NAMES_SINCE,
    container_name_problem,
    env_var_name_problem,
    is_label_value,
    relaxed_env_var_name_problem,
)

__all__ = [
    "TOLERATION_OPERATORS",
    "GATED_TOLERATION_OPERATORS",
    "TAINT_EFFECTS",
    "toleration_problems",
    "toleration_warnings",
    "node_selector_problems",
    "env_name_problems",
    "env_name_warnings",
    "container_name_problems",
]

TOLERATION_OPERATORS = ("Equal", "Exists")
"""`core.TolerationOperator` values every API server accepts (an empty operator means Equal)."""

GATED_TOLERATION_OPERATORS = ("Lt", "Gt")
"""Operators the API server accepts only with the `TaintTolerationComparisonOperators` feature gate (alpha from 1.35,
off by default): a warning here, not a refusal."""

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
"""`core.TaintEffect` values (an empty effect matches every effect)."""


def toleration_problems(tolerations: Sequence[Mapping[str, object]], where: str) -> list[str]:
    """Problems of a pod's tolerations, as `ValidateTolerations` finds them with the default feature gates.

    A key is a qualified name (`ValidateLabelName`); a toleration without a key needs operator `Exists`;
    `tolerationSeconds` needs effect `NoExecute`; operator `Equal` (or empty) takes a label value, `Exists` takes no
    value; the effect is empty or one of `TAINT_EFFECTS`. The gated operators `Lt` and `Gt` are
    `toleration_warnings`' business, not refused here.

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
        operator = tol.get("operator") or ""
        value = tol.get("value") or ""
        effect = tol.get("effect") or ""
        if key:
            out += [p.replace(" label key", " toleration key") for p in label_problems({str(key): ""}, at)]
        elif operator != "Exists":
            out.append(
                f"{at}: a toleration without a key must use operator 'Exists' (it tolerates every taint); "
                f"got operator {operator or 'Equal'!r}: give the taint's key, or use operator='Exists' with no value"
            )
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            out.append(
                f"{at}: tolerationSeconds applies only to effect 'NoExecute', got effect {effect!r}: set "
                "effect='NoExecute' or drop tolerationSeconds"
            )
        if operator in ("", "Equal"):
            if not is_label_value(value):
                out.append(
                    f"{at}: value {value!r} is not a valid taint value: at most 63 letters, digits, '-', '_' or '.', "
                    "starting and ending with a letter or digit"
                )
        elif operator == "Exists":
            if value:
                out.append(
                    f"{at}: operator 'Exists' takes no value, got value {value!r}: drop the value (Exists matches any "
                    "value of the key) or use operator='Equal'"
                )
        elif operator not in GATED_TOLERATION_OPERATORS:
            out.append(f"{at}: operator {operator!r} is not one of {list(TOLERATION_OPERATORS)}")
        if effect and effect not in TAINT_EFFECTS:
            out.append(f"{at}: effect {effect!r} is not one of {list(TAINT_EFFECTS)} (or empty: every effect)")
    return out


def toleration_warnings(tolerations: Sequence[Mapping[str, object]], where: str) -> list[str]:
    """Tolerations some clusters accept and others refuse: operators `Lt` and `Gt`, which the API server takes only
    with the alpha `TaintTolerationComparisonOperators` gate (1.35 and later) and otherwise refuses on every pod.

    Args:
        tolerations: the `tolerations` list, in the API's camelCase keys.
        where: the caller's name for the setting.

    Returns:
        One message per such toleration; empty when every cluster accepts them.
    """
    out = []
    for i, tol in enumerate(tolerations):
        operator = tol.get("operator") or ""
        if operator in GATED_TOLERATION_OPERATORS:
            out.append(
                f"{where}[{i}]: operator {operator!r} is accepted only where the API server enables the alpha "
                "TaintTolerationComparisonOperators feature gate (Kubernetes 1.35 and later, off by default); other "
                "clusters refuse every pod of the job: use 'Equal' or 'Exists' unless your cluster enables it"
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
    """Names no Kubernetes version accepts as a container environment variable (`IsRelaxedEnvVarName`, the most any
    version takes): empty, not printable ASCII, or holding '='.

    The one rule for every path a name reaches a container by (flytekit's ``environment=``, Flyte 2's
    ``env_vars=``, a pod template's ``env``); `env_name_warnings` names the versions that refuse more.

    Args:
        names: the variable names, in order.
        where: the caller's name for the setting, e.g. `environment`.

    Returns:
        One message per bad name; empty when Kubernetes 1.32 and later accept them all.
    """
    out = []
    for name in names:
        problem = relaxed_env_var_name_problem(name)
        if problem is not None:
            out.append(
                f"{where}: {name!r} is not an environment variable name Kubernetes accepts in any version "
                f"({problem}): use printable ASCII without '=' (every version takes letters, digits, '_', '-' and '.', "
                "not starting with a digit)"
            )
    return out


def env_name_warnings(names: Sequence[object], where: str) -> list[str]:
    """Names Kubernetes 1.32 and later accept but older API servers refuse (`IsEnvVarName`, the rule without
    `RelaxedEnvironmentVariableValidation`): `1ABC`, `MY VAR`, `a:b`, `$HOME`, `x[0]`, `~`.

    Args:
        names: the variable names, in order (names `env_name_problems` refuses are skipped).
        where: the caller's name for the setting.

    Returns:
        One message per such name; empty when every version accepts them all.
    """
    out = []
    for name in names:
        if relaxed_env_var_name_problem(name) is not None:
            continue
        if env_var_name_problem(name) is not None:
            out.append(
                f"{where}: {name!r} is accepted by Kubernetes {RELAXED_ENV_NAMES_SINCE} and later "
                "(RelaxedEnvironmentVariableValidation, GA in 1.34), but an older API server refuses every pod with "
                "it: for such a cluster use letters, digits, '_', '-' and '.', not starting with a digit, and not "
                "'.', '..' or a name starting with '..'"
            )
    return out


def container_name_problems(containers: Sequence[object], init_containers: Sequence[object], where: str) -> list[str]:
    """Problems of a pod's container names (`validateContainers`, `validateInitContainers`): each a DNS-1123 label,
    no name twice among the containers and init containers together.

    Args:
        containers: the names of `containers`, in order.
        init_containers: the names of `initContainers`, in order.
        where: the caller's name for the setting, e.g. `Worker.pod_template`.

    Returns:
        One message per bad or repeated name; empty when the API server accepts them.
    """
    out = []
    seen: set[object] = set()
    for kind, names in (("container", containers), ("init container", init_containers)):
        for name in names:
            problem = container_name_problem(name)
            if problem is not None:
                out.append(
                    f"{where}: {kind} name {name!r} is {problem}; use e.g. 'sidecar' or 'log-shipper' (lower case, "
                    "digits and '-', at most 63 characters)"
                )
            elif name in seen:
                out.append(f"{where}: {kind} name {name!r} is used twice; every container of a pod needs its own name")
            seen.add(name)
    return out
