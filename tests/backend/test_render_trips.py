"""What a newcomer tripped on with `pytorchjob render`, each done the way they did it.

- `--image ubuntu` (no tag) renders, as `container_image="ubuntu"` on the decorator does: the kubelet pulls
  `:latest`; whatever flytekit's image handling raises is one line;
- `--name` of 51 to 63 characters renders when every name the kind derives from it fits 63 (`<name>-worker-<i>`,
  `<name>-node-0-<i>-xxxxx`), and names the longest that fits when not;
- `--check` keeps its report (exit 1) when the backend refuses a setting before it writes a job;
- `--check` notes a job plain `kubectl apply` cannot create (its last-applied annotation would be over 256 KiB).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from backend_plugin.cli import RenderError, flytekit_image, main
from tests.helpers.jobs import load

PATHS = ["--inputs", "s3://b/run-1/inputs.pb", "--output-prefix", "s3://b/run-1"]

TASK = textwrap.dedent(
    """
    from flytekitplugins_pytorch import pytorch_task


    @pytorch_task(workers_count={workers}{image})
    def train(epochs: int) -> float:
        return float(epochs)
    """
)


def task_file(tmp_path: Path, workers: int = 2, image: str = "") -> Path:
    path = tmp_path / "train.py"
    path.write_text(TASK.format(workers=workers, image=f", container_image={image!r}" if image else ""))
    return path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def images(job: dict) -> set[str]:
    return {
        c["image"]
        for spec in job["spec"]["pytorchReplicaSpecs"].values()
        for c in spec["template"]["spec"]["containers"]
    }


@pytest.mark.parametrize("image", ["ubuntu", "localhost/x", "localhost:5000/x", "ghcr.io/org/train"])
def test_an_image_without_a_tag_renders_as_the_decorator_does(image: str, tmp_path: Path, capsys) -> None:
    code, out, err = run(["render", str(task_file(tmp_path)), "train", "--image", image, *PATHS], capsys)
    assert code == 0, err
    assert "Traceback" not in err and "AssertionError" not in err
    assert images(yaml.safe_load(out)) == {image}  # the kubelet pulls it as <image>:latest
    decorated = tmp_path / "decorated"
    decorated.mkdir()
    code, out, err = run(["render", str(task_file(decorated, image=image)), "train", *PATHS], capsys)
    assert code == 0, err
    assert images(yaml.safe_load(out)) == {image}


@pytest.mark.parametrize(
    ("image", "fqn", "tag", "digest"),
    [
        ("ubuntu", "ubuntu", "latest", None),
        ("localhost:5000/x", "localhost:5000/x", "latest", None),
        ("ghcr.io/org/train:1.0", "ghcr.io/org/train", "1.0", None),
        ("x@sha256:" + "a" * 64, "x", None, "sha256:" + "a" * 64),
        ("x:1@sha256:" + "a" * 64, "x:1", None, "sha256:" + "a" * 64),
    ],
)
def test_flytekits_image_gets_the_kubelets_default_tag(image: str, fqn: str, tag, digest) -> None:
    from flytekit.configuration import Image

    made = flytekit_image(Image, image)
    assert (made.fqn, made.tag, made.digest) == (fqn, tag, digest)


@pytest.mark.parametrize("error", [AssertionError("missing tag"), ValueError("bad"), TypeError("odd")])
def test_whatever_flytekits_image_raises_is_one_line(error: Exception) -> None:
    def refusing(**kwargs):
        raise error

    with pytest.raises(RenderError) as raised:
        flytekit_image(refusing, "ubuntu")
    assert "\n" not in str(raised.value) and str(raised.value).startswith("--image 'ubuntu': ")


NAMES = [
    # (target, replicas, length, fits): a PyTorchJob's pods and Services are <name>-<role>-<i>; a TrainJob's node
    # pods <name>-node-0-<i>-xxxxx (JobSet's webhook counts a 5-character random suffix)
    ("pytorchjob", 2, 51, True),
    ("pytorchjob", 2, 54, True),
    ("pytorchjob", 2, 55, False),
    ("pytorchjob", 11, 53, True),
    ("pytorchjob", 11, 54, False),
    ("trainjob", 2, 48, True),
    ("trainjob", 2, 49, False),
    ("trainjob", 11, 47, True),
    ("trainjob", 11, 48, False),
    # a JobSet's pods: <name>-<replicated job>-0-<i>-xxxxx (its webhook refuses the job; one verdict, not two)
    ("jobset", 2, 46, True),
    ("jobset", 2, 47, False),
    ("jobset", 11, 45, True),
    ("jobset", 11, 46, False),
]


@pytest.mark.parametrize(("target", "workers", "length", "fits"), NAMES, ids=[f"{t}-{w}-{n}" for t, w, n, _ in NAMES])
def test_a_name_renders_when_every_name_the_kind_derives_fits(
    target: str, workers: int, length: int, fits: bool, tmp_path: Path, capsys
) -> None:
    name = "m" + "x" * (length - 1)
    replicas = workers - 1 if target == "trainjob" else workers  # a TrainJob's nodes: the master and the workers
    argv = ["render", str(task_file(tmp_path, replicas)), "train", "--image", "img:1", "--target", target]
    code, out, err = run([*argv, "--name", name, *PATHS], capsys)
    if fits:
        assert code == 0, err
        assert yaml.safe_load(out)["metadata"]["name"] == name  # as given, never shortened
        return
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert f"({length} characters)" in line and f"use at most {length - 1} characters" in line


def refused_template(tmp_path: Path) -> str:
    """An elastic task, which a TrainJob cannot express: its writer refuses it."""
    path = tmp_path / "elastic.json"
    path.write_text(json.dumps(load("sdk_elastic")))
    return str(path)


def test_check_reports_a_setting_the_writer_refuses(tmp_path: Path, capsys) -> None:
    argv = ["render", "--template", refused_template(tmp_path), "--target", "trainjob", *PATHS]
    code, out, err = run([*argv, "--check"], capsys)
    assert (code, err) == (1, "")
    first, last = out.splitlines()
    assert first.startswith("refused -: ") and "target: pytorchjob" in first
    assert last.startswith("TrainJob ") and last.endswith("refused (1 problem(s)); nothing would be sent")
    code, out, err = run(argv, capsys)  # without --check: the same refusal is the one-line error
    assert (code, out) == (2, "") and "target: pytorchjob" in err


@pytest.mark.parametrize(("size", "noted"), [(200_000, False), (300_000, True)])
def test_check_notes_a_job_plain_kubectl_apply_cannot_create(size: int, noted: bool, tmp_path: Path, capsys) -> None:
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["containers"][0]["env"] = [{"name": "CONFIG_JSON", "value": "j" * size}]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(t))
    argv = ["render", "--template", str(path), "--target", "trainjob", *PATHS]
    code, out, _ = run([*argv, "--check"], capsys)
    assert code == 0 and "admitted intact" in out.splitlines()[-1]
    notes = [line for line in out.splitlines() if line.startswith("note -: kubectl apply:")]
    assert len(notes) == int(noted)
    if noted:
        assert "kubectl create -f" in notes[0] and "kubectl apply --server-side" in notes[0]
    code, out, err = run(argv, capsys)
    assert code == 0 and ("note: kubectl apply:" in err) is noted


@pytest.mark.parametrize(
    ("option", "what"),
    [
        ("--crd", "kubectl get crd pytorchjobs.kubeflow.org -o yaml"),
        ("--config", "leave --config out to use PYTORCHJOB_CONFIG"),
    ],
)
def test_a_missing_crd_or_config_file_names_the_option_the_path_and_what_to_do(
    option: str, what: str, tmp_path: Path, capsys
) -> None:
    missing = tmp_path / "nope.yaml"
    code, out, err = run(["render", str(task_file(tmp_path)), "train", *PATHS, option, str(missing)], capsys)
    assert (code, out) == (2, "")
    (line,) = err.strip().splitlines()  # the one line, before the task's module is even imported
    assert line.startswith(f"pytorchjob render: {option} {missing}: no such file")
    assert "Errno" not in line and what in line


@pytest.mark.parametrize(
    "option", ["--output-prefix", "--inputs", "--raw-output-prefix", "--checkpoint-prefix", "--prev-checkpoint"]
)
@pytest.mark.parametrize("value", ["notaurl", "bucket/run-1", "./out"])
def test_a_path_option_that_is_neither_a_url_nor_an_absolute_path_is_refused(
    option: str, value: str, tmp_path: Path, capsys
) -> None:
    argv = ["render", str(task_file(tmp_path)), "train", *PATHS]
    code, out, err = run([*argv, option, value], capsys)
    assert (code, out) == (2, ""), err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"pytorchjob render: {option} {value!r} is neither a URL nor an absolute path")
    assert "s3://" in line and "/mnt/" in line  # what is allowed, by example


@pytest.mark.parametrize(
    "value", ["s3://b/run-2", "gs://b/run-2", "abfs://c@a.dfs.core.windows.net/run-2", "file:///mnt/runs/2", "/mnt/2"]
)
def test_a_url_or_an_absolute_path_is_accepted_by_every_path_option(value: str, tmp_path: Path, capsys) -> None:
    code, out, err = run(["render", str(task_file(tmp_path)), "train", *PATHS, "--output-prefix", value], capsys)
    assert code == 0, err
    assert value in out


def test_a_misspelled_flag_shows_renders_usage_and_the_nearest_flag(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["render", str(task_file(tmp_path)), "train", "--chekc"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: pytorchjob render ")
    assert "unrecognized arguments: --chekc" in err and "--check" in err.splitlines()[-1]
