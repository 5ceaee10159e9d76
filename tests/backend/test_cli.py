"""`pytorchjob render`: a task in a file, a `.pb` from real `pyflyte package`, JSON templates, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml

from backend_plugin.cli import main
from pytorch_contract.install import install_hint
from tests.helpers.jobs import load
from tests.kube_schema import assert_valid_pytorchjob, assert_valid_trainjob

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
IMAGE = "ghcr.io/example/train:1.0"
REAL_PATHS = ["--inputs", "s3://b/run-1/inputs.pb", "--output-prefix", "s3://b/run-1"]
"""Paths a user gives for a job that runs (not the placeholder bucket): no placeholder warning."""

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


USER_OUTPUT_TASK = textwrap.dedent(
    """
    import ctypes
    import subprocess
    import sys

    from flytekitplugins_pytorch import pytorch_task

    print("model: v1 loaded")  # a mapping-like line: in the YAML it would be a ScannerError
    sys.stdout.write("epochs: 3\\n")
    subprocess.run(["echo", "from a subprocess: yes"], check=True)
    ctypes.CDLL(None).printf(b"from C: printf\\n")


    @pytorch_task(workers_count=1)
    def train(x: int) -> int:
        print("inside the task: never runs at render")
        return x
    """
)


def test_render_stdout_holds_only_the_job(tmp_path: Path):
    """The user's module prints through Python, a subprocess and C's stdio: all of it goes to stderr."""
    (tmp_path / "wf.py").write_text(USER_OUTPUT_TASK)
    out = subprocess.run(
        [sys.executable, "-m", "backend_plugin", "render", "wf.py", "train", "--image", IMAGE, *REAL_PATHS],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (job,) = list(yaml.safe_load_all(out.stdout))
    assert_valid_pytorchjob(job)
    assert out.stdout == yaml.safe_dump(job, sort_keys=False, width=120)
    for line in ("model: v1 loaded", "epochs: 3", "from a subprocess: yes", "from C: printf"):
        assert line in out.stderr.splitlines(), (line, out.stderr)
    assert "inside the task" not in out.stderr + out.stdout


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--name", "My_Job", "--name 'My_Job' (6 characters) is not a job name Kubernetes accepts: use at most 63"),
        ("--name", "a" * 64, f"--name '{'a' * 64}' (64 characters) is not a job name Kubernetes accepts"),
        ("--name", "1st-run", "--name '1st-run' (7 characters) is not a job name Kubernetes accepts"),
        (
            "--image",
            "ghcr.io/MyOrg/x:1",
            "--image 'ghcr.io/MyOrg/x:1' is not an image reference the kubelet accepts (repository path 'MyOrg/x' "
            "has upper-case letters; it must be lower case)",
        ),
        ("--image", "ghcr.io/org/x:", "--image 'ghcr.io/org/x:' is not an image reference the kubelet accepts (tag ''"),
        ("--namespace", "ML", "--namespace 'ML': namespace='ML' is not a DNS-1123 label"),
        ("--namespace", "ml.team", "--namespace 'ml.team': namespace='ml.team' is not a DNS-1123 label"),
    ],
    ids=[
        "name-upper-underscore",
        "name-too-long",
        "name-digit-first",
        "image-upper",
        "image-empty-tag",
        "namespace-upper",
        "namespace-dot",
    ],
)
def test_job_options_get_the_backend_and_sdk_checks(flag: str, value: str, message: str, task_file: Path, capsys):
    code, out, err = run(["render", str(task_file), "train", "--image", IMAGE, flag, value], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"pytorchjob render: {message}"), err


def test_the_same_image_is_refused_by_the_sdk(capsys):
    """`--image` is refused exactly when the SDK refuses the same reference as a task's `container_image`."""
    from flytekitplugins_pytorch.config import ConfigError as SdkConfigError
    from flytekitplugins_pytorch.config import check_image

    for image in ("ghcr.io/MyOrg/x:1", "ghcr.io/org/x:1", "localhost:5000/x", "x@sha256:abc"):
        try:
            check_image("container_image", image)
            sdk_ok = True
        except SdkConfigError:
            sdk_ok = False
        code, _, _ = run(["render", "--template", str(TEMPLATES / "hand_cpu.json"), "--image", image], capsys)
        assert (code == 0) == sdk_ok, image


def test_placeholder_paths_warn_once_with_the_fixing_flags(task_file: Path, tmp_path: Path, capsys):
    code, out, err = run(["render", str(task_file), "train", "--image", IMAGE, "--name", "mnist"], capsys)
    assert code == 0 and yaml.safe_load(out)["kind"] == "PyTorchJob"
    (line,) = err.splitlines()  # once, although three replicas and four paths use the placeholder
    assert line.startswith(
        "pytorchjob render: warning: the job reads its inputs from the placeholder "
        "s3://my-s3-bucket/pytorchjob-render/mnist/inputs.pb, which nothing writes"
    ), line
    assert "--input NAME=VALUE with --inputs-to" in line and "--output-prefix s3://" in line
    # real inputs, placeholder outputs: the warning names only --output-prefix
    code, _, err = run(["render", str(task_file), "train", "--image", IMAGE, "--inputs", "s3://b/in.pb"], capsys)
    (line,) = err.splitlines()
    assert "reads its inputs" not in line and "writes its outputs under the placeholder" in line
    assert line.endswith("pass --output-prefix s3://<bucket>/<run>"), line
    # both given: silent
    code, _, err = run(["render", str(task_file), "train", "--image", IMAGE, *REAL_PATHS], capsys)
    assert code == 0 and err == ""
    # a TrainJob's one node template is checked the same way
    code, out, err = run(["render", "--target", "trainjob", str(task_file), "train", "--image", IMAGE], capsys)
    assert code == 0 and yaml.safe_load(out)["kind"] == "TrainJob"
    (line,) = [line for line in err.splitlines() if "placeholder" in line]
    assert "--input NAME=VALUE with --inputs-to" in line and "--output-prefix s3://" in line


def test_invalid_template_is_reported(tmp_path: Path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text((TEMPLATES / "hand_cpu.json").read_text().replace('"primary_container_name"', '"pytorch.typo"'))
    code, _, err = run(["render", "--template", str(bad)], capsys)
    assert code == 2
    assert "config['pytorch.typo']" in err and "unknown key" in err


# --- issue 15 item 5: a rendered job that runs as-is ---------------------------------------------------------

INPUTS_FILE = textwrap.dedent(
    """
    from typing import List

    from flytekitplugins_pytorch import pytorch_task


    @pytorch_task(workers_count=1)
    def train(epochs: int, lr: float = 0.1, layers: List[int] = [1, 2], fast: bool = False) -> float:
        return lr
    """
)


def read_inputs(path: Path) -> dict:
    """The Python values of an inputs.pb written for INPUTS_FILE's task."""
    from flyteidl.core import literals_pb2
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.type_engine import TypeEngine
    from flytekit.models.literals import LiteralMap

    message = literals_pb2.LiteralMap()
    message.ParseFromString(path.read_bytes())
    types = {"epochs": int, "lr": float, "layers": list[int], "fast": bool}
    ctx = FlyteContextManager.current_context()
    return TypeEngine.literal_map_to_kwargs(ctx, LiteralMap.from_flyte_idl(message), types)


@pytest.fixture
def inputs_file(tmp_path: Path) -> Path:
    path = tmp_path / "wf_inputs.py"
    path.write_text(INPUTS_FILE)
    return path


def job_inputs_arg(job: dict, role: str) -> str:
    (container,) = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"]
    args = container["args"]
    return args[args.index("--inputs") + 1]


def test_input_writes_inputs_pb_locally_and_the_job_reads_it(inputs_file: Path, tmp_path: Path, capsys):
    folder = tmp_path / "in"
    argv = ["render", str(inputs_file), "train", "--image", IMAGE, "--input", "epochs=3", "--input", "layers=[4, 5]"]
    code, out, err = run([*argv, "--input", "fast=true", "--inputs-to", str(folder)], capsys)
    assert code == 0, err
    job = yaml.safe_load(out)
    assert_valid_pytorchjob(job)
    assert job_inputs_arg(job, "Master") == job_inputs_arg(job, "Worker") == str(folder / "inputs.pb")
    # the defaults of the Python function fill what was not given
    assert read_inputs(folder / "inputs.pb") == {"epochs": 3, "lr": 0.1, "layers": [4, 5], "fast": True}
    assert "pods cannot read a local file" in err
    assert "default image" not in err


def test_input_written_to_a_url_prefix(inputs_file: Path, tmp_path: Path, capsys):
    url = (tmp_path / "bucket" / "run-1").as_uri()
    argv = ["render", str(inputs_file), "train", "--image", IMAGE, "--input", "epochs=2", "--inputs-to", url]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert job_inputs_arg(yaml.safe_load(out), "Master") == f"{url}/inputs.pb"
    assert read_inputs(tmp_path / "bucket" / "run-1" / "inputs.pb")["epochs"] == 2
    assert "local file" not in err


def test_input_from_a_template_needs_every_input(tmp_path: Path, capsys):
    template = tmp_path / "t.json"
    template.write_text((TEMPLATES / "sdk_per_role.json").read_text())
    argv = ["render", "--template", str(template), "--input", "x=7", "--inputs-to", str(tmp_path / "in")]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert job_inputs_arg(yaml.safe_load(out), "Master") == str(tmp_path / "in" / "inputs.pb")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--input", "epochs=x", "--inputs-to", "{tmp}"], "--input epochs='x': not a int value"),
        (["--input", "lr=1", "--inputs-to", "{tmp}"], "missing --input for ['epochs'] (no default)"),
        (["--input", "epoch=1", "--inputs-to", "{tmp}"], "--input epoch: the task has no such input"),
        (["--input", "epochs=1"], "--input needs --inputs-to PREFIX"),
        (["--input", "epochs"], "--input 'epochs': expected NAME=VALUE"),
        (["--input", "epochs=1", "--input", "epochs=2", "--inputs-to", "{tmp}"], "--input epochs: given twice"),
    ],
    ids=["bad-value", "missing", "unknown", "no-prefix", "no-equals", "twice"],
)
def test_input_errors_are_one_line(extra: list, message: str, inputs_file: Path, tmp_path: Path, capsys):
    argv = ["render", str(inputs_file), "train", "--image", IMAGE, *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err


def test_default_image_is_warned_about(inputs_file: Path, capsys):
    code, out, err = run(["render", str(inputs_file), "train"], capsys)
    assert code == 0
    assert "Master image cr.flyte.org/flyteorg/flytekit:" in err and "Worker image" in err
    assert "neither torch nor flytekitplugins-pytorch" in err
    code, out, err = run(["render", str(inputs_file), "train", "--image", IMAGE, *REAL_PATHS], capsys)
    assert code == 0 and err == ""


def test_default_image_is_warned_about_on_a_trainjob(inputs_file: Path, capsys):
    code, out, err = run(["render", "--target", "trainjob", str(inputs_file), "train"], capsys)
    assert code == 0 and "kind: TrainJob" in out
    assert "node image cr.flyte.org/flyteorg/flytekit:" in err
    code, out, err = run(["render", "--target", "trainjob", str(inputs_file), "train", "--image", IMAGE], capsys)
    assert code == 0 and "flytekit's default image" not in err


# --- item 8: a config error is one line; render is deterministic -----------------------------------------------


@pytest.mark.parametrize(
    "yaml_text",
    ["log_links: 5", "accelerators: {A100: {node_selector: 5}}", "extra_gpu_resource_names: 5", "backoff_limit: [1"],
    ids=["log-links-int", "selector-int", "gpu-names-int", "not-yaml"],
)
def test_config_errors_are_one_line(yaml_text: str, tmp_path: Path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml_text + "\n")
    code, out, err = run(["render", "--template", str(TEMPLATES / "hand_cpu.json"), "--config", str(config)], capsys)
    assert code == 2 and out == ""
    assert err.startswith("pytorchjob render: ") and str(config) in err
    assert "Traceback" not in err


def test_render_ignores_the_key_order_of_a_json_template(tmp_path: Path, capsys):
    """Keys of the same template in another order (as a protobuf map or Struct may iterate) give the same job."""
    import json

    def reverse(value):
        if isinstance(value, dict):
            return {k: reverse(value[k]) for k in reversed(list(value))}
        if isinstance(value, list):
            return [reverse(v) for v in value]
        return value

    for name in ("official_pod_template", "hand_pod_template", "sdk_role_pod_templates"):
        source = TEMPLATES / f"{name}.json"
        shuffled = tmp_path / f"{name}.json"
        shuffled.write_text(json.dumps(reverse(json.loads(source.read_text()))))
        _, expected, _ = run(["render", "--template", str(source), "--name", "x"], capsys)
        _, got, _ = run(["render", "--template", str(shuffled), "--name", "x"], capsys)
        assert got == expected, name


# --- item 9: a map_task over a pytorch task --------------------------------------------------------------------

MAP_FILE = textwrap.dedent(
    """
    from flytekit import map_task, workflow

    from flytekitplugins_pytorch import pytorch_task


    @pytorch_task(workers_count=1)
    def train(seed: int) -> float:
        return float(seed)


    mapped = map_task(train)


    @workflow
    def repeated(seeds: list[int] = [1, 2, 3]) -> list[float]:
        return mapped(seed=seeds)
    """
)


def test_map_task_renders_as_one_pytorchjob_per_item(tmp_path: Path, capsys):
    """The mapped task is a `pytorch` task running pyflyte-map-execute over the whole list; which item a job
    trains is the FLYTE_K8S_ARRAY_INDEX that Flyte's array node gives each execution (docs/cluster.md)."""
    path = tmp_path / "wf_map.py"
    path.write_text(MAP_FILE)
    argv = ["render", str(path), "mapped", "--image", IMAGE, "--input", "seed=[1, 2, 3]", "--inputs-to", str(tmp_path)]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    job = yaml.safe_load(out)
    assert_valid_pytorchjob(job)
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["args"][0] == "pyflyte-map-execute"
    assert "flytekit.core.array_node_map_task.ArrayNodeMapTaskResolver" in container["args"]


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


def test_missing_backend_extra_is_one_line_naming_the_extra(tmp_path: Path, capsys, monkeypatch):
    """A pod-template task needs the kubernetes client (the `backend` extra); without it: one line, exit 3."""
    for name in [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")] + ["kubernetes"]:
        monkeypatch.setitem(sys.modules, name, None)  # `import kubernetes...` now raises ModuleNotFoundError
    template = json.loads((TEMPLATES / "official_pod_template.json").read_text())
    template["id"]["name"] = "not-read-before"  # the reader caches specs per content: this one is read afresh
    path = tmp_path / "task.json"
    path.write_text(json.dumps(template))
    code, out, err = run(["render", "--template", str(path)], capsys)
    assert (code, out) == (3, "")
    assert err == f"pytorchjob render: needs 'kubernetes': {install_hint('backend')}\n"


def test_a_missing_module_of_no_extra_is_not_disguised(tmp_path: Path, capsys):
    """Only modules an extra installs get the install hint; a user's own broken import keeps its error, on one line
    naming the file and line."""
    source = tmp_path / "broken.py"
    source.write_text("import os\nimport no_such_module_anywhere\n")
    code, out, err = run(["render", str(source), "train"], capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"pytorchjob render: {source}:2: ModuleNotFoundError while importing it: "
        "No module named 'no_such_module_anywhere'\n"
    )


SEED_FILE = textwrap.dedent(
    """
    from flytekitplugins_pytorch import pytorch_task


    @pytorch_task(
        workers_count=2,
        per_replica_cpu_request="500m",
        per_replica_memory_request="4Gi",
        per_replica_memory_limit="8Gi",
        per_replica_gpu_limit="1",
    )
    def train(batch_size: int, epochs: int, learning_rate: float) -> list[float]:
        return [learning_rate] * epochs
    """
)


def test_render_target_trainjob(tmp_path: Path, capsys):
    source = tmp_path / "seed.py"
    source.write_text(SEED_FILE)
    config = tmp_path / "backend.yaml"
    config.write_text("ttl_seconds_after_finished: null\n")
    argv = ["render", "--target", "trainjob", "--config", str(config), str(source), "train", "--image", "img:1"]
    code = main([*argv, "--output-prefix", "s3://b/run-1"])  # real paths: no placeholder warning
    out, err = capsys.readouterr()
    assert code == 0, err
    job = yaml.safe_load(out)
    assert_valid_trainjob(job)
    assert job["kind"] == "TrainJob" and job["spec"]["trainer"]["numNodes"] == 3
    assert err == ""


def test_render_template_target_trainjob_refuses_elastic(tmp_path: Path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(load("sdk_elastic")))
    code = main(["render", "--target", "trainjob", "--template", str(path)])
    _, err = capsys.readouterr()
    assert code == 2 and "Elastic(nnodes=" in err and "target: pytorchjob" in err


FLYTE2_TASK = textwrap.dedent(
    """
    import flyte
    from flyte2_pytorch import PyTorch, Worker

    env = flyte.TaskEnvironment(name="wf", image="ghcr.io/example/train:1.0", plugin_config=PyTorch(worker=Worker(2)))


    @env.task
    def train(steps: int) -> float:
        return float(steps)
    """
)


def test_a_flyte2_render_says_its_run_placeholders_in_one_line(tmp_path: Path, capsys) -> None:
    """Flyte 2's `{{.runName}}`, `{{.actionName}}` and `{{.runStartTime}}` are in every Flyte 2 job: one line says
    who fills them, not three near-identical warnings that the job cannot run."""
    pytest.importorskip("flyte")
    path = tmp_path / "wf.py"
    path.write_text(FLYTE2_TASK)
    code, out, err = run(["render", str(path), "train", *REAL_PATHS], capsys)
    assert code == 0, err
    assert "{{.runName}}" in out and "{{.actionName}}" in out and "{{.runStartTime}}" in out
    lines = [line for line in err.splitlines() if "{{" in line]
    assert len(lines) == 1, err
    assert all(p in lines[0] for p in ("{{.runName}}", "{{.actionName}}", "{{.runStartTime}}"))
    assert "Flyte 2 fills them when it runs the task" in lines[0] and "cannot run" not in lines[0]


def test_placeholders_render_cannot_fill_are_one_warning() -> None:
    from backend_plugin.cli import unfilled_placeholder_warnings

    job = {"args": ["--tgz", "{{ .remote_package_path }}", "--dest", "{{ .dest_dir }}", "{{.Other}}"]}
    (line,) = unfilled_placeholder_warnings(job)
    assert line.startswith("warning: the job still holds the placeholders ")
    assert "{{ .remote_package_path }} (the uploaded code archive" in line and "{{ .dest_dir }} (the folder" in line
    assert "{{.Other}} (a value Flyte fills when it runs the task" in line and line.endswith("cannot run")
    assert unfilled_placeholder_warnings({"args": ["a0", "--inputs", "s3://b/i.pb"]}) == []
