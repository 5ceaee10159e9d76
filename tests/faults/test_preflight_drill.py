"""Preflight drill: the preflight never fails a job that torch would run. A peer that cannot reach the master within
the time the task's own ``init_process_group`` would wait is a warning naming it, and the task's code runs as it would
without the preflight. The preflight's own checks, in-process, are in ``tests/core/test_preflight.py``."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from tests.connector.helpers import execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import BlobStore, FakeOperator
from tests.fakeapi.fixtures import running_fake_api
from tests.faults.preflight_tasks import JOIN_TIMEOUT_S, two_ranks


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the socket is: nothing listens there


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
def test_a_blocked_peer_is_a_warning_and_the_task_runs_as_without_the_preflight(tmp_path: Path) -> None:
    """The task never talks to its peer, so torch would run it: the preflight warns after the collective timeout and
    lets it run."""
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
    assert final.phase == TaskExecution.SUCCEEDED, final.message
    # The master's task code ran; the job succeeds with the master (the operator's success policy), whether or not
    # the blocked worker got that far before the job ended: as without the preflight.
    assert "ran-0" in [path.name for path in markers.iterdir()]
    assert not [name for name in blobs.files(prefix) if name.startswith("error")]
