"""Drill 11: property-based fuzzing of the config objects and of the task templates the backend reads.

Two properties, each with a bounded number of hypothesis examples (the whole file runs in well under a minute):

1. SDK: random keyword arguments (valid and invalid values of every type) to `pytorch_task`, `PyTorch`, `Worker`,
   `Master`, `Elastic`, `RunPolicy` either build a task that serializes through flytekit and builds into a
   PyTorchJob passing `assert_valid_pytorchjob`, or raise `ConfigError`/`ValueError`/`TypeError` whose message names
   one of the fields given. Any other exception, or a config the SDK accepts and the backend rejects, is a bug.
2. Backend: the committed templates (tests/data/templates/*.json), mutated (keys dropped, values replaced by wrong
   types, negative, huge or unicode values, unknown keys added), either build into a valid PyTorchJob or raise
   `TemplateError` naming a field. Never KeyError/TypeError/AttributeError or an invalid job.

The shrunk inputs of bugs this found are kept as explicit regression cases (`@example` / `REGRESSIONS`).
`drill_fuzz_summary()` runs both properties as plain loops for `benchmarks/fault_report.py`.
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import random
import re
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flytekit import Resources
from flytekit.tools.translator import get_serializable
from google.protobuf import json_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata
from flytekitplugins_pytorch import (
    CleanPodPolicy,
    ConfigError,
    Elastic,
    Master,
    PyTorch,
    RestartPolicy,
    RunPolicy,
    Worker,
    pytorch_task,
)
from pytorch_core.config import (
    JobLimitWarning,
    KubernetesVersionWarning,
    PodTemplateOverrideWarning,
    ProcessesGpusWarning,
)
from tests.helpers.jobs import build_pytorchjob
from tests.helpers.serialization import SETTINGS
from tests.kube_schema import assert_valid_pytorchjob

pytestmark = pytest.mark.faults

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
META = ExecutionMetadata(
    namespace="flytesnacks-development",
    job_name="fuzz-n0-0-1a2b3c4d",
    input_path="s3://bucket/meta/ex/n0/data/inputs.pb",
    output_prefix="s3://bucket/meta/ex/n0/data/0",
    raw_output_prefix="s3://bucket/raw/ex",
    checkpoint_prefix="s3://bucket/ckpt/ex/n0/0",
    project="flytesnacks",
    domain="development",
    execution_name="ex",
    node_id="n0",
)
SDK_EXAMPLES = 120
TEMPLATE_EXAMPLES = 250
ACCEPTED_ERRORS = (ConfigError, ValueError, TypeError)
ADVICE = (ProcessesGpusWarning, JobLimitWarning, KubernetesVersionWarning, PodTemplateOverrideWarning)


def fuzz_target(x: int) -> int:
    """The function every fuzzed config decorates (module level, so flytekit can serialize it)."""
    return x


@pytest.fixture(scope="module", autouse=True)
def _cached_core_schemas() -> Iterator[None]:
    """Read kubernetes-validate's schema files once instead of twice per pod template (10x faster validation).

    Only file reading is cached; the validation itself is unchanged.
    """
    with pytest.MonkeyPatch.context() as mp:
        cache_core_schemas(mp.setattr)
        yield


def cache_core_schemas(setattr_: Callable[[Any, str, Any], None]) -> None:
    """Wrap `kubernetes_validate.utils.schema_contents` in an LRU cache (the files never change).

    Args:
        setattr_: how to set the attribute (``monkeypatch.setattr`` in tests, ``setattr`` in the report script).
    """
    import kubernetes_validate.utils as kv_utils

    if not hasattr(kv_utils.schema_contents, "cache_info"):
        setattr_(kv_utils, "schema_contents", functools.lru_cache(maxsize=None)(kv_utils.schema_contents))


# ---------------------------------------------------------------------------------------------------------------
# Values: every field gets its own plausible values mixed with hostile ones of every type.

HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**63, -0.5, 0.5, 1e308, float("nan"), float("inf"),
    "", " ", "abc", "ü→😀", "a" * 300, "-1", "1e999", "8Gx", "1:0", "abc\n", [], {}, ["1"], {"a": 1},
    Resources(cpu="1"), datetime.timedelta(seconds=-1), object(),
]  # fmt: skip
hostile = st.sampled_from(HOSTILE) | st.text(max_size=12) | st.integers(-(2**40), 2**40) | st.floats()

quantity = st.sampled_from(["500m", "1", "2", "0.5", "4Gi", "512Mi", "1e3", "0", "1.5", 2, 0, "+1", "1E"])
gpu_count = st.sampled_from([0, 1, 2, "1", "8"])
small_int = st.integers(0, 5)
policy_word = st.sampled_from([*RestartPolicy, "Never", "ExitCode", "on_failure", "ALWAYS"])
clean_word = st.sampled_from([*CleanPodPolicy, "None", "Running", "all"])
label = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True)
dns = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


def either(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a valid value, sometimes a hostile one."""
    return st.one_of(valid, valid, valid, hostile)


def _resources_or_hostile(kwargs: dict[str, Any]) -> Any:
    try:
        return Resources(**kwargs)
    except (AssertionError, ValueError):  # flytekit's own type check (not ours): use the raw value as the hostile input
        return next(iter(kwargs.values()))


def resources() -> st.SearchStrategy:
    """flytekit `Resources` with (mostly) quantity-shaped fields."""
    return st.fixed_dictionaries(
        {},
        optional={
            "cpu": either(quantity),
            "mem": either(quantity),
            "gpu": either(gpu_count),
            "ephemeral_storage": either(quantity),
        },
    ).map(_resources_or_hostile)


RUN_POLICY_FIELDS: dict[str, st.SearchStrategy] = {
    "clean_pod_policy": either(clean_word),
    "backoff_limit": either(st.none() | small_int),
    "active_deadline_seconds": either(st.none() | st.integers(1, 10**6)),
    "ttl_seconds_after_finished": either(st.none() | st.integers(0, 10**6)),
    "queue": either(st.none() | dns | label),  # a label value that is no DNS subdomain (Team_A) is refused
    "priority_class": either(st.none() | dns),
    "gang_scheduling": either(st.booleans()),
    "min_available": either(st.none() | st.integers(1, 3)),
    "suspend": either(st.booleans()),
}
REPLICA_FIELDS: dict[str, st.SearchStrategy] = {
    "image": either(st.none() | st.sampled_from(["ghcr.io/org/train:2.0", "train@sha256:" + "a" * 64])),
    "requests": either(st.none() | resources()),
    "limits": either(st.none() | resources()),
    "restart_policy": either(policy_word),
}
COMMON_FIELDS: dict[str, st.SearchStrategy] = {
    "nproc_per_node": either(st.sampled_from([1, 2, 4, "auto", "cpu", "gpu", "GPU"])),
    "shm_size": either(st.none() | quantity),
    "accelerator": either(st.none() | st.sampled_from(["nvidia-tesla-a100", "A100", "nvidia-h100-80gb"]) | label),
    "gpu_resource": either(st.none() | st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.5gb"])),
    "start_method": either(st.sampled_from(["spawn", "fork", "forkserver"])),
    "collective_timeout": either(st.none() | st.integers(1, 10**5) | st.timedeltas(min_value=datetime.timedelta(0))),
}
FLAT_FIELDS: dict[str, st.SearchStrategy] = {
    "workers_count": either(small_int),
    **{
        f"per_replica_{w}_{k}": either(st.none() | quantity)
        for w in ("cpu", "memory", "storage")
        for k in ("request", "limit")
    },  # fmt: skip
    "per_replica_gpu_request": either(st.none() | gpu_count),
    "per_replica_gpu_limit": either(st.none() | gpu_count),
    **{k: v for k, v in COMMON_FIELDS.items()},
    **{k: v for k, v in RUN_POLICY_FIELDS.items()},
    "restart_policy": either(policy_word),
    # flytekit's own options pass through (valid values: their checks are flytekit's business)
    "retries": small_int,
    "timeout": st.none() | st.timedeltas(min_value=datetime.timedelta(seconds=1), max_value=datetime.timedelta(1)),
    "environment": st.dictionaries(st.from_regex(r"[A-Z_]{1,8}", fullmatch=True), st.text(max_size=8), max_size=2),
    "wrkers_count": st.just(1),  # a typo: must be an UnknownOptionError suggesting workers_count
}
ELASTIC_FIELDS: dict[str, st.SearchStrategy] = {
    "nnodes": either(st.sampled_from([1, 2, "1:2", "2:4", " 1 : 3 ", "3"])),
    "monitor_interval": either(st.sampled_from([0.1, 1, 5.0])),
    "max_restarts": either(small_int),
    "rdzv_join_timeout": either(st.integers(1, 2000)),
    "rdzv_last_call_timeout": either(st.integers(1, 100)),
    "rdzv_close_timeout": either(st.integers(1, 100)),
    **COMMON_FIELDS,
}
ELASTIC_FIELDS.pop("collective_timeout")  # same check as PyTorch's; keeps the search space smaller


def some_of(fields: dict[str, st.SearchStrategy], max_size: int = 5) -> st.SearchStrategy[dict[str, Any]]:
    """A random subset of `fields`, each with a drawn value."""
    return st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=max_size).flatmap(
        lambda names: st.fixed_dictionaries({n: fields[n] for n in names})
    )


def nested(cls: type, fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    """An instance of `cls` from valid field values, or (sometimes) a hostile object in its place."""
    valid = some_of(fields).map(lambda kw: _try(cls, kw))
    return st.one_of(valid.filter(lambda v: v is not None), valid.filter(lambda v: v is not None), hostile)


def _try(cls: type, kwargs: dict[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except ACCEPTED_ERRORS:
        return None


def configs() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(entry point, kwargs) over every public config class and the flat decorator."""
    pytorch_fields = {
        "master": nested(Master, REPLICA_FIELDS),
        "worker": nested(Worker, {"replicas": either(small_int), **REPLICA_FIELDS}),
        "run_policy": nested(RunPolicy, RUN_POLICY_FIELDS),
        **COMMON_FIELDS,
    }
    return st.one_of(
        st.tuples(st.just("pytorch_task"), some_of(FLAT_FIELDS, 6)),
        st.tuples(st.just("PyTorch"), some_of(pytorch_fields, 5)),
        st.tuples(st.just("Worker"), some_of({"replicas": either(small_int), **REPLICA_FIELDS})),
        st.tuples(st.just("Master"), some_of(REPLICA_FIELDS)),
        st.tuples(st.just("RunPolicy"), some_of(RUN_POLICY_FIELDS)),
        st.tuples(st.just("Elastic"), some_of({**ELASTIC_FIELDS, "run_policy": nested(RunPolicy, RUN_POLICY_FIELDS)})),
    )


def make_task(entry: str, kwargs: dict[str, Any]) -> Any:
    """Build the task a user would get from `entry(**kwargs)` (a bare Worker/Master/RunPolicy goes into PyTorch)."""
    import flytekit

    if entry == "pytorch_task":
        return pytorch_task(**kwargs)(fuzz_target)
    if entry == "Elastic":
        return flytekit.task(fuzz_target, task_config=Elastic(**kwargs))
    if entry == "PyTorch":
        return flytekit.task(fuzz_target, task_config=PyTorch(**kwargs))
    part = {"Worker": Worker, "Master": Master, "RunPolicy": RunPolicy}[entry](**kwargs)
    key = {"Worker": "worker", "Master": "master", "RunPolicy": "run_policy"}[entry]
    return flytekit.task(fuzz_target, task_config=PyTorch(**{key: part}))


def serialize(task: Any) -> dict[str, Any]:
    """The task's whole TaskTemplate as protobuf JSON, through flytekit's real serializer."""
    entity = get_serializable(OrderedDict(), SETTINGS, task)
    return json_format.MessageToDict(entity.template.to_flyte_idl())


def check_config(entry: str, kwargs: dict[str, Any]) -> str:
    """The SDK property for one input; returns "built" or "rejected", raises AssertionError on a violation."""
    error: Exception | None = None
    try:
        with warnings.catch_warnings():
            # advice, not a refusal: the job is built as given (each warning has its own tests)
            for advice in ADVICE:
                warnings.simplefilter("ignore", advice)
            task = make_task(entry, kwargs)
    except ACCEPTED_ERRORS as e:
        error = e
    if error is not None:
        message = str(error)
        assert any(name in message for name in kwargs), f"{entry}({kwargs!r}): error names no given field: {message}"
        return "rejected"
    template = serialize(task)
    try:
        job = build_pytorchjob(template, META)
    except TemplateError as e:
        raise AssertionError(f"{entry}({kwargs!r}) was accepted by the SDK but the backend rejects it: {e}") from e
    assert_valid_pytorchjob(job)
    return "built"


# ---------------------------------------------------------------------------------------------------------------
# SDK property


@settings(max_examples=SDK_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=configs())
# regressions found by this test (see the report of the fault suite)
@example(case=("PyTorch", {"collective_timeout": float("inf")}))  # OverflowError from timedelta
@example(case=("pytorch_task", {"collective_timeout": float("nan")}))  # ValueError naming no field
@example(case=("pytorch_task", {"collective_timeout": 1e300}))  # OverflowError from timedelta
@example(case=("pytorch_task", {"accelerator": "a" * 70}))  # accepted by the SDK, rejected by the backend
@example(case=("Elastic", {"accelerator": "ü→😀"}))  # accepted by the SDK, rejected by the backend
@example(case=("Elastic", {"nproc_per_node": 78579590009}))  # protobuf's "Value out of range" at serialization
@example(case=("pytorch_task", {"per_replica_gpu_limit": 2}))  # advice (1 rank, 2 GPUs) taken for a refusal
def test_config_builds_a_valid_job_or_names_the_field(case: tuple[str, dict[str, Any]]) -> None:
    entry, kwargs = case
    assert check_config(entry, kwargs) in ("built", "rejected")


def test_unknown_keyword_suggests_the_right_one() -> None:
    with pytest.raises(TypeError, match="workers_count"):
        make_task("pytorch_task", {"wrkers_count": 1})


# ---------------------------------------------------------------------------------------------------------------
# Template property


@functools.lru_cache(maxsize=1)
def committed_templates() -> dict[str, dict[str, Any]]:
    """Every template under tests/data/templates, by file stem."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(TEMPLATES.glob("*.json"))}


JSON_HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 3, 2**31, 2**63, -(2**63), 1e308, -0.5, 0.5, float("nan"), "", " ", "abc",
    "ü→😀", "abc\n", "a" * 300, "-1", "1e999", "500m", "4Gi", "Never", "ExitCode", "true", "0", "auto",
    [], {}, [1], ["x"], {"a": 1}, {"name": "x"},
]  # fmt: skip
UNKNOWN_KEYS = ["zzz", "pytorch.bogus", "replicas", "name", "rdzvBackend", "ü"]


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def mutate(template: dict[str, Any], rng: random.Random) -> str:
    """Apply one random mutation to `template` in place; returns a description like ``replace custom.x=-1``."""
    path = rng.choice([p for p in _paths(template) if p])
    parent = template
    for key in path[:-1]:
        parent = parent[key]
    where = ".".join(map(str, path))
    op = rng.choice(["drop", "replace", "replace", "unknown"])
    target = parent[path[-1]]
    if op == "drop":
        del parent[path[-1]]
        return f"drop {where}"
    value = rng.choice(JSON_HOSTILE)
    if op == "unknown" and isinstance(target, dict):
        key = rng.choice(UNKNOWN_KEYS)
        target[key] = value
        return f"add {where}.{key}={value!r}"
    if op == "unknown" and isinstance(target, list):
        target.append(value)
        return f"append {where}+={value!r}"
    parent[path[-1]] = value
    return f"replace {where}={value!r}"


def check_template(template: dict[str, Any]) -> str:
    """The backend property for one template: "built" or "rejected"; AssertionError on a violation."""
    try:
        job = build_pytorchjob(template, META)
    except TemplateError as e:
        assert str(e).strip(), "TemplateError without a message"
        return "rejected"
    assert_valid_pytorchjob(job)
    return "built"


def mutated_templates(rng: random.Random) -> tuple[str, dict[str, Any], list[str]]:
    """One committed template with 1-3 random mutations: (name, template, what was done)."""
    name = rng.choice(sorted(committed_templates()))
    template = copy.deepcopy(committed_templates()[name])
    done = [mutate(template, rng) for _ in range(rng.randint(1, 3))]
    return name, template, done


# Shrunk inputs of the bugs this found: (template, path, value) with value DROP meaning "delete the key".
DROP = object()
REGRESSIONS: dict[str, tuple[str, tuple, Any]] = {
    "container-not-a-dict": ("sdk_per_role", ("container",), "4Gi"),  # AttributeError; protobuf took it as {}
    "env-without-key": ("hand_cpu", ("container", "env", 0, "key"), DROP),  # KeyError 'key'
    "env-key-null": ("hand_cpu", ("container", "env", 0, "key"), None),  # invalid job: env name None
    "env-value-wrong-type": ("hand_cpu", ("container", "env", 0, "value"), 0.5),  # invalid job
    "image-wrong-type": ("hand_cpu", ("container", "image"), 1),  # invalid job
    "task-type-version-nan": ("hand_elastic", ("taskTypeVersion",), float("nan")),  # ValueError from int()
    "clean-pod-policy-unknown-enum": ("sdk_master_only", ("custom", "runPolicy", "cleanPodPolicy"), 3),  # KeyError
    "pod-metadata-a-list": ("sdk_pod_template", ("k8sPod", "metadata"), ["x"]),  # AttributeError
    "pod-labels-a-number": ("hand_pod_template", ("k8sPod", "metadata", "labels"), 0.5),  # TypeError
    "pod-env-a-number": ("official_pod_template", ("k8sPod", "podSpec", "containers", 0, "env"), 1),  # TypeError
    "pod-env-without-name": ("hand_pod_template", ("k8sPod", "podSpec", "containers", 0, "env", 0, "name"), DROP),
    "tolerations-a-number": ("hand_pod_template", ("k8sPod", "podSpec", "tolerations"), 0.5),  # TypeError
    "tolerations-a-dict": ("hand_pod_template", ("k8sPod", "podSpec", "tolerations"), {}),  # invalid job
    "toleration-a-string": ("sdk_pod_template", ("k8sPod", "podSpec", "tolerations", 0), "-1"),  # invalid job
    "affinity-term-a-number": (
        "hand_pod_template",
        (
            "k8sPod",
            "podSpec",
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
            0,
        ),
        1,
    ),  # AttributeError in _add_affinity  # fmt: skip
    "volume-empty-dir-a-bool": ("official_elastic", ("k8sPod", "podSpec", "volumes", 0, "emptyDir"), False),
    "pod-spec-unknown-field": ("official_elastic", ("k8sPod", "podSpec", "pytorch.bogus"), 1),  # invalid job
    "sidecar-without-image": ("hand_pod_template", ("k8sPod", "podSpec", "containers", 1, "image"), DROP),
}


def _apply(name: str, path: tuple, value: Any) -> dict[str, Any]:
    template = copy.deepcopy(committed_templates()[name])
    parent = template
    for key in path[:-1]:
        parent = parent[key]
    if value is DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return template


@pytest.mark.parametrize("case", sorted(REGRESSIONS), ids=sorted(REGRESSIONS))
def test_template_regression(case: str) -> None:
    name, path, value = REGRESSIONS[case]
    assert check_template(_apply(name, path, value)) in ("built", "rejected")


@pytest.mark.parametrize(
    "key, value",
    [("pytorch.accelerator", "MI300X\n"), ("pytorch.priority_class", "high\n"), ("pytorch.queue", "team-a\n")],
    ids=["accelerator", "priority-class", "queue"],
)
def test_trailing_newline_is_not_a_label_value(key: str, value: str) -> None:
    """`re.match(r"...$")` accepted "MI300X\\n" (`$` matches before a final newline); the API server does not."""
    template = _apply("hand_accel_amd", ("config", key), value)
    with pytest.raises(TemplateError, match=re.escape(key)):
        build_pytorchjob(template, META)


@settings(max_examples=TEMPLATE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_mutated_template_builds_a_valid_job_or_names_the_field(seed: int) -> None:
    name, template, done = mutated_templates(random.Random(seed))
    try:
        check_template(template)
    except AssertionError as e:
        raise AssertionError(f"{name} after {done}: {e}") from None
    except Exception as e:  # noqa: BLE001 - any other exception type is the bug being looked for
        raise AssertionError(f"{name} after {done}: {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------------------------------------------------------
# Summary for the fault report


def drill_fuzz_summary(sdk_examples: int = 300, template_examples: int = 1000, seed: int = 11) -> dict[str, Any]:
    """Drill 11 as one report row: run both properties as seeded loops and count the outcomes.

    Args:
        sdk_examples: config inputs to try.
        template_examples: mutated templates to try.
        seed: seed of the random choices (the same seed gives the same inputs).

    Returns:
        The report row: ``{drill, injected, expected, observed, detect_s, leftover, data_lost}``, ``observed``
        counting examples tried, built, rejected cleanly, and unexpected (with the first few described).
    """
    cache_core_schemas(setattr)
    start = time.monotonic()
    counts = {"tried": 0, "built": 0, "rejected": 0, "unexpected": 0}
    first: list[str] = []

    def record(what: Callable[[], str], job: Callable[[], str]) -> None:
        counts["tried"] += 1
        try:
            counts[job()] += 1
        except Exception as e:  # noqa: BLE001 - counted and described, that is the point of the drill
            counts["unexpected"] += 1
            if len(first) < 3:
                first.append(f"{what()}: {type(e).__name__}: {str(e)[:200]}")

    @settings(max_examples=max(sdk_examples, 1), deadline=None, database=None, derandomize=True)
    @given(case=configs())
    def sdk(case: tuple[str, dict[str, Any]]) -> None:
        record(lambda: f"{case[0]}({case[1]!r})", functools.partial(check_config, *case))

    if sdk_examples:
        sdk()
    rng = random.Random(seed)
    for _ in range(template_examples):
        name, template, done = mutated_templates(rng)
        record(lambda: f"{name} after {done}", functools.partial(check_template, template))  # noqa: B023
    elapsed = time.monotonic() - start
    return {
        "drill": "11 fuzzing (configs and templates)",
        "injected": f"{sdk_examples} random config kwargs + {template_examples} mutated templates",
        "expected": "valid PyTorchJob or a ConfigError/TemplateError naming the field; nothing else",
        "observed": {**counts, "first_unexpected": first},
        "detect_s": round(elapsed / max(counts["tried"], 1), 4),
        "leftover": 0,
        "data_lost": False,
    }
