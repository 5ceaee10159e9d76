"""Validation of every PyTorchJob a test produces.

Three layers, all of which must pass (TrainJobs: `assert_valid_trainjob`, the same three against Trainer v2):
1. the real PyTorchJob CRD (kubeflow/trainer v1.9.4) openAPIV3Schema, with jsonschema's Draft 7 validator;
2. the rules the training operator's admission webhook adds on top of the schema;
3. each replica's pod template against the strict Kubernetes schema of a current release (kubernetes-validate).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: The upstream CRDs, vendored unchanged inside the package (backend_plugin/crds/PROVENANCE.md gives their source
#: and sha256).
SCHEMA_DIR = ROOT / "backend_plugin" / "crds"
CRD_PATH = SCHEMA_DIR / "kubeflow.org_pytorchjobs.yaml"
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


# ----------------------------------------------------------------------------------------------------------------
# TrainJob (Kubeflow Trainer v2)

TRAINJOB_CRD_PATH = SCHEMA_DIR / "trainer.kubeflow.org_trainjobs.yaml"
RUNTIME_PATH = SCHEMA_DIR / "torch_distributed.yaml"
TRAINJOB_RESERVED_ENV = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
TRAINJOB_POD_PATCH = {
    "serviceAccountName",
    "volumes",
    "initContainers",
    "containers",
    "imagePullSecrets",
    "securityContext",
    "terminationGracePeriodSeconds",
    "nodeSelector",
    "affinity",
    "tolerations",
    "schedulingGates",
}
TRAINJOB_CONTAINER_PATCH = {"name", "env", "volumeMounts", "securityContext"}
TRAINJOB_MANAGED_BY = {"trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"}
# A domain-prefixed path: a DNS subdomain with at least one dot, then "/" and a path.
MANAGER = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[-A-Za-z0-9_./]+$")


@functools.lru_cache(maxsize=1)
def trainjob_crd_validator() -> jsonschema.Draft7Validator:
    """The Draft 7 validator for `spec.versions[name=v1alpha1].schema.openAPIV3Schema` of the real TrainJob CRD."""
    crd = yaml.safe_load(TRAINJOB_CRD_PATH.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def trainjob_webhook_errors(job: dict) -> list[str]:
    """The Trainer webhook's rules (and the CEL rules jsonschema ignores) that matter to us; empty when it passes.

    Name: a DNS-1035 label of <= 63 characters whose node pods `<name>-node-0-<index>-xxxxx` also fit in 63.
    Env: `trainer.env` never sets a reserved `PET_*` name. Runtime patches: unique, domain-prefixed managers; only
    the allowed pod spec and container fields; no env on the `node` container. runtimeRef, numNodes, numProcPerNode
    and managedBy within their allowed values.
    """
    errors = []
    spec = job.get("spec", {})
    trainer = spec.get("trainer") or {}
    name = job.get("metadata", {}).get("name", "")
    if not DNS1035.match(name) or len(name) > 63:
        errors.append(f"metadata.name {name!r} is not a DNS-1035 label")
    nodes = trainer.get("numNodes", 1)
    if not isinstance(nodes, int):
        return errors + [f"trainer.numNodes={nodes!r} is not an integer"]
    pod_name = f"{name}-node-0-{max(0, nodes - 1)}-xxxxx"
    if len(pod_name) > 63:
        errors.append(f"pod name {pod_name!r} is {len(pod_name)} characters (> 63)")
    if nodes < 1:
        errors.append(f"trainer.numNodes={nodes} must be >= 1")
    nproc = trainer.get("numProcPerNode", 1)
    if not isinstance(nproc, int) or nproc < 1:
        errors.append(f"trainer.numProcPerNode={nproc!r} must be an int >= 1")
    for entry in trainer.get("env") or []:
        if entry.get("name") in TRAINJOB_RESERVED_ENV:
            errors.append(f"trainer.env sets the reserved {entry['name']}")
    ref = spec.get("runtimeRef") or {}
    if ref.get("apiGroup", "trainer.kubeflow.org") != "trainer.kubeflow.org":
        errors.append(f"runtimeRef.apiGroup {ref.get('apiGroup')!r} is not trainer.kubeflow.org")
    if ref.get("kind", "ClusterTrainingRuntime") not in ("ClusterTrainingRuntime", "TrainingRuntime"):
        errors.append(f"runtimeRef.kind {ref.get('kind')!r} is not a training runtime kind")
    if "managedBy" in spec and spec["managedBy"] not in TRAINJOB_MANAGED_BY:
        errors.append(f"managedBy {spec['managedBy']!r} not one of {sorted(TRAINJOB_MANAGED_BY)}")
    managers = [p.get("manager", "") for p in spec.get("runtimePatches") or []]
    if len(set(managers)) != len(managers):
        errors.append(f"runtimePatches managers are not unique: {managers}")
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        if not MANAGER.match(patch.get("manager", "")):
            errors.append(f"runtimePatches[{i}].manager {patch.get('manager')!r} is not a domain-prefixed path")
        template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for job_patch in (template.get("spec") or {}).get("replicatedJobs") or []:
            where = f"runtimePatches[{i}].replicatedJobs[{job_patch.get('name')}]"
            pod = ((job_patch.get("template") or {}).get("spec") or {}).get("template") or {}
            for key in pod.get("spec") or {}:
                if key not in TRAINJOB_POD_PATCH:
                    errors.append(f"{where}: pod spec field {key!r} may not be patched")
            for kind in ("containers", "initContainers"):
                for c in (pod.get("spec") or {}).get(kind) or []:
                    extra = set(c) - TRAINJOB_CONTAINER_PATCH
                    if extra:
                        errors.append(f"{where}: {kind} field(s) {sorted(extra)} may not be patched")
                    if kind == "containers" and c.get("name") == "node" and "env" in c:
                        errors.append(f"{where}: env of the node container is trainer.env, not a patch")
    return errors


def rendered_node_pod(job: dict) -> dict:
    """The node pod template the Trainer controller would render from the default `torch-distributed` runtime:
    its `node` container with `spec.trainer`'s overrides, plus every runtime patch of the `node` job."""
    runtime = yaml.safe_load(RUNTIME_PATH.read_text())
    (node_job,) = [j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node"]
    pod = copy.deepcopy(node_job["template"]["spec"]["template"])
    pod.setdefault("metadata", {})
    (container,) = pod["spec"]["containers"]
    trainer = job["spec"].get("trainer") or {}
    for key, field_name in (("image", "image"), ("command", "command"), ("args", "args"), ("env", "env")):
        if key in trainer:
            container[field_name] = trainer[key]
    if "resourcesPerNode" in trainer:
        container["resources"] = trainer["resourcesPerNode"]
    for patch in job["spec"].get("runtimePatches") or []:
        for job_patch in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if job_patch["name"] == "node":
                tpl = job_patch["template"]["spec"]["template"]
                _merge_pod(pod, tpl.get("metadata") or {}, tpl.get("spec") or {})
    # Trainer v2.1's podTemplateOverrides (`mergePodTemplateOverrides`) and v2.0's podSpecOverrides
    # (`mergePodSpecOverrides`): the same merge into the targeted job's pod template, or its pod spec alone.
    for override in job["spec"].get("podTemplateOverrides") or []:
        if any(t.get("name") == "node" for t in override.get("targetJobs") or []):
            _merge_pod(pod, override.get("metadata") or {}, override.get("spec") or {})
    for override in job["spec"].get("podSpecOverrides") or []:
        if any(t.get("name") == "node" for t in override.get("targetJobs") or []):
            _merge_pod(pod, {}, {k: v for k, v in override.items() if k != "targetJobs"})
    return pod


def _merge_pod(pod: dict, metadata: dict, spec: dict) -> None:
    """Merge a runtime patch's (or an older override's) pod metadata and spec into the runtime's node pod."""
    for key in ("labels", "annotations"):
        pod["metadata"].setdefault(key, {}).update(metadata.get(key) or {})
    for key, value in spec.items():
        if key == "containers":
            for c in value:
                target = next(x for x in pod["spec"]["containers"] if x["name"] == c["name"])
                target.update({k: v for k, v in c.items() if k != "name"})
        else:
            pod["spec"][key] = value


def assert_valid_trainjob(job: dict) -> None:
    """Fail with every problem listed when `job` would be rejected by the TrainJob CRD, the Trainer webhook, or when
    the node pod it renders (default runtime + overrides + patches) is not a valid core/v1 pod template."""
    import kubernetes_validate

    assert job.get("apiVersion") == "trainer.kubeflow.org/v1alpha1" and job.get("kind") == "TrainJob", (
        f"not a trainer.kubeflow.org/v1alpha1 TrainJob: {job.get('apiVersion')}/{job.get('kind')}"
    )
    problems = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(trainjob_crd_validator().iter_errors(job), key=lambda e: list(map(str, e.absolute_path)))
    ]
    problems += trainjob_webhook_errors(job)
    if not problems:
        pod = rendered_node_pod(job)
        resource = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": pod}
        try:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"rendered node pod: {'.'.join(str(p) for p in e.path)}: {e.message}")
    assert not problems, "invalid TrainJob:\n  " + "\n  ".join(problems)
