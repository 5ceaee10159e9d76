"""Validation of every PyTorchJob a test produces.

Three layers, all of which must pass:
1. the real PyTorchJob CRD (kubeflow/trainer v1.9.4) openAPIV3Schema, with jsonschema's Draft 7 validator;
2. the rules the training operator's admission webhook adds on top of the schema;
3. each replica's pod template against the strict Kubernetes schema of a current release (kubernetes-validate).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_PATH = ROOT.parent / "shared" / "schemas" / "kubeflow.org_pytorchjobs.yaml"
KUBERNETES_VERSION = "1.37.0"
RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}  # the operator's RestartPolicy type
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@functools.lru_cache(maxsize=1)
def crd_validator() -> jsonschema.Draft7Validator:
    """The Draft 7 validator for `spec.versions[name=v1].schema.openAPIV3Schema` of the real CRD."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def webhook_errors(job: dict) -> list[str]:
    """The admission webhook's rules that the schema cannot express; empty when the job passes."""
    errors = []
    name = job.get("metadata", {}).get("name", "")
    if not DNS1035.match(name) or len(name) > 63:
        errors.append(f"metadata.name {name!r} is not a DNS-1035 label")
    specs = job.get("spec", {}).get("pytorchReplicaSpecs", {})
    master = specs.get("Master")
    if master is not None and master.get("replicas", 1) != 1:
        errors.append(f"Master replicas must be 1, got {master.get('replicas')}")
    for role, spec in specs.items():
        if spec.get("restartPolicy", "Never") not in RESTART_POLICIES:
            errors.append(f"{role}: restartPolicy {spec['restartPolicy']!r} not one of {sorted(RESTART_POLICIES)}")
        containers = spec.get("template", {}).get("spec", {}).get("containers", [])
        if not any(c.get("name") == "pytorch" for c in containers):
            errors.append(f"{role}: no container named 'pytorch'")
        for c in containers:
            if not c.get("image"):
                errors.append(f"{role}: container {c.get('name')!r} has no image")
    spec = job.get("spec", {})
    if "nprocPerNode" in spec and "nProcPerNode" in spec.get("elasticPolicy", {}):
        errors.append("spec.nprocPerNode combined with the deprecated elasticPolicy.nProcPerNode")
    return errors


def pod_template_errors(job: dict) -> list[str]:
    """Each replica's pod template validated strictly as a core/v1 PodTemplate."""
    import kubernetes_validate

    errors = []
    for role, spec in job.get("spec", {}).get("pytorchReplicaSpecs", {}).items():
        resource = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": spec["template"]}
        try:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{role}: {'.'.join(str(p) for p in e.path)}: {e.message}")
    return errors


def assert_valid_pytorchjob(job: dict) -> None:
    """Fail with every problem listed when `job` would be rejected by the CRD, the webhook or core/v1."""
    schema_errors = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(crd_validator().iter_errors(job), key=lambda e: list(map(str, e.absolute_path)))
    ]
    problems = schema_errors + webhook_errors(job) + pod_template_errors(job)
    assert job.get("apiVersion") == "kubeflow.org/v1" and job.get("kind") == "PyTorchJob", (
        f"not a kubeflow.org/v1 PyTorchJob: {job.get('apiVersion')}/{job.get('kind')}"
    )
    assert not problems, "invalid PyTorchJob:\n  " + "\n  ".join(problems)
