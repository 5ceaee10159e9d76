"""`pytorchjob render --crd FILE`: the job written for a cluster's installed CRD and checked against it offline, as
the connector does with the CRD it reads; with the CRD the backend ships, exactly the job render prints without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from backend_plugin.cli import main
from tests.helpers.jobs import load

CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"
VENDORED = Path(__file__).resolve().parents[2] / "backend_plugin" / "crds"
PATHS = ["--inputs", "s3://b/run-1/inputs.pb", "--output-prefix", "s3://b/run-1"]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def render(tmp_path: Path, template: dict, target: str, *extra: str, capsys) -> tuple[int, str, str]:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(template))
    return run(["render", "--template", str(path), "--target", target, *PATHS, *extra], capsys)


def sidecar() -> dict:
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["initContainers"] = [
        {"name": "proxy", "image": "ghcr.io/example/proxy:1.0", "restartPolicy": "Always"}
    ]
    return t


@pytest.mark.parametrize(
    ("target", "crd"),
    [
        ("pytorchjob", VENDORED / "kubeflow.org_pytorchjobs.yaml"),
        ("trainjob", VENDORED / "trainer.kubeflow.org_trainjobs.yaml"),
        ("jobset", VENDORED / "jobset.x-k8s.io_jobsets.yaml"),
        ("pytorchjob", CRDS / "pytorchjobs-v1.7.0.yaml"),
        ("trainjob", CRDS / "trainjobs-v2.2.1.yaml"),
    ],
    ids=["pytorchjob-vendored", "trainjob-vendored", "jobset-vendored", "pytorchjob-v1.7", "trainjob-v2.2"],
)
def test_a_crd_that_declares_everything_renders_the_same_job(tmp_path, capsys, target, crd) -> None:
    code, plain, plain_err = render(tmp_path, load("sdk_pod_template"), target, capsys=capsys)
    assert code == 0, plain_err
    code, out, err = render(tmp_path, load("sdk_pod_template"), target, "--crd", str(crd), capsys=capsys)
    assert code == 0 and out == plain and err == plain_err
    code, out, _ = render(tmp_path, load("sdk_pod_template"), target, "--crd", str(crd), "--check", capsys=capsys)
    assert code == 0 and "admitted intact" in out and "note" not in out


def test_trainer_v2_1_renders_the_patch_as_its_overrides_and_says_so(tmp_path, capsys) -> None:
    crd = str(CRDS / "trainjobs-v2.1.0.yaml")
    code, out, err = render(tmp_path, load("sdk_pod_template"), "trainjob", "--crd", crd, capsys=capsys)
    assert code == 0, err
    spec = yaml.safe_load(out)["spec"]
    assert "runtimePatches" not in spec and spec["podTemplateOverrides"][0]["targetJobs"] == [{"name": "node"}]
    assert "note: spec.runtimePatches is written as spec.podTemplateOverrides" in err
    code, out, _ = render(tmp_path, load("sdk_pod_template"), "trainjob", "--crd", crd, "--check", capsys=capsys)
    assert code == 0
    assert out.splitlines()[0].startswith("note -: spec.runtimePatches is written as spec.podTemplateOverrides")
    assert "admitted intact" in out.splitlines()[-1]


def test_check_against_trainer_v2_0_says_what_to_upgrade(tmp_path, capsys) -> None:
    crd = str(CRDS / "trainjobs-v2.0.0.yaml")
    code, out, _ = render(tmp_path, load("hand_cpu"), "trainjob", "--crd", crd, "--check", capsys=capsys)
    assert code == 1
    first, last = out.splitlines()[0], out.splitlines()[-1]
    assert first.startswith("rejected spec.runtimePatches (written by the backend): ")
    assert "the cluster's TrainJob CRD (Trainer v2.0) does not declare it" in first
    assert "upgrade Kubeflow Trainer to v2.1 or later" in first and last.endswith("nothing would be sent")
    code, out, err = render(tmp_path, load("hand_cpu"), "trainjob", "--crd", crd, capsys=capsys)
    assert code == 2 and out == ""
    assert "the TrainJob would not be admitted by the cluster: spec.runtimePatches (written by the backend)" in err


def test_a_native_sidecar_is_refused_on_v1_7_and_rendered_on_v1_8(tmp_path, capsys) -> None:
    old = str(CRDS / "pytorchjobs-v1.7.0.yaml")
    code, out, _ = render(tmp_path, sidecar(), "pytorchjob", "--crd", old, "--check", capsys=capsys)
    assert code == 1 and "a native sidecar" in out and "upgrade the training operator to v1.8 or later" in out
    code, out, err = render(tmp_path, sidecar(), "pytorchjob", "--crd", str(CRDS / "pytorchjobs-v1.8.1.yaml"),
                            capsys=capsys)  # fmt: skip
    assert code == 0, err
    master = yaml.safe_load(out)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["initContainers"][0]["restartPolicy"] == "Always"


def test_a_crd_of_another_kind_or_no_crd_is_one_line(tmp_path, capsys) -> None:
    code, _, err = render(tmp_path, load("hand_cpu"), "pytorchjob", "--crd", str(CRDS / "trainjobs-v2.1.0.yaml"),
                          capsys=capsys)  # fmt: skip
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"pytorchjob render: --crd {CRDS / 'trainjobs-v2.1.0.yaml'} defines trainjobs.trainer.kubeflow.org, the "
        "CRD of the TrainJob, but render writes a PyTorchJob: pass --target trainjob, or the pytorchjobs.kubeflow.org "
        "CRD"
    )
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    code, _, err = render(tmp_path, load("hand_cpu"), "pytorchjob", "--crd", str(pod), capsys=capsys)
    assert code == 2 and err.strip().splitlines()[-1].endswith("no CustomResourceDefinition in the file")
    code, _, err = render(tmp_path, load("hand_cpu"), "pytorchjob", "--crd", str(tmp_path / "nope.yaml"),
                          capsys=capsys)  # fmt: skip
    assert code == 2 and "nope.yaml" in err


def test_the_admission_page_quotes_what_check_prints(tmp_path, capsys) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "admission.md").read_text(encoding="utf-8")
    intro = "For example, `render --check` of a plain task against the Trainer v2.0 CRD"
    block = page[page.index(intro) :].split("```text\n", 1)[1].split("\n```", 1)[0]
    crd = str(CRDS / "trainjobs-v2.0.0.yaml")
    code, out, _ = render(tmp_path, load("hand_cpu"), "trainjob", "--crd", crd, "--check", capsys=capsys)
    assert code == 1 and out.splitlines()[0].startswith(block.strip())


def test_check_against_jobset_v0_9_gives_the_refusal_its_verdict_and_the_path_once(tmp_path, capsys) -> None:
    """`render --check --crd <JobSet v0.9.1 CRD>`: the API server refuses the create (fieldValidation=Strict), so the
    line's verdict is `rejected`, never `pruned`, and the field's path is said once."""
    code, out, _ = render(tmp_path, load("hand_cpu"), "jobset", "--crd", str(CRDS / "jobsets-v0.9.1.yaml"), "--check",
                          capsys=capsys)  # fmt: skip
    assert code == 1
    first = out.splitlines()[0]
    path = "spec.failurePolicy.rules[0].onJobFailureMessagePatterns"
    assert first.startswith(f"rejected {path} ")
    assert first.count(path) == 1, first
    assert "pruned" not in first and "dropped silently" not in first, first
    assert "the cluster's JobSet CRD (JobSet v0.9 or earlier) does not declare it" in first
    assert "upgrade JobSet to v0.10 or later" in first
