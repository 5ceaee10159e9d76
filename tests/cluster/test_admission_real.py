"""The admission model's verdicts against the real API server's, with every release's webhooks on.

Every golden job (tests/data/jobs, tests/data/trainjobs, and every template of tests/data/templates written as a
JobSet), every case of the admission tables (tests/backend/test_admission.py's rules and accepted boundary values, for
each kind; tests/backend/test_admission_upstream.py's upstream cases) and every pod-level case of the upstream-rule
tables (tests/contract/test_upstream_rules.py) is created with `dryRun=All` and `fieldValidation=Strict`, and the
server's verdict (created, refused, or created with a pod or Service of it refused) is compared with the model's; a
refusal must name the field the model names. Run with `-s` to see the count and each difference.

`KNOWN` lists the differences that stay, each with its upstream reason. A difference where the model refuses what the
server accepts is never known: the model must never refuse what the real server accepts.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import yaml

from backend_plugin.admission.settings import get_path
from backend_plugin.errors import TemplateError
from backend_plugin.kinds import declaration_for
from backend_plugin.targets.registry import target_for_config
from pytorch_contract.k8s_metadata import annotation_problems, label_problems
from pytorch_contract.k8s_names import queue_name_problem
from pytorch_contract.pod_rules import container_name_problems, env_name_problems, toleration_problems
from tests.backend import test_admission as rules_table
from tests.backend import test_admission_upstream as upstream_table
from tests.cluster.harness import RealCluster
from tests.cluster.realapi_admission import NS, Case, job_case, judge, object_case, pod_case, report
from tests.contract import test_upstream_rules as contract
from tests.helpers.jobs import META, write_job

DATA = Path(__file__).resolve().parents[1] / "data"
KINDS = ("pytorchjob", "trainjob", "jobset")

_GATED = (
    "the model says a note, not a refusal: operators Lt and Gt are accepted only where the "
    "TaintTolerationComparisonOperators feature gate is on (ValidateTolerations, alpha since Kubernetes 1.35, off "
    "by default; this cluster runs with the defaults and refuses them), and the model must never refuse what a "
    "cluster with the gate on accepts"
)
KNOWN: dict[str, str] = {
    "upstream/toleration-Lt": _GATED,
    "upstream/toleration-Gt": _GATED,
    "contract/tolerations/13:{'key': 'node.kubernetes.io/sla', 'operator': 'Gt', 'value': '950'}": _GATED,
    "contract/tolerations/14:{'key': 'sla', 'operator': 'Lt', 'value': '5'}": _GATED,
}
"""Case id -> why the model's verdict and the server's differ, with the upstream source."""


def _write(template: dict, target: str) -> dict:
    kind = target_for_config(target)
    assert kind is not None
    return write_job(kind, template, copy.deepcopy(META))


def golden_cases() -> list[Case]:
    out = [
        job_case(f"golden/{p.parent.name}/{p.stem}", "golden", yaml.safe_load(p.read_text()))
        for p in sorted((DATA / "jobs").glob("*.yaml")) + sorted((DATA / "trainjobs").glob("*.yaml"))
    ]
    for path in sorted((DATA / "templates").glob("*.json")):
        try:
            job = _write(json.loads(path.read_text()), "jobset")
        except TemplateError:
            continue  # the JobSet writer refuses the template itself: nothing is sent
        out.append(job_case(f"golden/jobset/{path.stem}", "golden (written as a JobSet)", job))
    return out


def rules_cases() -> list[Case]:
    out = []
    for case_id, (mutate, _verdicts, _text) in rules_table.RULES.items():
        for target in KINDS:
            t = rules_table.pod_template()
            mutate(t)
            try:
                job = _write(t, target)
            except TemplateError:
                continue  # refused by the writer: no job exists to send
            out.append(job_case(f"rules/{case_id}/{target}", "test_admission.RULES", job))
    for case_id, mutate in rules_table.ACCEPTED.items():
        for target in KINDS:
            t = rules_table.pod_template()
            mutate(t)
            out.append(job_case(f"accepted/{case_id}/{target}", "test_admission.ACCEPTED", _write(t, target)))
    return out


def upstream_cases() -> list[Case]:
    out = []
    for case_id, (_function, kind, change, _verdict, _text) in upstream_table.CASES.items():
        job = copy.deepcopy(upstream_table.GOLDEN[kind])
        change(job)
        out.append(job_case(f"upstream/{case_id}", "test_admission_upstream.CASES", job))
    return out


def _main(**fields: object) -> dict:
    return {"name": "main", "image": "registry.example/probe:1.0", **fields}


def _worker_resources(section: str, name: str, amount: object) -> dict:
    job = copy.deepcopy(upstream_table.GOLDEN["PyTorchJob"])
    upstream_table.resources(section, name, amount)(job)
    return job


def contract_cases() -> list[Case]:
    """The pod-level rules of pytorch_contract, each value in a Pod (or, for a queue name, a Kueue-managed Job)."""
    out = []
    for i, (name, _refused, _old) in enumerate(contract.ENV_NAMES):
        problems = env_name_problems([name], "env")
        out.append(
            pod_case(
                f"contract/env/{i}:{name!r}",
                "ENV_NAMES",
                {"containers": [_main(env=[{"name": name, "value": "v"}])]},
                problems,
                ["env"],
            )
        )
    for i, (labels, _ok) in enumerate(contract.LABELS):
        problems = label_problems(labels, "labels")
        out.append(
            pod_case(
                f"contract/labels/{i}",
                "LABELS",
                {"containers": [_main()]},
                problems,
                ["labels"],
                metadata={"labels": labels},
            )
        )
    for key in ("Example.com/team", "EXAMPLE.COM/Team", "example.com/team!", "a/b/c"):
        problems = annotation_problems({key: "v"}, "annotations")
        out.append(
            pod_case(
                f"contract/annotations/{key}",
                "annotation keys",
                {"containers": [_main()]},
                problems,
                ["annotations"],
                metadata={"annotations": {key: "v"}},
            )
        )
    for i, (toleration, _refused, _warned) in enumerate(contract.TOLERATIONS):
        problems = toleration_problems([toleration], "tolerations")
        out.append(
            pod_case(
                f"contract/tolerations/{i}:{toleration}",
                "TOLERATIONS",
                {"containers": [_main()], "tolerations": [toleration]},
                problems,
                ["tolerations"],
            )
        )
    for i, (name, _ok) in enumerate(contract.CONTAINER_NAMES):
        problems = container_name_problems(["main", name], [], "containers")
        out.append(
            pod_case(
                f"contract/container-names/{i}:{name!r}",
                "CONTAINER_NAMES",
                {"containers": [_main(), {"name": name, "image": "x"}]},
                problems,
                ["name"],
            )
        )
    for containers, inits in (
        (["main", "sidecar"], ["setup"]),
        (["main", "main"], []),
        (["main"], ["main"]),
        (["main"], ["setup", "setup"]),
    ):
        problems = container_name_problems(containers, inits, "containers")
        spec = {
            "containers": [{"name": n, "image": "x"} for n in containers],
            "initContainers": [{"name": n, "image": "x"} for n in inits],
        }
        out.append(
            pod_case(f"contract/unique-names/{containers}+{inits}", "container names unique", spec, problems, ["name"])
        )
    # quantities are judged where the backend writes them: in a job's pod template, under its CRD's pattern
    for text, _value in contract.QUANTITIES:
        out.append(job_case(f"contract/quantity/{text!r}", "QUANTITIES", _worker_resources("requests", "cpu", text)))
    whole = ["2", 2, "2.0", "2000m", "1e1", "+2", "0", "1Ki", "1.5", "500m", "1.0001", "1000001u", "1n", "x"]
    for amount in whole:
        job = _worker_resources("limits", "nvidia.com/gpu", amount)
        out.append(job_case(f"contract/whole-gpu/{amount!r}", "whole amounts (integer resources)", job))
    # the same quantities in each kind's other places: a TrainJob's node resources and runtime patch, a JobSet's pods
    for text in ("1e1.5", "1e9223372036854775808", "1Gi", "-1"):
        job = copy.deepcopy(upstream_table.GOLDEN["TrainJob"])
        upstream_table.node_resources("memory", text)(job)
        out.append(job_case(f"contract/quantity/trainjob-node/{text!r}", "QUANTITIES", job))
        job = copy.deepcopy(upstream_table.GOLDEN["TrainJob"])
        upstream_table.node(job)["containers"][0]["resources"] = {"limits": {"memory": text}}
        out.append(job_case(f"contract/quantity/trainjob-patch/{text!r}", "QUANTITIES", job))
        job = _write(json.loads((DATA / "templates" / "hand_cpu.json").read_text()), "jobset")
        for path, _setting in declaration_for(job).pod_template_paths(job):
            get_path(job, path)["spec"]["containers"][0]["resources"] = {"limits": {"memory": text}}
        out.append(job_case(f"contract/quantity/jobset/{text!r}", "QUANTITIES", job))
    # hugepages: a whole number of pages (validateResourceQuantityHugePageValue)
    for amount in ("2Mi", "4Mi", "1.5Mi", "1Mi", "3Mi", "1Gi"):
        job = _worker_resources("limits", "hugepages-2Mi", amount)
        out.append(job_case(f"contract/hugepages-2Mi/{amount!r}", "hugepages", job))
    for name, _admitted in contract.QUEUE_NAMES:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "probe", "labels": {"kueue.x-k8s.io/queue-name": name}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [_main()]}}},
        }
        out.append(
            object_case(
                f"contract/queue-name/{name!r}", "QUEUE_NAMES", job, queue_name_problem(name) is not None, ["labels"]
            )
        )
    return out


def test_the_model_agrees_with_the_real_api_server(real: RealCluster) -> None:
    started = time.monotonic()
    cases = golden_cases() + rules_cases() + upstream_cases() + contract_cases()
    built = time.monotonic() - started
    judge(real.kube, cases)
    unexplained, stale, summary = report(cases, KNOWN)
    print(f"\n{summary}\n(built in {built:.1f} s, judged in {time.monotonic() - started - built:.1f} s)")
    assert len({c.id for c in cases}) == len(cases)
    assert len(cases) > 300
    # the first rule: never refuse what the server accepts
    false_positives = [c.describe() for c in cases if c.model_refuses and c.real_verdict() == "accepted"]
    assert false_positives == []
    assert [c.describe() for c in unexplained] == []
    assert [c.id for c in stale] == [], "a known difference that no longer differs: remove it from KNOWN"


@pytest.mark.parametrize("namespace", [NS])
def test_a_dry_run_stores_nothing(real: RealCluster, namespace: str) -> None:
    """The cases above leave no object behind: a dry run is judged in full and never stored."""
    job = yaml.safe_load((DATA / "jobs" / "cpu_only.yaml").read_text())
    (case,) = [job_case("golden/probe", "golden", job)]
    judge(real.kube, [case])
    assert case.job is not None and case.job.accepted, case.describe()
    path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{job['metadata']['name']}"
    assert real.kube.get_or_none(path) is None
