"""The Flyte 2 front-end on values whose verdict comes from Kubernetes' own sources (tests/contract has the rules),
checked when the task is defined, named as the user wrote them:

- environment variable names in ``TaskEnvironment(env_vars=...)`` and in its pod template: the one rule of every path;
- ``TaskEnvironment(pod_template=...)``: labels, container names, tolerations, named ``TaskEnvironment.pod_template``;
- ``TaskEnvironment(image=...)``: image references and digests;
- a role's GPUs with their type: ``Resources(gpu="A100:1")``, ``flyte.GPU("A100", 1)``.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flyte
import pytest
from google.protobuf import json_format
from kubernetes.client import V1Container, V1EnvVar, V1PodSpec, V1Toleration

import flyte2_pytorch as f2
from pytorch_contract import template_keys as keys
from pytorch_core.config import KubernetesVersionWarning
from tests.flyte2.test_serialization import SCTX

_names = itertools.count()


def define(**env: Any) -> Any:
    """A task of a fresh `flyte.TaskEnvironment(**env)` with a PyTorch config (defined here, as at import)."""
    env.setdefault("plugin_config", f2.PyTorch())
    environment = flyte.TaskEnvironment(name=f"upstream-{next(_names)}", **env)

    @environment.task
    def train(x: int) -> int:
        return x

    return train


def serialize(task: Any) -> Any:
    """The task's template, through flyte's own serializer (what ``flyte deploy`` sends)."""
    from flyte._internal.runtime.task_serde import get_proto_task

    return get_proto_task(task, SCTX)


def caught(build: Callable[[], Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", KubernetesVersionWarning)
        build()
    return [str(w.message) for w in seen if issubclass(w.category, KubernetesVersionWarning)]


def pod(*env_names: str, **spec: Any) -> flyte.PodTemplate:
    env = [V1EnvVar(name=n, value="x") for n in env_names] or None
    spec.setdefault("containers", [V1Container(name="primary", env=env)])
    return flyte.PodTemplate(pod_spec=V1PodSpec(**spec))


# ---------------------------------------------------------------------------------------------------------------
# Environment variable names: the rule of flytekit's `environment=`

RELAXED = ["1ABC", "MY VAR", "a:b", "$HOME", "x[0]", "~"]
REFUSED = ["A=B", "", "A\tB", "CL\u00c9"]
PATHS: dict[str, Callable[[str], Any]] = {
    "TaskEnvironment.env_vars": lambda name: define(env_vars={name: "v"}),
    "TaskEnvironment.pod_template": lambda name: define(pod_template=pod(name)),
    "Worker.pod_template": lambda name: f2.PyTorch(worker=f2.Worker(pod_template=pod(name))),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", RELAXED)
def test_names_newer_clusters_accept_are_accepted_with_a_warning(path: str, name: str) -> None:
    messages = caught(lambda: PATHS[path](name))
    assert len(messages) == 1 and messages[0].startswith(path), messages
    assert repr(name) in messages[0] and "Kubernetes 1.32 and later" in messages[0]


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", REFUSED)
def test_names_no_version_accepts_are_refused(path: str, name: str) -> None:
    with pytest.raises(f2.ConfigError) as refused:
        PATHS[path](name)
    assert str(refused.value).startswith(path) and repr(name) in str(refused.value)


@pytest.mark.parametrize("path", list(PATHS))
def test_portable_names_pass_silently(path: str) -> None:
    assert caught(lambda: PATHS[path]("MY_VAR")) == []


def test_a_relaxed_name_reaches_the_serialized_task() -> None:
    with pytest.warns(KubernetesVersionWarning):
        task = define(env_vars={"1ABC": "v"})
    container = serialize(task).container
    assert {e.key: e.value for e in container.env}["1ABC"] == "v"


# ---------------------------------------------------------------------------------------------------------------
# TaskEnvironment(pod_template=...): checked at definition, named as the user wrote it

BAD_PODS = [
    ("label", flyte.PodTemplate(labels={"team": "ml team"}), "TaskEnvironment.pod_template labels: team="),
    ("container-uppercase", pod(containers=[V1Container(name="primary"), V1Container(name="Sidecar")]), "'Sidecar'"),
    ("container-underscore", pod(containers=[V1Container(name="side_car")]), "'side_car'"),
    ("container-dash", pod(containers=[V1Container(name="-a")]), "'-a'"),
    ("container-64", pod(containers=[V1Container(name="a" * 64)]), "64 characters"),
    (
        "toleration-exists-with-value",
        pod(tolerations=[V1Toleration(key="k", operator="Exists", value="v")]),
        "TaskEnvironment.pod_template tolerations[0]",
    ),
]


@pytest.mark.parametrize(("pod_template", "part"), [c[1:] for c in BAD_PODS], ids=[c[0] for c in BAD_PODS])
def test_a_pod_template_kubernetes_refuses_is_refused_at_definition(pod_template: Any, part: str) -> None:
    with pytest.raises(f2.ConfigError) as refused:
        define(pod_template=pod_template)
    assert str(refused.value).startswith("TaskEnvironment.pod_template") and part in str(refused.value)


def test_the_tasks_own_pod_template_is_named_as_the_tasks() -> None:
    environment = flyte.TaskEnvironment(name="own-pod-template", plugin_config=f2.PyTorch())
    with pytest.raises(f2.ConfigError, match=r"^own-pod-template\.train: pod_template labels: team="):

        @environment.task(pod_template=flyte.PodTemplate(labels={"team": "ml team"}))
        def train(x: int) -> int:
            return x


def test_valid_pod_templates_and_named_ones_pass() -> None:
    define(pod_template=pod(containers=[V1Container(name="primary"), V1Container(name="sidecar-1")]))
    define(pod_template=flyte.PodTemplate(labels={"team": "ml", "example.com/Team_1": ""}))
    define(pod_template="cluster-template")  # a name: the cluster's, not checked here


def test_a_bad_label_is_caught_when_the_users_module_is_imported(tmp_path: Path) -> None:
    """What a newcomer wrote: a label with a space in the environment's pod template, in a module of their own."""
    module = tmp_path / "bad_label_workflow.py"
    module.write_text(
        textwrap.dedent(
            """
            import flyte
            from flyte2_pytorch import PyTorch

            env = flyte.TaskEnvironment(
                name="bad-label",
                plugin_config=PyTorch(),
                pod_template=flyte.PodTemplate(labels={"team": "ml team"}),
            )

            @env.task
            def train(x: int) -> int:
                return x
            """
        )
    )
    spec = importlib.util.spec_from_file_location("bad_label_workflow", module)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    with pytest.raises(f2.ConfigError) as refused:
        spec.loader.exec_module(loaded)
    message = str(refused.value)
    assert message.startswith("TaskEnvironment.pod_template labels: team='ml team'")
    assert "Master.pod_template" not in message and "Worker.pod_template" not in message
    sys.modules.pop("bad_label_workflow", None)


# ---------------------------------------------------------------------------------------------------------------
# TaskEnvironment(image=...)

HEX64 = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("image", "part"),
    [
        (f"ghcr.io/org/train@sha256:{'a' * 32}", "64 lower-case hex digits"),
        (f"ghcr.io/org/train@sha256:{HEX64.upper()}", "64 lower-case hex digits"),
        (f"ghcr.io/org/train@md5:{'a' * 32}", "'md5'"),
        (HEX64, "image ID"),
        ("ghcr.io/MyOrg/train:1", "upper-case"),
    ],
)
def test_an_image_the_kubelet_refuses_is_refused(image: str, part: str) -> None:
    with pytest.raises(f2.ConfigError) as refused:
        define(image=image)
    assert str(refused.value).startswith("TaskEnvironment.image=") and part in str(refused.value)


@pytest.mark.parametrize("image", ["ubuntu", "localhost/x", f"ghcr.io/org/train@sha256:{HEX64}"])
def test_an_image_the_kubelet_pulls_is_accepted(image: str) -> None:
    define(image=image)


# ---------------------------------------------------------------------------------------------------------------
# A role's GPUs with their type


@pytest.mark.parametrize(
    "gpu",
    ["A100:1", flyte.GPU("A100", 1)],
    ids=["Resources(gpu='A100:1')", "flyte.GPU('A100', 1)"],
)
def test_a_gpu_type_on_a_role_is_accepted_and_becomes_the_jobs_accelerator(gpu: Any) -> None:
    config = f2.PyTorch(worker=f2.Worker(limits=flyte.Resources(gpu=gpu)), nproc_per_node="gpu")
    assert config.accelerator == "nvidia-tesla-a100"  # flyte's own name for a task's A100
    template = serialize(define(plugin_config=config))
    resources = json_format.MessageToDict(template.custom)["workerReplicas"]["resources"]
    assert {"name": "GPU", "value": "1"} in resources["limits"]
    assert {kv.key: kv.value for kv in template.container.config}[keys.ACCELERATOR] == "nvidia-tesla-a100"


def test_gpu_types_that_differ_are_refused() -> None:
    with pytest.raises(f2.ConfigError, match="GPU type is given more than once"):
        f2.PyTorch(
            master=f2.Master(limits=flyte.Resources(gpu="T4:1")),
            worker=f2.Worker(limits=flyte.Resources(gpu="A100:1")),
        )
    same = f2.PyTorch(
        master=f2.Master(limits=flyte.Resources(gpu="A100:1")), worker=f2.Worker(limits=flyte.Resources(gpu=2))
    )
    assert same.accelerator == "nvidia-tesla-a100"


def test_a_gpu_count_alone_names_no_accelerator() -> None:
    assert f2.PyTorch(worker=f2.Worker(limits=flyte.Resources(gpu=2))).accelerator is None
