"""``pytorchjob render FILE TASK`` of a Flyte 2 task: the job of its flytekit twin, the same ``--check``, Flyte 2's
inputs message for ``--input``, and a clear error naming the extra where ``flyte`` is not installed.

Each twin is one typed function in a file named ``wf.py``: under flytekit (``@task(task_config=...)``, task
``wf.train``) and under Flyte 2 (``flyte.TaskEnvironment(name="wf", plugin_config=...)``, task ``wf.train``), with the
same options. Their jobs differ only where the two SDKs' pods differ: the primary containers' arguments (flytekit's
``pyflyte-execute ... task-module wf task-name train`` against Flyte 2's ``a0 ... mod wf instance train``, the same
input, output and checkpoint paths in both), ``FLYTE_INTERNAL_TASK_VERSION`` (Flyte 2 serializes a version,
``pyflyte package`` none), and the spec digest, which covers both.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from flyteidl2.task import common_pb2

from backend_plugin.cli import main
from pytorch_contract.install import install_hint
from tests.flyte2.served import repo_env
from tests.kube_schema import assert_valid_pytorchjob, assert_valid_trainjob
from tests.targets.jobset.schema import assert_valid_jobset

IMAGE = "ghcr.io/example/train:1.0"
PATHS = ["--inputs", "s3://b/run-1/inputs.pb", "--output-prefix", "s3://b/run-1"]
DIGEST = "pytorch.flyte.org/spec-sha256"

FLYTEKIT = """
import flytekit
from flytekit import PodTemplate, task
from flytekitplugins_pytorch import Elastic, Master, PyTorch, RunPolicy, Worker

R = lambda **kw: flytekit.Resources(**{{("mem" if k == "memory" else k): v for k, v in kw.items()}})
{setup}

@task(task_config={config}, container_image="{image}"{extra})
def train(steps: int, lr: float = 0.1) -> float:
    return steps * lr
"""

FLYTE2 = """
import flyte
from flyte import PodTemplate
from flyte2_pytorch import Connector, Elastic, Master, PyTorch, RunPolicy, Worker

R = flyte.Resources
{setup}
env = flyte.TaskEnvironment(name="wf", image="{image}", plugin_config={config2}{extra})


@env.task
def train(steps: int, lr: float = 0.1) -> float:
    return steps * lr
"""

POD = """
from kubernetes.client import V1Container, V1EmptyDirVolumeSource, V1PodSpec, V1Volume, V1VolumeMount
mount = V1VolumeMount(name="data", mount_path="/data"{mount})
pod = PodTemplate(primary_container_name="trainer", labels={{"team": "ml"}}, pod_spec=V1PodSpec(
    containers=[V1Container(name="trainer", volume_mounts=[mount])], node_selector={{"pool": "gpu"}},
    volumes=[V1Volume(name="data", empty_dir=V1EmptyDirVolumeSource())]))
"""

ROLES = (
    'PyTorch(master=Master(image="ghcr.io/example/master:2", requests=R(cpu="1", memory="2Gi"), '
    'restart_policy="ExitCode"), worker=Worker(replicas=3, requests=R(cpu="2", memory="4Gi"), '
    'limits=R(memory="8Gi"), restart_policy="OnFailure"), run_policy=RunPolicy(clean_pod_policy="All", '
    'backoff_limit=0, active_deadline_seconds=3600, queue="team-a", priority_class="high"), nproc_per_node=2, '
    'shm_size="1Gi")'
)
TRAINJOB = 'PyTorch(worker=Worker(replicas=2), nproc_per_node=2, run_policy=RunPolicy(queue="team-a"))'
JOBSET = (
    'PyTorch(master=Master(image="ghcr.io/example/master:2", requests=R(cpu="1", memory="2Gi"), '
    'restart_policy="ExitCode"), worker=Worker(replicas=3, requests=R(cpu="2", memory="4Gi"), '
    'restart_policy="OnFailure"), run_policy=RunPolicy(backoff_limit=2, queue="team-a", priority_class="high"), '
    'nproc_per_node=2, shm_size="1Gi")'
)
VALIDATE = {"pytorchjob": assert_valid_pytorchjob, "trainjob": assert_valid_trainjob, "jobset": assert_valid_jobset}

#: name -> (flytekit config, Flyte 2 config (None: the same text), pod template, target)
CASES: dict[str, tuple[str, Any, bool, str]] = {
    "roles": (ROLES, None, False, "pytorchjob"),
    "elastic": ('Elastic(nnodes="1:4", nproc_per_node=2, max_restarts=2)', None, False, "pytorchjob"),
    "pod_template": (ROLES, None, True, "pytorchjob"),
    "trainjob": (TRAINJOB, None, True, "trainjob"),
    "trainjob_connector": (TRAINJOB, f"Connector({TRAINJOB})", True, "trainjob"),
    "jobset_connector": (JOBSET, f"Connector({JOBSET})", True, "jobset"),
}


def write_twins(tmp_path: Path, case: str, mount: str = "") -> tuple[Path, Path]:
    """The flytekit and the Flyte 2 file of `case`, each ``wf.py`` in a folder of its own."""
    config, config2, pod, _ = CASES[case]
    setup = POD.format(mount=mount) if pod else ""
    extra = ", pod_template=pod" if pod else ""
    files = []
    for folder, text in (("gen1", FLYTEKIT), ("gen2", FLYTE2)):
        path = tmp_path / folder / "wf.py"
        path.parent.mkdir()
        path.write_text(
            textwrap.dedent(text).format(
                setup=setup, config=config, config2=config2 or config, image=IMAGE, extra=extra
            )
        )
        files.append(path)
    return files[0], files[1]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Every primary container of a job (each role's, or the TrainJob's trainer)."""
    spec = job["spec"]
    if "pytorchReplicaSpecs" in spec:
        return [role["template"]["spec"]["containers"][0] for role in spec["pytorchReplicaSpecs"].values()]
    if "replicatedJobs" in spec:
        return [rjob["template"]["spec"]["template"]["spec"]["containers"][0] for rjob in spec["replicatedJobs"]]
    return [spec["trainer"]]


def without_sdk_differences(job: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]], list[Any]]:
    """The job without what legitimately differs, and what was removed: each primary container's arguments and
    the task version variable."""
    job = copy.deepcopy(job)
    job["metadata"]["annotations"].pop(DIGEST)
    argv, versions = [], []
    for c in containers(job):
        argv.append(c.pop("args", None) or c.pop("command"))
        env = c.get("env", [])
        versions += [e["value"] for e in env if e["name"] == "FLYTE_INTERNAL_TASK_VERSION"]
        c["env"] = [e for e in env if e["name"] != "FLYTE_INTERNAL_TASK_VERSION"]
    return job, argv, versions


def paths(argv: list[str]) -> list[str]:
    """The values of the arguments that name a Flyte path, in order."""
    return [v for v in argv if v.startswith("s3://")]


@pytest.mark.parametrize("case", list(CASES))
def test_the_flyte2_twin_renders_the_flytekit_tasks_job(case: str, tmp_path: Path, capsys) -> None:
    flytekit_file, flyte2_file = write_twins(tmp_path, case)
    target = CASES[case][3]
    jobs = []
    for path in (flytekit_file, flyte2_file):
        code, out, err = run(["render", str(path), "train", "--target", target, *PATHS], capsys)
        assert code == 0, err
        jobs.append((out, yaml.safe_load(out)))
    (flytekit_text, flytekit_job), (flyte2_text, flyte2_job) = jobs
    VALIDATE[target](flyte2_job)
    assert flyte2_text != flytekit_text

    same_flytekit, flytekit_argv, flytekit_versions = without_sdk_differences(flytekit_job)
    same_flyte2, flyte2_argv, flyte2_versions = without_sdk_differences(flyte2_job)
    dump = lambda job: yaml.safe_dump(job, sort_keys=False, width=120)  # noqa: E731 - render's own dump
    assert dump(same_flyte2) == dump(same_flytekit)  # byte for byte, but for the removed parts
    assert flytekit_versions == [] and set(flyte2_versions) == {"v1"}
    for old, new in zip(flytekit_argv, flyte2_argv, strict=True):
        assert old[0] == "pyflyte-execute" and old[-4:] == ["task-module", "wf", "task-name", "train"]
        assert new[0] == "a0" and new[-4:] == ["mod", "wf", "instance", "train"]
        assert paths(new) == paths(old)  # inputs, outputs, raw data, checkpoints: the same places
    assert flyte2_job["metadata"]["annotations"][DIGEST] != flytekit_job["metadata"]["annotations"][DIGEST]


@pytest.mark.parametrize("case", ["roles", "trainjob"])
def test_check_of_both_twins_admits_them_intact(case: str, tmp_path: Path, capsys) -> None:
    reports = []
    for path in write_twins(tmp_path, case):
        code, out, err = run(["render", str(path), "train", "--target", CASES[case][3], "--check", *PATHS], capsys)
        assert code == 0, err
        reports.append(out)
    assert [r.split(" (")[0] for r in reports] == [reports[0].split(" (")[0]] * 2
    assert all("admitted intact" in r for r in reports)


@pytest.mark.parametrize("case", ["pod_template", "trainjob"])
def test_check_of_both_twins_finds_the_same_problem(case: str, tmp_path: Path, capsys) -> None:
    """A mount option the CRD prunes: both front-ends pass it at definition; the admission model catches both."""
    reports = []
    for path in write_twins(tmp_path, case, mount=', bind_mount_options=["rbind"]'):
        code, out, _ = run(["render", str(path), "train", "--target", CASES[case][3], "--check", *PATHS], capsys)
        assert code == 1
        reports.append(out.splitlines())
    flytekit_lines, flyte2_lines = reports
    assert flyte2_lines == flytekit_lines
    assert flyte2_lines[0].startswith("pruned ") and "bindMountOp" in flyte2_lines[0]
    assert flyte2_lines[-1].endswith("nothing would be sent")


def test_input_writes_the_inputs_message_flyte2_pods_read(tmp_path: Path, capsys) -> None:
    from flyte._internal.runtime.convert import convert_from_native_to_inputs, convert_inputs_to_native
    from flyte._internal.runtime.io import load_inputs

    _, flyte2_file = write_twins(tmp_path, "roles")
    out_dir = tmp_path / "run"
    code, out, err = run(
        ["render", str(flyte2_file), "train", "--input", "steps=7", "--inputs-to", str(out_dir)], capsys
    )
    assert code == 0, err
    written = common_pb2.Inputs.FromString((out_dir / "inputs.pb").read_bytes())
    import wf  # the module render loaded

    expected = asyncio.run(convert_from_native_to_inputs(wf.train.native_interface, steps=7)).proto_inputs
    assert written == expected
    loaded = asyncio.run(load_inputs(str(out_dir / "inputs.pb")))  # what the pod's entrypoint (a0) calls
    assert asyncio.run(convert_inputs_to_native(loaded, wf.train.native_interface)) == {"steps": 7, "lr": 0.1}
    args = containers(yaml.safe_load(out))[0]["args"]
    assert args[args.index("--inputs") + 1] == str(out_dir / "inputs.pb")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["--input", "steps=x"], "--input steps='x': not a int value"),
        (["--input", "epochs=3"], "--input epochs: the task has no such input; its inputs: ['lr', 'steps']"),
        (["--input", "lr=0.5"], "missing --input for ['steps'] (no default)"),
    ],
)
def test_input_errors_name_the_input(given: list[str], message: str, tmp_path: Path, capsys) -> None:
    _, flyte2_file = write_twins(tmp_path, "roles")
    code, out, err = run(["render", str(flyte2_file), "train", *given, "--inputs-to", str(tmp_path / "r")], capsys)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_plain_flyte2_task_is_not_a_pytorch_task(tmp_path: Path, capsys) -> None:
    path = tmp_path / "plain.py"
    path.write_text(
        'import flyte\nenv = flyte.TaskEnvironment(name="p")\n\n\n@env.task\ndef f(x: int) -> int:\n    return x\n'
    )
    code, _, err = run(["render", str(path), "f"], capsys)
    assert code == 2 and "p.f is a 'python' task, not a pytorch task" in err and "flyte.TaskEnvironment" in err
    code, _, err = run(["render", str(path), "g"], capsys)
    assert code == 2 and "no task named 'g'; tasks in this file: ['f']" in err


def test_the_default_image_of_flyte2_is_warned_about(tmp_path: Path, capsys) -> None:
    path = tmp_path / "noimage.py"
    path.write_text(
        "import flyte\nfrom flyte2_pytorch import PyTorch\n"
        'env = flyte.TaskEnvironment(name="n", plugin_config=PyTorch())\n\n\n@env.task\ndef f() -> None:\n    pass\n'
    )
    code, _, err = run(["render", str(path), "f", *PATHS], capsys)
    assert code == 0
    assert "is Flyte 2's default image, which has neither torch nor flyte2_pytorch" in err
    code, _, err = run(["render", str(path), "f", "--image", IMAGE, *PATHS], capsys)
    assert code == 0 and "default image" not in err


WITHOUT_FLYTE = """
import importlib.abc, json, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("flyte", "flyteidl2", "flyte_migrate"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from backend_plugin.cli import main
from pytorch_contract.install import install_hint

codes = [main(["render", path, "train", "--inputs", "s3://b/i.pb", "--output-prefix", "s3://b/o"])
         for path in sys.argv[1:]]
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("flyte", "flyteidl2"))
print(json.dumps({"codes": codes, "loaded": loaded}))
"""


@pytest.mark.timeout(180)
def test_without_flyte_a_flytekit_file_renders_and_a_flyte2_file_names_the_extra(tmp_path: Path) -> None:
    flytekit_file, flyte2_file = write_twins(tmp_path, "roles")
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_FLYTE, str(flytekit_file), str(flyte2_file)],
        capture_output=True,
        text=True,
        timeout=150,
        env=repo_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"codes": [0, 3], "loaded": []}
    assert proc.stderr.strip().splitlines()[-1] == f"pytorchjob render: needs 'flyte': {install_hint('flyte2')}"
    assert yaml.safe_load(proc.stdout.split('{"codes"')[0])["kind"] == "PyTorchJob"


def test_a_task_in_a_package_is_named_by_its_dotted_module(tmp_path: Path, capsys) -> None:
    """As for a flytekit task: the module the pods import is the file's, from the first folder that is no package."""
    flytekit_file, flyte2_file = write_twins(tmp_path, "roles")
    modules = []
    for path in (flytekit_file, flyte2_file):
        (path.parent / "__init__.py").write_text("")
        code, out, err = run(["render", str(path), "train", *PATHS], capsys)
        assert code == 0, err
        modules.append(containers(yaml.safe_load(out))[0]["args"][-3])
    assert modules == ["gen1.wf", "gen2.wf"]


@pytest.mark.parametrize(
    ("case", "ignored"),
    [
        ("roles", "queue, priority class, /dev/shm size (shm_size), the Master's restart policy ExitCode"),
        ("pod_template", "queue, priority class, /dev/shm size (shm_size), the Master's restart policy ExitCode"),
        ("trainjob", "queue"),
        ("trainjob_connector", None),
    ],
)
def test_a_native_plugin_task_is_told_which_settings_that_path_ignores(
    case: str, ignored: str | None, tmp_path: Path, capsys
) -> None:
    """A `pytorch` task runs on Flyte 2's native plugin, which reads only the message: render (which shows the job
    this project's connector would make) says which of the job's settings that path drops; `Connector(...)` does not
    go there, and a flytekit task is not Flyte 2's."""
    flytekit_file, flyte2_file = write_twins(tmp_path, case)
    code, _, err = run(["render", str(flyte2_file), "train", "--target", CASES[case][3], *PATHS], capsys)
    assert code == 0, err
    warned = [line for line in err.splitlines() if "native kfoperators plugin" in line]
    if ignored is None:
        assert warned == []
    else:
        (line,) = warned
        assert f"so {ignored} of this job are ignored on that path" in line and "flyte2_pytorch.Connector(" in line
    code, _, err = run(["render", str(flytekit_file), "train", "--target", CASES[case][3], *PATHS], capsys)
    assert code == 0 and "native kfoperators plugin" not in err


def test_the_flyte2_page_lists_what_the_native_plugin_ignores() -> None:
    from backend_plugin.cli import NATIVE_PLUGIN_IGNORES

    page = (Path(__file__).resolve().parents[2] / "docs" / "flyte2.md").read_text(encoding="utf-8")
    (paragraph,) = [p for p in page.split("\n\n") if p.startswith("The native plugin reads only the message")]
    flat = " ".join(paragraph.split())
    assert [label for label in NATIVE_PLUGIN_IGNORES.values() if label not in flat] == []
