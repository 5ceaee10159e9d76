"""Golden tests of the task template: ``custom`` and ``config`` compared exactly with tests/data/sdk/*.json.

Regenerate after an intended change with ``python -m pytest tests/sdk/test_serialization.py --update-golden`` and
review the diff; this also rewrites tests/data/templates/sdk_<case>.json (whole templates, inputs of the backend's
tests).
"""

from __future__ import annotations

import datetime
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from flyteidl.plugins.kubeflow import pytorch_pb2
from flytekit import PodTemplate, Resources, task
from flytekit.tools.translator import get_serializable
from google.protobuf import json_format
from kubernetes.client import (
    V1Container,
    V1EnvVar,
    V1PersistentVolumeClaimVolumeSource,
    V1PodSpec,
    V1Toleration,
    V1Volume,
    V1VolumeMount,
)

from flytekitplugins_pytorch import (
    CleanPodPolicy,
    Elastic,
    ElasticPyTorchFunctionTask,
    Master,
    PyTorch,
    PyTorchFunctionTask,
    RestartPolicy,
    RunPolicy,
    Worker,
    pytorch_task,
)
from tests import golden as golden_files
from tests.helpers.serialization import SETTINGS

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN_DIR = DATA / "sdk"
TEMPLATE_DIR = DATA / "templates"


# --- the cases: module-level tasks, as a user would write them ---------------------------------------------------


@pytorch_task(
    workers_count=2,
    per_replica_cpu_request="500m",
    per_replica_memory_request="4Gi",
    per_replica_memory_limit="8Gi",
    per_replica_gpu_limit="1",
)
def seed_gpu(batch_size: int, epochs: int, learning_rate: float) -> list[float]:
    """The decorator from the original Flyte PyTorch docs."""
    return [learning_rate] * epochs


@pytorch_task(workers_count=0, per_replica_cpu_request="1", per_replica_memory_request="2Gi")
def master_only(x: int) -> int:
    """A single-pod job: the master alone."""
    return x


@task(
    task_config=PyTorch(
        master=Master(
            image="ghcr.io/example/train-master:1.0",
            requests=Resources(cpu="1", mem="2Gi"),
            limits=Resources(cpu="2", mem="2Gi"),
        ),
        worker=Worker(
            replicas=3,
            requests=Resources(cpu="4", mem="16Gi", gpu="2", ephemeral_storage="10Gi"),
            limits=Resources(mem="16Gi", gpu="2"),
            restart_policy=RestartPolicy.ON_FAILURE,
        ),
        run_policy=RunPolicy(
            clean_pod_policy="All", backoff_limit=0, active_deadline_seconds=3600, ttl_seconds_after_finished=86400
        ),
        nproc_per_node=2,
    ),
    retries=2,
)
def per_role(x: int) -> int:
    """Master and workers sized differently, through @task(task_config=PyTorch(...))."""
    return x


@task(task_config=Elastic(nnodes="1:2", nproc_per_node=2, max_restarts=3))
def elastic(x: int) -> int:
    """torchrun-style: 1 to 2 pods, 2 ranks each."""
    return x


@pytorch_task(
    workers_count=3,
    per_replica_gpu_limit=1,
    queue="team-a",
    priority_class="high-priority",
    gang_scheduling=True,
    suspend=True,
    shm_size="2Gi",
    accelerator="nvidia-tesla-a100",
    gpu_resource="nvidia.com/gpu",
    restart_policy="ExitCode",
    clean_pod_policy=CleanPodPolicy.NONE,
    nproc_per_node="auto",
    collective_timeout=datetime.timedelta(minutes=10),
    timeout=datetime.timedelta(hours=2),
    cache=True,
    cache_version="1",
    environment={"NCCL_DEBUG": "WARN"},
)
def scheduling(x: int) -> int:
    """Kueue/Volcano scheduling, shared memory, an accelerator and the ExitCode restart policy."""
    return x


@pytorch_task(
    workers_count=1,
    per_replica_memory_request="1Gi",
    pod_template=PodTemplate(
        primary_container_name="trainer",
        pod_spec=V1PodSpec(
            containers=[V1Container(name="trainer")],
            tolerations=[V1Toleration(key="dedicated", operator="Equal", value="training", effect="NoSchedule")],
        ),
        labels={"team": "ml"},
    ),
)
def with_pod_template(x: int) -> int:
    """A pod-template target: the template has ``k8s_pod`` and ``config.primary_container_name``."""
    return x


@task(
    task_config=PyTorch(
        master=Master(
            pod_template=PodTemplate(
                pod_spec=V1PodSpec(
                    containers=[
                        V1Container(
                            name="primary",
                            volume_mounts=[V1VolumeMount(name="checkpoints", mount_path="/checkpoints")],
                        )
                    ],
                    volumes=[
                        V1Volume(
                            name="checkpoints",
                            persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(claim_name="ckpt-pvc"),
                        )
                    ],
                ),
                labels={"role": "master"},
            )
        ),
        worker=Worker(
            replicas=2,
            pod_template=PodTemplate(
                pod_spec=V1PodSpec(
                    containers=[
                        V1Container(name="primary", env=[V1EnvVar(name="NCCL_DEBUG", value="INFO")]),
                        V1Container(name="metrics", image="ghcr.io/example/metrics:2"),
                    ],
                    node_selector={"pool": "gpu-workers"},
                ),
                annotations={"example.com/scrape": "true"},
            ),
        ),
    ),
    requests=Resources(cpu="1", mem="2Gi"),
    environment={"NCCL_DEBUG": "WARN"},
    pod_template=PodTemplate(
        pod_spec=V1PodSpec(
            containers=[V1Container(name="primary")],
            node_selector={"pool": "training", "disk": "ssd"},
        ),
        annotations={"sidecar.istio.io/inject": "true"},
        labels={"team": "ml"},
    ),
)
def role_pod_templates(x: int) -> int:
    """Per-role pod templates over a task pod template: a PVC on the master, a sidecar, env and a node selector on
    the workers; the task's istio annotation must survive the backend's default."""
    return x


CASES: dict[str, Any] = {
    "seed_gpu": seed_gpu,
    "master_only": master_only,
    "per_role": per_role,
    "elastic": elastic,
    "scheduling": scheduling,
    "pod_template": with_pod_template,
    "role_pod_templates": role_pod_templates,
}


# --- helpers ------------------------------------------------------------------------------------------------------


def serialize(t: Any) -> dict[str, Any]:
    """The whole TaskTemplate as protobuf JSON, through flytekit's real serializer."""
    entity = get_serializable(OrderedDict(), SETTINGS, t)
    return json_format.MessageToDict(entity.template.to_flyte_idl())


def golden_of(template: dict[str, Any]) -> dict[str, Any]:
    """What the golden files pin: identity, the whole custom and the whole config.

    Numbers in a serialized template's custom are floats (Struct); they compare equal to the golden ints.
    """
    return {
        "type": template["type"],
        "taskTypeVersion": template.get("taskTypeVersion", 0),
        "custom": template.get("custom", {}),
        "config": template.get("config", {}),
    }


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


# --- tests --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_template_matches_golden(case: str) -> None:
    template = serialize(CASES[case])
    golden_path = GOLDEN_DIR / f"{case}.json"
    if golden_files.updating():
        # The golden keeps get_custom's ints (readable); the template file keeps exactly what a backend receives.
        write_json(golden_path, {**golden_of(template), "custom": CASES[case].get_custom(SETTINGS)})
        write_json(TEMPLATE_DIR / f"sdk_{case}.json", template)
    golden = json.loads(golden_files.text(golden_path))
    assert golden_of(template) == golden
    assert CASES[case].get_custom(SETTINGS) == golden["custom"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_committed_template_agrees_with_golden(case: str) -> None:
    """The whole templates handed to the backend's tests carry exactly the golden custom and config."""
    template = json.loads(golden_files.text(TEMPLATE_DIR / f"sdk_{case}.json"))
    assert golden_of(template) == json.loads(golden_files.text(GOLDEN_DIR / f"{case}.json"))
    target = "k8sPod" if case in ("pod_template", "role_pod_templates") else "container"
    assert target in template


@pytest.mark.parametrize("source", ["get_custom", "template"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_custom_parses_strictly_into_flyte_proto(case: str, source: str) -> None:
    """Both what get_custom returns (ints) and what a backend receives (a Struct: every number a float) parse."""
    t = CASES[case]
    custom = t.get_custom(SETTINGS) if source == "get_custom" else serialize(t)["custom"]
    message = json_format.ParseDict(custom, pytorch_pb2.DistributedPyTorchTrainingTask(), ignore_unknown_fields=False)
    # Round trip: nothing in custom is lost or invented by the proto (explicit zeros aside, which it drops).
    assert json_format.MessageToDict(message) == strip_zeros(custom)


def test_template_struct_turns_ints_into_whole_floats() -> None:
    """custom travels as a protobuf Struct, whose numbers are doubles: readers must accept 2.0 for 2."""
    template_numbers = numbers(serialize(per_role)["custom"])
    assert template_numbers and all(isinstance(n, float) and n.is_integer() for n in template_numbers)
    assert all(isinstance(n, int) for n in numbers(per_role.get_custom(SETTINGS)))


def strip_zeros(d: Any) -> Any:
    """Drop explicit zero numbers, as protobuf JSON does."""
    if isinstance(d, dict):
        return {k: strip_zeros(v) for k, v in d.items() if not (isinstance(v, (int, float)) and v == 0)}
    return d


def numbers(d: Any) -> list[Any]:
    """Every number in a JSON value."""
    if isinstance(d, dict):
        return [n for v in d.values() for n in numbers(v)]
    if isinstance(d, list):
        return [n for v in d for n in numbers(v)]
    return [d] if isinstance(d, (int, float)) and not isinstance(d, bool) else []


def test_int32_fields_are_json_numbers() -> None:
    """MessageToDict writes int32 as JSON numbers (int64 would be strings); readers rely on numbers."""
    custom = seed_gpu.get_custom(SETTINGS)
    assert type(custom["masterReplicas"]["replicas"]) is int and custom["masterReplicas"]["replicas"] == 1
    assert type(custom["workerReplicas"]["replicas"]) is int and custom["workerReplicas"]["replicas"] == 2
    assert type(elastic.get_custom(SETTINGS)["elasticConfig"]["maxReplicas"]) is int


def test_explicit_zero_backoff_limit_is_kept() -> None:
    """backoff_limit=0 ("never restart a pod") must not be confused with unset: written explicitly."""
    assert serialize(per_role)["custom"]["runPolicy"]["backoffLimit"] == 0


@pytest.mark.parametrize(
    "case",
    ["master_only"],
)
def test_master_only_has_no_worker_replicas(case: str) -> None:
    custom = serialize(CASES[case])["custom"]
    assert "workerReplicas" not in custom
    assert custom["masterReplicas"]["replicas"] == 1


def test_type_and_version() -> None:
    assert isinstance(seed_gpu, PyTorchFunctionTask)
    assert isinstance(elastic, ElasticPyTorchFunctionTask)
    for t in CASES.values():
        template = serialize(t)
        assert (template["type"], template["taskTypeVersion"]) == ("pytorch", 1)


def test_the_local_rendezvous_backend_is_the_one_the_template_declares() -> None:
    from flytekitplugins_pytorch.task import elastic_custom
    from pytorch_core._plan import RDZV_BACKEND

    assert RDZV_BACKEND == elastic_custom(Elastic(nnodes="1:2"))["elasticConfig"]["rdzvBackend"]


# --- compatibility with flytekit's official kfpytorch plugin (whose templates Flyte's Go backend runs) ----------


def official_tasks() -> dict[str, Any]:
    """The same jobs written with flytekitplugins.kfpytorch; defined lazily (it is a test-only dependency)."""
    kf = pytest.importorskip("flytekitplugins.kfpytorch")

    res_req = Resources(cpu="500m", mem="4Gi")
    res_lim = Resources(mem="8Gi", gpu="1")

    def fn(x: int) -> int:
        return x

    running = kf.RunPolicy(clean_pod_policy=kf.CleanPodPolicy.RUNNING)
    seed = kf.PyTorch(
        master=kf.Master(requests=res_req, limits=res_lim),
        worker=kf.Worker(replicas=2, requests=res_req, limits=res_lim),
        run_policy=running,
    )
    elastic_cfg = kf.Elastic(nnodes="1:2", nproc_per_node=2, max_restarts=3, run_policy=running)
    return {
        "seed_gpu": kf.task.PyTorchFunctionTask(seed, fn),
        "elastic": kf.task.PytorchElasticFunctionTask(elastic_cfg, fn),
    }


@pytest.mark.filterwarnings("ignore:Configuring shared memory:UserWarning")
@pytest.mark.parametrize("case", ["seed_gpu", "elastic"])
def test_custom_equals_official_plugin_proto(case: str) -> None:
    """Our custom and flytekit kfpytorch's parse into the same proto: Flyte's Go backend sees the same job."""
    theirs = official_tasks()[case].get_custom(SETTINGS)
    ours = CASES[case].get_custom(SETTINGS)
    parse = lambda d: json_format.ParseDict(d, pytorch_pb2.DistributedPyTorchTrainingTask())  # noqa: E731
    assert parse(ours) == parse(theirs)


# --- per-role pod templates (issue 15 items 3 and 4) ------------------------------------------------------------


def test_role_pod_template_must_be_a_flytekit_pod_template() -> None:
    from flytekitplugins_pytorch import ConfigError

    with pytest.raises(ConfigError, match=r"Master.pod_template=\{'spec': \{\}\} is not a flytekit PodTemplate"):
        Master(pod_template={"spec": {}})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"worker.pod_template=PodTemplate\(...\) is given for a master-only"):
        PyTorch(worker=Worker(replicas=0, pod_template=PodTemplate(pod_spec=V1PodSpec(containers=[]))))


def test_pod_template_args_are_replaced_with_a_warning() -> None:
    from flytekitplugins_pytorch.config import PodTemplateOverrideWarning

    with_args = PodTemplate(pod_spec=V1PodSpec(containers=[V1Container(name="primary", args=["python", "x.py"])]))
    with pytest.warns(PodTemplateOverrideWarning, match="Worker.pod_template: the primary container 'primary' sets"):
        worker = Worker(replicas=1, pod_template=with_args)
    assert "args" not in json.loads(_role_json(worker))["podSpec"]["containers"][0]

    def f(x: int) -> int:
        return x

    with pytest.warns(PodTemplateOverrideWarning, match="pod_template: the primary container 'primary' sets args"):
        t = task(f, task_config=PyTorch(), pod_template=with_args)
    container = serialize(t)["k8sPod"]["podSpec"]["containers"][0]
    assert container["args"][0] == "pyflyte-execute"


def _role_json(worker: Worker) -> str:
    from flytekitplugins_pytorch.task import role_pod_template

    assert worker.pod_template is not None
    return role_pod_template(worker.pod_template)
