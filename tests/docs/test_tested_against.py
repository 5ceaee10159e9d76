"""The releases docs/cluster.md says the project is tested against are the ones the cluster tier builds and runs
(devcluster/components.py), and docs/testing.md's component table names the same versions."""

from __future__ import annotations

import re

from devcluster.components import BY_NAME
from tests.docs.markdown_blocks import ROOT

ROWS = {
    "Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler)": "kubernetes",
    "etcd": "etcd",
    "Kubeflow training operator (PyTorchJob)": "training-operator",
    "Kubeflow Trainer (TrainJob), its `torch-distributed` runtime": "trainer",
    "JobSet": "jobset",
    "Kueue": "kueue",
}


def _table(page: str, heading: str) -> dict[str, str]:
    text = (ROOT / "docs" / page).read_text()
    section = text.split(heading, 1)[1]
    rows = {}
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and not set(cells[0]) <= {"-", " "}:
            rows[cells[0]] = cells[1]
    return rows


def test_cluster_md_names_the_releases_the_cluster_tier_runs() -> None:
    rows = _table("cluster.md", "### Tested against")
    assert {name: rows.get(name) for name in ROWS} == {name: BY_NAME[c].version for name, c in ROWS.items()}


def test_testing_md_names_each_components_version() -> None:
    text = (ROOT / "docs" / "testing.md").read_text()
    for component in ("etcd", "kubernetes", "training-operator", "jobset", "trainer", "kueue"):
        version = BY_NAME[component].version
        assert re.search(rf"\| {re.escape(version)} \|", text), f"docs/testing.md does not name {component} {version}"
