"""The flytekit front-end on values whose verdict comes from Kubernetes' own sources (tests/contract has the rules):
what the cluster accepts is accepted at decoration (with a warning where some versions refuse it), what it refuses
is refused at decoration, naming the setting.

- environment variable names, one rule on every path (``environment=``, the task's pod template, a role's);
- whole GPU quantities (``"2.0"``, ``"2000m"``, ``"1e1"``, ``"+2"``);
- flytekit's accelerator object in ``PyTorch(accelerator=...)``, as ``pytorch_task(accelerator=...)`` takes it;
- container names in pod templates; image references and digests; resource quantities.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
from flytekit import PodTemplate, Resources, task
from flytekit.extras.accelerators import A100, T4
from flytekit.tools.translator import get_serializable
from kubernetes.client import V1Container, V1EnvVar, V1PodSpec, V1Toleration

from flytekitplugins_pytorch import ConfigError, Elastic, Master, PyTorch, Worker, pytorch_task
from pytorch_core.config import KubernetesVersionWarning
from tests.helpers.serialization import SETTINGS


def fn() -> int:
    return 1


def template(t: Any) -> Any:
    return get_serializable(OrderedDict(), SETTINGS, t).template


def env_template(*names: str) -> PodTemplate:
    env = [V1EnvVar(name=n, value="x") for n in names]
    return PodTemplate(pod_spec=V1PodSpec(containers=[V1Container(name="primary", env=env)]))


def caught(build: Callable[[], Any]) -> list[str]:
    """The KubernetesVersionWarnings `build` gives (others fail the test, as the suite's filter says)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", KubernetesVersionWarning)
        build()
    return [str(w.message) for w in seen if issubclass(w.category, KubernetesVersionWarning)]


# ---------------------------------------------------------------------------------------------------------------
# Environment variable names: the same verdict on every path

RELAXED = ["1ABC", "MY VAR", "a:b", "$HOME", "x[0]", "~"]  # Kubernetes 1.32 and later accept them
REFUSED = ["A=B", "", "A\tB", "CL\u00c9"]  # no version accepts them
PORTABLE = ["MY_VAR", "my.env-name", "_x"]

PATHS: dict[str, Callable[[list[str]], Any]] = {
    "environment": lambda names: pytorch_task(environment=dict.fromkeys(names, "v"))(fn),
    "environment-elastic": lambda names: task(task_config=Elastic(), environment=dict.fromkeys(names, "v"))(fn),
    "pod_template": lambda names: pytorch_task(pod_template=env_template(*names))(fn),
    "Worker.pod_template": lambda names: PyTorch(worker=Worker(pod_template=env_template(*names))),
    "Master.pod_template": lambda names: PyTorch(master=Master(pod_template=env_template(*names))),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", RELAXED)
def test_names_newer_clusters_accept_are_accepted_with_a_warning_naming_the_version(path: str, name: str) -> None:
    messages = caught(lambda: PATHS[path]([name]))
    assert len(messages) == 1, messages
    assert repr(name) in messages[0] and "Kubernetes 1.32 and later" in messages[0]
    assert messages[0].startswith(path.split("-")[0])


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", PORTABLE)
def test_names_every_version_accepts_pass_silently(path: str, name: str) -> None:
    assert caught(lambda: PATHS[path]([name])) == []


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", REFUSED)
def test_names_no_version_accepts_are_refused_naming_the_setting(path: str, name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        PATHS[path]([name])
    message = str(refused.value)
    assert message.startswith(path.split("-")[0]) and repr(name) in message
    assert "not an environment variable name Kubernetes accepts in any version" in message


def test_a_relaxed_name_reaches_the_template() -> None:
    with pytest.warns(KubernetesVersionWarning):
        t = pytorch_task(environment={"1ABC": "v"})(fn)
    assert template(t).container.env["1ABC"] == "v"


# ---------------------------------------------------------------------------------------------------------------
# Whole GPU quantities (ValidateResourceQuantityValue: MilliValue() % 1000 == 0)

WHOLE = [("2.0", 2), ("2000m", 2), ("1e1", 10), ("+2", 2), ("2", 2), (2, 2), ("0", 0)]
NOT_WHOLE = ["1.5", "500m", "1.0001", "-1", "1e1.5", "2Gi\n", "two"]


@pytest.mark.parametrize(("gpus", "count"), WHOLE, ids=[repr(g) for g, _ in WHOLE])
def test_whole_gpu_quantities_are_accepted(gpus: Any, count: int) -> None:
    t = pytorch_task(per_replica_gpu_limit=gpus, nproc_per_node="gpu")(fn)
    assert t.task_config.worker.limits.gpu == str(gpus)
    worker = PyTorch(worker=Worker(limits=Resources(gpu=gpus)), nproc_per_node="gpu")
    assert worker.worker.limits.gpu == gpus
    limits = template(t).custom["workerReplicas"]["resources"]["limits"]
    assert {"name": "GPU", "value": str(gpus)} in limits


def test_a_whole_float_is_a_gpu_count_for_the_flat_keyword() -> None:
    """The flat keyword writes the value as text ("2.0"), which Kubernetes counts as 2; flytekit's own `Resources`
    takes no float."""
    assert pytorch_task(per_replica_gpu_limit=2.0, nproc_per_node="gpu")(fn).task_config.worker.limits.gpu == "2.0"
    with pytest.raises(ConfigError, match="not a whole number of GPUs"):
        pytorch_task(per_replica_gpu_limit=1.5)(fn)


@pytest.mark.parametrize("gpus", NOT_WHOLE)
def test_gpu_amounts_that_are_not_whole_are_refused(gpus: str) -> None:
    with pytest.raises(ConfigError, match=r"pytorch_task\.per_replica_gpu_limit="):
        pytorch_task(per_replica_gpu_limit=gpus)(fn)
    with pytest.raises(ConfigError, match=r"Worker\.limits\.gpu="):
        Worker(limits=Resources(gpu=gpus))


# ---------------------------------------------------------------------------------------------------------------
# flytekit's accelerator object: PyTorch(accelerator=A100) means what pytorch_task(accelerator=A100) means


@pytest.mark.parametrize("accelerator", [A100, A100.partition_1g_5gb, T4], ids=["A100", "A100-1g.5gb", "T4"])
def test_the_accelerator_object_is_accepted_by_the_config_as_by_the_decorator(accelerator: Any) -> None:
    by_config = template(task(task_config=PyTorch(accelerator=accelerator))(fn))
    by_decorator = template(pytorch_task(accelerator=accelerator)(fn))
    elastic = template(task(task_config=Elastic(accelerator=accelerator))(fn))
    assert by_config.extended_resources == by_decorator.extended_resources == elastic.extended_resources
    assert by_config.extended_resources.gpu_accelerator.device == accelerator.to_flyte_idl().device
    assert "pytorch.accelerator" not in by_config.config  # the object travels in flytekit's own field


def test_the_accelerator_given_twice_differently_is_refused() -> None:
    with pytest.raises(ConfigError, match="give the accelerator once"):
        task(task_config=PyTorch(accelerator=A100), accelerator=T4)(fn)
    assert template(task(task_config=PyTorch(accelerator=A100), accelerator=A100)(fn)).extended_resources


@pytest.mark.parametrize("accelerator", [3, "nvidia tesla", "a" * 64])
def test_other_accelerator_values_are_still_refused(accelerator: Any) -> None:
    with pytest.raises(ConfigError, match=r"PyTorch\.accelerator="):
        PyTorch(accelerator=accelerator)


# ---------------------------------------------------------------------------------------------------------------
# Container names in pod templates (IsDNS1123Label, unique)


def containers(*names: str, init: tuple[str, ...] = ()) -> PodTemplate:
    return PodTemplate(
        pod_spec=V1PodSpec(
            containers=[V1Container(name=n) for n in names],
            init_containers=[V1Container(name=n) for n in init] or None,
        )
    )


BAD_CONTAINERS = [
    ("uppercase", containers("primary", "Sidecar"), "'Sidecar'"),
    ("underscore", containers("primary", "side_car"), "'side_car'"),
    ("leading-dash", containers("primary", "-a"), "'-a'"),
    ("64-chars", containers("primary", "a" * 64), "64 characters"),
    ("twice", containers("primary", "primary"), "used twice"),
    ("init-twice", containers("primary", init=("primary",)), "used twice"),
    ("init-uppercase", containers("primary", init=("Setup",)), "init container name 'Setup'"),
]
SETTINGS_WITH_TEMPLATES: dict[str, Callable[[PodTemplate], Any]] = {
    "pod_template": lambda pt: pytorch_task(pod_template=pt)(fn),
    "Worker.pod_template": lambda pt: PyTorch(worker=Worker(pod_template=pt)),
    "Master.pod_template": lambda pt: Master(pod_template=pt),
}


@pytest.mark.parametrize("setting", list(SETTINGS_WITH_TEMPLATES))
@pytest.mark.parametrize(("pod", "part"), [c[1:] for c in BAD_CONTAINERS], ids=[c[0] for c in BAD_CONTAINERS])
def test_container_names_kubernetes_refuses_are_refused_naming_the_setting(
    setting: str, pod: PodTemplate, part: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        SETTINGS_WITH_TEMPLATES[setting](pod)
    assert str(refused.value).startswith(f"{setting}: ") and part in str(refused.value)


@pytest.mark.parametrize("setting", list(SETTINGS_WITH_TEMPLATES))
def test_valid_container_names_pass(setting: str) -> None:
    SETTINGS_WITH_TEMPLATES[setting](containers("primary", "sidecar-1", "a" * 63, init=("setup",)))


# ---------------------------------------------------------------------------------------------------------------
# Tolerations: an operator behind an alpha gate is a warning, not a refusal


def test_a_gated_toleration_operator_is_warned_about_not_refused() -> None:
    pod = PodTemplate(
        pod_spec=V1PodSpec(
            containers=[V1Container(name="primary")],
            tolerations=[V1Toleration(key="sla", operator="Gt", value="950", effect="NoSchedule")],
        )
    )
    messages = caught(lambda: pytorch_task(pod_template=pod)(fn))
    assert len(messages) == 1 and "TaintTolerationComparisonOperators" in messages[0]
    unknown = PodTemplate(pod_spec=V1PodSpec(containers=[], tolerations=[V1Toleration(key="k", operator="In")]))
    with pytest.raises(ConfigError, match="is not one of"):
        pytorch_task(pod_template=unknown)(fn)


# ---------------------------------------------------------------------------------------------------------------
# Image references, where the SDK checks them (Master.image, Worker.image, container_image)

HEX64 = "0123456789abcdef" * 4
GOOD_IMAGES = ["ubuntu", "localhost/x", f"ghcr.io/org/train@sha256:{HEX64}", f"ghcr.io/org/train:1@sha512:{'a' * 128}"]
BAD_IMAGES = [
    (f"ghcr.io/org/train@sha256:{'a' * 32}", "64 lower-case hex digits"),
    (f"ghcr.io/org/train@sha256:{HEX64.upper()}", "64 lower-case hex digits"),
    (f"ghcr.io/org/train@md5:{'a' * 32}", "'md5'"),
    (HEX64, "image ID"),
]
IMAGE_SETTINGS: dict[str, Callable[[str], Any]] = {
    "Master.image": lambda image: Master(image=image),
    "Worker.image": lambda image: Worker(image=image),
    "container_image": lambda image: pytorch_task(container_image=image)(fn),
}


@pytest.mark.parametrize("setting", list(IMAGE_SETTINGS))
@pytest.mark.parametrize(("image", "part"), BAD_IMAGES, ids=[p for _, p in BAD_IMAGES])
def test_image_references_the_kubelet_refuses_are_refused(setting: str, image: str, part: str) -> None:
    with pytest.raises(ConfigError) as refused:
        IMAGE_SETTINGS[setting](image)
    assert str(refused.value).startswith(f"{setting}=") and part in str(refused.value)


@pytest.mark.parametrize("setting", list(IMAGE_SETTINGS))
@pytest.mark.parametrize("image", GOOD_IMAGES)
def test_image_references_the_kubelet_pulls_are_accepted(setting: str, image: str) -> None:
    IMAGE_SETTINGS[setting](image)


# ---------------------------------------------------------------------------------------------------------------
# Resource quantities (ParseQuantity, the CRD pattern, non-negative)


@pytest.mark.parametrize("amount", ["-1", "1e1.5", "1Gi\n", "+", "1e9223372036854775808"])
def test_quantities_kubernetes_refuses_are_refused(amount: str) -> None:
    with pytest.raises(ConfigError, match=r"pytorch_task\.per_replica_memory_limit="):
        pytorch_task(per_replica_memory_limit=amount)(fn)


@pytest.mark.parametrize("amount", ["1Gi", "1.", ".5Gi", "1e3", "+1Gi", "1e100"])
def test_quantities_kubernetes_accepts_are_accepted(amount: str) -> None:
    assert pytorch_task(per_replica_memory_limit=amount)(fn).task_config.worker.limits.mem == amount


# ---------------------------------------------------------------------------------------------------------------
# What the SDK accepts, the backend builds (the same contract rules on both sides)


def backend_job(t: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    from tests.helpers.jobs import META, build_pytorchjob

    return build_pytorchjob(json_format.MessageToDict(template(t).to_flyte_idl()), META)


@pytest.mark.parametrize(("gpus", "count"), WHOLE[:4], ids=[repr(g) for g, _ in WHOLE[:4]])
def test_the_backend_builds_a_whole_gpu_quantity(gpus: Any, count: int) -> None:
    job = backend_job(pytorch_task(per_replica_gpu_limit=gpus, nproc_per_node="gpu")(fn))
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)


def test_the_backend_places_the_configs_accelerator_object() -> None:
    job = backend_job(task(task_config=PyTorch(accelerator=A100), limits=Resources(gpu="1"))(fn))
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "nvidia-tesla-a100" in str(spec.get("affinity") or spec.get("nodeSelector"))


def test_the_backend_builds_a_relaxed_env_name() -> None:
    with pytest.warns(KubernetesVersionWarning):
        t = pytorch_task(environment={"1ABC": "v"})(fn)
    job = backend_job(t)
    env = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "1ABC", "value": "v"} in env
