"""A Flyte 2 task serializes, through flyte's own serializer, to the message Flyte 2's native pytorch plugin reads.

The template is made by ``flyte._internal.runtime.task_serde.get_proto_task`` (what ``flyte deploy`` and ``flyte run``
send). Its ``custom`` must parse strictly as flyteidl2's ``DistributedPyTorchTrainingTask`` (unknown fields are an
error), carry task type ``pytorch`` version 1, and equal what the flytekit front-end writes for the same options.
The same bytes, read as a flyteidl (Flyte 1) template by the backend's reader, render a CRD-valid PyTorchJob.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flyte
import pytest
from flyte._internal.runtime.task_serde import get_proto_task
from flyte.models import SerializationContext
from flyteidl2.plugins.kubeflow import pytorch_pb2
from google.protobuf import json_format

import flyte2_pytorch as f2
from pytorch_contract import template_keys as keys
from tests.flyte2.tasks import CASES, TASKS, sdk_config

ROOT = Path(__file__).resolve().parents[2]
SCTX = SerializationContext(version="v1", project="proj", domain="dev", root_dir=ROOT)


def template(case: str) -> Any:
    return get_proto_task(TASKS[case], SCTX)


def custom_message(case: str) -> pytorch_pb2.DistributedPyTorchTrainingTask:
    custom = json_format.MessageToDict(template(case).custom)
    return json_format.ParseDict(custom, pytorch_pb2.DistributedPyTorchTrainingTask(), ignore_unknown_fields=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_task_type_and_version_are_the_native_plugins(case: str) -> None:
    t = template(case)
    assert (t.type, t.task_type_version) == (keys.TASK_TYPE, keys.TASK_TYPE_VERSION) == ("pytorch", 1)
    assert t.container.args[0] == "a0"  # Flyte 2's entrypoint runs the replicas


def test_master_worker_message() -> None:
    job = custom_message("roles")
    assert job.master_replicas.replicas == 1
    assert job.master_replicas.image == "ghcr.io/example/master:2"
    assert job.worker_replicas.replicas == 3
    assert pytorch_pb2.DistributedPyTorchTrainingReplicaSpec.DESCRIPTOR.fields_by_name["restart_policy"]
    assert job.worker_replicas.restart_policy == 1  # RESTART_POLICY_ON_FAILURE
    assert job.master_replicas.restart_policy == 0  # ExitCode has no proto value: NEVER, plus the config key
    requests = {e.name: e.value for e in job.worker_replicas.resources.requests}
    limits = {e.name: e.value for e in job.worker_replicas.resources.limits}
    assert requests == {1: "2", 3: "4Gi", 2: "2"}  # CPU, MEMORY, GPU
    assert limits == {3: "8Gi", 2: "2"}
    assert job.run_policy.clean_pod_policy == 2  # CLEANPOD_POLICY_ALL
    assert job.run_policy.active_deadline_seconds == 3600
    assert not job.HasField("elastic_config")
    assert json_format.MessageToDict(template("roles").custom)["runPolicy"]["backoffLimit"] == 0


def test_master_only_job_has_no_worker_group() -> None:
    job = custom_message("master_only")
    assert job.master_replicas.replicas == 1
    assert not job.HasField("worker_replicas")


def test_elastic_message() -> None:
    job = custom_message("elastic")
    assert not job.HasField("master_replicas")
    assert job.worker_replicas.replicas == 4
    ec = job.elastic_config
    assert (ec.rdzv_backend, ec.min_replicas, ec.max_replicas, ec.nproc_per_node, ec.max_restarts) == (
        "c10d",
        1,
        4,
        2,
        2,
    )
    word = custom_message("elastic_word")
    assert word.elastic_config.nproc_per_node == 0  # a word travels in the config key


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_message_as_the_flytekit_front_end(case: str) -> None:
    """custom and the pytorch.* keys equal the flytekit front-end's for the same options."""
    from flytekit import task

    from tests.helpers.serialization import SETTINGS

    def fn() -> None: ...

    sdk_task = task(fn, task_config=sdk_config(case))
    ours = template(case)
    assert json_format.MessageToDict(ours.custom) == sdk_task.get_custom(SETTINGS)
    # Flyte 2 writes a task's config() to its container, not to the template
    container_config = {kv.key: kv.value for kv in ours.container.config}
    sdk_keys = {k: v for k, v in sdk_task.get_config(SETTINGS).items() if k.startswith(keys.CONFIG_PREFIX)}
    assert container_config == sdk_keys
    assert dict(ours.config) == {}


def test_the_bytes_read_as_a_flyte1_template_render_a_valid_pytorchjob() -> None:
    """flyteidl2's TaskTemplate keeps flyteidl's field numbers: the backend's reader reads a Flyte 2 template."""
    from flyteidl.core import tasks_pb2 as v1_tasks

    from backend_plugin.targets.pytorchjob.writer import to_pytorchjob
    from backend_plugin.template import read_template
    from tests.helpers.jobs import META
    from tests.kube_schema import assert_valid_pytorchjob

    t2 = template("roles")
    v1 = v1_tasks.TaskTemplate.FromString(t2.SerializeToString())
    assert (v1.type, v1.task_type_version, v1.container.args[0]) == ("pytorch", 1, "a0")
    # The reader reads pytorch.* keys from the template's config; Flyte 2 put them on the container.
    for kv in v1.container.config:
        v1.config[kv.key] = kv.value
    job = to_pytorchjob(read_template(v1), META, None)
    assert_valid_pytorchjob(job)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)
    assert specs["Worker"]["restartPolicy"] == "OnFailure"
    assert specs["Master"]["restartPolicy"] == "ExitCode"
    assert job["spec"]["nprocPerNode"] == "2"


def test_options_are_the_flytekit_front_ends() -> None:
    """Every option of the flytekit front-end's config classes exists here with the same default."""
    import dataclasses

    import flytekitplugins_pytorch as sdk

    for name in ("PyTorch", "Elastic", "Master", "Worker", "RunPolicy"):
        theirs = {f.name: f for f in dataclasses.fields(getattr(sdk, name))}
        ours = {f.name: f for f in dataclasses.fields(getattr(f2, name))}
        assert list(ours) == list(theirs), name
        for field_name, field in theirs.items():
            if field.default is not dataclasses.MISSING:
                assert ours[field_name].default == field.default, f"{name}.{field_name}"
            else:
                assert ours[field_name].default is dataclasses.MISSING, f"{name}.{field_name}"


class RunPolicyLike:
    """Not a RunPolicy of either front-end."""

    def __repr__(self) -> str:
        return "RunPolicyLike()"


BAD = [
    ("Worker", {"replicas": -1}),
    ("Worker", {"replicas": 10**6}),
    ("Worker", {"replicas": 1.5}),
    ("Worker", {"restart_policy": "sometimes"}),
    ("Master", {"restart_policy": 3}),
    ("RunPolicy", {"clean_pod_policy": "everything"}),
    ("RunPolicy", {"backoff_limit": -2}),
    ("RunPolicy", {"active_deadline_seconds": 0}),
    ("RunPolicy", {"min_available": True}),
    ("Elastic", {"nnodes": "4:2"}),
    ("Elastic", {"nnodes": 0}),
    ("Elastic", {"nnodes": "two"}),
    ("Elastic", {"nproc_per_node": 0}),
    ("Elastic", {"monitor_interval": 0}),
    ("Elastic", {"max_restarts": -1}),
    ("PyTorch", {"nproc_per_node": "tpu"}),
    # The checks that once ran only in the flytekit front-end: the core runs them for both.
    ("Worker", {"image": "Bad Image:1.0"}),
    ("Master", {"image": ""}),
    ("RunPolicy", {"queue": "team queue!"}),
    ("RunPolicy", {"priority_class": "High_Priority"}),
    ("RunPolicy", {"gang_scheduling": "yes"}),
    ("PyTorch", {"shm_size": "lots"}),
    ("PyTorch", {"accelerator": "nvidia tesla"}),
    ("PyTorch", {"gpu_resource": "gpu"}),
    ("PyTorch", {"start_method": "thread"}),
    ("PyTorch", {"collective_timeout": -5}),
    ("PyTorch", {"preload_modules": ["not a module"]}),
    ("PyTorch", {"retry_hangs": "no"}),
    ("PyTorch", {"run_policy": RunPolicyLike()}),
    ("Elastic", {"progress_timeout": "soon"}),
    ("Elastic", {"rdzv_join_timeout": 0}),
    ("Elastic", {"nproc_per_node": "gpus"}),
    ("Elastic", {"min_replicas": 1}),
    ("PyTorch", {"num_workers": 2}),
    ("PyTorch", {"nproc_per_nod": 2}),
]


@pytest.mark.parametrize(
    ("cls", "kwargs"), BAD, ids=[f"{c}-{next(iter(k))}={next(iter(k.values()))!r}" for c, k in BAD]
)
def test_bad_values_get_the_flytekit_front_ends_message(cls: str, kwargs: dict[str, Any]) -> None:
    import flytekitplugins_pytorch as sdk

    with pytest.raises(sdk.ConfigError) as theirs:
        getattr(sdk, cls)(**kwargs)
    with pytest.raises(f2.ConfigError) as ours:
        getattr(f2, cls)(**kwargs)
    # The one difference: where a message tells the user what to build, it names the user's package.
    assert str(ours.value) == str(theirs.value).replace("flytekitplugins_pytorch.", "flyte2_pytorch.")
    assert (ours.value.field, ours.value.value) == (theirs.value.field, theirs.value.value)
    assert type(ours.value) is type(theirs.value)


# Values both resources classes hold (a negative count, say, flyte.Resources refuses itself).
ROLE_BAD = [
    ({"requests": {"cpu": "two"}}, "cpu"),
    ({"requests": {"cpu": "1.5.2"}}, "cpu"),
    ({"limits": {"cpu": "500m"}, "requests": {"cpu": "1"}}, "cpu"),
    ({"requests": {"gpu": 1}, "limits": {"gpu": 2}}, "gpu"),
]


@pytest.mark.parametrize(("role", "resources"), [(r, b[0]) for r in ("Master", "Worker") for b in ROLE_BAD])
def test_bad_role_resources_get_the_flytekit_front_ends_message(role: str, resources: dict[str, Any]) -> None:
    """The same quantity, GPU and limit-below-request checks, each SDK's resources class given the same values."""
    import flytekit

    import flytekitplugins_pytorch as sdk

    def build(module: Any, resources_class: Any) -> Any:
        kwargs = {kind: resources_class(**values) for kind, values in resources.items()}
        return getattr(module, role)(**kwargs)

    with pytest.raises(sdk.ConfigError) as theirs:
        build(sdk, flytekit.Resources)
    with pytest.raises(f2.ConfigError) as ours:
        build(f2, flyte.Resources)
    assert str(ours.value) == str(theirs.value)
    assert ours.value.field == theirs.value.field


def test_shm_above_the_memory_limit_names_each_sdks_field() -> None:
    import flytekit

    import flytekitplugins_pytorch as sdk

    with pytest.raises(sdk.ConfigError) as theirs:
        sdk.PyTorch(shm_size="2Gi", master=sdk.Master(limits=flytekit.Resources(mem="1Gi")))
    with pytest.raises(f2.ConfigError) as ours:
        f2.PyTorch(shm_size="2Gi", master=f2.Master(limits=flyte.Resources(memory="1Gi")))
    assert str(ours.value) == str(theirs.value).replace("Master.limits.mem=", "Master.limits.memory=").replace(
        "raise Master.limits.mem", "raise Master.limits.memory"
    )
    assert "above the memory limit Master.limits.memory='1Gi'" in str(ours.value)


def test_valid_spellings_the_flytekit_front_end_accepts_are_accepted() -> None:
    """No false positives: the spellings the SDK accepts pass here too."""
    assert f2.Worker(restart_policy="on_failure").restart_policy is f2.RestartPolicy.ON_FAILURE
    assert f2.RunPolicy(clean_pod_policy="running").clean_pod_policy is f2.CleanPodPolicy.RUNNING
    assert f2.PyTorch(nproc_per_node="AUTO").nproc_per_node == "auto"
    assert f2.Elastic(nnodes=" 2 : 3 ").max_nodes == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"requests": {"cpu": "1"}}, "Worker.requests={'cpu': '1'} is not flyte.Resources (dict)"),
        ({"limits": flyte.Resources(cpu=(1, 2))}, "Worker.limits.cpu=(1, 2) is a (request, limit) pair"),
        ({"requests": flyte.Resources(gpu=flyte.GPU("A100", 1, partition="1g.5gb"))}, "Worker.requests.gpu=Device("),
        ({"requests": flyte.Resources(shm="1Gi")}, "Worker.requests.shm='1Gi' is set on a role"),
        ({"pod_template": "my-template"}, "Worker.pod_template='my-template' is not a flyte PodTemplate (str)"),
    ],
)
def test_flyte2_types_of_a_role(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(f2.ConfigError) as raised:
        f2.Worker(**kwargs)
    assert str(raised.value).startswith(message)


def test_environment_registers_the_task_type() -> None:
    from flyte.extend import TaskPluginRegistry

    assert TaskPluginRegistry.find(f2.PyTorch) is f2.PyTorchTask
    assert TaskPluginRegistry.find(f2.Elastic) is f2.ElasticTask
    assert isinstance(TASKS["elastic"], f2.ElasticTask)
