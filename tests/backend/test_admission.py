"""The admission model (`backend_plugin.admission`): one case per rule, for both job kinds, built through the real
reader and writer from a task template that carries the bad setting, so that each case shows the refusal names the
user's setting and what to do; and the same model against its false positives (every golden job, the boundary
values Kubernetes accepts)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any, Optional

import pytest
import yaml

from backend_plugin.admission import (
    NOTE,
    PRUNED,
    REJECTED,
    UNSTARTABLE,
    JobNotAdmitted,
    admit,
    check_admission,
)
from backend_plugin.admission.crds import CRD_DIR, schema_for
from backend_plugin.errors import TemplateError
from backend_plugin.targets.registry import target_for_config
from pytorch_contract.job_limits import WRITER_ENV_ENTRIES, WRITER_ENV_NAMES
from tests.helpers.jobs import JOBS, META, load, write_job

TARGETS = ("pytorchjob", "trainjob")
WRITER = "writer"
"""Refused earlier still: the writer raises a TemplateError naming the setting (nothing is written)."""


def write(template: dict, target: str) -> dict:
    kind = target_for_config(target)
    assert kind is not None
    return write_job(kind, template, copy.deepcopy(META))


def pod_template() -> dict:
    """The SDK's pod-template task: task-level labels, a toleration, a primary container named `trainer`."""
    return load("sdk_pod_template")


def meta(t: dict) -> dict:
    return t["k8sPod"].setdefault("metadata", {})


def primary(t: dict) -> dict:
    return t["k8sPod"]["podSpec"]["containers"][0]


def env(n: int, value: str = "v") -> Callable[[dict], None]:
    def apply(t: dict) -> None:
        primary(t)["env"] = [{"name": f"VAR_{i}", "value": value} for i in range(n)]

    return apply


def setter(getter: Callable[[dict], dict], key: str, value: Any) -> Callable[[dict], None]:
    def apply(t: dict) -> None:
        getter(t)[key] = value

    return apply


def pod_labels(value: dict) -> Callable[[dict], None]:
    return setter(meta, "labels", value)


def pod_annotations(value: dict) -> Callable[[dict], None]:
    return setter(meta, "annotations", value)


def spec(key: str, value: Any) -> Callable[[dict], None]:
    return setter(lambda t: t["k8sPod"]["podSpec"], key, value)


def container(key: str, value: Any) -> Callable[[dict], None]:
    return setter(primary, key, value)


# id -> (mutation of the pod-template task, verdict per target (None: admitted), text the message must hold)
RULES: dict[str, tuple[Callable[[dict], None], dict[str, Optional[str]], str]] = {
    "label-value-64-characters": (
        pod_labels({"team": "x" * 64}),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "pod_template labels: team='xxx",
    ),
    "label-key-with-space-and-bang": (
        pod_labels({"bad key!": "ml"}),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "key 'bad key!' is not a valid label key",
    ),
    "label-value-with-space": (
        pod_labels({"team": "ml team"}),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "put longer or free text in an annotation",
    ),
    "annotation-key-invalid": (
        pod_annotations({"-bad/key": "x"}),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "pod_template annotations: key '-bad/key' is not a valid annotation key",
    ),
    "annotations-over-256-KiB": (
        pod_annotations({"example.com/blob": "a" * 300_000}),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "over Kubernetes' limit of 262,144 bytes (256 KiB) per object",
    ),
    "toleration-exists-with-value": (
        spec("tolerations", [{"key": "dedicated", "operator": "Exists", "value": "training"}]),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "pod_template tolerations[0]: operator 'Exists' takes no value",
    ),
    "toleration-no-key-with-equal": (
        spec("tolerations", [{"operator": "Equal", "value": "x"}]),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "a toleration without a key must use operator 'Exists'",
    ),
    "toleration-seconds-without-noexecute": (
        spec("tolerations", [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "tolerationSeconds applies only to effect 'NoExecute'",
    ),
    "node-selector-value-with-space": (
        spec("nodeSelector", {"pool": "gpu pool"}),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "pod_template nodeSelector: pool='gpu pool' is not a valid label value",
    ),
    "env-name-with-equals": (
        container("env", [{"name": "A=B", "value": "1"}]),
        {"pytorchjob": UNSTARTABLE, "trainjob": UNSTARTABLE},
        "environment: 'A=B' is not an environment variable name",
    ),
    "undeclared-pod-field-is-pruned": (
        spec("evictionResponders", [{"name": "x", "priority": 1}]),
        {"pytorchjob": PRUNED, "trainjob": WRITER},  # a TrainJob's runtime patch cannot carry it at all
        "evictionResponders",
    ),
    "undeclared-volume-mount-field-is-pruned": (
        container("volumeMounts", [{"name": "data", "mountPath": "/data", "bindMountOptions": ["rbind"]}]),
        {"pytorchjob": PRUNED, "trainjob": PRUNED},
        "bindMountOptions",
    ),
    "duplicate-volume-mount-list-map-key": (
        container("volumeMounts", [{"name": "a", "mountPath": "/data"}, {"name": "a", "mountPath": "/data"}]),
        {"pytorchjob": REJECTED, "trainjob": REJECTED},
        "keys must be unique",
    ),
    "env-over-trainjob-max-items": (
        env(130),
        {"pytorchjob": None, "trainjob": REJECTED},
        "more than the 128 spec.trainer.env admits (maxItems)",
    ),
    "env-over-the-limit-in-an-executions-job": (
        env(128 - WRITER_ENV_ENTRIES + 1),
        {"pytorchjob": None, "trainjob": REJECTED},
        f"keep at most {128 - WRITER_ENV_ENTRIES}",
    ),
    "job-over-1.5-MiB-written-per-role": (
        container("env", [{"name": "CONFIG_JSON", "value": "j" * 800_000}]),
        {"pytorchjob": REJECTED, "trainjob": None},
        "a PyTorchJob holds the pod template once per role",
    ),
    "job-over-3-MiB-request": (
        container("env", [{"name": "CONFIG_JSON", "value": "j" * 3_200_000}]),
        {"pytorchjob": REJECTED, "trainjob": REJECTED},
        "request limit",
    ),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(RULES))
def test_each_rule_refuses_with_the_users_setting(case: str, target: str) -> None:
    mutate, verdicts, text = RULES[case]
    t = pod_template()
    mutate(t)
    if verdicts[target] == WRITER:
        with pytest.raises(TemplateError, match=text):
            write(t, target)
        return
    job = write(t, target)
    problems = [p for p in admit(job) if p.verdict != NOTE]
    expected = verdicts[target]
    if expected is None:  # the other kind's limit: no false positive here
        assert problems == [], [p.message for p in problems]
        return
    assert problems, f"{case} admitted as a {target}"
    assert {p.verdict for p in problems} == {expected}, [p.message for p in problems]
    assert any(text in p.message for p in problems), [p.message for p in problems]
    for p in problems:  # the user's setting, never the job's internal layout
        assert not p.message.startswith("spec."), p.message
        assert "pytorchReplicaSpecs" not in p.setting and "runtimePatches" not in p.setting
    with pytest.raises(JobNotAdmitted) as raised:
        check_admission(job)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("target", TARGETS)
def test_per_role_pod_template_names_the_role(target: str) -> None:
    """A PyTorchJob's role template is named by its role; a TrainJob has one pod template."""
    t = pod_template()
    pod_labels({"team": "ml team"})(t)
    messages = [p.message for p in admit(write(t, target))]
    if target == "pytorchjob":
        assert any(m.startswith("Master.pod_template labels") for m in messages)
        assert any(m.startswith("Worker.pod_template labels") for m in messages)
    else:
        assert all(m.startswith("pod_template labels") for m in messages), messages


# Boundary values Kubernetes accepts: the model must admit each (first rule: no false positives).
ACCEPTED: dict[str, Callable[[dict], None]] = {
    "label-value-63-characters": pod_labels({"team": "x" * 63}),
    "label-value-empty": pod_labels({"team": ""}),
    "label-key-with-prefix": pod_labels({"example.com/team": "ml"}),
    # the writer adds its own annotations (about 130 bytes) to the task's
    "annotations-just-under-256-KiB": pod_annotations({"a": "b" * (256 * 1024 - 1 - 200)}),
    "annotation-key-upper-case": pod_annotations({"Example.com/Owner": "x"}),
    "toleration-exists-without-key": spec("tolerations", [{"operator": "Exists"}]),
    "toleration-noexecute-seconds": spec(
        "tolerations", [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    ),
    "node-selector-empty-value": spec("nodeSelector", {"pool": ""}),
    "env-name-relaxed": container("env", [{"name": "1DIGIT_FIRST", "value": "x"}]),
    # the execution's own variables count as the task's: what is left for the task is 128 - 11 - those
    "env-at-the-trainjob-limit": env(128 - WRITER_ENV_ENTRIES - len(META.environment)),
    "large-env-that-fits": container("env", [{"name": "CONFIG_JSON", "value": "j" * 600_000}]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(ACCEPTED))
def test_values_kubernetes_accepts_are_admitted(case: str, target: str) -> None:
    t = pod_template()
    ACCEPTED[case](t)
    job = write(t, target)
    assert [p.message for p in admit(job) if p.refuses] == []


GOLDEN = sorted(JOBS.glob("*.yaml")) + sorted((JOBS.parent / "trainjobs").glob("*.yaml"))


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_golden_job_is_admitted_intact(path) -> None:
    assert admit(yaml.safe_load(path.read_text())) == []


def _client_fields_the_crd_lacks() -> list[tuple[str, ...]]:
    """Paths under the pod spec that the installed kubernetes client's models declare and the PyTorchJob CRD's
    embedded pod schema does not (the CRD is older than the client)."""
    import kubernetes.client as k

    root = schema_for("kubeflow.org/v1", "PyTorchJob")["properties"]["spec"]["properties"]["pytorchReplicaSpecs"]
    pod = root["additionalProperties"]["properties"]["template"]["properties"]["spec"]
    out: list[tuple[str, ...]] = []

    def walk(model: str, schema: dict, path: tuple[str, ...], seen: frozenset) -> None:
        cls = getattr(k, model, None)
        if cls is None or model in seen or schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        for attr, kind in cls.openapi_types.items():
            name = cls.attribute_map[attr]
            props = schema.get("properties") or {}
            if name not in props:
                out.append((*path, name))
                continue
            listed = re.match(r"list\[(\w+)\]", kind, re.I)
            if listed:
                walk(listed.group(1), props[name].get("items") or {}, (*path, name, "[]"), seen | {model})
            elif kind.startswith("V1"):
                walk(kind, props[name], (*path, name), seen | {model})

    walk("V1PodSpec", pod, (), frozenset())
    return out


def test_every_client_pod_field_the_crd_lacks_is_refused_by_path() -> None:
    """Each field the kubernetes client can write but the CRD would prune: set it alone in a Worker pod spec, and the
    model names its path (the server would drop it silently; with fieldValidation=Strict it refuses the create)."""
    missing = _client_fields_the_crd_lacks()
    assert len(missing) >= 40, missing  # kubernetes 37's models against the v1.9.4 CRD: 52
    base = yaml.safe_load((JOBS / "cpu_only.yaml").read_text())
    for path in missing:
        job = copy.deepcopy(base)
        node: Any = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        for part, after in zip(path[:-1], path[1:], strict=True):
            if part == "[]":
                continue
            if part == "containers":
                node = node["containers"][0]
                continue
            child = node.setdefault(part, [{}] if after == "[]" else {})
            node = child[0] if isinstance(child, list) else child
        node[path[-1]] = "x"
        pruned = [p for p in admit(job) if p.verdict == PRUNED]
        assert pruned, f"{'.'.join(path)} not reported"
        assert path[-1] in pruned[0].message and "Worker.pod_template" in pruned[0].message


def test_cel_rules_are_evaluated_as_written() -> None:
    """The TrainJob CRD's rules: a name the rule refuses; and the transition rules (oldSelf) are skipped on create."""
    job = write(load("hand_cpu"), "trainjob")
    job["metadata"]["name"] = "Upper-Case"
    problems = admit(job)
    assert [p.message for p in problems if p.verdict == REJECTED] == [
        "job: metadata.name must match RFC 1035 DNS label format"
    ]
    job["spec"]["managedBy"] = "someone/else"
    assert any("ManagedBy must be" in p.message for p in admit(job))
    # The PyTorchJob CRD's only rule (queue immutable) compares with oldSelf: a create never runs it.
    pytorchjob = yaml.safe_load((JOBS / "queue_gang_suspend.yaml").read_text())
    assert admit(pytorchjob) == []


def test_the_crds_are_shipped_with_the_package() -> None:
    import backend_plugin

    assert CRD_DIR.parent == __import__("pathlib").Path(backend_plugin.__file__).parent
    assert (CRD_DIR / "PROVENANCE.md").is_file()
    setup = (CRD_DIR.parents[1] / "setup.py").read_text()
    assert '"crds/*.yaml"' in setup


def test_the_writer_adds_exactly_the_contracts_env_entries() -> None:
    """`WRITER_ENV_NAMES` (what the SDK counts against a TrainJob's 128) is what the writer adds in an execution."""
    job = write(load("hand_cpu"), "trainjob")
    names = [e["name"] for e in job["spec"]["trainer"]["env"]]
    own = {e["key"] for e in load("hand_cpu")["container"]["env"]} | set(META.environment)
    assert [n for n in names if n not in own] == list(WRITER_ENV_NAMES)
