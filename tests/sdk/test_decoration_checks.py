"""What the SDK refuses or warns about when a task is decorated, table-driven, with the valid neighbour of each rule.

- pod templates (the task's, the Master's, the Worker's) whose labels, annotations, tolerations or nodeSelector
  Kubernetes refuses on every pod create (`pytorch_contract.k8s_metadata`, `pytorch_contract.pod_rules`);
- environment entries over a TrainJob's `maxItems`, counting the writer's (`pytorch_contract.job_limits`);
- a payload over the API server's 1.5 MiB stored-object limit;
- `nproc_per_node` against the GPUs a replica requests;
- unknown keywords, with kfpytorch 1.16's names mapped to ours.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any, Optional

import pytest
from flytekit import PodTemplate, Resources, task
from kubernetes.client import V1Container, V1EnvVar, V1PodSpec, V1Toleration

import flytekitplugins_pytorch
from flytekitplugins_pytorch import (
    ConfigError,
    Elastic,
    JobLimitWarning,
    Master,
    ProcessesGpusWarning,
    PyTorch,
    RunPolicy,
    UnknownOptionError,
    Worker,
    pytorch_task,
)
from flytekitplugins_pytorch.config import KFPYTORCH_NAMES, kfpytorch_replacement, option_names
from pytorch_contract.job_limits import ENV_MAX_ITEMS, WRITER_ENV_ENTRIES
from tests.docs.test_migration_names import ROWS


def spec(**kwargs: Any) -> V1PodSpec:
    return V1PodSpec(containers=[V1Container(name="primary")], **kwargs)


def primary_env(n: int) -> PodTemplate:
    env = [V1EnvVar(name=f"P{i}", value="x") for i in range(n)]
    return PodTemplate(pod_spec=V1PodSpec(containers=[V1Container(name="primary", env=env)]))


# (id, PodTemplate, parts of the message); the message also names where the template was given.
BAD_TEMPLATES = [
    ("label-key-with-space", PodTemplate(labels={"bad key!": "x"}), ("labels", "'bad key!'", "label key")),
    ("label-value-64-chars", PodTemplate(labels={"team": "a" * 64}), ("labels", "team=", "at most 63")),
    ("label-value-with-space", PodTemplate(labels={"team": "ml team"}), ("labels", "'ml team'", "label value")),
    ("annotation-key-bad", PodTemplate(annotations={"no spaces/x y": "1"}), ("annotations", "annotation key")),
    (
        "annotations-over-256KiB",
        PodTemplate(annotations={"blob": "x" * 300_000}),
        ("annotations", "300,004 bytes", "ConfigMap or Secret"),
    ),
    (
        "toleration-exists-with-value",
        PodTemplate(pod_spec=spec(tolerations=[V1Toleration(key="gpu", operator="Exists", value="yes")])),
        ("tolerations[0]", "'Exists' takes no value", "'yes'"),
    ),
    (
        "toleration-seconds-without-NoExecute",
        PodTemplate(pod_spec=spec(tolerations=[V1Toleration(key="k", toleration_seconds=5, effect="NoSchedule")])),
        ("tolerations[0]", "tolerationSeconds", "NoExecute"),
    ),
    (
        "node-selector-value-with-space",
        PodTemplate(pod_spec=spec(node_selector={"pool": "big gpus"})),
        ("nodeSelector", "'big gpus'", "label value"),
    ),
    (
        "container-env-name-with-equals",
        PodTemplate(pod_spec=V1PodSpec(containers=[V1Container(name="primary", env=[V1EnvVar(name="A=B")])])),
        ("container 'primary' env", "'A=B'", "without '='"),
    ),
]

# Valid neighbours of each rule: Kubernetes admits the pods, so the SDK must too.
GOOD_TEMPLATES = [
    ("label-value-63-chars", PodTemplate(labels={"team": "a" * 63})),
    ("label-value-empty", PodTemplate(labels={"team": ""})),
    ("label-key-prefixed", PodTemplate(labels={"example.com/team": "ml.x_y-z"})),
    ("annotation-free-text-200KB", PodTemplate(annotations={"example.com/note": "free text, spaces! " * 10_000})),
    ("annotation-key-upper-case", PodTemplate(annotations={"Example.com/Note": "x"})),
    ("toleration-exists-no-value", PodTemplate(pod_spec=spec(tolerations=[V1Toleration(operator="Exists")]))),
    (
        "toleration-equal-noexecute-seconds",
        PodTemplate(
            pod_spec=spec(
                tolerations=[V1Toleration(key="gpu", value="a100", effect="NoExecute", toleration_seconds=30)]
            )
        ),
    ),
    (
        "container-env-name-dotted",
        PodTemplate(pod_spec=V1PodSpec(containers=[V1Container(name="primary", env=[V1EnvVar(name="my.var-1")])])),
    ),
    ("node-selector-gpu-product", PodTemplate(pod_spec=spec(node_selector={"nvidia.com/gpu.product": "A100-80GB"}))),
]

PLACES: dict[str, Callable[[PodTemplate], Any]] = {
    "pod_template": lambda t: task(task_config=PyTorch(), pod_template=t)(_fn),
    "Master.pod_template": lambda t: PyTorch(master=Master(pod_template=t)),
    "Worker.pod_template": lambda t: PyTorch(worker=Worker(pod_template=t)),
}


def _fn() -> None:
    pass


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize(("template", "parts"), [c[1:] for c in BAD_TEMPLATES], ids=[c[0] for c in BAD_TEMPLATES])
def test_a_pod_template_kubernetes_refuses_is_refused(place: str, template: PodTemplate, parts: tuple) -> None:
    with pytest.raises(ConfigError) as info:
        PLACES[place](template)
    message = str(info.value)
    assert message.startswith(f"{place} "), message
    assert all(p in message for p in parts), message
    assert "Kubernetes would refuse every pod" in message
    assert len(message) < 1200  # a huge value is abbreviated


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("template", [c[1] for c in GOOD_TEMPLATES], ids=[c[0] for c in GOOD_TEMPLATES])
def test_a_pod_template_kubernetes_admits_passes(place: str, template: PodTemplate) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PLACES[place](template)


TRAINJOB_ROOM = ENV_MAX_ITEMS["trainjob"] - WRITER_ENV_ENTRIES  # 117 of the task's own


# (id, environment size, entries in the task's pod template's primary container, warns)
ENV_COUNTS = [
    ("fits-exactly", TRAINJOB_ROOM, 0, False),
    ("one-over", TRAINJOB_ROOM + 1, 0, True),
    ("pod-template-env-counts", TRAINJOB_ROOM - 1, 2, True),
    ("pod-template-env-fits", TRAINJOB_ROOM - 2, 2, False),
]


@pytest.mark.parametrize(("n_env", "n_pod", "warns"), [c[1:] for c in ENV_COUNTS], ids=[c[0] for c in ENV_COUNTS])
def test_env_entries_over_a_trainjobs_limit_warn(n_env: int, n_pod: int, warns: bool) -> None:
    # A PyTorchJob admits any number, and the SDK does not know the backend's kind: a warning, never a refusal.
    environment = {f"V{i}": "x" for i in range(n_env)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task(task_config=PyTorch(), environment=environment, pod_template=primary_env(n_pod) if n_pod else None)(_fn)
    ours = [str(w.message) for w in caught if issubclass(w.category, JobLimitWarning)]
    assert bool(ours) is warns, ours
    if warns:
        assert f"{n_env + n_pod} environment entries" in ours[0]
        assert f"keep at most {TRAINJOB_ROOM}" in ours[0] and "ConfigMap or Secret" in ours[0]


BIG, HALF = "j" * 1_600_000, "j" * 800_000

# (id, build, outcome: "error" | "warning" | None)
SIZES: list[tuple[str, Callable[[], Any], Optional[str]]] = [
    ("over-1.5MiB-any-kind", lambda: pytorch_task(environment={"CONFIG_JSON": BIG})(_fn), "error"),
    ("over-when-written-per-role", lambda: pytorch_task(environment={"CONFIG_JSON": HALF})(_fn), "warning"),
    ("master-only-written-once", lambda: pytorch_task(workers_count=0, environment={"CONFIG_JSON": HALF})(_fn), None),
    ("elastic-written-once", lambda: task(task_config=Elastic(), environment={"CONFIG_JSON": HALF})(_fn), None),
    (
        "pod-template-env-over",
        lambda: task(
            task_config=Elastic(),
            pod_template=PodTemplate(
                pod_spec=V1PodSpec(containers=[V1Container(name="primary", env=[V1EnvVar(name="C", value=BIG)])])
            ),
        )(_fn),
        "error",
    ),
    ("small", lambda: pytorch_task(environment={"CONFIG_JSON": "j" * 100_000})(_fn), None),
]


@pytest.mark.parametrize(("build", "outcome"), [c[1:] for c in SIZES], ids=[c[0] for c in SIZES])
def test_a_job_over_the_size_limit(build: Callable[[], Any], outcome: Optional[str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if outcome == "error":
            with pytest.raises(ConfigError) as info:
                build()
            message = str(info.value)
            assert "1.5 MiB" in message and "mount a ConfigMap or Secret" in message
            assert "characters)" in message and len(message) < 600  # the value, abbreviated
            return
        build()
    ours = [str(w.message) for w in caught if issubclass(w.category, JobLimitWarning)]
    if outcome is None:
        assert ours == []
    else:
        assert len(ours) == 1 and "2 copies" in ours[0] and "environment['CONFIG_JSON']" in ours[0]


# (id, build, the values the warning names or None for silence)
GPUS: list[tuple[str, Callable[[], Any], Optional[tuple[str, ...]]]] = [
    (
        "4-ranks-2-gpus",
        lambda: pytorch_task(nproc_per_node=4, per_replica_gpu_limit="2")(_fn),
        ("nproc_per_node=4", "limits.gpu=2", "more ranks than GPUs"),
    ),
    (
        "1-rank-2-gpus",
        lambda: pytorch_task(nproc_per_node=1, per_replica_gpu_limit=2)(_fn),
        ("nproc_per_node=1", "limits.gpu=2", "model parallel"),
    ),
    (
        "elastic-task-limits",
        lambda: task(task_config=Elastic(nproc_per_node=8), limits=Resources(gpu="4"))(_fn),
        ("Elastic.nproc_per_node=8", "limits.gpu=4"),
    ),
    (
        "worker-requests-only",
        lambda: task(task_config=PyTorch(nproc_per_node=2, worker=Worker(requests=Resources(gpu="1"))))(_fn),
        ("PyTorch.nproc_per_node=2", "Worker.requests.gpu=1"),
    ),
    ("equal", lambda: pytorch_task(nproc_per_node=2, per_replica_gpu_limit="2")(_fn), None),
    ("gpu-word", lambda: pytorch_task(nproc_per_node="gpu", per_replica_gpu_limit="2")(_fn), None),
    ("auto-word", lambda: pytorch_task(nproc_per_node="auto", per_replica_gpu_limit="2")(_fn), None),
    ("cpu-only", lambda: pytorch_task(nproc_per_node=4)(_fn), None),
]


@pytest.mark.parametrize(("build", "parts"), [c[1:] for c in GPUS], ids=[c[0] for c in GPUS])
def test_processes_against_gpus(build: Callable[[], Any], parts: Optional[tuple[str, ...]]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build()
    ours = [str(w.message) for w in caught if issubclass(w.category, ProcessesGpusWarning)]
    if parts is None:
        assert ours == []
    else:
        assert len(ours) == 1, ours
        assert all(p in ours[0] for p in parts), ours[0]
        # it points at the user's decorated function, not into flytekit's decorator
        assert [w.filename for w in caught if issubclass(w.category, ProcessesGpusWarning)] == [__file__]


# (id, call, the suggestion)
TYPOS: list[tuple[str, Callable[[], Any], str]] = [
    ("Elastic.max_restart", lambda: Elastic(max_restart=3), "did you mean 'max_restarts'?"),
    ("PyTorch.nproc_per_nod", lambda: PyTorch(nproc_per_nod=2), "did you mean 'nproc_per_node'?"),
    ("Master.imag", lambda: Master(imag="x"), "did you mean 'image'?"),
    ("Worker.replica", lambda: Worker(replica=2), "did you mean 'replicas'?"),
    ("RunPolicy.backof_limit", lambda: RunPolicy(backof_limit=2), "did you mean 'backoff_limit'?"),
    ("pytorch_task.acelerator", lambda: pytorch_task(acelerator="A100"), "did you mean 'accelerator'?"),
    ("pytorch_task.retrie", lambda: pytorch_task(retrie=2), "did you mean 'retries'?"),
    ("PyTorch.num_workers", lambda: PyTorch(num_workers=2), "write PyTorch(worker=Worker(replicas=2))"),
    ("pytorch_task.num_workers", lambda: pytorch_task(num_workers=2), "write pytorch_task(workers_count=2)"),
    ("PyTorch.increase_shared_mem", lambda: PyTorch(increase_shared_mem=False), 'write PyTorch(shm_size="0")'),
    ("Elastic.increase_shared_mem", lambda: Elastic(increase_shared_mem=True), "write Elastic()"),
    (
        "Elastic.rdzv_configs",
        lambda: Elastic(rdzv_configs={"join_timeout": 600, "close_timeout": 10}),
        "write Elastic(rdzv_join_timeout=600, rdzv_close_timeout=10)",
    ),
]


@pytest.mark.parametrize(("call", "hint"), [c[1:] for c in TYPOS], ids=[c[0] for c in TYPOS])
def test_unknown_keyword_suggests(call: Callable[[], Any], hint: str) -> None:
    with pytest.raises(UnknownOptionError) as info:
        call()
    message = str(info.value)
    assert hint in message, message
    assert isinstance(info.value, TypeError)
    quoted = re.findall(r"'(\w+)'", message)
    assert len(quoted) == len(set(quoted)), message  # no option twice


def test_pytorch_task_lists_only_its_own_options_once_when_nothing_is_close() -> None:
    with pytest.raises(UnknownOptionError) as info:
        pytorch_task(zzqqxx=1)
    listed = str(info.value).split("valid options: ", 1)[1].split(", and ", 1)[0].split(", ")
    assert len(listed) == len(set(listed)) and "workers_count" in listed
    assert "cache" not in listed  # flytekit's own @task options are named as a group, not one by one


def _docs_rows_for_renamed() -> list[tuple[str, str, str, Any]]:
    """(owner, keyword, write here, value) of every docs row whose kfpytorch keyword is not an option here."""
    out = []
    for old, new, _ in ROWS:
        match = re.fullmatch(r"(\w+)\((\w+)=(.*)\)", old)
        if not match or match[1] not in ("PyTorch", "Elastic", "Master", "Worker", "RunPolicy"):
            continue
        owner, name = match[1], match[2]
        if name in option_names(getattr(flytekitplugins_pytorch, owner)):
            continue
        out.append((owner, name, new, eval(match[3])))  # noqa: S307 - the page's own code cells
    return out


DOC_RENAMES = _docs_rows_for_renamed()


@pytest.mark.parametrize(
    ("owner", "name", "new", "value"), DOC_RENAMES, ids=[f"{r[0]}.{r[1]}={r[3]!r}" for r in DOC_RENAMES]
)
def test_the_code_gives_the_docs_replacement(owner: str, name: str, new: str, value: Any) -> None:
    assert (owner, name) in KFPYTORCH_NAMES
    assert kfpytorch_replacement(owner, name, value) == new


def test_every_code_rename_is_in_the_docs() -> None:
    documented = {(owner, name) for owner, name, _, _ in DOC_RENAMES}
    in_code = {key for key in KFPYTORCH_NAMES if key[0] != "pytorch_task"}
    assert in_code == documented
    assert ("pytorch_task", "num_workers") in KFPYTORCH_NAMES  # docs: "or @pytorch_task(workers_count=2)"
    assert any("@pytorch_task(workers_count=2)" in note for _, _, note in ROWS)
