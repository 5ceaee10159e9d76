"""Configuration checks: every bad setting fails when built, naming the field, the bad value and what is allowed."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from flytekit import Resources, task
from flytekit.extras.accelerators import A100

from flytekitplugins_pytorch import (
    CleanPodPolicy,
    ConfigError,
    Elastic,
    Master,
    PyTorch,
    PyTorchFunctionTask,
    RestartPolicy,
    RunPolicy,
    Worker,
    pytorch_task,
)
from flytekitplugins_pytorch.config import UnknownOptionError
from pytorch_contract.quantity import QuantityError, is_quantity, parse_quantity

QUANTITY_HINT = "Kubernetes quantity such as"
GPU_HINT = "whole number >= 0"
NPROC_HINT = "positive integer, 'auto'"
NNODES_HINT = "'min:max' with 1 <= min <= max"
LIMIT_HINT = "a limit must be >= its request"


def flat(**kwargs: Any) -> Callable[[], Any]:
    """Decorate nothing: the flat decorator checks its settings before it sees a function."""
    return lambda: pytorch_task(**kwargs)


def sample(x: int) -> int:
    """A function to decorate where a check needs the whole task (flytekit's own options)."""
    return x


def decorated(**kwargs: Any) -> Callable[[], Any]:
    """Decorate `sample`: flytekit's options (environment, container_image) are checked when the task is built."""
    return lambda: pytorch_task(**kwargs)(sample)


ENV_HINT = "letters, digits, '_', '-' and '.', not starting with a digit"
IMAGE_HINT = "'ghcr.io/org/train:1.0'"
REPLICAS_HINT = "must fit 63 characters"

# (id, build, exception type, substrings the message must contain: field, bad value, allowed form)
BAD: list[tuple[str, Callable[[], Any], type[Exception], tuple[str, ...]]] = [
    # workers_count
    ("workers-negative", flat(workers_count=-1), ConfigError, ("workers_count", "-1", "whole number >= 0")),
    ("workers-float", flat(workers_count=1.5), ConfigError, ("workers_count", "1.5", "whole number >= 0")),
    ("workers-str", flat(workers_count="2"), ConfigError, ("workers_count", "'2'", "whole number >= 0")),
    ("workers-bool", flat(workers_count=True), ConfigError, ("workers_count", "True", "whole number >= 0")),
    ("worker-replicas-negative", lambda: Worker(replicas=-3), ConfigError, ("Worker.replicas", "-3", ">= 0")),
    # quantities
    *[
        (
            f"memory-{label}",
            flat(per_replica_memory_request=bad),
            ConfigError,
            ("per_replica_memory_request", repr(bad), QUANTITY_HINT),
        )
        for label, bad in [("4Gx", "4Gx"), ("abc", "abc"), ("minus1", "-1"), ("1.5.0", "1.5.0"), ("empty", "")]
    ],
    (
        "cpu-limit-garbage",
        flat(per_replica_cpu_limit="two"),
        ConfigError,
        ("per_replica_cpu_limit", "'two'", QUANTITY_HINT),
    ),
    (
        "storage-unit-case",
        flat(per_replica_storage_limit="10gi"),
        ConfigError,
        ("per_replica_storage_limit", "'10gi'", QUANTITY_HINT),
    ),
    (
        "worker-resources-4Gx",
        lambda: Worker(requests=Resources(mem="4Gx")),
        ConfigError,
        ("Worker.requests.mem", "'4Gx'", QUANTITY_HINT),
    ),
    (
        "master-limits-abc",
        lambda: Master(limits=Resources(cpu="abc")),
        ConfigError,
        ("Master.limits.cpu", "'abc'", QUANTITY_HINT),
    ),
    (
        "worker-resources-pair",
        lambda: Worker(requests=Resources(cpu=("1", "2"))),
        ConfigError,
        ("Worker.requests.cpu", "('1', '2')", "requests and limits separately"),
    ),
    (
        "worker-requests-not-resources",
        lambda: Worker(requests={"cpu": "1"}),
        ConfigError,
        ("Worker.requests", "{'cpu': '1'}", "flytekit.Resources"),
    ),
    (
        "flytekit-requests-4Gx",
        flat(requests=Resources(mem="4Gx")),
        ConfigError,
        ("pytorch_task.requests.mem", "'4Gx'", QUANTITY_HINT),
    ),
    (
        "flytekit-limit-below",
        flat(requests=Resources(cpu="2"), limits=Resources(cpu="1")),
        ConfigError,
        ("pytorch_task.limits.cpu", "'1'", LIMIT_HINT),
    ),
    # GPUs
    *[
        (f"gpu-{label}", flat(per_replica_gpu_limit=bad), ConfigError, ("per_replica_gpu_limit", repr(bad), GPU_HINT))
        for label, bad in [("abc", "abc"), ("1.5", "1.5"), ("minus1", "-1"), ("500m", "500m"), ("neg-int", -1)]
    ],
    (
        "worker-gpu-half",
        lambda: Worker(limits=Resources(gpu="0.5")),
        ConfigError,
        ("Worker.limits.gpu", "'0.5'", GPU_HINT),
    ),
    (
        "gpu-request-ne-limit",
        flat(per_replica_gpu_request="1", per_replica_gpu_limit="2"),
        ConfigError,
        ("per_replica_gpu_limit", "'2'", "equal"),
    ),
    # limit below request, compared numerically
    (
        "memory-limit-below",
        flat(per_replica_memory_request="8Gi", per_replica_memory_limit="4Gi"),
        ConfigError,
        ("per_replica_memory_limit", "'4Gi'", "'8Gi'", LIMIT_HINT),
    ),
    (
        "cpu-limit-below",
        flat(per_replica_cpu_request="1", per_replica_cpu_limit="500m"),
        ConfigError,
        ("per_replica_cpu_limit", "'500m'", "'1'", LIMIT_HINT),
    ),
    (
        "memory-limit-below-mixed-units",
        flat(per_replica_memory_request="1G", per_replica_memory_limit="900Mi"),
        ConfigError,
        ("per_replica_memory_limit", "'900Mi'", LIMIT_HINT),
    ),
    (
        "worker-limit-below",
        lambda: Worker(requests=Resources(mem="2Gi"), limits=Resources(mem="1Gi")),
        ConfigError,
        ("Worker.limits.mem", "'1Gi'", "Worker.requests.mem='2Gi'", LIMIT_HINT),
    ),
    # unknown keywords, with a suggestion
    ("unknown-worker_count", flat(worker_count=2), UnknownOptionError, ("worker_count", "'workers_count'")),
    (
        "unknown-mem-limit",
        flat(per_replica_mem_limit="1Gi"),
        UnknownOptionError,
        ("per_replica_mem_limit", "'per_replica_memory_limit'"),
    ),
    ("unknown-retry", flat(retry=3), UnknownOptionError, ("retry", "'retries'")),
    ("unknown-nothing-close", flat(zzzz=1), UnknownOptionError, ("zzzz", "valid options:", "workers_count")),
    # elastic nnodes
    *[
        (
            f"nnodes-{label}",
            (lambda bad=bad: Elastic(nnodes=bad)),
            ConfigError,
            ("Elastic.nnodes", repr(bad), NNODES_HINT),
        )
        for label, bad in [("0", 0), ("abc", "abc"), ("3:2", "3:2"), ("0:2", "0:2"), ("bool", True), ("neg", -2)]
    ],
    # nproc_per_node
    *[
        (f"nproc-{label}", flat(nproc_per_node=bad), ConfigError, ("nproc_per_node", repr(bad), NPROC_HINT))
        for label, bad in [("0", 0), ("minus1", -1), ("abc", "abc"), ("bool", True)]
    ],
    ("elastic-nproc-0", lambda: Elastic(nproc_per_node=0), ConfigError, ("Elastic.nproc_per_node", "0", NPROC_HINT)),
    # start method
    ("start-method", flat(start_method="thread"), ConfigError, ("start_method", "'thread'", "'spawn', 'fork'")),
    (
        "elastic-start-method",
        lambda: Elastic(start_method="SPAWN"),
        ConfigError,
        ("Elastic.start_method", "'SPAWN'", "'forkserver'"),
    ),
    # policies
    (
        "restart-policy",
        flat(restart_policy="Sometimes"),
        ConfigError,
        ("restart_policy", "'Sometimes'", "'Never', 'OnFailure', 'Always', 'ExitCode'"),
    ),
    (
        "restart-policy-int",
        lambda: Worker(restart_policy=1),
        ConfigError,
        ("Worker.restart_policy", "1", "'OnFailure'"),
    ),
    (
        "clean-pod-policy",
        flat(clean_pod_policy="Finished"),
        ConfigError,
        ("clean_pod_policy", "'Finished'", "'None', 'Running', 'All'"),
    ),
    (
        "clean-pod-policy-wrong-enum",
        lambda: RunPolicy(clean_pod_policy=RestartPolicy.ALWAYS),
        ConfigError,
        ("RunPolicy.clean_pod_policy", "RestartPolicy.ALWAYS", "'Running'"),
    ),
    # run policy numbers
    ("backoff-negative", flat(backoff_limit=-1), ConfigError, ("backoff_limit", "-1", "whole number >= 0")),
    (
        "deadline-negative",
        flat(active_deadline_seconds=-5),
        ConfigError,
        ("active_deadline_seconds", "-5", "whole number >= 1"),
    ),
    (
        "deadline-zero",
        lambda: RunPolicy(active_deadline_seconds=0),
        ConfigError,
        ("active_deadline_seconds", "0", "whole number >= 1"),
    ),
    (
        "ttl-negative",
        flat(ttl_seconds_after_finished=-1),
        ConfigError,
        ("ttl_seconds_after_finished", "-1", "whole number >= 0"),
    ),
    (
        "backoff-int32-overflow",
        lambda: RunPolicy(backoff_limit=2**31),
        ConfigError,
        ("backoff_limit", str(2**31), "<= 2147483647"),
    ),
    ("min-available-zero", lambda: RunPolicy(min_available=0), ConfigError, ("min_available", "0", ">= 1")),
    (
        "min-available-above-replicas",
        flat(workers_count=2, min_available=4),
        ConfigError,
        ("min_available", "4", "3 replicas", "1..3"),
    ),
    (
        "elastic-min-available-above-nodes",
        lambda: Elastic(nnodes="1:2", run_policy=RunPolicy(min_available=3)),
        ConfigError,
        ("min_available", "3", "1..2"),
    ),
    ("gang-not-bool", flat(gang_scheduling="yes"), ConfigError, ("gang_scheduling", "'yes'", "True or False")),
    ("queue-not-label", flat(queue="team a"), ConfigError, ("queue", "'team a'", "queue name Kueue admits")),
    ("queue-kueue-refuses", flat(queue="Team_A"), ConfigError, ("queue", "'Team_A'", "DNS-1123 subdomain")),
    ("priority-class-upper", flat(priority_class="High"), ConfigError, ("priority_class", "'High'", "DNS subdomain")),
    (
        "collective-timeout-nan",
        flat(collective_timeout=float("nan")),
        ConfigError,
        ("collective_timeout", "nan", "positive datetime.timedelta"),
    ),
    (
        "collective-timeout-inf",
        flat(collective_timeout=float("inf")),
        ConfigError,
        ("collective_timeout", "inf", "positive datetime.timedelta"),
    ),
    (
        "accelerator-not-label-value",
        flat(accelerator="nvidia a100"),
        ConfigError,
        ("accelerator", "'nvidia a100'", "label value"),
    ),
    # the rest
    ("shm-not-quantity", flat(shm_size="lots"), ConfigError, ("shm_size", "'lots'", QUANTITY_HINT)),
    ("shm-negative", lambda: Elastic(shm_size="-1Gi"), ConfigError, ("Elastic.shm_size", "'-1Gi'", QUANTITY_HINT)),
    ("gpu-resource-no-domain", flat(gpu_resource="gpu"), ConfigError, ("gpu_resource", "'gpu'", "'nvidia.com/gpu'")),
    ("accelerator-empty", flat(accelerator=" "), ConfigError, ("accelerator", "' '", "'nvidia-tesla-a100'")),
    (
        "collective-timeout-negative",
        flat(collective_timeout=-1),
        ConfigError,
        ("collective_timeout", "-1", "positive datetime.timedelta"),
    ),
    (
        "collective-timeout-str",
        flat(collective_timeout="10m"),
        ConfigError,
        ("collective_timeout", "'10m'", "positive datetime.timedelta"),
    ),
    (
        "monitor-interval-zero",
        lambda: Elastic(monitor_interval=0),
        ConfigError,
        ("monitor_interval", "0", "positive number of seconds"),
    ),
    ("max-restarts-negative", lambda: Elastic(max_restarts=-1), ConfigError, ("max_restarts", "-1", ">= 0")),
    ("rdzv-timeout-zero", lambda: Elastic(rdzv_join_timeout=0), ConfigError, ("rdzv_join_timeout", "0", ">= 1")),
    ("master-image-empty", lambda: Master(image=""), ConfigError, ("Master.image", "''", "image")),
    # what Kubernetes itself rejects (issue 11, item 6): non-ASCII digits, env names, image references, name lengths
    (
        "memory-arabic-indic-digit",
        flat(per_replica_memory_limit="\u0661Gi"),
        ConfigError,
        ("per_replica_memory_limit", "'\u0661Gi'", QUANTITY_HINT),
    ),
    (
        "cpu-fullwidth-digit",
        flat(per_replica_cpu_request="\uff14"),
        ConfigError,
        ("per_replica_cpu_request", "'\uff14'", QUANTITY_HINT),
    ),
    ("shm-arabic-indic-digit", flat(shm_size="\u0668Gi"), ConfigError, ("shm_size", "'\u0668Gi'", QUANTITY_HINT)),
    (
        "worker-resources-unicode-digit",
        lambda: Worker(requests=Resources(mem="\u0662Gi")),
        ConfigError,
        ("Worker.requests.mem", "'\u0662Gi'", QUANTITY_HINT),
    ),
    ("nnodes-unicode-digits", lambda: Elastic(nnodes="\u0661:\u0662"), ConfigError, ("Elastic.nnodes", NNODES_HINT)),
    (
        "env-name-with-equals",
        decorated(environment={"A=B": "1"}),
        ConfigError,
        ("environment['A=B'] is not an environment variable name", ENV_HINT),
    ),
    (
        "env-name-non-ascii",
        decorated(environment={"CL\u00c9": "1"}),
        ConfigError,
        ("environment['CL\u00c9']", "not an environment variable name Kubernetes accepts", ENV_HINT),
    ),
    ("env-name-control-char", decorated(environment={"1\tX": "1"}), ConfigError, ("environment['1\\tX']", ENV_HINT)),
    ("env-name-dotdot-equals", decorated(environment={"..X=": "1"}), ConfigError, ("environment['..X=']", ENV_HINT)),
    ("env-name-empty", decorated(environment={"": "1"}), ConfigError, ("environment['']", "non-empty", ENV_HINT)),
    ("env-value-int", decorated(environment={"X": 1}), ConfigError, ("environment['X']", "not a string", "string")),
    (
        "env-elastic-task",
        lambda: task(task_config=Elastic(), environment={"A B=": "1"})(sample),
        ConfigError,
        ("environment['A B=']", ENV_HINT),
    ),
    (
        "image-uppercase-path",
        lambda: Worker(image="ghcr.io/MyOrg/Train:1.0"),
        ConfigError,
        ("Worker.image", "'ghcr.io/MyOrg/Train:1.0'", "'MyOrg/Train' has upper-case letters", IMAGE_HINT),
    ),
    (
        "image-bad-tag",
        lambda: Master(image="ghcr.io/org/train:-1"),
        ConfigError,
        ("Master.image", "tag '-1'", IMAGE_HINT),
    ),
    (
        "image-bad-digest",
        lambda: Master(image="ghcr.io/org/train@sha256:abc"),
        ConfigError,
        ("Master.image", "digest 'sha256:abc'", IMAGE_HINT),
    ),
    ("image-spaces", lambda: Worker(image="org/train 1.0"), ConfigError, ("Worker.image", "spaces", IMAGE_HINT)),
    (
        "container-image-uppercase",
        decorated(container_image="ghcr.io/Org/train:1"),
        ConfigError,
        ("container_image", "'Org/train' has upper-case letters", IMAGE_HINT),
    ),
    (
        "workers-ten-million",
        flat(workers_count=10**7),
        ConfigError,
        ("workers_count", "10000000", "at most 100000", REPLICAS_HINT),
    ),
    (
        "worker-replicas-too-many",
        lambda: Worker(replicas=100_001),
        ConfigError,
        ("Worker.replicas", "100001", REPLICAS_HINT),
    ),
    (
        "nnodes-too-many",
        lambda: Elastic(nnodes="1:200000"),
        ConfigError,
        ("Elastic.nnodes", "'1:200000'", REPLICAS_HINT),
    ),
    ("master-not-master", lambda: PyTorch(master=Worker()), ConfigError, ("PyTorch.master", "Worker(", "Master(")),
    (
        "task-config-wrong-type",
        lambda: PyTorchFunctionTask(Elastic(), lambda: None),
        ConfigError,
        ("task_config", "Elastic(", "PyTorch("),
    ),
]


@pytest.mark.parametrize(("build", "error", "parts"), [row[1:] for row in BAD], ids=[row[0] for row in BAD])
def test_bad_setting_is_rejected_with_a_precise_message(
    build: Callable[[], Any], error: type[Exception], parts: tuple[str, ...]
) -> None:
    with pytest.raises(error) as info:
        build()
    message = str(info.value)
    missing = [p for p in parts if p not in message]
    assert not missing, f"{missing} not in {message!r}"


def test_ids_are_unique() -> None:
    ids = [row[0] for row in BAD]
    assert len(ids) == len(set(ids))


def test_unknown_keyword_is_both_config_and_type_error() -> None:
    with pytest.raises(UnknownOptionError) as info:
        pytorch_task(worker_count=2)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert info.value.field == "pytorch_task.worker_count"


def test_config_error_carries_field_and_value() -> None:
    with pytest.raises(ConfigError) as info:
        Worker(replicas=-1)
    assert (info.value.field, info.value.value) == ("Worker.replicas", -1)


# --- good inputs ---------------------------------------------------------------------------------------------


# A flat keyword feeds a dataclass field; the error must name what the user typed (issue 15 item 8).
FLAT_KEYWORD_ERRORS = [
    (dict(restart_policy="sometimes"), "pytorch_task.restart_policy", "'sometimes'"),
    (dict(clean_pod_policy="Finished"), "pytorch_task.clean_pod_policy", "'Finished'"),
    (dict(workers_count=2, min_available=9), "pytorch_task.min_available", "9"),
    (dict(backoff_limit=-1), "pytorch_task.backoff_limit", "-1"),
    (dict(queue="no spaces"), "pytorch_task.queue", "'no spaces'"),
    (dict(priority_class="UPPER"), "pytorch_task.priority_class", "'UPPER'"),
    (dict(gang_scheduling="yes"), "pytorch_task.gang_scheduling", "'yes'"),
    (dict(shm_size="lots"), "pytorch_task.shm_size", "'lots'"),
    (dict(accelerator="a b"), "pytorch_task.accelerator", "'a b'"),
    (dict(nproc_per_node=0), "pytorch_task.nproc_per_node", "0"),
    (dict(start_method="thread"), "pytorch_task.start_method", "'thread'"),
    (dict(collective_timeout="soon"), "pytorch_task.collective_timeout", "'soon'"),
]


@pytest.mark.parametrize(("kwargs", "name", "value"), FLAT_KEYWORD_ERRORS, ids=[r[1] for r in FLAT_KEYWORD_ERRORS])
def test_flat_keyword_errors_name_the_keyword(kwargs: dict, name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        pytorch_task(**kwargs)
    assert info.value.field == name
    assert str(info.value).startswith(f"{name}={value} is ")
    assert not any(owner in str(info.value) for owner in ("Master.", "Worker.", "RunPolicy.", "PyTorch."))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("OnFailure", RestartPolicy.ON_FAILURE),
        ("onfailure", RestartPolicy.ON_FAILURE),
        ("ON_FAILURE", RestartPolicy.ON_FAILURE),
        ("ExitCode", RestartPolicy.EXIT_CODE),
        ("exit_code", RestartPolicy.EXIT_CODE),
        ("Never", RestartPolicy.NEVER),
        ("always", RestartPolicy.ALWAYS),
        (RestartPolicy.ALWAYS, RestartPolicy.ALWAYS),
    ],
    ids=lambda v: str(v),
)
def test_restart_policy_accepts_strings_and_enums(value: Any, expected: RestartPolicy) -> None:
    assert Master(restart_policy=value).restart_policy is expected
    assert Worker(restart_policy=value).restart_policy is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("None", CleanPodPolicy.NONE),
        ("running", CleanPodPolicy.RUNNING),
        ("ALL", CleanPodPolicy.ALL),
        (CleanPodPolicy.ALL, CleanPodPolicy.ALL),
    ],
    ids=lambda v: str(v),
)
def test_clean_pod_policy_accepts_strings_and_enums(value: Any, expected: CleanPodPolicy) -> None:
    assert RunPolicy(clean_pod_policy=value).clean_pod_policy is expected


@pytest.mark.parametrize(
    ("nnodes", "bounds"),
    [(1, (1, 1)), (4, (4, 4)), ("2", (2, 2)), ("1:2", (1, 2)), ("2:2", (2, 2)), (" 1 : 8 ", (1, 8))],
    ids=str,
)
def test_elastic_nnodes(nnodes: Any, bounds: tuple[int, int]) -> None:
    e = Elastic(nnodes=nnodes)
    assert (e.min_nodes, e.max_nodes) == bounds


@pytest.mark.parametrize(
    ("value", "expected"), [(1, 1), (8, 8), ("auto", "auto"), ("GPU", "gpu"), ("cpu", "cpu")], ids=str
)
def test_nproc_per_node_good(value: Any, expected: Any) -> None:
    assert PyTorch(nproc_per_node=value).nproc_per_node == expected
    assert Elastic(nproc_per_node=value).nproc_per_node == expected


def test_defaults() -> None:
    cfg = PyTorch()
    assert (cfg.worker.replicas, cfg.master.restart_policy, cfg.run_policy.clean_pod_policy) == (
        1,
        RestartPolicy.NEVER,
        CleanPodPolicy.RUNNING,
    )
    assert (cfg.nproc_per_node, cfg.start_method, cfg.collective_timeout, cfg.replicas) == (1, "forkserver", None, 2)


def test_good_resources_and_quantities() -> None:
    w = Worker(
        replicas=0,
        requests=Resources(cpu=0.5, mem=1024, gpu=1, ephemeral_storage="1e9"),
        limits=Resources(cpu="1", mem="1Ki", gpu="1", ephemeral_storage="1G"),
    )
    assert w.replicas == 0
    assert RunPolicy(backoff_limit=0, ttl_seconds_after_finished=0, active_deadline_seconds=1).backoff_limit == 0
    assert PyTorch(shm_size="0").shm_size == "0"
    assert PyTorch(shm_size=1024).shm_size == "1024"
    assert PyTorch(collective_timeout=30).collective_timeout == datetime.timedelta(seconds=30)
    assert PyTorch(worker=Worker(replicas=2), run_policy=RunPolicy(min_available=3)).run_policy.min_available == 3


@pytest.mark.parametrize(
    "image",
    [
        "python:3.11",
        "ghcr.io/org/train:1.0",
        "localhost:5000/team/train",
        "registry.example.com:443/a__b/c--d.e/f_g:v1.2-rc_3",
        "[::1]:5000/train:latest",
        "ghcr.io/org/train@sha256:" + "0" * 64,
        "ghcr.io/org/train:1.0@sha256:" + "a" * 64,
        "MyRegistry/train",  # an upper-case first component is a registry host, as Docker reads it
    ],
)
def test_good_image_references(image: str) -> None:
    assert Worker(image=image).image == image and Master(image=image).image == image


def test_good_environment_and_the_replica_bound() -> None:
    env = {"MY_VAR": "1", "my.env-name": "2", "_X": "3", "-dash": "4", "a1": ""}
    assert pytorch_task(environment=env)(sample).environment == env
    assert Worker(replicas=100_000).replicas == 100_000
    assert pytorch_task(workers_count=100_000)(sample).task_config.worker.replicas == 100_000
    assert Elastic(nnodes="1:100000").max_nodes == 100_000


def test_flat_decorator_builds_the_same_config_as_the_dataclasses() -> None:
    def train(x: int) -> int:
        return x

    t = pytorch_task(
        train,
        workers_count=3,
        per_replica_cpu_request="500m",
        per_replica_memory_limit="8Gi",
        per_replica_storage_request="10Gi",
        restart_policy="ExitCode",
        clean_pod_policy="All",
        queue="team-a",
        accelerator=A100,
        retries=2,
        cache=True,
        cache_version="1",
    )
    assert isinstance(t, PyTorchFunctionTask)
    cfg = t.task_config
    assert cfg.worker.replicas == 3
    assert cfg.master.requests == cfg.worker.requests == Resources(cpu="500m", ephemeral_storage="10Gi")
    assert cfg.master.limits == cfg.worker.limits == Resources(mem="8Gi")
    assert cfg.worker.restart_policy is cfg.master.restart_policy is RestartPolicy.EXIT_CODE
    assert (cfg.run_policy.clean_pod_policy, cfg.run_policy.queue) == (CleanPodPolicy.ALL, "team-a")
    assert cfg.accelerator is None and t.accelerator is A100  # a flytekit accelerator object goes to flytekit
    assert (t.metadata.retries, t.metadata.cache, t.metadata.cache_version) == (2, True, "1")
    assert t._task_function is train


def test_bare_decorator() -> None:
    def train(x: int) -> int:
        return x

    t = pytorch_task(train)
    assert isinstance(t, PyTorchFunctionTask)
    assert (t.task_config.worker.replicas, t.task_config.master.requests) == (1, None)


# --- the quantity parser, shared with the backend ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", "0"),
        ("1", "1"),
        ("500m", "0.5"),
        ("100n", "0.0000001"),
        ("5u", "0.000005"),
        ("1k", "1000"),
        ("1M", "1000000"),
        ("2G", "2000000000"),
        ("1T", "1e12"),
        ("1P", "1e15"),
        ("1E", "1e18"),
        ("1Ki", "1024"),
        ("4Gi", str(4 * 1024**3)),
        ("1.5Gi", str(3 * 512 * 1024**2)),
        ("1Ei", str(1024**6)),
        ("1e3", "1000"),
        ("1E3", "1000"),
        ("1e-3", "0.001"),
        ("2.5e+2", "250"),
        (".5", "0.5"),
        ("5.", "5"),
        ("+1", "1"),
        ("-1", "-1"),
    ],
    ids=str,
)
def test_parse_quantity(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)
    assert is_quantity(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "4Gx",
        "abc",
        "1.5.0",
        "Gi",
        "1 Gi",
        "1gi",
        "1K",
        "1KI",
        "1e",
        "1e1.5",
        ".",
        "1mi",
        "e3",
        "inf",
        "nan",
        "\u0661Gi",
        "\uff14",
        "1e\u0663",
        "\u0968",
    ],
    ids=repr,
)
def test_not_a_quantity(text: str) -> None:
    assert not is_quantity(text)
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_quantity_types() -> None:
    assert parse_quantity(3) == 3
    assert parse_quantity(0.25) == Decimal("0.25")
    assert parse_quantity(Decimal("1.5")) == Decimal("1.5")
    assert not is_quantity(True) and not is_quantity(None) and not is_quantity([1])
    assert parse_quantity("8Gi") > parse_quantity("4Gi") and parse_quantity("1") > parse_quantity("500m")


# --- the execute hook ----------------------------------------------------------------------------------------


def test_execute_delegates_to_the_launcher_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both task types run through launcher.run_distributed; in-process mode gives world size 1."""
    pytest.importorskip("pytorch_core.launcher")
    from flytekit import task

    from tests.sdk.test_serialization import master_only

    monkeypatch.setenv("FLYTE_PYTORCH_INPROCESS", "1")

    def double(x: int) -> int:
        return 2 * x

    elastic_task = task(double, task_config=Elastic(nnodes="1:2"))
    assert master_only(x=5) == 5
    assert elastic_task(x=4) == 8
