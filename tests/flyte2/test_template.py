"""A Flyte 2 task as the template the backend reads (``flyte2_pytorch.template``): the ``pytorch.*`` keys read where
Flyte 2 keeps them, a CRD-valid PyTorchJob and TrainJob from the backend's reader and writers, and ``pytorchjob render
--template`` on the JSON ``python -m flyte2_pytorch.template`` prints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend_plugin.targets.pytorchjob.writer import to_pytorchjob
from backend_plugin.targets.trainjob.writer import to_trainjob
from backend_plugin.template import read_template
from flyte2_pytorch.template import task_template
from tests.flyte2.tasks import POD_TEMPLATE_TASK, TASKS, TRAINJOB_TASK
from tests.helpers.jobs import META
from tests.kube_schema import assert_valid_pytorchjob, assert_valid_trainjob

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "pytorch.accelerator": "nvidia-tesla-a100",
    "pytorch.clean_pod_policy": "All",
    "pytorch.master.image": "ghcr.io/example/master:2",
    "pytorch.master.restart_policy": "ExitCode",
    "pytorch.nproc_per_node": "2",
    "pytorch.queue": "team-a",
    "pytorch.shm_size": "1Gi",
    "pytorch.suspend": "true",
}


def test_the_reader_reads_the_pytorch_keys_flyte2_keeps_in_the_container() -> None:
    """The front-end hands over Flyte 2's template as it is (the keys on the container); reading them is the
    backend reader's Flyte 2 dialect."""
    t = task_template(TASKS["roles"], root_dir=ROOT)
    assert {kv["key"]: kv["value"] for kv in t["container"]["config"] if kv["key"].startswith("pytorch.")} == KEYS
    assert dict(read_template(t).config) == KEYS
    assert t["container"]["args"][0] == "a0"


def test_a_pod_template_task_keeps_its_keys() -> None:
    """Flyte 2's serializer drops a container's config in a K8sPod target; the keys come from the task."""
    t = task_template(POD_TEMPLATE_TASK, root_dir=ROOT)
    assert "k8sPod" in t and "container" not in t
    assert {k: v for k, v in t["config"].items() if k.startswith("pytorch.")} == KEYS


@pytest.mark.parametrize("case", ["default", "roles", "master_only", "elastic", "elastic_word"])
def test_crd_valid_pytorchjob(case: str) -> None:
    assert_valid_pytorchjob(to_pytorchjob(read_template(task_template(TASKS[case], root_dir=ROOT)), META, None))


@pytest.mark.parametrize(
    "task", [TASKS["default"], TASKS["master_only"], TRAINJOB_TASK], ids=["default", "master_only", "pod_template"]
)
def test_crd_valid_trainjob(task: object) -> None:
    assert_valid_trainjob(to_trainjob(read_template(task_template(task, root_dir=ROOT)), META, None))


def test_pod_template_task_renders() -> None:
    job = to_pytorchjob(read_template(task_template(POD_TEMPLATE_TASK, root_dir=ROOT)), META, None)
    assert_valid_pytorchjob(job)
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert master["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert master["metadata"]["labels"]["team"] == "ml"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "target", "kind"),
    [("POD_TEMPLATE_TASK", "pytorchjob", "PyTorchJob"), ("TRAINJOB_TASK", "trainjob", "TrainJob")],
)
def test_pytorchjob_render_reads_the_printed_template(tmp_path: Path, task: str, target: str, kind: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    printed = subprocess.run(
        [sys.executable, "-m", "flyte2_pytorch.template", str(ROOT / "tests/flyte2/tasks.py"), task],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert printed.returncode == 0, printed.stderr[-3000:]
    (tmp_path / "task.json").write_text(printed.stdout)
    cli = shutil.which("pytorchjob", path=str(Path(sys.executable).parent)) or "pytorchjob"
    rendered = subprocess.run(
        [cli, "render", "--template", str(tmp_path / "task.json"), "--target", target],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    job = yaml.safe_load(rendered.stdout)
    assert job["kind"] == kind
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def test_an_unknown_task_name_is_named() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    printed = subprocess.run(
        [sys.executable, "-m", "flyte2_pytorch.template", str(ROOT / "tests/flyte2/tasks.py"), "nothing_here"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert printed.returncode == 2 and "no Flyte 2 pytorch task named 'nothing_here'" in printed.stderr


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import flyte\n\ndef train(:\n    pass\n", "bad.py:3: syntax error: "),
        (
            "import flyte\nraise RuntimeError('no GPU config')\n",
            "bad.py:2: RuntimeError while importing it: no GPU config",
        ),
    ],
    ids=["syntax-error", "raises-on-import"],
)
def test_a_broken_file_is_one_line_naming_file_and_line(source: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    printed = subprocess.run(
        [sys.executable, "-m", "flyte2_pytorch.template", str(tmp_path / "bad.py"), "train"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (printed.returncode, printed.stdout) == (2, "")
    (line,) = printed.stderr.splitlines()
    assert message in line and "Traceback" not in printed.stderr
