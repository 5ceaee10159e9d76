"""Sample templates, an execution, backend configs, and PyTorchJob building with validation, for the builder tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.targets.pytorchjob.writer import to_pytorchjob
from backend_plugin.template import read_template
from tests.kube_schema import assert_valid_pytorchjob

DATA = Path(__file__).resolve().parents[1] / "data"
TEMPLATES = DATA / "templates"
JOBS = DATA / "jobs"

META = ExecutionMetadata(
    namespace="flytesnacks-development",
    job_name="f7a3c2e1b0-n0-0-1a2b3c4d",
    labels={"execution-id": "f7a3c2e1b0", "project": "flytesnacks", "domain": "development"},
    annotations={"example.com/cost-center": "ml"},
    environment={"FLYTE_INTERNAL_EXECUTION_WORKFLOW": "flytesnacks:development:train.wf"},
    input_path="s3://bucket/metadata/f7a3c2e1b0/n0/data/inputs.pb",
    output_prefix="s3://bucket/metadata/f7a3c2e1b0/n0/data/0",
    raw_output_prefix="s3://bucket/raw/f7a3c2e1b0",
    checkpoint_prefix="s3://bucket/checkpoints/f7a3c2e1b0/n0/0",
    prev_checkpoint_prefix="",
    project="flytesnacks",
    domain="development",
    execution_name="f7a3c2e1b0",
    node_id="n0",
    retry_attempt=0,
)

GKE = BackendConfig.from_dict(
    dict(
        accelerator_label="cloud.google.com/gke-accelerator",
        accelerators={"MI300X": {"node_selector": {"amd.com/gpu.product": ["MI300X"]}, "tolerations": []}},
    )
)

# A GKE cluster with a spot node pool, as a site would configure Flyte's interruptible-* settings.
SPOT = BackendConfig.from_dict(
    dict(
        interruptible_tolerations=[
            {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ],
        interruptible_node_selector={"cloud.google.com/gke-spot": "true"},
    )
)


def build_pytorchjob(template: Any, meta: ExecutionMetadata, config: Optional[BackendConfig] = None) -> dict[str, Any]:
    """The PyTorchJob the connector would write: the reader, then the PyTorchJob writer (no validation)."""
    return to_pytorchjob(read_template(template), meta, config)


def write_job(kind: Any, template: Any, meta: ExecutionMetadata, config: Optional[BackendConfig] = None) -> dict:
    """The job of `kind` (a `JobTarget`) for a template: the reader, the kind's plan and its writer (no stamp, no
    admission)."""
    return kind.write(kind.plan(read_template(template), meta, config if config is not None else BackendConfig()))


def load(name: str) -> dict:
    """A template from tests/data/templates."""
    return json.loads((TEMPLATES / f"{name}.json").read_text())


def build(template: dict, config: BackendConfig | None = None, **meta: Any) -> dict:
    """Build with META (fields overridden by `meta`) and validate the job against CRD, webhook and core/v1."""
    m = copy.deepcopy(META)
    for key, value in meta.items():
        setattr(m, key, value)
    job = build_pytorchjob(template, m, config)
    assert_valid_pytorchjob(job)
    return job


def specs(job: dict) -> dict:
    """Replica specs by role."""
    return job["spec"]["pytorchReplicaSpecs"]


def pod(job: dict, role: str) -> dict:
    """The pod spec of one role."""
    return specs(job)[role]["template"]["spec"]


def main_container(job: dict, role: str) -> dict:
    """The `pytorch` container of one role."""
    (c,) = [c for c in pod(job, role)["containers"] if c["name"] == "pytorch"]
    return c
