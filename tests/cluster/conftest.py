"""The cluster tier: every test here runs on a real control plane (`python -m devcluster`), marked `cluster`.

A cluster already up (`python -m devcluster up`, its state folder `DEVCLUSTER_STATE`, default /tmp/devcluster) is used
as it is, and left up; otherwise the session starts one with every controller and stops it at the end. The tier needs
root (network namespaces), `ip`, `nft`, `nslookup` and the binaries of `python -m devcluster build`: where one is
missing it skips, saying which, unless `DEVCLUSTER_REQUIRED=1` (CI), where it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import KINDS, TIMES, ClusterInfo, Propeller, RealCluster, ensure_bucket

REQUIRED = os.environ.get("DEVCLUSTER_REQUIRED") == "1"
CLUSTER_TEST_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)
            if item.get_closest_marker("timeout") is None:
                # the first test's setup starts the cluster (100 to 300 s on a loaded 2-core machine) and deploys the
                # connector: the tiers' 300 s default would cut a scenario that ran well
                item.add_marker(pytest.mark.timeout(CLUSTER_TEST_TIMEOUT_S))


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


@pytest.fixture(scope="session")
def connectors(real: RealCluster) -> Iterator[Callable[..., Propeller]]:
    """`connectors(kind, config=None, variant="")`: the connector of a kind deployed once per session (a variant is a
    second Deployment of the kind with other settings), and a propeller client to it."""
    made: dict[tuple[str, str], Propeller] = {}

    def get(kind: str, config: dict[str, Any] | None = None, variant: str = "") -> Propeller:
        if (kind, variant) not in made:
            made[(kind, variant)] = real.deploy_connector(kind, config, variant)
        return made[(kind, variant)]

    try:
        yield get
    finally:
        for p in made.values():
            p.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each scenario's time per kind in this session (seconds from CreateTask to the test's last check)."""
    if not TIMES:
        return
    scenarios = sorted({s for s, _ in TIMES})
    kinds = [k for k in ("pytorchjob", "trainjob", "jobset") if any(k == kk for _, kk in TIMES)]
    terminalreporter.write_sep("-", "cluster tier: seconds per scenario and kind (this machine, this run)")
    terminalreporter.write_line(f"{'scenario':<36}" + "".join(f"{k:>12}" for k in kinds))
    for s in scenarios:
        cells = "".join(f"{TIMES[(s, k)]:>12.1f}" if (s, k) in TIMES else f"{'-':>12}" for k in kinds)
        terminalreporter.write_line(f"{s:<36}{cells}")


PACKAGED = ("tests.cluster.workflows", "tests.cluster.workflows_official", "tests.cluster.workflows_map",
            "examples.mnist.workflow")  # fmt: skip


@pytest.fixture(scope="session")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every task the tier runs, packaged once by `pyflyte package` (no fast registration: the pods run this
    checkout)."""
    from tests.e2e.harness import package_tasks

    return package_tasks(PACKAGED, tmp_path_factory.mktemp("package"))


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """The job kind a scenario runs on: every kind, unless the test parametrizes `kind` itself (indirectly, through
    `kind_params`, or directly)."""
    return str(request.param)


@pytest.fixture
def propeller(connectors: Callable[..., Propeller], kind: str) -> Propeller:
    """A propeller client to the connector of the scenario's kind."""
    return connectors(kind)
