"""Each rule of the admission model on values its upstream source refuses, beside valid neighbours it accepts.

The model judges a job as it is sent, so each case changes one field of a golden job (a PyTorchJob's Worker pod
template, a TrainJob's runtime patch or `spec.trainer`) and states what the upstream function does with the value:
refused (`rejected` at create, `unstartable` when every pod create fails), said (`note`: the create succeeds), or
admitted without a word (None). The upstream function is the first column, and the case id names the value.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from backend_plugin.admission import NOTE, REJECTED, UNSTARTABLE, admit, is_integer_resource
from pytorch_contract.job_limits import WRITER_ENV_NAMES

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = {
    "PyTorchJob": yaml.safe_load((DATA / "jobs" / "sdk_pod_template.yaml").read_text()),
    "TrainJob": yaml.safe_load((DATA / "trainjobs" / "pod_template.yaml").read_text()),
}


def worker(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


def node(job: dict) -> dict:
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def resources(section: str, name: str, value: Any) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        worker(job)["containers"][0].setdefault("resources", {}).setdefault(section, {})[name] = value

    return apply


def node_resources(name: str, value: Any) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        job["spec"]["trainer"].setdefault("resourcesPerNode", {}).setdefault("limits", {})[name] = value

    return apply


def pod_field(key: str, value: Any) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        worker(job)[key] = copy.deepcopy(value)

    return apply


def container_field(key: str, value: Any) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        worker(job)["containers"][0][key] = copy.deepcopy(value)

    return apply


def sidecar(name: Any) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        worker(job)["containers"].append({"name": name, "image": "busybox:1.36"})

    return apply


def env_name(name: str) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        worker(job)["containers"][0].setdefault("env", []).append({"name": name, "value": "v"})

    return apply


def toleration(**fields: Any) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        worker(job).setdefault("tolerations", []).append(dict(fields))

    return apply


def named(length: int, workers: Optional[int] = None) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        job["metadata"]["name"] = "j" + "x" * (length - 1)
        if workers is not None:
            job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers

    return apply


def trainjob_named(length: int, nodes: int) -> Callable[[dict], None]:
    def apply(job: dict) -> None:
        job["metadata"]["name"] = "j" + "x" * (length - 1)
        job["spec"]["trainer"]["numNodes"] = nodes

    return apply


def trainer_env(own: int, writer: bool = True) -> Callable[[dict], None]:
    """`spec.trainer.env` with `own` entries of the task's, after the writer's (all of them when `writer`)."""

    def apply(job: dict) -> None:
        env = [e for e in job["spec"]["trainer"]["env"] if writer and e["name"] in WRITER_ENV_NAMES]
        job["spec"]["trainer"]["env"] = env + [{"name": f"VAR_{i}", "value": "v"} for i in range(own)]

    return apply


# id -> (upstream function, kind, change, verdict (None: admitted without a word), text a message holds)
CASES: dict[str, tuple[str, str, Callable[[dict], None], Optional[str], str]] = {
    # --- the CRD's pattern, read as RE2 (`$` is the end of the text)
    "memory-1Gi-newline": (
        "CRD pattern (RE2)",
        "PyTorchJob",
        resources("limits", "memory", "1Gi\n"),
        REJECTED,
        "does not match",
    ),
    "memory-1Gi": ("CRD pattern (RE2)", "PyTorchJob", resources("limits", "memory", "1Gi"), None, ""),
    # --- quantities: ParseQuantity, ValidateNonnegativeQuantity, ValidateResourceQuantityValue
    "memory-minus-1": (
        "ValidateNonnegativeQuantity",
        "PyTorchJob",
        resources("limits", "memory", "-1"),
        UNSTARTABLE,
        "negative",
    ),
    # the CRD's pattern takes these, ParseQuantity does not: the kind's webhook, which decodes the job, refuses the
    # create (training-operator's mpytorchjob.kb.io, Trainer's defaulter.trainjob, JobSet's mjobset.kb.io)
    "memory-1e1.5": (
        "ParseQuantity (the kind's webhook)",
        "PyTorchJob",
        resources("requests", "memory", "1e1.5"),
        REJECTED,
        "the training operator's admission webhook cannot decode it",
    ),
    "memory-exponent-over-int64": (
        "ParseQuantity (the kind's webhook)",
        "PyTorchJob",
        resources("requests", "memory", "1e9223372036854775808"),
        REJECTED,
        "not a Kubernetes quantity",
    ),
    "trainjob-node-memory-1e1.5": (
        "ParseQuantity (the kind's webhook)",
        "TrainJob",
        node_resources("memory", "1e1.5"),
        REJECTED,
        "Kubeflow Trainer's admission webhook cannot decode it",
    ),
    "memory-1e1": ("ParseQuantity", "PyTorchJob", resources("requests", "memory", "1e1"), None, ""),
    "cpu-plus-2": ("ParseQuantity", "PyTorchJob", resources("requests", "cpu", "+2"), None, ""),
    "cpu-.5": ("ParseQuantity", "PyTorchJob", resources("requests", "cpu", ".5"), None, ""),
    "cpu-500m": ("ParseQuantity", "PyTorchJob", resources("limits", "cpu", "500m"), None, ""),
    "cpu-zero": ("ValidateNonnegativeQuantity", "PyTorchJob", resources("limits", "cpu", "0"), None, ""),
    "gpu-2.0": ("ValidateResourceQuantityValue", "PyTorchJob", resources("limits", "nvidia.com/gpu", "2.0"), None, ""),
    "gpu-2000m": (
        "ValidateResourceQuantityValue",
        "PyTorchJob",
        resources("limits", "nvidia.com/gpu", "2000m"),
        None,
        "",
    ),
    "gpu-1e1": ("ValidateResourceQuantityValue", "PyTorchJob", resources("limits", "nvidia.com/gpu", "1e1"), None, ""),
    "gpu-plus-2": (
        "ValidateResourceQuantityValue",
        "PyTorchJob",
        resources("limits", "nvidia.com/gpu", "+2"),
        None,
        "",
    ),
    "gpu-1.5": (
        "ValidateResourceQuantityValue",
        "PyTorchJob",
        resources("limits", "nvidia.com/gpu", "1.5"),
        UNSTARTABLE,
        "whole number",
    ),
    "gpu-500m": (
        "ValidateResourceQuantityValue",
        "PyTorchJob",
        resources("limits", "nvidia.com/gpu", "500m"),
        UNSTARTABLE,
        "whole number",
    ),
    # hugepages: a whole number of pages of the resource's size (validateResourceQuantityHugePageValue)
    "hugepages-fraction": (
        "validateResourceQuantityHugePageValue",
        "PyTorchJob",
        resources("limits", "hugepages-2Mi", "1.5Mi"),
        UNSTARTABLE,
        "limits['hugepages-2Mi']='1.5Mi' is not a whole number of 2Mi pages",
    ),
    "hugepages-3Mi": (
        "validateResourceQuantityHugePageValue",
        "PyTorchJob",
        resources("requests", "hugepages-2Mi", "3Mi"),
        UNSTARTABLE,
        "whole number of 2Mi pages",
    ),
    "hugepages-two-pages": (
        "validateResourceQuantityHugePageValue",
        "PyTorchJob",
        resources("limits", "hugepages-2Mi", "4Mi"),
        None,
        "",
    ),
    "hugepages-1Gi-of-2Mi-pages": (
        "validateResourceQuantityHugePageValue",
        "PyTorchJob",
        resources("limits", "hugepages-2Mi", "1Gi"),
        None,
        "",
    ),
    "hugepages-zero": (
        "validateResourceQuantityHugePageValue",
        "PyTorchJob",
        resources("limits", "hugepages-1Gi", "0"),
        None,
        "",
    ),
    "trainjob-node-gpu-1.5": (
        "ValidateResourceQuantityValue",
        "TrainJob",
        node_resources("nvidia.com/gpu", "1.5"),
        UNSTARTABLE,
        "resources: limits['nvidia.com/gpu']='1.5'",
    ),
    "trainjob-node-gpu-2.0": (
        "ValidateResourceQuantityValue",
        "TrainJob",
        node_resources("nvidia.com/gpu", "2.0"),
        None,
        "",
    ),
    "trainjob-node-memory-minus-1": (
        "ValidateNonnegativeQuantity",
        "TrainJob",
        node_resources("memory", "-1"),
        UNSTARTABLE,
        "negative",
    ),
    # --- nulls: PruneNonNullableNullsWithoutDefaults, then Default; a null list item fails validation
    "nodeSelector-null": (
        "PruneNonNullableNullsWithoutDefaults",
        "PyTorchJob",
        pod_field("nodeSelector", None),
        NOTE,
        "null is dropped by the API server",
    ),
    "tolerations-null": (
        "PruneNonNullableNullsWithoutDefaults",
        "PyTorchJob",
        pod_field("tolerations", None),
        NOTE,
        "the create succeeds",
    ),
    "affinity-null": (
        "PruneNonNullableNullsWithoutDefaults",
        "PyTorchJob",
        pod_field("affinity", None),
        NOTE,
        "as if it were not set",
    ),
    "trainjob-affinity-null": (
        "PruneNonNullableNullsWithoutDefaults",
        "TrainJob",
        lambda j: node(j).update(affinity=None),
        NOTE,
        "null is dropped",
    ),
    "port-protocol-null": (
        "Default",
        "PyTorchJob",
        container_field("ports", [{"containerPort": 1, "protocol": None}]),
        NOTE,
        "default 'TCP'",
    ),
    "tolerations-null-item": (
        "kube-openapi type validation",
        "PyTorchJob",
        pod_field("tolerations", [None]),
        REJECTED,
        "null is not of type object",
    ),
    "required-name-null": (
        "PruneNonNullableNullsWithoutDefaults, required",
        "PyTorchJob",
        container_field("name", None),
        REJECTED,
        "is required",
    ),
    "nodeSelector-empty": ("ValidateLabels", "PyTorchJob", pod_field("nodeSelector", {}), None, ""),
    # --- container names: validateContainers, IsDNS1123Label, unique
    "container-Sidecar": ("IsDNS1123Label", "PyTorchJob", sidecar("Sidecar"), UNSTARTABLE, "container name 'Sidecar'"),
    "container-side_car": (
        "IsDNS1123Label",
        "PyTorchJob",
        sidecar("side_car"),
        UNSTARTABLE,
        "container name 'side_car'",
    ),
    "container-dash-a": ("IsDNS1123Label", "PyTorchJob", sidecar("-a"), UNSTARTABLE, "container name '-a'"),
    "container-64-characters": ("IsDNS1123Label", "PyTorchJob", sidecar("a" * 64), UNSTARTABLE, "64 characters"),
    "container-twice": ("CRD list-map keys", "PyTorchJob", sidecar("pytorch"), REJECTED, "keys must be unique"),
    "init-container-named-as-a-container": (
        "validateInitContainers (unique across both lists)",
        "PyTorchJob",
        pod_field("initContainers", [{"name": "pytorch", "image": "busybox:1.36"}]),
        UNSTARTABLE,
        "init container name 'pytorch' is used twice",
    ),
    "container-sidecar": ("IsDNS1123Label", "PyTorchJob", sidecar("sidecar"), None, ""),
    "container-a": ("IsDNS1123Label", "PyTorchJob", sidecar("a"), None, ""),
    "container-63-characters": ("IsDNS1123Label", "PyTorchJob", sidecar("a" * 63), None, ""),
    "container-log-shipper-2": ("IsDNS1123Label", "PyTorchJob", sidecar("log-shipper-2"), None, ""),
    "trainjob-container-Sidecar": (
        "IsDNS1123Label",
        "TrainJob",
        lambda j: node(j)["containers"].append({"name": "Sidecar"}),
        UNSTARTABLE,
        "container name 'Sidecar'",
    ),
    # --- environment names: IsRelaxedEnvVarName refuses; IsEnvVarName (before 1.32) is a note naming 1.32
    "env-1ABC": (
        "IsEnvVarName (before 1.32)",
        "PyTorchJob",
        env_name("1ABC"),
        NOTE,
        "accepted by Kubernetes 1.32 and later",
    ),
    "env-MY-VAR-space": ("IsEnvVarName (before 1.32)", "PyTorchJob", env_name("MY VAR"), NOTE, "1.32"),
    "env-a:b": ("IsEnvVarName (before 1.32)", "PyTorchJob", env_name("a:b"), NOTE, "1.32"),
    "env-$HOME": ("IsEnvVarName (before 1.32)", "PyTorchJob", env_name("$HOME"), NOTE, "1.32"),
    "env-x[0]": ("IsEnvVarName (before 1.32)", "PyTorchJob", env_name("x[0]"), NOTE, "1.32"),
    "env-tilde": ("IsEnvVarName (before 1.32)", "PyTorchJob", env_name("~"), NOTE, "1.32"),
    "env-A=B": ("IsRelaxedEnvVarName", "PyTorchJob", env_name("A=B"), UNSTARTABLE, "holds '='"),
    "env-empty": ("IsRelaxedEnvVarName", "PyTorchJob", env_name(""), UNSTARTABLE, "not a non-empty string"),
    "env-non-ascii": ("IsRelaxedEnvVarName", "PyTorchJob", env_name("é"), UNSTARTABLE, "not ASCII"),
    "env-tab": ("IsRelaxedEnvVarName", "PyTorchJob", env_name("A\tB"), UNSTARTABLE, "not printable"),
    "env-MY_VAR": ("IsEnvVarName", "PyTorchJob", env_name("MY_VAR"), None, ""),
    "env-my.var-dash": ("IsEnvVarName", "PyTorchJob", env_name("my.var-x"), None, ""),
    "trainjob-env-1ABC": (
        "IsEnvVarName (before 1.32)",
        "TrainJob",
        lambda j: j["spec"]["trainer"]["env"].append({"name": "1ABC", "value": "v"}),
        NOTE,
        "1.32",
    ),
    "trainjob-env-A=B": (
        "IsRelaxedEnvVarName",
        "TrainJob",
        lambda j: j["spec"]["trainer"]["env"].append({"name": "A=B", "value": "v"}),
        UNSTARTABLE,
        "holds '='",
    ),
    # --- tolerations: ValidateTolerations; Lt / Gt only behind an alpha feature gate
    "toleration-Lt": (
        "ValidateTolerations (TaintTolerationComparisonOperators)",
        "PyTorchJob",
        toleration(key="gpu-count", operator="Lt", value="5"),
        NOTE,
        "TaintTolerationComparisonOperators",
    ),
    "toleration-Gt": (
        "ValidateTolerations (TaintTolerationComparisonOperators)",
        "PyTorchJob",
        toleration(key="gpu-count", operator="Gt", value="1"),
        NOTE,
        "1.35",
    ),
    "toleration-In": (
        "ValidateTolerations",
        "PyTorchJob",
        toleration(key="k", operator="In", value="1"),
        UNSTARTABLE,
        "operator 'In'",
    ),
    "toleration-exists-no-key": ("ValidateTolerations", "PyTorchJob", toleration(operator="Exists"), None, ""),
    "toleration-equal-no-key": (
        "ValidateTolerations",
        "PyTorchJob",
        toleration(operator="Equal", value="x"),
        UNSTARTABLE,
        "without a key",
    ),
    # --- names the kind's controllers derive from the job's name: IsDNS1035Label, at most 63 characters
    "pytorchjob-name-54-two-workers": ("GenGeneralName + ValidateServiceName", "PyTorchJob", named(54, 2), None, ""),
    "pytorchjob-name-55": (
        "GenGeneralName + ValidateServiceName",
        "PyTorchJob",
        named(55, 2),
        UNSTARTABLE,
        "use a job name of at most 54 characters",
    ),
    "pytorchjob-name-53-eleven-workers": (
        "GenGeneralName + ValidateServiceName",
        "PyTorchJob",
        named(53, 11),
        None,
        "",
    ),
    "pytorchjob-name-54-eleven-workers": (
        "GenGeneralName + ValidateServiceName",
        "PyTorchJob",
        named(54, 11),
        UNSTARTABLE,
        "-worker-10",
    ),
    "trainjob-name-48-three-nodes": ("JobSet webhook GenPodName", "TrainJob", trainjob_named(48, 3), None, ""),
    "trainjob-name-49-three-nodes": (
        "JobSet webhook GenPodName",
        "TrainJob",
        trainjob_named(49, 3),
        UNSTARTABLE,
        "-node-0-2-xxxxx",
    ),
    "trainjob-name-47-eleven-nodes": ("JobSet webhook GenPodName", "TrainJob", trainjob_named(47, 11), None, ""),
    # --- a TrainJob's env count against the CRD's maxItems (the object as it is; the execution a note)
    "trainjob-env-128": ("CRD maxItems", "TrainJob", trainer_env(117), None, ""),
    "trainjob-env-129": ("CRD maxItems", "TrainJob", trainer_env(118), REJECTED, "holds 129 environment entries"),
    "trainjob-hand-written-120": (
        "CRD maxItems",
        "TrainJob",
        trainer_env(120, writer=False),
        NOTE,
        "would hold up to 131",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_rule_follows_its_upstream_source(case: str) -> None:
    _, kind, change, verdict, text = CASES[case]
    job = copy.deepcopy(GOLDEN[kind])
    change(job)
    problems = admit(job)
    refusing = [p for p in problems if p.refuses]
    if verdict in (None, NOTE):
        assert refusing == [], [p.message for p in refusing]
        notes = [p.message for p in problems if p.verdict == NOTE]
        if verdict is None:
            assert notes == []
        else:
            assert any(text in m for m in notes), notes
        return
    assert {p.verdict for p in refusing} == {verdict}, [p.message for p in refusing]
    assert any(text in p.message for p in refusing), [p.message for p in refusing]
    assert all(not p.message.startswith("spec.") for p in refusing)  # the user's setting, not the job's layout


@pytest.mark.parametrize(
    ("name", "whole"),
    [
        ("nvidia.com/gpu", True),
        ("amd.com/gpu", True),
        ("example.com/foo", True),
        ("nvidia.com/mig-1g.5gb", True),
        ("cpu", False),
        ("memory", False),
        ("ephemeral-storage", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/foo", False),
        ("requests.example.com/foo", False),
    ],
)
def test_integer_resources_are_the_extended_ones(name: str, whole: bool) -> None:
    """`helper.IsIntegerResourceName` for a container: `IsExtendedResourceName`."""
    assert is_integer_resource(name) is whole


@pytest.mark.parametrize("kind", list(GOLDEN))
def test_every_golden_job_is_admitted_without_a_note(kind: str) -> None:
    assert admit(GOLDEN[kind]) == []
