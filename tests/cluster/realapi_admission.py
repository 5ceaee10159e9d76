"""The admission model's cases, as objects to send to a real API server, and the server's verdict on each.

Every case is an object the model judges (`backend_plugin.admission.admit` for a job, the `pytorch_contract` rule for
a pod-level value) and a create the API server judges with `dryRun=All` (nothing is stored, every validating and
mutating admission webhook still runs, as `sideEffects: None` webhooks are called on a dry run):

- a job the model refuses as `rejected` or `pruned` must be refused by its create (`fieldValidation=Strict`, as the
  connector sends it: a field the CRD does not declare is a 400 then), naming the same field;
- a job the model calls `unstartable` must be created, and a pod (or Service) its controller would make from it must
  be refused: each embedded pod template is sent as a Pod (with an image where a Trainer runtime patch leaves it to
  the runtime), the env and resources a kind writes outside its templates in a Pod of their own, and each name the
  kind's controllers derive from the job's name as a Service's name (`ValidateServiceName`: a DNS-1035 label);
- a job the model admits must be created, and those pods and Services too.

The 1.5 MiB etcd limit is not met on a dry run (nothing reaches etcd): a case whose refusal is that limit is created
for real and deleted at once.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

from backend_plugin.admission import PRUNED, REJECTED, UNSTARTABLE, Problem, admit
from backend_plugin.admission.settings import get_path
from backend_plugin.kinds import declaration_for
from devcluster.kube import ApiError, Kube

NS = "flytesnacks-development"
PROBE_IMAGE = "registry.example/probe:1.0"

PLURALS = {
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjobs",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainjobs",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobsets",
    ("v1", "Pod"): "pods",
    ("v1", "Service"): "services",
    ("batch/v1", "Job"): "jobs",
}


def collection(obj: Mapping[str, Any], namespace: str = NS) -> str:
    """The path of the namespaced collection `obj` is created in."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{root}/namespaces/{namespace}/{PLURALS[(api_version, kind)]}"


@dataclass
class Sent:
    """One object sent and the server's answer: accepted, or the refusal's status and message."""

    what: str
    obj: dict
    accepted: bool = False
    status: int = 0
    message: str = ""
    real_create: bool = False


@dataclass
class Case:
    """One case: the object the model judged, the model's verdicts, and what the server said."""

    id: str
    source: str
    obj: dict
    verdicts: set[str]
    """The model's refusing verdicts (empty: admitted, with or without notes)."""
    names: list[str]
    """For each refusal of the model, the field it names (leaf key), "" where it names none (the size)."""
    probes: list[Sent] = field(default_factory=list)
    job: Optional[Sent] = None

    @property
    def model_refuses(self) -> bool:
        return bool(self.verdicts)

    def real_verdict(self) -> str:
        """`refused` (the create), `unstartable` (created, a pod or Service of it refused) or `accepted`."""
        assert self.job is not None
        if not self.job.accepted:
            return "refused"
        return "unstartable" if any(not p.accepted for p in self.probes) else "accepted"

    def model_verdict(self) -> str:
        if self.verdicts & {REJECTED, PRUNED}:
            return "refused"
        return "unstartable" if UNSTARTABLE in self.verdicts else "accepted"

    def refusal_messages(self) -> list[str]:
        assert self.job is not None
        if not self.job.accepted:
            return [self.job.message]
        return [p.message for p in self.probes if not p.accepted]

    def agrees(self) -> bool:
        if self.model_verdict() != self.real_verdict():
            return False
        if self.model_verdict() == "accepted":
            return True
        text = " ".join(self.refusal_messages()).lower()
        if not _FIELD.search(text):
            return True  # the server names no field (a webhook that cannot decode the job says only why)
        return any(name.lower() in text for name in self.names if name) or not any(self.names)

    def describe(self) -> str:
        real = self.real_verdict()
        said = " | ".join(m[:300] for m in self.refusal_messages())
        return f"{self.id} ({self.source}): model {self.model_verdict()} {sorted(self.names)}, server {real}: {said}"


_FIELD = re.compile(r"\b(spec|metadata)\.")


def leaf(path: str) -> str:
    """The last key of a formatted path (`spec.containers[0].env` -> `env`, `...limits.nvidia.com/gpu`: the map key
    as the server prints it, `nvidia.com/gpu`)."""
    if not path:
        return ""
    for marker in (".limits.", ".requests."):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    last = path.rsplit("]", 1)[-1].rsplit(".", 1)[-1]
    return last or path.rsplit("[", 1)[0].rsplit(".", 1)[-1]


def job_case(case_id: str, source: str, job: dict) -> Case:
    """A job case: the model's refusing verdicts and named fields, and the probes its controller would create."""
    problems: list[Problem] = [p for p in admit(job) if p.refuses]
    names = sorted({leaf(p.path) for p in problems})
    return Case(case_id, source, job, {p.verdict for p in problems}, names, probes=probes_of(job, case_id))


def _probe_pod(name: str, metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> dict:
    spec = copy.deepcopy(dict(spec))
    containers = spec.get("containers") or [{"name": "probe"}]
    for c in [*containers, *(spec.get("initContainers") or [])]:
        if isinstance(c, dict):
            c.setdefault("image", PROBE_IMAGE)
    spec["containers"] = containers
    meta = {k: copy.deepcopy(v) for k, v in metadata.items() if k in ("labels", "annotations")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name}, "spec": spec}


def probes_of(job: Mapping[str, Any], case_id: str) -> list[Sent]:
    """What the job's controllers would create from it, for the pod-level rules: each embedded pod template as a Pod,
    the env lists and resources written outside the templates in one Pod, each derived name as a Service."""
    declaration = declaration_for(job)
    out: list[Sent] = []
    for i, (path, setting) in enumerate(declaration.pod_template_paths(job)):
        template = get_path(job, path) or {}
        if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
            pod = _probe_pod(f"probe-{i}", template.get("metadata") or {}, template["spec"])
            out.append(Sent(f"{setting} as a Pod", pod))
    container: dict[str, Any] = {"name": "probe", "image": PROBE_IMAGE}
    for path in declaration.limits.env_paths:
        env = get_path(job, path)
        if isinstance(env, list):
            container["env"] = copy.deepcopy(env)
    for path in declaration.limits.resource_paths:
        resources = get_path(job, path)
        if isinstance(resources, Mapping):
            container["resources"] = copy.deepcopy(dict(resources))
    if len(container) > 2:
        out.append(
            Sent(
                "the env and resources outside the pod templates, as a Pod",
                _probe_pod("probe-env", {}, {"containers": [container]}),
            )
        )
    for generated, what in declaration.generated_names(job):
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": generated},
                   "spec": {"clusterIP": "None", "selector": {"probe": "x"}}}  # fmt: skip
        out.append(Sent(f"the {what} name as a Service", service))
    return out


def pod_case(case_id: str, source: str, pod_spec: dict, problems: list[str], names: Iterable[str],
             metadata: Optional[dict] = None) -> Case:  # fmt: skip
    """A case of a pod-level rule: its Pod, and the rule's refusals (each one's field named by `names`): what makes
    a job `unstartable` refuses the Pod's create."""
    pod = _probe_pod("probe", metadata or {}, pod_spec)
    verdicts = {REJECTED} if problems else set()
    return Case(case_id, source, pod, verdicts, sorted(set(names)) if problems else [])


def object_case(case_id: str, source: str, obj: dict, refused: bool, names: Iterable[str]) -> Case:
    """A case of any other object (a batch Job with a queue name): the rule refuses it at create or admits it."""
    return Case(case_id, source, obj, {REJECTED} if refused else set(), sorted(set(names)) if refused else [])


def _send(kube: Kube, obj: dict, real: bool = False) -> Sent:
    sent = Sent("", obj, real_create=real)
    query = {"fieldValidation": "Strict"} if real else {"dryRun": "All", "fieldValidation": "Strict"}
    path = collection(obj)
    try:
        kube.create(path, obj, **query)
        sent.accepted = True
        if real:
            kube.delete(f"{path}/{obj['metadata']['name']}", {"propagationPolicy": "Background"})
    except ApiError as e:
        sent.status = e.status
        try:
            body = json.loads(e.body)
            causes = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}" for c in
                               (body.get("details") or {}).get("causes") or [])  # fmt: skip
            sent.message = f"{body.get('message', '')} [{causes}]"
        except ValueError:
            sent.message = e.body
    return sent


def _etcd_sized(case: Case) -> bool:
    """A case the model refuses only for the 1.5 MiB etcd stores (a dry run never reaches etcd)."""
    return (
        case.verdicts == {REJECTED}
        and case.names == [""]
        and "etcd" in json.dumps([p.message for p in admit(case.obj) if p.refuses])
    )


def judge(kube: Kube, cases: list[Case], threads: int = 12) -> None:
    """Send every case's object (and, when it is a job, its probes) to the server, in parallel."""

    def one(case: Case) -> None:
        real = _etcd_sized(case)
        obj = copy.deepcopy(case.obj)
        if real:
            obj["metadata"]["name"] = f"size-{abs(hash(case.id)) % 10**8}"
        sent = _send(kube, obj, real=real)
        sent.what = f"the {case.obj['kind']}"
        case.job = sent
        if sent.accepted:
            for probe in case.probes:
                answer = _send(kube, probe.obj)
                probe.accepted, probe.status, probe.message = answer.accepted, answer.status, answer.message
                if not probe.accepted:
                    probe.message = f"{probe.what}: {probe.message}"

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, cases))


def report(cases: list[Case], known: Mapping[str, str]) -> tuple[list[Case], list[Case], str]:
    """(disagreements not in `known`, known differences that no longer differ, a printable summary)."""
    agree = [c for c in cases if c.agrees()]
    differ = [c for c in cases if not c.agrees()]
    unexplained = [c for c in differ if c.id not in known]
    stale = [c for c in agree if c.id in known]
    lines = [f"admission against the real API server: {len(cases)} cases, {len(agree)} agree, "
             f"{len(differ) - len(unexplained)} known differences, {len(unexplained)} unexplained"]  # fmt: skip
    for c in differ:
        lines.append(("  known: " if c.id in known else "  DIFFERS: ") + c.describe())
    return unexplained, stale, "\n".join(lines)
