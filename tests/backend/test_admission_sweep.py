"""A sweep of decorator configurations through the SDK, the reader, both writers and the admission model: every one
is either admitted intact or refused before anything is sent, with an error that names the user's setting.

Admitted jobs are cross-checked with the independent validators of `tests/kube_schema.py` (jsonschema against the
same CRDs, the webhook rules, kubernetes-validate for the pod templates). Run with `-s` to see the counts.
"""

from __future__ import annotations

import itertools
import sys
from collections import Counter
from typing import Any

import pytest

from backend_plugin.admission import admit
from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.targets.registry import target_for_config
from tests.helpers.jobs import META, write_job
from tests.kube_schema import assert_valid_pytorchjob, assert_valid_trainjob

IMAGE = "ghcr.io/example/train:1.0"

WORKERS = {"master-only": 0, "two-workers": 2}
RESOURCES: dict[str, dict[str, Any]] = {"cpu": {"per_replica_cpu_request": "1"}, "gpu": {"per_replica_gpu_limit": 1}}
ENVIRONMENT: dict[str, dict[str, str]] = {
    "no-env": {},
    "small-env": {"LOG_LEVEL": "info"},
    "120-env": {f"VAR_{i}": "x" for i in range(120)},
    "800k-env-value": {"CONFIG_JSON": "j" * 800_000},
}
POLICY: dict[str, dict[str, Any]] = {"default": {}, "backoff-3": {"backoff_limit": 3}}


def _pod(kind: str) -> Any:
    from flytekit import PodTemplate
    from kubernetes.client import V1Container, V1EvictionResponder, V1PodSpec, V1Toleration

    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    spec: dict[str, Any] = {}
    if kind == "labels":
        labels = {"team": "ml", "example.com/cost": "42"}
    elif kind == "label-64":
        labels = {"team": "x" * 64}
    elif kind == "label-key-bad":
        labels = {"bad key!": "ml"}
    elif kind == "annotations-300k":
        annotations = {"example.com/blob": "a" * 300_000}
    elif kind == "toleration-exists-value":
        spec["tolerations"] = [V1Toleration(key="gpu", operator="Exists", value="yes")]
    elif kind == "node-selector-space":
        spec["node_selector"] = {"pool": "gpu pool"}
    elif kind == "undeclared-field":
        spec["eviction_responders"] = [V1EvictionResponder(name="drain", priority=1)]
    return PodTemplate(
        labels=labels or None,
        annotations=annotations or None,
        primary_container_name="trainer",
        pod_spec=V1PodSpec(containers=[V1Container(name="trainer")], **spec),
    )


PODS = [
    "none",
    "labels",
    "label-64",
    "label-key-bad",
    "annotations-300k",
    "toleration-exists-value",
    "node-selector-space",
    "undeclared-field",
]


def _task(workers: int, resources: dict, env: dict, pod: str, policy: dict) -> Any:
    from flytekitplugins_pytorch import pytorch_task

    options: dict[str, Any] = {"container_image": IMAGE, **resources, **policy}
    if env:
        options["environment"] = env
    if pod != "none":
        options["pod_template"] = _pod(pod)

    def train(epochs: int) -> float:
        return float(epochs)

    # flytekit resolves a task by its module and name: make it a real attribute of this module
    global _COUNTER
    _COUNTER += 1
    train.__qualname__ = train.__name__ = f"sweep_train_{_COUNTER}"
    setattr(sys.modules[__name__], train.__name__, train)
    return pytorch_task(workers_count=workers, **options)(train)


_COUNTER = 0


def _meta() -> ExecutionMetadata:
    return META


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_configuration_is_admitted_intact_or_refused_naming_the_setting() -> None:
    from backend_plugin.cli import serialize_task

    counts: Counter[str] = Counter()
    configs = list(itertools.product(WORKERS, RESOURCES, ENVIRONMENT, PODS, POLICY))
    for w, r, e, p, pol in configs:
        counts["configurations"] += 1
        try:
            template = serialize_task(_task(WORKERS[w], RESOURCES[r], ENVIRONMENT[e], p, POLICY[pol]))
        except Exception as err:  # the SDK refused it at decoration or serialization
            counts["refused by the SDK"] += 1
            assert str(err), (w, r, e, p, pol)
            continue
        for target in ("pytorchjob", "trainjob"):
            where = f"{w}/{r}/{e}/{p}/{pol} as {target}"
            try:
                kind = target_for_config(target)
                assert kind is not None
                job = write_job(kind, template, _meta())
            except TemplateError as err:
                counts["refused by the reader or writer"] += 1
                assert "\n" not in str(err) and "pytorchReplicaSpecs" not in str(err), where
                continue
            counts["rendered"] += 1
            problems = [q for q in admit(job) if q.refuses]
            if problems:
                counts["refused by admission"] += 1
                for q in problems:
                    assert not q.message.startswith(("spec.", "metadata.")), (where, q.message)
                    assert "pytorchReplicaSpecs" not in q.setting and "runtimePatches" not in q.setting
                continue
            counts["admitted intact"] += 1
            (assert_valid_trainjob if target == "trainjob" else assert_valid_pytorchjob)(job)
    print("\nadmission sweep:", dict(counts))
    renders = counts["rendered"] + counts["refused by the reader or writer"]
    assert renders == 2 * (counts["configurations"] - counts["refused by the SDK"])
    assert counts["admitted intact"] + counts["refused by admission"] == counts["rendered"]
    assert counts["admitted intact"] > 0 and counts["refused by admission"] > 0
