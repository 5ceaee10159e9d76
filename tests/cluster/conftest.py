"""The cluster tier: every test here runs on a real control plane (`python -m devcluster`), marked `cluster`.

A cluster already up (`python -m devcluster up`, its state folder `DEVCLUSTER_STATE`, default /tmp/devcluster) is used
as it is, and left up; otherwise the session starts one with every controller and stops it at the end. The tier needs
root (network namespaces), `ip`, `nft`, `nslookup` and the binaries of `python -m devcluster build`: where one is
missing it skips, saying which, unless `DEVCLUSTER_REQUIRED=1` (CI), where it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import ClusterInfo, RealCluster, ensure_bucket

REQUIRED = os.environ.get("DEVCLUSTER_REQUIRED") == "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


def _missing(start: bool) -> str:
    if os.geteuid() != 0:
        return "root (network namespaces, mounts)"
    for tool in ("ip", "nft", "nslookup", "go"):
        if shutil.which(tool) is None:
            return f"`{tool}` on PATH"
    if start:
        from devcluster.build import BuildError, binaries

        try:
            binaries()
        except BuildError as e:
            return str(e)
    return ""


@pytest.fixture(scope="session")
def devcluster() -> Iterator[ClusterInfo]:
    from devcluster import cluster
    from devcluster.kube import Kube
    from devcluster.paths import state_root

    state = state_root()
    started = True
    if (state / "cluster.json").exists():
        info = ClusterInfo.read(state)
        try:
            Kube(info.kubeconfig).get("/version")
            started = False
        except Exception:  # noqa: BLE001 - a state folder left by a cluster that is gone: start a new one
            cluster.down()
    missing = _missing(started)
    if missing:
        if REQUIRED:
            pytest.fail(f"the cluster tier needs {missing}")
        pytest.skip(f"the cluster tier needs {missing}")
    if started:
        cluster.up()
        info = ClusterInfo.read(state)
    ensure_bucket(info)
    try:
        yield info
    finally:
        if started and os.environ.get("DEVCLUSTER_KEEP") != "1":
            cluster.down()


@pytest.fixture(scope="session")
def real(devcluster: ClusterInfo) -> RealCluster:
    rc = RealCluster(devcluster)
    rc.ensure_namespace("flytesnacks-development")
    return rc
