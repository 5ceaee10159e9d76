"""What every job kind does the same way: one test for each kind of the registry (the `kind` fixture).

A kind's declaration must say where its writer puts things (its CRD, pod templates, env lists, config section), and
its status and links must keep the rules every kind shares: a job its spec holds is QUEUED and never timed out, an
unknown condition is still running, a malformed status is never an exception, a failed job follows the task's own
error document, and log links name the job's pods. Each kind's own tables and shapes are tested in its folder.
"""

from __future__ import annotations

import copy
import datetime
import logging
from pathlib import Path

import pytest
from flyteidl.core.execution_pb2 import TaskExecution as TE

from backend_plugin.admission import admit
from backend_plugin.admission.crds import CRD_DIR, schema_for
from backend_plugin.admission.settings import get_path
from backend_plugin.config import TARGETS, BackendConfig
from backend_plugin.kinds import declaration_of
from backend_plugin.targets.base import Observed
from backend_plugin.targets.registry import KINDS
from backend_plugin.task_errors import ErrorReport, parse_error_document
from backend_plugin.template import read_template
from tests.fakeapi.objects import condition
from tests.helpers.jobs import META, load
from tests.targets.conftest import Kind, facts_of

NOW = datetime.datetime(2025, 1, 1, 2, 0, tzinfo=datetime.timezone.utc)
CREATED = "2025-01-01T00:00:00Z"  # two hours before NOW: past every pickup and start timeout
CONFIG = BackendConfig()
LINK = {"name": "Logs", "template": "https://logs.example.com/{{ .namespace }}/{{ .podName }}"}


def written(kind: Kind, template: str = "hand_cpu", config: BackendConfig = CONFIG, **keys: str) -> dict:
    """The kind's job for a committed template (its `pytorch.*` config updated with `keys`)."""
    t = load(template)
    t.setdefault("config", {}).update(keys)
    return kind.target.write(kind.target.plan(read_template(t), copy.deepcopy(META), config))


def as_read(job: dict, conditions: tuple = (), **status: object) -> dict:
    """The job as the API server answers it two hours after its creation, with these conditions."""
    out = copy.deepcopy(job)
    out["metadata"]["creationTimestamp"] = CREATED
    out["status"] = {"conditions": list(conditions), **status}
    return out


# --- the declaration says where the writer puts things --------------------------------------------------------------


def test_every_registered_kind_has_its_test_folder() -> None:
    """A new kind brings its tests: its writer, status and links, and the facts the shared tests need."""
    names = [t.config_name for t in KINDS]
    assert len(set(names)) == len(names) and TARGETS == (*names, "auto")
    for target in KINDS:
        folder = Path(__file__).parent / target.config_name
        assert {"test_writer.py", "test_status.py", "test_links.py"} <= {p.name for p in folder.glob("test_*.py")}
        facts = facts_of(target)
        assert callable(facts.pod) and callable(facts.validate) and isinstance(facts.SUCCEEDED, str)
        facts.validate(facts.WARM_UP)  # what the fake API server validates first (tests/fakeapi/fixtures.py)


def test_the_declaration_matches_what_the_writer_writes(kind: Kind) -> None:
    declaration = kind.target.declaration
    job = written(kind, "sdk_pod_template")
    kind.validate(job)
    assert (job["apiVersion"], job["kind"]) == (declaration.api_version, declaration.kind)
    assert declaration_of(job["apiVersion"], job["kind"]) is declaration
    assert (CRD_DIR / declaration.crd.file).is_file() and schema_for(declaration.api_version, declaration.kind)
    templates = declaration.pod_template_paths(job)
    assert templates, "the writer wrote a pod template where the declaration does not look"
    for path, setting in templates:
        template = get_path(job, path)
        assert set(template) == {"metadata", "spec"} and setting.endswith("pod_template")
        assert template["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "flytekitplugins-pytorch"
    for env in declaration.limits.env_paths:
        assert isinstance(get_path(job, env), list), f"no env list at {env}"
    assert isinstance(CONFIG.kinds[declaration.config_name], declaration.settings)
    assert [p.verdict for p in admit(job) if p.refuses] == []


@pytest.mark.parametrize("template", ["hand_cpu", "sdk_seed_gpu", "hand_accel_mig", "flytekit_secrets_spot"])
def test_the_shared_templates_become_valid_jobs(kind: Kind, template: str) -> None:
    kind.validate(written(kind, template))


# --- status: the rules every kind shares -----------------------------------------------------------------------------


def test_a_job_suspended_in_its_spec_is_queued_and_never_timed_out(kind: Kind) -> None:
    """Kueue or an admin holds it: the controller may show no condition at all, for hours."""
    held = as_read(written(kind, **{"pytorch.suspend": "true"}))
    status = kind.target.status(held, Observed(), CONFIG, NOW)
    assert status.phase == TE.QUEUED and status.message.startswith("suspended, waiting for admission"), status
    reads = kind.target.reads(held, CONFIG, NOW)
    assert not (reads.pods or reads.events or reads.error_report)
    held["status"]["conditions"] = [condition(kind.SUCCEEDED)]  # a terminal condition still wins
    assert kind.target.status(held, Observed(), CONFIG, NOW).phase == TE.SUCCEEDED
    held["status"]["conditions"] = [condition("Failed", reason="DeadlineExceeded", message="deadline.")]
    assert kind.target.status(held, Observed(pods=[]), CONFIG, NOW).phase == TE.RETRYABLE_FAILED


def test_an_unknown_condition_is_still_running_and_logged(kind: Kind, caplog: pytest.LogCaptureFixture) -> None:
    job = as_read(written(kind), (condition("Paused", reason="Maintenance"),))
    with caplog.at_level(logging.WARNING):
        status = kind.target.status(job, Observed(pods=[]), CONFIG, NOW)
    assert status.phase == TE.RUNNING and "unknown condition 'Paused'" in status.message
    assert "unknown condition 'Paused'" in caplog.text


@pytest.mark.parametrize(
    "status",
    [None, {}, {"conditions": None}, {"conditions": ["garbage"]}, {"conditions": [{"type": "Failed"}]}],
    ids=["no-status", "empty-status", "null-conditions", "non-dict-condition", "condition-without-status"],
)
def test_a_malformed_status_never_raises(kind: Kind, status: object) -> None:
    job = as_read(written(kind))
    job["metadata"]["creationTimestamp"] = "2025-01-01T01:59:00Z"  # a minute old: not timed out yet
    job["status"] = status
    assert kind.target.status(job, Observed(pods=[]), CONFIG, NOW).phase == TE.QUEUED


@pytest.mark.parametrize(
    "document, phase, lead",
    [
        ("user", TE.FAILED, "ValueError"),
        ("recoverable_worker", TE.RETRYABLE_FAILED, "a recoverable error"),
        (None, TE.RETRYABLE_FAILED, "no error document"),
    ],
    ids=["non-recoverable", "recoverable", "no-document"],
)
def test_a_failed_job_follows_the_tasks_error_document(kind: Kind, flytekit_errors, document, phase, lead) -> None:
    """The contract's rule, on every kind: retryable unless the task's own error document says it is not."""
    job = written(kind)
    failed = as_read(job, (condition("Failed", reason="FailedJobs", message="a node failed."),))
    assert kind.target.reads(failed, CONFIG, NOW).error_report
    assert not kind.target.reads(as_read(job), CONFIG, NOW).error_report
    errors = ErrorReport()
    if document is not None:
        path = flytekit_errors[document]
        errors = ErrorReport((parse_error_document(path.read_bytes(), path.name),))
    status = kind.target.status(failed, Observed(pods=[], errors=errors), CONFIG, NOW)
    assert (status.phase, status.condition) == (phase, "Failed") and lead in status.message, status


# --- log links ----------------------------------------------------------------------------------------------------


def test_log_links_name_the_jobs_pods(kind: Kind) -> None:
    config = BackendConfig.from_dict({"log_links": [LINK]})
    job = as_read(written(kind, config=config), startTime="2025-01-01T00:01:00Z")
    pods = [kind.pod(job, 0), kind.pod(job, 1)]
    links = kind.target.links(job, pods, config, NOW, {})
    uris = [link.uri for link in links]
    assert links and all(link.name.startswith("Logs") for link in links)
    for pod in pods:
        assert f"https://logs.example.com/{META.namespace}/{pod['metadata']['name']}" in uris, uris
    assert kind.target.links(job, pods, CONFIG, NOW, {}) == []  # no templates, no links


# --- pods no node can take ------------------------------------------------------------------------------------------

STARTING = {
    "pytorchjob": {"conditions": [condition("Created")]},
    "trainjob": {"jobsStatus": [{"name": "node", "active": 1, "ready": 0}]},
    "jobset": {"replicatedJobsStatus": [{"name": "master", "active": 1, "ready": 0},
                                        {"name": "worker", "active": 1, "ready": 0}]},
}  # fmt: skip
"""Each kind's status while its pods are created and none runs yet."""

ACCELERATOR_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}
                    ]
                }  # fmt: skip
            ]
        }
    }
}
GPU_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "flyte/gpu", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"},
]
# what the API server's DefaultTolerationSeconds admission plugin adds to every pod
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


@pytest.mark.parametrize(
    "placement, verdict, asks",
    [
        (
            {"affinity": ACCELERATOR_AFFINITY, "tolerations": GPU_TOLERATIONS + DEFAULT_TOLERATIONS},
            "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.",
            "the pod asks for a node with nvidia.com/gpu.product In [NVIDIA-H100-80GB-HBM3] (the task's accelerator); "
            "it tolerates the taints nvidia.com/gpu, flyte/gpu=dedicated",
        ),
        (
            {"nodeSelector": {"pool": "gpu"}, "tolerations": DEFAULT_TOLERATIONS},
            "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated "
            "taint(s).",
            "the pod asks for a node with pool=gpu (nodeSelector); it tolerates no NoSchedule taint",
        ),
    ],
    ids=["accelerator-no-node-has", "taint-not-tolerated"],
)
def test_a_pod_no_node_can_take_is_said_with_what_it_asks_of_a_node(kind: Kind, placement, verdict, asks) -> None:
    """The scheduler says which of its filters no node passed; the status adds what the pod asked of a node (its node
    selector and required node affinity, named after the task's setting where the backend knows it, and the taints it
    tolerates), since the scheduler's own message names none of them."""
    job = as_read(written(kind, "sdk_seed_gpu"), **STARTING[kind.name])
    job["metadata"]["creationTimestamp"] = "2025-01-01T01:59:00Z"  # a minute old: not timed out yet
    pod = kind.pod(job, 0, phase="Pending")
    pod["spec"].update(placement)
    pod["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": verdict}]}  # fmt: skip
    status = kind.target.status(job, Observed(pods=[pod]), CONFIG, NOW)
    assert status.phase in (TE.QUEUED, TE.INITIALIZING), status
    assert f"Unschedulable: {verdict} ({asks})" in status.message, status.message
