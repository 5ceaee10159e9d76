"""Preflight drills: a peer that cannot reach the master is a retryable infrastructure failure, found before the
task's code runs; and the preflight's own checks, in-process."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.task_errors import parse_error_document
from flytekitplugins_pytorch._preflight import PreflightError, run_preflight, shm_problem
from tests.connector.helpers import execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import BlobStore, FakeOperator
from tests.fakeapi.fixtures import running_fake_api
from tests.faults.preflight_tasks import JOIN_TIMEOUT_S, two_ranks


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the socket is: nothing listens there


def test_a_peer_that_never_joins_fails_the_waiting_rank_naming_it(monkeypatch) -> None:
    monkeypatch.setenv("_F_WN", "job-master-0")
    monkeypatch.setenv("GROUP_RANK", "0")
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_closed_port())}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(PreflightError) as info:
        run_preflight(shm_size=None, join_timeout_s=1.0)
    text = str(info.value)
    assert text.startswith("preflight failed on node 0 (pod job-master-0), rank 0: could not join the other 1 ranks")


def test_an_unresolvable_master_is_named(monkeypatch) -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "23456"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(PreflightError, match="cannot resolve the master address 'no-such-host.invalid'"):
        run_preflight(shm_size=None, join_timeout_s=1.0)


def test_shm_smaller_than_asked_is_named(tmp_path: Path) -> None:
    assert shm_problem(None) is None
    assert shm_problem("1Ki", str(tmp_path)) is None
    problem = shm_problem("1000Pi", str(tmp_path))
    assert problem is not None and "less than shm_size='1000Pi'" in problem
    assert "is not there" in str(shm_problem("1Gi", str(tmp_path / "missing")))


class BlockedWorker(FakeOperator):
    """The fake operator, with worker-0's path to the master blocked (its master port leads nowhere)."""

    def _make_replica(self, job: dict, rtype: str, index: int, spec: dict, master_port: int, rdzv_port: int) -> Any:
        replica = super()._make_replica(job, rtype, index, spec, master_port, rdzv_port)
        if rtype == "Worker":
            replica.env["MASTER_PORT"] = replica.env["PET_MASTER_PORT"] = str(_closed_port())
        return replica


@pytest.mark.e2e
@pytest.mark.faults
@pytest.mark.slow
def test_a_blocked_peer_is_a_retryable_infrastructure_failure_before_the_task_runs(tmp_path: Path) -> None:
    template = harness.package_tasks(["tests.faults.preflight_tasks"], tmp_path / "package")["two_ranks"]
    blobs = BlobStore(tmp_path / "blobs")
    markers = tmp_path / "markers"
    markers.mkdir()
    with running_fake_api() as (server, client):
        with BlockedWorker(server, tmp_path / "pods") as operator:
            connector = make_connector(client, api_timeout_s=5.0)
            prefix = blobs.uri("metadata", "pre", "n0", "data", "0")
            inputs = harness.to_literal_map({"marker_dir": str(markers)}, two_ranks.python_interface.inputs)
            meta = connector.create(template, prefix, inputs, execution_metadata("pre"))
            final = harness.poll_until_terminal(connector, meta, JOIN_TIMEOUT_S + 90)[-1]
            operator.run_for(meta.name)
        assert operator.errors == []
    assert final.phase == TaskExecution.RETRYABLE_FAILED, final.message
    assert list(markers.iterdir()) == []  # the task's code never ran
    documents = [name for name in blobs.files(prefix) if name.startswith("error")]
    assert documents
    for name in documents:
        error = parse_error_document((Path(prefix.removeprefix("file://")) / name).read_bytes(), name)
        assert (error.kind, error.origin) == ("RECOVERABLE", "SYSTEM"), error
        assert "preflight failed on node" in error.message and "could not join the other 1 ranks" in error.message
    print(f"\n[preflight drill] {final.message[:300]}")
