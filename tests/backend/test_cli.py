"""`pytorchjob render`: a task in a file, a `.pb` from real `pyflyte package`, JSON templates, errors."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml

from backend_plugin.cli import main
from tests.kube_schema import assert_valid_pytorchjob

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
IMAGE = "ghcr.io/example/train:1.0"

TASK_FILE = textwrap.dedent(
    """
    from flytekit import Resources, task
    from flytekitplugins.kfpytorch import PyTorch, Worker


    @task(task_config=PyTorch(worker=Worker(replicas=2), increase_shared_mem=False), requests=Resources(cpu="1"))
    def train(x: int) -> int:
        return x


    def not_a_task() -> None:
        pass
    """
)


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    """A Python file with one pytorch task, in its own directory."""
    path = tmp_path / "wf.py"
    path.write_text(TASK_FILE)
    return path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr)."""
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_render_task_from_file(task_file: Path, capsys):
    code, out, _ = run(
        ["render", str(task_file), "train", "--image", IMAGE, "--namespace", "ml", "--name", "mnist"], capsys
    )
    assert code == 0
    job = yaml.safe_load(out)
    assert_valid_pytorchjob(job)
    assert job["metadata"]["name"] == "mnist" and job["metadata"]["namespace"] == "ml"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["args"][container["args"].index("--inputs") + 1] == (
        "s3://my-s3-bucket/pytorchjob-render/mnist/inputs.pb"
    )
    assert container["args"][-4:] == ["task-module", "wf", "task-name", "train"]


def test_placeholder_flags(task_file: Path, capsys):
    argv = ["render", str(task_file), "train", "--inputs", "s3://b/in.pb", "--output-prefix", "s3://b/out"]
    code, out, _ = run(argv + ["--prev-checkpoint", "s3://b/ckpt0"], capsys)
    assert code == 0
    args = yaml.safe_load(out)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--inputs") + 1] == "s3://b/in.pb"
    assert args[args.index("--output-prefix") + 1] == "s3://b/out"
    assert args[args.index("--prev-checkpoint") + 1] == "s3://b/ckpt0"


@pytest.mark.slow
def test_render_pyflyte_package_output_matches_file_render(task_file: Path, tmp_path: Path, capsys):
    pyflyte = Path(sys.executable).with_name("pyflyte")
    archive = tmp_path / "pkg.tgz"
    subprocess.run(
        [str(pyflyte), "--pkgs", "wf", "package", "--image", IMAGE, "-f", "-o", str(archive)],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    with tarfile.open(archive) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.endswith("_1.pb")]
        pb = tmp_path / Path(member.name).name
        pb.write_bytes(tar.extractfile(member).read())
    assert pb.name == "0_wf.train_1.pb"  # what `pyflyte package` names an admin TaskSpec
    outputs = []
    for argv in (["--template", str(pb)], ["--template", str(archive), "train"], [str(task_file), "train"]):
        code, out, err = run(["render", *argv, "--image", IMAGE], capsys)
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert_valid_pytorchjob(yaml.safe_load(outputs[0]))


def test_render_bare_task_template_pb(tmp_path: Path, capsys):
    import json

    from flyteidl.core import tasks_pb2
    from google.protobuf import json_format

    template = json.loads((TEMPLATES / "official_pod_template.json").read_text())
    pb = tmp_path / "task.pb"
    pb.write_bytes(json_format.ParseDict(template, tasks_pb2.TaskTemplate()).SerializeToString())
    code, from_pb, _ = run(["render", "--template", str(pb), "--name", "x"], capsys)
    code_json, from_json, _ = run(
        ["render", "--template", str(TEMPLATES / "official_pod_template.json"), "--name", "x"], capsys
    )
    assert code == code_json == 0
    assert from_pb == from_json
    assert_valid_pytorchjob(yaml.safe_load(from_pb))


def test_module_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "backend_plugin", "render", "--template", str(TEMPLATES / "hand_cpu.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["kind"] == "PyTorchJob"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["render", "{file}", "nope"], "no task named 'nope'; tasks in this file: ['train']"),
        (["render", "{file}", "not_a_task"], "no task named 'not_a_task'"),
        (["render", "/nonexistent/wf.py", "train"], "/nonexistent/wf.py: no such file"),
        (["render", "--template", "{file}"], "neither a TaskTemplate nor a TaskSpec"),
        (["render", "{file}", "train", "--config", "{config}"], "unknown backend config key 'namespce'"),
    ],
    ids=["unknown-task", "not-a-task", "missing-file", "not-a-template", "bad-config"],
)
def test_errors_exit_2_with_a_message(argv, message, task_file: Path, tmp_path: Path, capsys):
    config = tmp_path / "backend.yaml"
    config.write_text("namespce: ml\n")
    argv = [a.format(file=task_file, config=config) for a in argv]
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    assert message in err


def test_invalid_template_is_reported(tmp_path: Path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text((TEMPLATES / "hand_cpu.json").read_text().replace('"primary_container_name"', '"pytorch.typo"'))
    code, _, err = run(["render", "--template", str(bad)], capsys)
    assert code == 2
    assert "config['pytorch.typo']" in err and "unknown key" in err


@pytest.mark.parametrize("template", ["legacy_v0_elastic", "hand_run_policy_zeros"])
def test_render_shows_the_contract_fixes(template: str, capsys):
    """Issue 11 items 2 and 4 through the renderer: v0 elastic templates render, and zeros arrive."""
    code, out, err = run(["render", "--template", str(TEMPLATES / f"{template}.json"), "--name", "x"], capsys)
    assert code == 0, err
    job = yaml.safe_load(out)
    assert_valid_pytorchjob(job)
    if template == "legacy_v0_elastic":
        assert job["spec"]["elasticPolicy"]["maxReplicas"] == 2 and "Master" not in job["spec"]["pytorchReplicaSpecs"]
    else:
        policy = job["spec"]["runPolicy"]
        assert (policy["backoffLimit"], policy["ttlSecondsAfterFinished"]) == (0, 0)
