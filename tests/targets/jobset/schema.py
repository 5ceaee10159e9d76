"""Validation of every JobSet a test produces, independent of the backend's own admission model.

Four layers, all of which must pass:
1. the JobSet v0.12.0 CRD's openAPIV3Schema (`backend_plugin/crds/`), with jsonschema's Draft 7 validator;
2. the typed models of `kubeflow-trainer-api` 2.3.0 (pydantic models of JobSet v1alpha2 and batch/v1 that Kubeflow
   Trainer generates from the same Go types): the job must parse and come back unchanged, so every field we write is
   one the types know, with the type they give it;
3. the rules JobSet's webhook adds to the schema (`pkg/webhooks/jobset_webhook.go`), restated here from its source:
   generated Job and pod names, rule names, targets, failure reasons, subdomain, managedBy;
4. each replicated job's template as the batch/v1 Job the JobSet controller creates from it (name, subdomain and the
   completion-index labels added), against the strict Kubernetes schema of a current release (kubernetes-validate),
   plus the Job rules that schema cannot say (a pod failure policy needs restartPolicy Never; Indexed needs
   completions).
"""

from __future__ import annotations

import copy
import functools
import re

import jsonschema
import yaml

from tests.kube_schema import DNS1035, KUBERNETES_VERSION, SCHEMA_DIR

CRD_PATH = SCHEMA_DIR / "jobset.x-k8s.io_jobsets.yaml"
FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                   "PodFailurePolicy"}  # fmt: skip
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
# A domain-prefixed path: a DNS subdomain, then "/" and HTTP path characters.
MANAGED_BY = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-A-Za-z0-9/._~%!$&'()*+,;=:]+$"
)


@functools.lru_cache(maxsize=1)
def crd_validator() -> jsonschema.Draft7Validator:
    """The Draft 7 validator for `spec.versions[name=v1alpha2].schema.openAPIV3Schema` of the JobSet CRD."""
    crd = yaml.load(CRD_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def typed_model_errors(job: dict) -> list[str]:
    """The job through `kubeflow_trainer_api`'s JobSet model and back: what it refuses, or what it dropped or
    changed (a field it does not know)."""
    import pydantic
    from kubeflow_trainer_api.models.jobset_v1alpha2_job_set import JobsetV1alpha2JobSet

    try:
        back = JobsetV1alpha2JobSet.from_dict(copy.deepcopy(job))
    except pydantic.ValidationError as e:
        return [f"typed model: {err['loc']}: {err['msg']}" for err in e.errors()]
    assert back is not None
    return [] if back.to_dict() == job else ["typed model: the job does not come back unchanged (an unknown field?)"]


def webhook_errors(job: dict) -> list[str]:
    """JobSet's webhook rules that the schema cannot express; empty when the job passes."""
    errors = []
    name = job.get("metadata", {}).get("name", "")
    spec = job.get("spec", {})
    jobs = spec.get("replicatedJobs") or []
    names = [j.get("name") for j in jobs]
    for rjob in jobs:
        replicas = rjob.get("replicas", 1)
        if not DNS1035.match(rjob.get("groupName", "default")):
            errors.append(f"{rjob.get('name')}: groupName is not a DNS-1035 label")
        job_name = f"{name}-{rjob.get('name')}-{replicas - 1}"
        if not DNS1035.match(job_name) or len(job_name) > 63:
            errors.append(f"child Job name {job_name!r} is not a DNS-1035 label of <= 63 characters")
        completions = rjob.get("template", {}).get("spec", {}).get("completions")
        if completions is not None:
            pod = f"{job_name}-{completions - 1}-abcde"
            if len(pod) > 63:
                errors.append(f"pod name {pod!r} is {len(pod)} characters (> 63)")
    for target in (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []:
        if target not in names:
            errors.append(f"successPolicy names {target!r}, not a replicated job")
    policy = spec.get("failurePolicy") or {}
    rule_names = [r.get("name", "") for r in policy.get("rules") or []]
    if len(set(rule_names)) != len(rule_names):
        errors.append(f"failure-policy rule names are not unique: {rule_names}")
    for rule in policy.get("rules") or []:
        if not RULE_NAME.match(rule.get("name", "")) or len(rule.get("name", "")) > 128:
            errors.append(f"rule name {rule.get('name')!r} is not allowed")
        errors += [f"rule {rule['name']}: {t!r} is not a replicated job" for t in rule.get("targetReplicatedJobs") or []
                   if t not in names]  # fmt: skip
        errors += [f"rule {rule['name']}: {r!r} is not a Job failure reason"
                   for r in rule.get("onJobFailureReasons") or [] if r not in FAILURE_REASONS]  # fmt: skip
        if rule.get("action") in ("RestartJob", "RestartJobAndIgnoreMaxRestarts"):
            errors.append(f"rule {rule['name']}: {rule['action']} needs an alpha feature gate")
    if policy.get("restartStrategy") == "InPlaceRestart":
        errors.append("InPlaceRestart needs an alpha feature gate")
    subdomain = (spec.get("network") or {}).get("subdomain")
    if subdomain and (not DNS1035.match(subdomain) or len(subdomain) > 63):
        errors.append(f"network.subdomain {subdomain!r} is not a DNS-1035 label")
    if "managedBy" in spec and (not MANAGED_BY.match(spec["managedBy"]) or len(spec["managedBy"]) > 63):
        errors.append(f"managedBy {spec['managedBy']!r} is not a domain-prefixed path of <= 63 characters")
    return errors


def child_job(job: dict, rjob: dict, index: int = 0) -> dict:
    """The batch/v1 Job the JobSet controller creates from `rjob` (its name, labels and the subdomain added)."""
    name = job["metadata"]["name"]
    child = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-{rjob['name']}-{index}"},
             "spec": copy.deepcopy(rjob["template"]["spec"])}  # fmt: skip
    labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"]}
    child["metadata"]["labels"] = dict(labels)
    pod = child["spec"]["template"]
    pod.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    if (job["spec"].get("network") or {}).get("enableDNSHostnames"):
        pod["spec"]["subdomain"] = (job["spec"].get("network") or {}).get("subdomain") or name
    return child


def child_job_errors(job: dict) -> list[str]:
    """Each replicated job's Job against core/v1 and batch/v1 (strict), and the Job rules beyond the schema."""
    import kubernetes_validate

    errors = []
    for rjob in job.get("spec", {}).get("replicatedJobs") or []:
        child = child_job(job, rjob)
        try:
            kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{rjob['name']} Job: {'.'.join(str(p) for p in e.path)}: {e.message}")
        spec = child["spec"]
        if "podFailurePolicy" in spec and spec["template"]["spec"].get("restartPolicy") != "Never":
            errors.append(f"{rjob['name']} Job: a podFailurePolicy needs restartPolicy Never")
        if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
            errors.append(f"{rjob['name']} Job: Indexed needs completions")
        for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
            codes = rule.get("onExitCodes")
            if codes is not None:
                values = codes.get("values") or []
                if (
                    values != sorted(set(values))
                    or not 0 < len(values) <= 255
                    or (codes["operator"] == "In" and 0 in values)
                ):
                    errors.append(f"{rjob['name']} Job: onExitCodes values {values} are not allowed")
    return errors


def assert_valid_jobset(job: dict) -> None:
    """Fail with every problem listed when `job` would be rejected by the JobSet CRD or webhook, does not survive the
    typed models, or its child Jobs would be refused."""
    assert job.get("apiVersion") == "jobset.x-k8s.io/v1alpha2" and job.get("kind") == "JobSet", (
        f"not a jobset.x-k8s.io/v1alpha2 JobSet: {job.get('apiVersion')}/{job.get('kind')}"
    )
    problems = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(crd_validator().iter_errors(job), key=lambda e: list(map(str, e.absolute_path)))
    ]
    problems += typed_model_errors(job) + webhook_errors(job)
    if not problems:
        problems += child_job_errors(job)
    assert not problems, "invalid JobSet:\n  " + "\n  ".join(problems)
