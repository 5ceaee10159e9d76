"""The release manifests as devcluster changes them: Kueue's integrations."""

from __future__ import annotations

import pytest
import yaml

from devcluster import addons

SHIPPED = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
integrations:
  frameworks:
  - "batch/job"
  - "jobset.x-k8s.io/jobset"
  # - "kubeflow.org/pytorchjob"
  - "trainer.kubeflow.org/trainjob"
  - "pod"
"""


def _manifests(text: str) -> list[dict]:
    return [
        {"kind": "Deployment", "metadata": {"name": "kueue-controller-manager"}},
        {
            "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config"},
            "data": {"controller_manager_config.yaml": text},
        },
    ]


def test_kueue_gets_the_pytorchjob_integration_its_release_leaves_commented_out() -> None:
    objects = _manifests(SHIPPED)
    addons.enable_kueue_frameworks(objects)
    config = yaml.safe_load(objects[1]["data"]["controller_manager_config.yaml"])
    assert config["integrations"]["frameworks"] == [
        "batch/job", "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob", "pod", "kubeflow.org/pytorchjob"
    ]  # fmt: skip
    assert config["kind"] == "Configuration"
    addons.enable_kueue_frameworks(objects)  # once only
    assert (
        yaml.safe_load(objects[1]["data"]["controller_manager_config.yaml"])["integrations"]["frameworks"].count(
            "kubeflow.org/pytorchjob"
        )
        == 1
    )


@pytest.mark.parametrize("objects", [_manifests("kind: Configuration\n"), _manifests(SHIPPED)[:1]])
def test_manifests_without_the_configuration_say_so(objects: list[dict]) -> None:
    with pytest.raises(RuntimeError, match="Kueue's"):
        addons.enable_kueue_frameworks(objects)
