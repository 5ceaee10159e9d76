"""The connector on clusters that run older releases: TrainJob on the Trainer v2.0, v2.1 and v2.2 CRDs, PyTorchJob on
the training operator v1.7 and v1.8 CRDs, JobSet on its one release, each with and without RBAC to read CRDs.

Each case goes through flytekit's `AsyncConnectorService` as propeller calls it (CreateTask, then GetTask polls),
against the test API server, which serves the installed CRD (or a 403 without the permission) and decodes every create
by that CRD under `fieldValidation=Strict`, as kube-apiserver does (tests/data/crds/ holds the upstream CRDs). Every
case either creates a job with the same meaning (the node pod a TrainJob's controller renders is the one the newest
release renders) or fails once, naming the release or the field and what to do, never with the raw 400; and the API
requests are counted: the CRD is read once per kind, not per create, a strict 400 is never followed by the same
request, and a steady poll costs none.
"""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import jsonschema
import pytest
import yaml
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobMetadata, ServedJobConnector
from tests.connector.helpers import TEMPLATES, Propeller, template_of
from tests.fakeapi.objects import condition
from tests.fakeapi.server import FakeKubeApi
from tests.kube_schema import rendered_node_pod

NS = "flytesnacks-development"
DATA = Path(__file__).resolve().parents[1] / "data" / "crds"
CRDS = "customresourcedefinitions"
PLURALS = {"pytorchjob": "pytorchjobs", "trainjob": "trainjobs", "jobset": "jobsets"}
SUCCEEDED = {"pytorchjob": "Succeeded", "trainjob": "Complete", "jobset": "Completed"}
FAST = {"api_backoff_initial_s": 0.01, "api_backoff_max_s": 0.05, "api_create_budget_s": 10.0}


@functools.cache
def _upstream_crd(name: str) -> dict:
    crd: dict = yaml.load((DATA / f"{name}.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return crd


def upstream_crd(name: str) -> dict:
    """An older release's CRD, as `kubectl apply` installs it."""
    return copy.deepcopy(_upstream_crd(name))


def template(name: str = "sdk_seed_gpu", change: Optional[Callable[[dict], None]] = None) -> Any:
    data = json.loads((TEMPLATES / f"{name}.json").read_text())
    if change is not None:
        change(data)
    return template_of(data)


def native_sidecar(data: dict) -> None:
    """A sidecar the pods need running beside the trainer (Kubernetes' native sidecar: an init container that
    restarts Always)."""
    data["k8sPod"]["podSpec"]["initContainers"] = [
        {"name": "proxy", "image": "ghcr.io/example/proxy:1.0", "restartPolicy": "Always"}
    ]


def validated_by(installed: dict) -> Callable[[FakeKubeApi, dict], None]:
    """A create hook: the stored job is valid against the installed CRD's own schema (jsonschema)."""
    (version,) = [v for v in installed["spec"]["versions"] if v.get("served")]
    validator = jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])

    def hook(_server: FakeKubeApi, job: dict) -> None:
        validator.validate(job)

    return hook


@pytest.fixture
def cluster(fake_api) -> Iterator[Callable[..., Propeller]]:
    """`cluster(target, crd=None, rbac=True, **config)`: a served connector of `target` over a test API server that
    has `crd` installed (an older release's; None: the vendored one) and, without `rbac`, forbids reading CRDs."""
    made: list[ServedJobConnector] = []

    def make(target: str, crd: Optional[str] = None, rbac: bool = True, **config: Any) -> Propeller:
        server = fake_api.server
        if crd is not None:
            installed = upstream_crd(crd)
            server.install_crd(installed)
            server.on_create.append(validated_by(installed))
        if not rbac:
            server.forbid("get", CRDS)
        settings = BackendConfig.from_dict({"target": target, "watch_cache": True, **FAST, **config})
        connector = ServedJobConnector(config=settings, api_client_factory=lambda: fake_api.client)
        made.append(connector)
        return Propeller(server, connector)

    yield make
    for connector in made:
        connector.close()


def calls(server: FakeKubeApi) -> list[tuple[str, str, int]]:
    """(verb, resource, status) of every request but watches, in order."""
    return [(r.verb, r.resource, r.status) for r in server.requests if r.verb != "watch"]


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def steady_polls_cost_nothing(p: Propeller, meta: bytes, kind: str) -> str:
    """Let the job succeed, wait for the watch cache to hold it, then poll 10 times: no GET or LIST. Returns the
    message of the last poll."""
    server = p.server
    name = json.loads(meta)["name"]
    server.set_job_status(NS, name, {"conditions": [condition(SUCCEEDED[kind])]}, PLURALS[kind])
    assert p.get(meta).name == "SUCCEEDED"  # starts the namespace's watch
    held = JobMetadata.decode(meta)
    wait_for(lambda: p.connector.service.answer_from_cache(held) is not None)
    server.reset_log()
    answers = [p.get(meta) for _ in range(10)]
    assert {a.name for a in answers} == {"SUCCEEDED"}
    assert [r for r in server.requests if r.verb in ("get", "list")] == []
    return answers[-1].message


def failed_once(p: Propeller, meta: bytes) -> str:
    """GetTask of a create that failed for good: FAILED (not retryable, no gRPC error propeller would retry), the
    message in the connector's words; no request."""
    before = len(p.server.requests)
    answer = p.get(meta)
    assert answer.error == "" and answer.phase == TaskExecution.FAILED, answer
    assert len(p.server.requests) == before
    assert "strict decoding error" not in answer.message
    return answer.message


# ------------------------------------------------------------------------------------------- the version table


@dataclass(frozen=True)
class Case:
    """One row of the version table: a task on a kind's older CRD, with or without RBAC to read it."""

    kind: str
    crd: Optional[str]  # tests/data/crds/<crd>.yaml; None: the vendored CRD (the newest release)
    rbac: bool
    template: str
    created: bool
    requests: tuple[tuple[str, str, int], ...]
    says: tuple[str, ...] = ()  # in the failure's message, or in the GetTask messages of a job created with a drop
    change: Optional[Callable[[dict], None]] = None


def _crd(status: int) -> tuple[str, str, int]:
    return ("get", CRDS, status)


def _create(kind: str, status: int) -> tuple[str, str, int]:
    return ("create", PLURALS[kind], status)


CASES = {
    # TrainJob: v2.0 has no field for the node pods' labels and annotations, every task's pods carry some
    "trainjob-v2.0-rbac": Case("trainjob", "trainjobs-v2.0.0", True, "sdk_seed_gpu", False, (_crd(200),),
                               ("the cluster's TrainJob CRD (Trainer v2.0) does not declare it",
                                "upgrade Kubeflow Trainer to v2.1 or later")),
    "trainjob-v2.0-no-rbac": Case("trainjob", "trainjobs-v2.0.0", False, "sdk_seed_gpu", False,
                                  (_crd(403), _create("trainjob", 400)),
                                  ("the cluster's TrainJob CRD (older than Trainer v2.2) does not declare it",
                                   "upgrade Kubeflow Trainer to v2.2 or later", "get on customresourcedefinitions")),
    # v2.1: the runtime patch as podTemplateOverrides, the task's timeout (Flyte's to enforce) dropped and said
    "trainjob-v2.1-rbac": Case("trainjob", "trainjobs-v2.1.0", True, "flytekit_secrets_spot", True,
                               (_crd(200), _create("trainjob", 201)),
                               ("spec.activeDeadlineSeconds (the task's timeout (7230s)) dropped",)),
    "trainjob-v2.1-no-rbac": Case("trainjob", "trainjobs-v2.1.0", False, "flytekit_secrets_spot", False,
                                  (_crd(403), _create("trainjob", 400)),
                                  ("(older than Trainer v2.2) does not declare it",
                                   "get on customresourcedefinitions")),
    "trainjob-v2.2-rbac": Case("trainjob", "trainjobs-v2.2.1", True, "flytekit_secrets_spot", True,
                               (_crd(200), _create("trainjob", 201))),
    "trainjob-v2.2-no-rbac": Case("trainjob", "trainjobs-v2.2.1", False, "flytekit_secrets_spot", True,
                                  (_crd(403), _create("trainjob", 201))),
    # PyTorchJob: every field the writer writes is in v1.7 and v1.8; a native sidecar is not in v1.7
    "pytorchjob-v1.7-rbac": Case("pytorchjob", "pytorchjobs-v1.7.0", True, "sdk_pod_template", True,
                                 (_crd(200), _create("pytorchjob", 201))),
    "pytorchjob-v1.7-no-rbac": Case("pytorchjob", "pytorchjobs-v1.7.0", False, "sdk_pod_template", True,
                                    (_crd(403), _create("pytorchjob", 201))),
    "pytorchjob-v1.7-sidecar-rbac": Case("pytorchjob", "pytorchjobs-v1.7.0", True, "sdk_pod_template", False,
                                         (_crd(200),),
                                         ("(training operator v1.7 or earlier) does not declare it",
                                          "a native sidecar", "upgrade the training operator to v1.8 or later"),
                                         native_sidecar),
    "pytorchjob-v1.7-sidecar-no-rbac": Case("pytorchjob", "pytorchjobs-v1.7.0", False, "sdk_pod_template", False,
                                            (_crd(403), _create("pytorchjob", 400)),
                                            ("(older than training operator v1.8) does not declare it",
                                             "a native sidecar", "upgrade the training operator to v1.8 or later"),
                                            native_sidecar),
    "pytorchjob-v1.8-sidecar-rbac": Case("pytorchjob", "pytorchjobs-v1.8.1", True, "sdk_pod_template", True,
                                         (_crd(200), _create("pytorchjob", 201)), (), native_sidecar),
    "pytorchjob-v1.8-sidecar-no-rbac": Case("pytorchjob", "pytorchjobs-v1.8.1", False, "sdk_pod_template", True,
                                            (_crd(403), _create("pytorchjob", 201)), (), native_sidecar),
    # JobSet: one release (v0.12.0, the vendored CRD)
    "jobset-v0.12-rbac": Case("jobset", None, True, "sdk_seed_gpu", True, (_crd(200), _create("jobset", 201))),
    "jobset-v0.12-no-rbac": Case("jobset", None, False, "sdk_seed_gpu", True, (_crd(403), _create("jobset", 201))),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_a_task_on_an_older_crd_is_created_with_its_meaning_or_fails_once_saying_why(cluster, tmp_path, name) -> None:
    case = CASES[name]
    p = cluster(case.kind, case.crd, case.rbac)
    meta, context = p.try_create(tmp_path, template=template(case.template, case.change))
    assert context.code is None, context.details  # never a gRPC error propeller would retry
    assert tuple(calls(p.server)) == case.requests
    if not case.created:
        message = failed_once(p, meta)
        assert p.server.jobs(PLURALS[case.kind]) == []
        for words in case.says:
            assert words in message, message
        return
    (stored,) = p.server.jobs(PLURALS[case.kind])
    assert json.loads(meta)["uid"] == stored["metadata"]["uid"]
    message = steady_polls_cost_nothing(p, meta, case.kind)
    for words in case.says:
        assert words in message, message


def test_on_trainer_v2_1_the_node_pods_are_the_ones_the_newest_release_renders(cluster, tmp_path, fake_api) -> None:
    """The TrainJob created on v2.1 (podTemplateOverrides) renders the node pod the v2.3 TrainJob (runtimePatches)
    renders; only the task's deadline is gone, and said."""
    p = cluster("trainjob", "trainjobs-v2.1.0")
    p.create(tmp_path, template=template("flytekit_secrets_spot"))
    (old,) = p.server.jobs("trainjobs")
    assert "podTemplateOverrides" in old["spec"] and "runtimePatches" not in old["spec"]
    with_newest = FakeKubeApi().start()
    try:
        newest = Propeller(with_newest, ServedJobConnector(
            config=BackendConfig.from_dict({"target": "trainjob", "watch_cache": False, **FAST}),
            api_client_factory=with_newest.api_client))  # fmt: skip
        newest.create(tmp_path, template=template("flytekit_secrets_spot"))
        (new,) = with_newest.jobs("trainjobs")
    finally:
        with_newest.stop()
    assert new["spec"]["activeDeadlineSeconds"] == 7230 and "activeDeadlineSeconds" not in old["spec"]
    assert rendered_node_pod(old) == rendered_node_pod(new)
    same = {k: v for k, v in new["spec"].items() if k not in ("runtimePatches", "activeDeadlineSeconds")}
    assert {k: v for k, v in old["spec"].items() if k != "podTemplateOverrides"} == same


# --------------------------------------------------------------------------------------- once per kind, not per create


def test_the_crd_is_read_once_per_kind_not_per_create(cluster, tmp_path) -> None:
    p = cluster("trainjob", "trainjobs-v2.1.0")
    for execution in ("a1", "a2", "a3"):
        p.create(tmp_path, execution, template=template("sdk_pod_template"))
    assert calls(p.server) == [_crd(200)] + [_create("trainjob", 201)] * 3
    assert len(p.server.jobs("trainjobs")) == 3


def test_without_rbac_what_a_400_named_is_learnt_once(cluster, tmp_path) -> None:
    """The first sidecar task meets the 400 and fails for good; the next one is refused before any request."""
    p = cluster("pytorchjob", "pytorchjobs-v1.7.0", rbac=False)
    first, _ = p.try_create(tmp_path, "b1", template=template("sdk_pod_template", native_sidecar))
    second, _ = p.try_create(tmp_path, "b2", template=template("sdk_pod_template", native_sidecar))
    assert calls(p.server) == [_crd(403), _create("pytorchjob", 400)]
    assert failed_once(p, first) == failed_once(p, second).replace("b2-", "b1-")
    p.create(tmp_path, "b3", template=template("sdk_pod_template"))  # a task without the sidecar: created as it is
    assert calls(p.server)[2:] == [_create("pytorchjob", 201)]


# ----------------------------------------------------------------------------------------- a CRD that changes


def test_an_upgrade_under_a_cached_crd_costs_one_400_and_one_read(cluster, tmp_path) -> None:
    """The cluster moves from Trainer v2.1 to v2.2 while the connector still holds v2.1's CRD: the job it builds for
    v2.1 is refused (podTemplateOverrides is gone), the CRD is read again and the job built for v2.2 is created."""
    p = cluster("trainjob", "trainjobs-v2.1.0")
    p.create(tmp_path, "d1", template=template("sdk_pod_template"))
    p.server.on_create.clear()
    p.server.install_crd(upstream_crd("trainjobs-v2.2.1"))
    p.server.reset_log()
    p.create(tmp_path, "d2", template=template("sdk_pod_template"))
    assert calls(p.server) == [_create("trainjob", 400), _crd(200), _create("trainjob", 201)]
    newest = [j for j in p.server.jobs("trainjobs") if j["metadata"]["name"].startswith("d2-")]
    assert "runtimePatches" in newest[0]["spec"]


def test_a_downgrade_costs_one_400_and_one_read(cluster, tmp_path) -> None:
    p = cluster("trainjob", "trainjobs-v2.2.1")
    p.create(tmp_path, "e1", template=template("sdk_pod_template"))
    p.server.on_create.clear()
    p.server.install_crd(upstream_crd("trainjobs-v2.1.0"))
    p.server.reset_log()
    meta = p.create(tmp_path, "e2", template=template("sdk_pod_template"))
    assert calls(p.server) == [_create("trainjob", 400), _crd(200), _create("trainjob", 201)]
    assert json.loads(meta)["uid"]


@pytest.mark.parametrize("recheck_s", [300.0, 0.001], ids=["within-recheck", "after-recheck"])
def test_a_refused_task_runs_once_the_controller_is_upgraded(cluster, tmp_path, recheck_s) -> None:
    """A native sidecar on training operator v1.7 is refused from the cached CRD; after the upgrade to v1.8 it is
    refused until the cached CRD is `api_crd_recheck_s` old, then the CRD is read again and the task runs."""
    p = cluster("pytorchjob", "pytorchjobs-v1.7.0", api_crd_recheck_s=recheck_s)
    refused, _ = p.try_create(tmp_path, "f1", template=template("sdk_pod_template", native_sidecar))
    assert "a native sidecar" in failed_once(p, refused)
    p.server.on_create.clear()
    p.server.install_crd(upstream_crd("pytorchjobs-v1.8.1"))
    p.server.reset_log()
    meta, _ = p.try_create(tmp_path, "f2", template=template("sdk_pod_template", native_sidecar))
    if recheck_s > 1:
        assert calls(p.server) == [] and "a native sidecar" in failed_once(p, meta)
    else:
        assert calls(p.server) == [_crd(200), _create("pytorchjob", 201)] and json.loads(meta)["uid"]


def test_a_cached_crd_that_fits_the_job_is_never_read_again(cluster, tmp_path) -> None:
    """Reading again is for jobs the cached CRD changes: a job it accepts as written costs no read, however old."""
    p = cluster("pytorchjob", "pytorchjobs-v1.7.0", api_crd_recheck_s=0.001)
    for execution in ("g1", "g2"):
        p.create(tmp_path, execution, template=template("sdk_pod_template"))
    assert calls(p.server) == [_crd(200), _create("pytorchjob", 201), _create("pytorchjob", 201)]


def test_a_crd_that_no_longer_serves_the_version_is_refused_naming_it(cluster, tmp_path) -> None:
    crd = copy.deepcopy(upstream_crd("trainjobs-v2.2.1"))
    crd["spec"]["versions"][0]["name"] = "v1beta1"
    p = cluster("trainjob")
    p.server.install_crd(crd)
    meta, _ = p.try_create(tmp_path, template=template("sdk_pod_template"))
    assert calls(p.server) == [_crd(200)]
    message = failed_once(p, meta)
    assert "serves v1beta1, not v1alpha1" in message and "upgrade Kubeflow Trainer" in message


def test_render_with_the_crd_refuses_with_the_connectors_message(cluster, tmp_path, capsys) -> None:
    """`pytorchjob render --crd` judges the same task by the same CRD offline and says the same thing."""
    from backend_plugin.cli import main

    p = cluster("pytorchjob", "pytorchjobs-v1.7.0")
    meta, _ = p.try_create(tmp_path, template=template("sdk_pod_template", native_sidecar))
    connector = failed_once(p, meta)
    data = json.loads((TEMPLATES / "sdk_pod_template.json").read_text())
    native_sidecar(data)
    task = tmp_path / "task.json"
    task.write_text(json.dumps(data))
    crd = str(DATA / "pytorchjobs-v1.7.0.yaml")
    assert main(["render", "--template", str(task), "--target", "pytorchjob", "--crd", crd]) == 2
    rendered = capsys.readouterr().err.strip().splitlines()[-1]
    head = "would not be admitted by the cluster: "
    assert connector.startswith("the task template cannot run: the PyTorchJob " + head)
    assert rendered.startswith("pytorchjob render: the PyTorchJob " + head)
    assert rendered.split(head, 1)[1] == connector.split(head, 1)[1]


def test_creates_that_start_together_read_the_crd_once(cluster, tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    p = cluster("trainjob", "trainjobs-v2.1.0", watch_cache=False)
    with ThreadPoolExecutor(4) as pool:
        metas = list(pool.map(lambda e: p.create(tmp_path, e, template=template("sdk_pod_template")),
                              ["h1", "h2", "h3", "h4"]))  # fmt: skip
    assert all(json.loads(m)["uid"] for m in metas)
    assert sorted(calls(p.server)) == sorted([_crd(200)] + [_create("trainjob", 201)] * 4)


def test_a_crd_read_the_api_cannot_answer_leaves_the_create_its_time(cluster, tmp_path) -> None:
    """The read is optional: an API failing it costs at most half of the create's budget, the vendored CRD is
    assumed (the job as written is created), and the next create asks again."""
    p = cluster("pytorchjob", api_create_budget_s=2.0, watch_cache=False)
    p.server.fail(500, times=None, verb="get", resource=CRDS)
    started = time.monotonic()
    p.create(tmp_path, "i1", template=template("sdk_pod_template"))
    assert time.monotonic() - started < 2.0
    reads = [c for c in calls(p.server) if c[1] == CRDS]
    assert reads and {c[2] for c in reads} == {500} and calls(p.server)[-1] == _create("pytorchjob", 201)
    p.server.clear_faults()
    p.server.reset_log()
    p.create(tmp_path, "i2", template=template("sdk_pod_template"))
    assert calls(p.server) == [_crd(200), _create("pytorchjob", 201)]


def test_without_rbac_to_read_the_crd_the_log_names_the_permission(cluster, tmp_path, caplog) -> None:
    """The CRD read is optional; without it the connector says once which permission it lacks and what it does
    instead."""
    import logging

    p = cluster("pytorchjob", rbac=False)
    with caplog.at_level(logging.INFO, logger="backend_plugin.connector.cluster_crds"):
        p.create(tmp_path, template=template("sdk_pod_template"))
    (message,) = [r.getMessage() for r in caplog.records if "customresourcedefinitions" in r.getMessage()]
    assert "needs permission to get customresourcedefinitions (apiGroup apiextensions.k8s.io) cluster-wide" in message
    assert "pytorchjobs.kubeflow.org" in message and "learnt from the API server's strict answers" in message
