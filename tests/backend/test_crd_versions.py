"""Jobs for a cluster's installed CRD (`admission.installed`, `JobTarget.fit`, `build.build_job(..., crd)`), judged by
the upstream CRDs of older releases (tests/data/crds/, with their provenance): what each release is named, which jobs
are written otherwise with the same meaning, which fields are dropped and said, and which are refused naming the field
and what to do. No false positive: every golden task is built byte for byte as before on the CRD the backend ships,
and on an older release that declares everything it writes."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Optional

import jsonschema
import pytest
import yaml

from backend_plugin.admission import REJECTED
from backend_plugin.admission.installed import (
    InstalledCrd,
    from_crd,
    learned,
    parse_path,
    read_crd_file,
    unknown_fields,
)
from backend_plugin.build import build_job
from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.kinds import DECLARED
from backend_plugin.targets.registry import target_for_config
from tests.helpers.jobs import GKE, META, SPOT, load
from tests.kube_schema import rendered_node_pod

DATA = Path(__file__).resolve().parents[1] / "data" / "crds"
VENDORED = Path(__file__).resolve().parents[2] / "backend_plugin" / "crds"


@functools.cache
def crd(name: str) -> InstalledCrd:
    """An older release's CRD from tests/data/crds, as the connector reads it from a cluster."""
    return read_crd_file(str(DATA / f"{name}.yaml"))


@functools.cache
def vendored(kind: str) -> InstalledCrd:
    """The CRD the backend ships for `kind`, as a cluster of the newest release installs it."""
    (declaration,) = [d for d in DECLARED if d.config_name == kind]
    return read_crd_file(str(VENDORED / declaration.crd.file))


def build(kind: str, template: dict, installed: Optional[InstalledCrd], config: Optional[BackendConfig] = None):
    return build_job(template, copy.deepcopy(META), config or BackendConfig(), target_for_config(kind), installed)


def test_every_older_crd_is_the_upstream_file_its_provenance_names() -> None:
    rows = re.findall(
        r"^\| `([^`]+\.yaml)` \| [^|]+ \| (v[\d.]+) \(([0-9a-f]{40})\) \| `([^`]+)` \| `([0-9a-f]{64})` \|$",
        (DATA / "PROVENANCE.md").read_text(),
        re.M,
    )
    recorded = {file: digest for file, _, _, _, digest in rows}
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in DATA.glob("*.yaml")}
    assert on_disk == recorded and len(rows) == 6
    for file, tag, _, path, _ in rows:
        assert file.endswith(f"-{tag}.yaml")
        assert path.startswith("config/components/crd/bases/" if file.startswith("jobsets") else "manifests/base/crds/")


# --------------------------------------------------------------------------------------------------- the release


@pytest.mark.parametrize(
    ("name", "described"),
    [
        ("trainjobs-v2.0.0", "the cluster's TrainJob CRD (Trainer v2.0)"),
        ("trainjobs-v2.1.0", "the cluster's TrainJob CRD (Trainer v2.1)"),
        ("trainjobs-v2.2.1", "the cluster's TrainJob CRD (Trainer v2.2 or later)"),
        ("pytorchjobs-v1.7.0", "the cluster's PyTorchJob CRD (training operator v1.7 or earlier)"),
        ("pytorchjobs-v1.8.1", "the cluster's PyTorchJob CRD (training operator v1.8)"),
        ("jobsets-v0.9.1", "the cluster's JobSet CRD (JobSet v0.9 or earlier)"),
    ],
)
def test_the_release_is_named_by_what_the_crd_declares(name: str, described: str) -> None:
    assert crd(name).describe() == described


@pytest.mark.parametrize(
    ("kind", "described"),
    [
        ("trainjob", "the cluster's TrainJob CRD (Trainer v2.2 or later)"),
        ("pytorchjob", "the cluster's PyTorchJob CRD (training operator v1.9 or later)"),
        ("jobset", "the cluster's JobSet CRD (JobSet v0.10 or later)"),
    ],
)
def test_the_vendored_crds_are_the_newest_release(kind: str, described: str) -> None:
    installed = vendored(kind)
    assert installed.describe() == described and installed.exact and installed.serves_version


def test_a_crd_known_from_a_400_is_named_by_the_fields_it_lacks() -> None:
    (trainjob,) = [d for d in DECLARED if d.config_name == "trainjob"]
    known, unmapped = learned(trainjob, ["spec.runtimePatches"])
    assert unmapped == [] and not known.exact and known.undeclared == ("spec.runtimePatches",)
    assert known.describe() == "the cluster's TrainJob CRD (older than Trainer v2.2)"
    assert not known.declares(("spec", "runtimePatches")) and known.declares(("spec", "trainer", "env"))
    (pytorchjob,) = [d for d in DECLARED if d.config_name == "pytorchjob"]
    sidecar = "spec.pytorchReplicaSpecs.Worker.template.spec.initContainers[0].restartPolicy"
    known, _ = learned(pytorchjob, [sidecar])
    assert known.describe() == "the cluster's PyTorchJob CRD (older than training operator v1.8)"
    assert not known.declares(parse_path(sidecar.replace("Worker", "Master")))  # one schema for every role
    nothing, unmapped = learned(pytorchjob, ["spec.madeUp.deeper"])
    assert unmapped == ["spec.madeUp.deeper"] and nothing.describe() == "the cluster's PyTorchJob CRD"


def test_the_strict_message_is_parsed_and_nothing_else() -> None:
    message = (
        'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding error: unknown field '
        '"spec.runtimePatches", unknown field "spec.activeDeadlineSeconds"'
    )
    assert unknown_fields(message) == ["spec.runtimePatches", "spec.activeDeadlineSeconds"]
    assert unknown_fields('TrainJob.trainer.kubeflow.org "x" is invalid: unknown field "spec.y"') == []
    assert parse_path("spec.a.b[0].c[12]") == ("spec", "a", "b", 0, "c", 12)


def test_a_file_that_is_not_a_job_kinds_crd_is_refused_naming_it(tmp_path: Path) -> None:
    other = yaml.safe_load((VENDORED / "trainer.kubeflow.org_clustertrainingruntimes.yaml").read_text())
    with pytest.raises(ValueError, match="clustertrainingruntimes.trainer.kubeflow.org, not the CRD of a job kind"):
        from_crd(other, "--crd x.yaml")
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    with pytest.raises(ValueError, match="no CustomResourceDefinition"):
        read_crd_file(str(tmp_path / "pod.yaml"))


def test_a_crd_that_does_not_serve_the_version_refuses_every_job() -> None:
    data = yaml.safe_load((DATA / "trainjobs-v2.1.0.yaml").read_text())
    data["spec"]["versions"][0]["name"] = "v1alpha2"
    built = build("trainjob", load("hand_cpu"), from_crd(data, "test"))
    (problem,) = built.refusals
    assert problem.verdict == REJECTED and "serves v1alpha2, not v1alpha1" in problem.message
    assert "upgrade Kubeflow Trainer" in problem.message


# ---------------------------------------------------------------------------------------- no false positive

GOLDEN = {
    "pytorchjob": [("sdk_seed_gpu", None), ("hand_cpu", None), ("hand_accel_mig", GKE), ("sdk_pod_template", None),
                   ("flytekit_secrets_spot", SPOT), ("hand_elastic", None), ("sdk_role_pod_templates", None)],
    "trainjob": [("sdk_seed_gpu", None), ("hand_cpu", None), ("hand_accel_mig", GKE), ("sdk_pod_template", None),
                 ("flytekit_secrets_spot", SPOT)],
    "jobset": [("sdk_seed_gpu", None), ("hand_cpu", None), ("sdk_pod_template", None),
               ("flytekit_secrets_spot", SPOT)],
}  # fmt: skip
"""Golden tasks of each kind (template, backend config)."""

RELEASES_THAT_DECLARE_EVERYTHING = {
    "pytorchjob": ["pytorchjobs-v1.7.0", "pytorchjobs-v1.8.1"],
    "trainjob": ["trainjobs-v2.2.1"],
    "jobset": [],
}


@pytest.mark.parametrize(
    ("kind", "template", "config"),
    [(k, t, c) for k, cases in GOLDEN.items() for t, c in cases],
    ids=[f"{k}-{t}" for k, cases in GOLDEN.items() for t, _ in cases],
)
def test_a_crd_that_declares_everything_changes_nothing(kind: str, template: str, config) -> None:
    as_shipped = build(kind, load(template), None, config)
    assert as_shipped.refusals == []
    for installed in [vendored(kind), *(crd(n) for n in RELEASES_THAT_DECLARE_EVERYTHING[kind])]:
        built = build(kind, load(template), installed, config)
        assert json.dumps(built.job) == json.dumps(as_shipped.job), installed.describe()
        assert built.problems == as_shipped.problems and built.warnings == as_shipped.warnings
        assert built.dropped == () and built.fitted is not None and built.fitted.advice == {}


# ------------------------------------------------------------------------------------------------ TrainJob


def schema_of(name: str) -> dict:
    schema = crd(name).schema
    assert schema is not None
    return dict(schema)


@pytest.mark.parametrize(("template", "config"), GOLDEN["trainjob"], ids=[t for t, _ in GOLDEN["trainjob"]])
def test_trainer_v2_1_gets_the_patch_as_pod_template_overrides_with_the_same_node_pod(template: str, config) -> None:
    newest = build("trainjob", load(template), None, config)
    built = build("trainjob", load(template), crd("trainjobs-v2.1.0"), config)
    assert built.refusals == []
    spec = built.job["spec"]
    assert "runtimePatches" not in spec and "activeDeadlineSeconds" not in spec
    (override,) = spec["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]
    jsonschema.Draft7Validator(schema_of("trainjobs-v2.1.0")).validate(built.job)  # the old CRD's own reading
    assert rendered_node_pod(built.job) == rendered_node_pod(newest.job)  # the node pods are the same
    same = {k: v for k, v in newest.job["spec"].items() if k not in ("runtimePatches", "activeDeadlineSeconds")}
    assert {k: v for k, v in spec.items() if k != "podTemplateOverrides"} == same
    assert any("written as spec.podTemplateOverrides" in w for w in built.warnings)
    if "activeDeadlineSeconds" in newest.job["spec"]:  # the task's timeout: Flyte's to enforce
        (dropped,) = built.dropped
        assert dropped.startswith("spec.activeDeadlineSeconds (the task's timeout (7230s)) dropped")
    else:
        assert built.dropped == ()


def with_pod_security_context() -> dict:
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["securityContext"] = {"runAsNonRoot": True}
    return t


def test_trainer_v2_1_refuses_what_its_overrides_cannot_carry() -> None:
    built = build("trainjob", with_pod_security_context(), crd("trainjobs-v2.1.0"))
    (problem,) = built.refusals
    assert problem.verdict == REJECTED and problem.path == "spec.runtimePatches"
    assert "the cluster's TrainJob CRD (Trainer v2.1) does not declare it" in problem.message
    assert "cannot carry pod_template spec.securityContext" in problem.message
    assert "upgrade Kubeflow Trainer to v2.2 or later" in problem.message
    assert "runtimePatches" in built.job["spec"]  # nothing written otherwise, nothing dropped
    assert build("trainjob", with_pod_security_context(), crd("trainjobs-v2.2.1")).refusals == []


@pytest.mark.parametrize("template", ["hand_cpu", "sdk_pod_template", "flytekit_secrets_spot"])
def test_trainer_v2_0_cannot_label_the_node_pods_and_says_to_upgrade(template: str) -> None:
    built = build("trainjob", load(template), crd("trainjobs-v2.0.0"))
    (problem,) = built.refusals
    assert problem.path == "spec.runtimePatches"
    assert "the cluster's TrainJob CRD (Trainer v2.0) does not declare it" in problem.message
    assert "spec.podSpecOverrides (Trainer v2.0's field for the node pod) cannot carry the node pods' labels" in (
        problem.message
    )
    assert "upgrade Kubeflow Trainer to v2.1 or later" in problem.message
    assert "strict decoding error" not in problem.message


def with_run_policy_deadline() -> dict:
    t = load("hand_cpu")
    t["custom"]["runPolicy"] = {"activeDeadlineSeconds": 600}
    return t


def test_a_deadline_flyte_does_not_enforce_is_refused_one_it_does_is_dropped() -> None:
    installed = crd("trainjobs-v2.1.0")
    refused = build("trainjob", with_run_policy_deadline(), installed)
    (problem,) = refused.refusals
    assert problem.path == "spec.activeDeadlineSeconds"
    assert "RunPolicy(active_deadline_seconds=600) sets it" in problem.message
    assert "give the task a timeout= instead" in problem.message
    backend = build("trainjob", load("hand_cpu"), installed, BackendConfig.from_dict({"active_deadline_seconds": 900}))
    assert backend.refusals == [] and "activeDeadlineSeconds" not in backend.job["spec"]
    assert backend.dropped == (
        "spec.activeDeadlineSeconds (the backend's active_deadline_seconds (900s)) dropped: the cluster's TrainJob "
        "CRD (Trainer v2.1) does not declare it",
    )
    assert (
        build("trainjob", with_run_policy_deadline(), crd("trainjobs-v2.2.1")).job["spec"]["activeDeadlineSeconds"]
        == 600
    )


def test_a_trainjob_known_only_from_a_400_names_the_read_it_needs() -> None:
    (trainjob,) = [d for d in DECLARED if d.config_name == "trainjob"]
    known, _ = learned(trainjob, ["spec.runtimePatches", "spec.activeDeadlineSeconds"])
    built = build("trainjob", load("flytekit_secrets_spot"), known, SPOT)
    (problem,) = built.refusals
    assert "the cluster's TrainJob CRD (older than Trainer v2.2) does not declare it" in problem.message
    assert "pod labels, pod annotations" in problem.message and "get on customresourcedefinitions" in problem.message
    assert "activeDeadlineSeconds" not in built.job["spec"] and len(built.dropped) == 1


# ---------------------------------------------------------------------------------------------- PyTorchJob


def with_native_sidecar() -> dict:
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["initContainers"] = [
        {"name": "proxy", "image": "ghcr.io/example/proxy:1.0", "restartPolicy": "Always"}
    ]
    return t


def test_a_native_sidecar_on_training_operator_v1_7_is_refused_never_pruned() -> None:
    built = build("pytorchjob", with_native_sidecar(), crd("pytorchjobs-v1.7.0"))
    assert [p.path for p in built.refusals] == [
        "spec.pytorchReplicaSpecs.Master.template.spec.initContainers[0].restartPolicy",
        "spec.pytorchReplicaSpecs.Worker.template.spec.initContainers[0].restartPolicy",
    ]
    message = built.refusals[0].message
    assert message.startswith("Master.pod_template spec.initContainers[0].restartPolicy: field ")
    assert "the cluster's PyTorchJob CRD (training operator v1.7 or earlier) does not declare it" in message
    assert "a native sidecar" in message and "upgrade the training operator to v1.8 or later" in message
    assert (
        built.job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"][0]["restartPolicy"]
        == "Always"
    )  # refused as it is, never written without it
    assert build("pytorchjob", with_native_sidecar(), crd("pytorchjobs-v1.8.1")).refusals == []


@pytest.mark.parametrize("template", ["sdk_seed_gpu", "hand_per_role"])
def test_jobset_v0_9_refuses_the_preemption_rule_never_prunes_it(template: str) -> None:
    """Without message patterns the Preempted rule would restart the JobSet for free after the task's own failure:
    the patterns are refused on JobSet v0.9, naming the release and what to do, and never dropped."""
    built = build("jobset", load(template), crd("jobsets-v0.9.1"))
    assert [p.path for p in built.refusals] == ["spec.failurePolicy.rules[0].onJobFailureMessagePatterns"]
    message = built.refusals[0].message
    assert "the cluster's JobSet CRD (JobSet v0.9 or earlier) does not declare it" in message
    assert "upgrade JobSet to v0.10 or later" in message and "target: pytorchjob" in message
    assert built.job["spec"]["failurePolicy"]["rules"][0]["onJobFailureMessagePatterns"]  # refused as written
    assert build("jobset", load(template), vendored("jobset")).refusals == []
    (jobset,) = [d for d in DECLARED if d.config_name == "jobset"]
    known, _ = learned(jobset, ["spec.failurePolicy.rules[0].onJobFailureMessagePatterns"])  # a strict 400
    (refusal,) = build("jobset", load(template), known).refusals
    assert "(older than JobSet v0.10) does not declare it" in refusal.message
    assert "upgrade JobSet to v0.10 or later" in refusal.message


def test_another_pod_field_an_older_crd_lacks_names_the_setting_and_the_release() -> None:
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data", "recursiveReadOnly": "Enabled", "readOnly": True}
    ]
    t["k8sPod"]["podSpec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    built = build("pytorchjob", t, crd("pytorchjobs-v1.8.1"))
    assert {p.path.rsplit(".", 1)[-1] for p in built.refusals} == {"recursiveReadOnly"}
    message = built.refusals[0].message
    assert "the cluster's PyTorchJob CRD (training operator v1.8) does not declare it" in message
    assert "upgrade the training operator to a release whose CRD declares it" in message
    assert "or remove it from Master.pod_template spec.containers[0].volumeMounts[0].recursiveReadOnly" in message
    assert build("pytorchjob", t, None).refusals == []


def test_a_template_the_kind_refuses_is_refused_before_any_crd_matters() -> None:
    t = load("hand_elastic")
    with pytest.raises(TemplateError, match="a TrainJob has a fixed node count"):
        build("trainjob", t, crd("trainjobs-v2.1.0"))
