"""The connector's fitting (`JobTarget.fit`, `connector.cluster_crds`) against the real API server's strict decoding,
on the CRDs of older releases (tests/data/crds/: Trainer v2.0, v2.1, v2.2, training operator v1.7, v1.8, JobSet v0.9).

Each older CRD replaces the installed one for the duration of its case (the controllers and their webhooks stay as
they are: the API server's decoding and pruning follow the CRD alone) and the installed one is put back after. For
every task of tests/data/templates, the job the backend builds for the CRD the API server serves (`build_job(...,
crd)`, the CRD read back from the server) is sent with `dryRun=All` and `fieldValidation=Strict`, as the connector
sends it: what the model admits is accepted, and what it refuses is refused. Where the fitting changed the job, the
job as written for the newest release is sent too, and the server refuses it naming a field the installed CRD lacks:
what the fitting moved or dropped had to go. Then the connector itself, in this process with the shipped RBAC and a
TokenRequest token, creates one task's job for real (CreateTask) and it is deleted.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from backend_plugin.admission.installed import from_crd
from backend_plugin.build import build_job
from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.targets.registry import target_for_config
from devcluster.kube import ApiError, Kube
from tests.cluster.harness import TASK_NS, RealCluster
from tests.cluster.realapi_rbac import Accounts, rules_without, shipped_role
from tests.connector.helpers import Propeller, template_of
from tests.helpers.jobs import META

DATA = Path(__file__).resolve().parents[1] / "data"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
OLDER = {
    "trainjobs-v2.0.0": ("trainjob", "trainjobs.trainer.kubeflow.org", "trainer.kubeflow.org/v1alpha1", "trainjobs"),
    "trainjobs-v2.1.0": ("trainjob", "trainjobs.trainer.kubeflow.org", "trainer.kubeflow.org/v1alpha1", "trainjobs"),
    "trainjobs-v2.2.1": ("trainjob", "trainjobs.trainer.kubeflow.org", "trainer.kubeflow.org/v1alpha1", "trainjobs"),
    "pytorchjobs-v1.7.0": ("pytorchjob", "pytorchjobs.kubeflow.org", "kubeflow.org/v1", "pytorchjobs"),
    "pytorchjobs-v1.8.1": ("pytorchjob", "pytorchjobs.kubeflow.org", "kubeflow.org/v1", "pytorchjobs"),
    "jobsets-v0.9.1": ("jobset", "jobsets.jobset.x-k8s.io", "jobset.x-k8s.io/v1alpha2", "jobsets"),
}


def _native_sidecar() -> dict:
    """The SDK's pod-template task with a native sidecar (an init container that restarts Always): v1.8 declares it."""
    data = json.loads((DATA / "templates" / "sdk_pod_template.json").read_text())
    data["k8sPod"]["podSpec"]["initContainers"] = [
        {"name": "proxy", "image": "ghcr.io/example/proxy:1.0", "restartPolicy": "Always"}
    ]
    return data


TEMPLATES = [(p.stem, json.loads(p.read_text())) for p in sorted((DATA / "templates").glob("*.json"))]
TEMPLATES.append(("sdk_pod_template+native-sidecar", _native_sidecar()))


def _send(kube: Kube, path: str, job: dict) -> str:
    """ "" when the dry run is accepted, else the server's message."""
    try:
        kube.create(path, job, dryRun="All", fieldValidation="Strict")
        return ""
    except ApiError as e:
        return str(e) or "refused"


def _replace(kube: Kube, name: str, spec: dict) -> None:
    current = kube.get(f"{CRDS}/{name}")
    body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "resourceVersion": current["metadata"]["resourceVersion"],
                         "labels": current["metadata"].get("labels") or {},
                         "annotations": current["metadata"].get("annotations") or {}},
            "spec": spec}  # fmt: skip
    kube.request("PUT", f"{CRDS}/{name}", body=body)


@pytest.fixture(scope="module")
def installed(real: RealCluster) -> Iterator[Any]:
    """`install(file)`: put an older release's CRD in place of the installed one; every CRD is restored at the end."""
    saved: dict[str, dict] = {}

    def install(file: str) -> dict:
        _, name, _, _ = OLDER[file]
        if name not in saved:
            saved[name] = real.kube.get(f"{CRDS}/{name}")["spec"]
        older = yaml.safe_load((DATA / "crds" / f"{file}.yaml").read_text())
        _replace(real.kube, name, older["spec"])
        time.sleep(3.0)  # the API server rebuilds the resource's decoder from the CRD it watches
        return real.kube.get(f"{CRDS}/{name}")

    try:
        yield install
    finally:
        for name, spec in saved.items():
            _replace(real.kube, name, spec)
        time.sleep(3.0)


def _case(real: RealCluster, file: str, crd_obj: dict) -> tuple[list[str], dict[str, int]]:
    kind, _name, api_version, plural = OLDER[file]
    target = target_for_config(kind)
    assert target is not None
    crd = from_crd(crd_obj, f"the cluster's {plural} CRD")
    path = f"/apis/{api_version}/namespaces/{TASK_NS}/{plural}"
    wrong: list[str] = []
    counts = {"accepted": 0, "refused as the model said": 0, "fitted (unfitted refused)": 0, "writer refused": 0}

    def one(named: tuple[str, dict]) -> None:
        stem, template = named
        try:
            fitted = build_job(template, copy.deepcopy(META), BackendConfig(), target, crd)
            plain = build_job(template, copy.deepcopy(META), BackendConfig(), target)
        except TemplateError:
            counts["writer refused"] += 1
            return
        refuses = [p.message for p in fitted.problems if p.refuses]
        said = _send(real.kube, path, fitted.job)
        where = f"{file}/{stem}"
        if refuses:
            if not said:
                wrong.append(f"{where}: the model refuses ({refuses[0][:200]}) and the server accepts")
            counts["refused as the model said"] += 1
            return
        if said:
            wrong.append(f"{where}: the fitted job is refused: {said[:300]}")
            return
        counts["accepted"] += 1
        if fitted.job != plain.job:
            refused = _send(real.kube, path, plain.job)
            if not refused or "unknown field" not in refused:
                wrong.append(f"{where}: the fitting changed the job, and the unfitted job is {refused or 'accepted'}")
            else:
                counts["fitted (unfitted refused)"] += 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, TEMPLATES))
    return wrong, counts


def _create_with_the_connector(real: RealCluster, file: str, tmp: Path) -> str:
    """CreateTask as propeller sends it, the connector acting with the shipped RBAC: the job created (then deleted),
    or the permanent failure's message."""
    kind, _name, api_version, plural = OLDER[file]
    accounts = Accounts(real.info, real.kube)
    client = accounts.client(f"crd-{kind}", rules_without(shipped_role(), None))
    settings = BackendConfig.from_dict({"target": kind, "watch_cache": False, "api_create_budget_s": 30.0})
    from backend_plugin.connector import ServedJobConnector

    connector = ServedJobConnector(config=settings, api_client_factory=lambda: client)
    data = json.loads((DATA / "templates" / "sdk_pod_template.json").read_text())
    data["k8sPod"]["podSpec"]["nodeSelector"] = {"devcluster.test/crd-probe": "never"}  # nothing runs
    try:
        p = Propeller(None, connector)
        meta, context = p.try_create(tmp, execution=f"crd{uuid.uuid4().hex[:8]}", template=template_of(data))
        assert context.code is None, context.details
        answer = json.loads(meta)
        name = answer.get("name") or ""
        if name and not answer.get("error"):
            real.kube.delete(f"/apis/{api_version}/namespaces/{TASK_NS}/{plural}/{name}")
            return f"created {name}"
        return p.get(meta).message
    finally:
        connector.close()
        accounts.remove()


@pytest.mark.parametrize("file", list(OLDER))
def test_the_fitted_job_meets_real_strict_decoding(real: RealCluster, installed: Any, file: str,
                                                   tmp_path: Path) -> None:  # fmt: skip
    crd_obj = installed(file)
    wrong, counts = _case(real, file, crd_obj)
    created = _create_with_the_connector(real, file, tmp_path)
    print(f"\n[{file}] {counts}; the connector: {created[:300]}")
    assert wrong == []
    assert counts["accepted"] + counts["refused as the model said"] > 0
