"""`pytorchjob render` and the admission model: `--check`, refusals on one line, the namespace only when given, and
the render errors every user meets (a syntax error, a plain task, a placeholder render cannot fill, `--help`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from backend_plugin.cli import main
from tests.helpers.jobs import load

IMAGE = "ghcr.io/example/train:1.0"
PATHS = ["--inputs", "s3://b/run-1/inputs.pb", "--output-prefix", "s3://b/run-1"]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def template_file(tmp_path: Path, template: dict, name: str = "task.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(template))
    return str(path)


def bad_labels(tmp_path: Path) -> str:
    t = load("sdk_pod_template")
    t["k8sPod"]["metadata"]["labels"] = {"team": "ml team"}
    return template_file(tmp_path, t)


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_namespace_is_written_only_when_given(target: str, tmp_path: Path, capsys) -> None:
    path = template_file(tmp_path, load("sdk_pod_template"))
    code, out, err = run(["render", "--template", path, "--target", target, *PATHS], capsys)
    assert code == 0, err
    assert "namespace" not in yaml.safe_load(out)["metadata"]  # `kubectl create -n NS -f` decides
    code, out, _ = run(["render", "--template", path, "--target", target, "--namespace", "ml", *PATHS], capsys)
    assert code == 0 and yaml.safe_load(out)["metadata"]["namespace"] == "ml"


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_check_of_a_good_job_says_admitted_intact(target: str, tmp_path: Path, capsys) -> None:
    path = template_file(tmp_path, load("sdk_pod_template"))
    code, out, _ = run(["render", "--template", path, "--target", target, "--check", *PATHS], capsys)
    assert code == 0
    assert out.startswith(("PyTorchJob ", "TrainJob ")) and "admitted intact" in out


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_check_prints_what_would_not_start_and_why(target: str, tmp_path: Path, capsys) -> None:
    code, out, _ = run(["render", "--template", bad_labels(tmp_path), "--target", target, "--check", *PATHS], capsys)
    assert code == 1
    lines = out.splitlines()
    assert all(line.startswith("unstartable ") for line in lines[:-1]), out
    assert "pod_template labels: team='ml team' is not a valid label value" in out
    assert "every pod create would fail" in out and lines[-1].endswith("nothing would be sent")


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_render_refuses_a_job_the_cluster_would_not_start_on_one_line(target: str, tmp_path: Path, capsys) -> None:
    code, out, err = run(["render", "--template", bad_labels(tmp_path), "--target", target, *PATHS], capsys)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith("pytorchjob render: the ") and "would not be admitted by the cluster" in line


def env_template(tmp_path: Path, entries: int) -> str:
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["containers"][0]["env"] = [{"name": f"V{i}", "value": "x"} for i in range(entries)]
    return template_file(tmp_path, t)


def test_a_trainjob_under_max_items_is_admitted_with_a_note_on_the_executions_headroom(tmp_path: Path, capsys) -> None:
    """The verdict is about the object printed (the task's 120 entries and the few the writer writes in a render, which
    belongs to no execution: under the CRD's maxItems 128); what an execution adds is a note naming the headroom."""
    path = env_template(tmp_path, 120)
    code, out, err = run(["render", "--template", path, "--target", "trainjob", *PATHS], capsys)
    assert code == 0, err
    assert len(yaml.safe_load(out)["spec"]["trainer"]["env"]) <= 128
    (note,) = [line for line in err.splitlines() if "note: environment:" in line]
    assert "is admitted as it is" in note and "would hold up to 131, 3 over the limit" in note
    assert "keep at most 117 entries of your own (120 now)" in note
    code, out, _ = run(["render", "--template", path, "--target", "trainjob", "--check", *PATHS], capsys)
    assert code == 0 and "admitted intact" in out.splitlines()[-1]
    assert out.startswith("note spec.trainer.env: environment: this TrainJob holds")
    code, _, err = run(["render", "--template", path, "--target", "pytorchjob", *PATHS], capsys)
    assert code == 0 and "note: environment" not in err  # a PyTorchJob's env has no such limit


def test_a_trainjob_over_max_items_is_refused_naming_environment(tmp_path: Path, capsys) -> None:
    code, out, err = run(["render", "--template", env_template(tmp_path, 127), "--target", "trainjob", *PATHS], capsys)
    assert (code, out) == (2, "")
    assert "environment entries (127 of the task's, " in err
    assert "more than the 128 spec.trainer.env admits (maxItems); keep at most 117 of your own" in err


def test_a_syntax_error_in_the_users_file_is_one_line_naming_file_and_line(tmp_path: Path, capsys) -> None:
    source = tmp_path / "train.py"
    source.write_text("import os\n\ndef train(:\n    pass\n")
    code, out, err = run(["render", str(source), "train"], capsys)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"pytorchjob render: {source}:3: syntax error: "), line


def test_an_exception_while_importing_names_the_users_line(tmp_path: Path, capsys) -> None:
    source = tmp_path / "train.py"
    source.write_text("x = 1\nraise RuntimeError('no GPU config')\n")
    code, _, err = run(["render", str(source), "train"], capsys)
    assert code == 2
    assert err == f"pytorchjob render: {source}:2: RuntimeError while importing it: no GPU config\n"


def test_a_plain_task_gets_a_sentence_saying_what_render_is_for(tmp_path: Path, capsys) -> None:
    source = tmp_path / "plain.py"
    source.write_text(
        textwrap.dedent(
            """
            from flytekit import task

            @task
            def hello(x: int) -> int:
                return x
            """
        )
    )
    code, out, err = run(["render", str(source), "hello", "--image", IMAGE], capsys)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert "is a 'python-task' task, not a pytorch task: render prints the PyTorchJob or TrainJob" in line


def test_an_unfilled_placeholder_is_warned_about(tmp_path: Path, capsys) -> None:
    """A fast-registered package's `{{ .remote_package_path }}` is filled at registration, not by render."""
    t = load("sdk_pod_template")
    args = t["k8sPod"]["podSpec"]["containers"][0]["args"]
    t["k8sPod"]["podSpec"]["containers"][0]["args"] = [
        "pyflyte-fast-execute",
        "--additional-distribution",
        "{{ .remote_package_path }}",
        "--dest-dir",
        "{{ .dest_dir }}",
        "--",
        *args,
    ]
    code, out, err = run(["render", "--template", template_file(tmp_path, t), *PATHS], capsys)
    assert code == 0
    assert "{{ .remote_package_path }}" in out  # the job is as the connector would write it
    (warning,) = [line for line in err.splitlines() if "placeholders {{" in line]  # one line naming both
    assert "{{ .remote_package_path }} (" in warning and "{{ .dest_dir }} (" in warning
    assert "pyflyte package --fast" in warning and "pyflyte register" in warning


def test_render_help_has_an_example_and_no_placeholder_jargon(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    text = capsys.readouterr().out
    assert "example: pytorchjob render train.py train_mnist" in text
    assert "{{" not in text


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_render_stamps_the_job_as_the_connector_does(target: str, tmp_path: Path, capsys) -> None:
    """The rendered job carries the digest annotation the connector sends and adopts its own job by."""
    from backend_plugin.admission import SPEC_DIGEST_ANNOTATION, spec_digest

    path = template_file(tmp_path, load("sdk_pod_template"))
    code, out, err = run(["render", "--template", path, "--target", target, *PATHS], capsys)
    assert code == 0, err
    job = yaml.safe_load(out)
    assert job["metadata"]["annotations"][SPEC_DIGEST_ANNOTATION] == spec_digest(job)
