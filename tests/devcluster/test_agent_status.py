"""The node agent's pod status reports, as the API server merges them (no cluster needed: the agent's patches are
recorded and merged here as a strategic merge patch merges a pod's conditions, by `type`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from devcluster.agent.pods import PodRuntime


class RecordingKube:
    def __init__(self) -> None:
        self.patches: list[dict] = []

    def strategic_patch(self, path: str, body: dict) -> None:
        self.patches.append(body)


def merged_conditions(patches: list[dict]) -> dict[str, dict]:
    """The pod's conditions after the patches: a strategic merge patch merges list items by their `type` (the merge
    key of PodStatus.conditions), keeps the fields a patch leaves out and deletes those it sets to null."""
    conditions: dict[str, dict[str, Any]] = {}
    for patch in patches:
        for c in patch["status"]["conditions"]:
            item = conditions.setdefault(c["type"], {})
            item.update(c)
            for key in [k for k, v in item.items() if v is None]:
                del item[key]
    return conditions


def test_a_condition_that_turns_true_keeps_no_reason_or_message_of_its_false_days(tmp_path: Path) -> None:
    """Seen on a real API server: a completed pod's `Initialized` said True with reason ContainersNotInitialized and
    "containers with incomplete status": the agent's patch of the True condition left out the reason and message the
    False one had, and a strategic merge keeps what a patch leaves out."""
    kube = RecordingKube()
    node = SimpleNamespace(agent=SimpleNamespace(state=tmp_path, node_ip="10.78.0.1"), kube=kube)
    spec = {"containers": [{"name": "main", "image": "img"}], "initContainers": [{"name": "init", "image": "img"}]}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec, "status": {}}
    runtime = PodRuntime(node, pod)  # type: ignore[arg-type]
    runtime.report()
    before = merged_conditions(kube.patches)["Initialized"]
    assert (before["status"], before["reason"]) == ("False", "ContainersNotInitialized")
    runtime.initialized = True
    runtime.report()
    after = merged_conditions(kube.patches)["Initialized"]
    assert after["status"] == "True" and "reason" not in after and "message" not in after, after
