"""Regenerate tests/data/templates/official_*.json with flytekit's official kfpytorch plugin.

Run: `python -m tests.backend.official_templates` (needs flytekitplugins-kfpytorch). The files are committed so
the tests do not depend on the plugin's version; this module documents exactly how they were made.
"""

from __future__ import annotations

import json
import warnings
from collections import OrderedDict
from pathlib import Path

from flytekit import Resources, task
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.extras.accelerators import A100
from flytekit.tools.translator import get_serializable
from flytekitplugins.kfpytorch import Elastic, Master, PyTorch, RunPolicy, Worker
from flytekitplugins.kfpytorch.task import CleanPodPolicy, RestartPolicy
from google.protobuf import json_format

OUT = Path(__file__).resolve().parents[1] / "data" / "templates"
IMAGE = "ghcr.io/example/train:1.0"


@task(
    task_config=PyTorch(worker=Worker(replicas=2), increase_shared_mem=False),
    requests=Resources(cpu="1", mem="2Gi"),
    limits=Resources(mem="4Gi"),
)
def official_container(x: int) -> int:
    """Container target: no pod template (increase_shared_mem=False)."""
    return x


@task(
    task_config=PyTorch(
        master=Master(requests=Resources(cpu="500m", mem="1Gi"), restart_policy=RestartPolicy.NEVER),
        worker=Worker(
            replicas=3,
            requests=Resources(cpu="2", mem="8Gi", gpu="1"),
            limits=Resources(mem="8Gi", gpu="1"),
            restart_policy=RestartPolicy.FAILURE,
        ),
        run_policy=RunPolicy(clean_pod_policy=CleanPodPolicy.ALL, backoff_limit=2, active_deadline_seconds=7200),
    ),
    accelerator=A100,
)
def official_pod_template(x: int) -> int:
    """Pod-template target: the plugin's default shared-memory volume named `shm` at /dev/shm."""
    return x


@task(task_config=Elastic(nnodes="1:3", nproc_per_node=2, max_restarts=2), requests=Resources(cpu="2", mem="4Gi"))
def official_elastic(x: int) -> int:
    """Elastic: workerReplicas only plus elasticConfig, pod-template target."""
    return x


def serialize(entity) -> dict:
    """The TaskTemplate JSON that `pyflyte package` would register for `entity`."""
    settings = SerializationSettings(
        project="flytesnacks",
        domain="development",
        version="v1",
        image_config=ImageConfig(default_image=Image(name="default", fqn="ghcr.io/example/train", tag="1.0")),
    )
    spec = get_serializable(OrderedDict(), settings, entity)
    return json_format.MessageToDict(spec.template.to_flyte_idl())


def main() -> None:
    """Write one JSON file per task."""
    warnings.simplefilter("ignore")
    for entity in (official_container, official_pod_template, official_elastic):
        path = OUT / f"{entity.name.rsplit('.', 1)[-1]}.json"
        path.write_text(json.dumps(serialize(entity), indent=2, sort_keys=True) + "\n")
        print(path)


if __name__ == "__main__":
    main()
