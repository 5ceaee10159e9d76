"""The cluster hang drill: one replica's rank hangs outside a collective, on a PyTorchJob, a TrainJob and a JobSet.

The fake operator (or Trainer, or JobSet controller) runs each pod as its own process group with the operator's
environment, so the ranks share no folder: the waiting ranks learn which rank did not arrive through the group's store
only. Checked: every pod exits within `collective_timeout` + 30 s of the job's start, the error documents of the failing
pods lead with the culprit's rank, node and pod, and so does the connector's message; the failure is not retried (the
late rank was still running the task's code; `retry_hangs` retries only a rank that vanished). The measured time to
failure is printed.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.task_errors import parse_error_document
from tests.connector.helpers import execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import BlobStore, FakeJobSet, FakeOperator, FakeTrainer
from tests.fakeapi.fixtures import running_fake_api
from tests.faults.hang_tasks import HANG_TIMEOUT_S, rank_hangs

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.slow]

BOUND_S = HANG_TIMEOUT_S + 30
TARGETS = {"pytorchjob": FakeOperator, "trainjob": FakeTrainer, "jobset": FakeJobSet}


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return harness.package_tasks(["tests.faults.hang_tasks"], tmp_path_factory.mktemp("package"))["rank_hangs"]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_hanging_rank_is_named_and_every_pod_exits_within_the_bound(target: str, template, tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    with running_fake_api() as (_server, client):
        fake = TARGETS[target](_server, tmp_path / "pods")
        with fake:
            connector = make_connector(client, api_timeout_s=5.0, target=target)
            prefix = blobs.uri("metadata", "hang", "n0", "data", "0")
            inputs = harness.to_literal_map({"x": 1}, rank_hangs.python_interface.inputs)
            meta = connector.create(template, prefix, inputs, execution_metadata(execution=f"hang{target[:3]}"))
            seen = harness.poll_until_terminal(connector, meta, BOUND_S + 60)
            run = fake.run_for(meta.name)
            assert fake.wait_processes_gone(run, timeout_s=BOUND_S) == []
            all_gone = time.time()
        errors = list(fake.errors)
    assert errors == []
    started = _seconds(run.start_time)
    assert all_gone - started <= BOUND_S + 1  # start_time has whole seconds
    exits = {r.label: _seconds(r.finished_at) - started for r in run.replicas if r.finished_at}
    deleted = [r.label for r in run.replicas if r.deleted and not r.finished_at]
    culprit = run.replicas[1]
    print(f"\n[hang drill {target}] first failures after {exits} s, every pod gone after {all_gone - started:.1f} s")
    assert set(exits) | set(deleted) == {r.label for r in run.replicas}
    assert all(seconds <= BOUND_S for seconds in exits.values()), exits
    final = seen[-1]
    # rank 1 was still running the task's code: a retry would hang again, so it is not retried (retry_hangs retries
    # only a rank that vanished).
    assert final.phase == TaskExecution.FAILED, final.message
    lead = f"rank 1 (of 3) on node 1 (pod {culprit.pod_name}) did not arrive: still running at "
    assert lead in final.message and "in _wait_for_nothing, outside torch.distributed" in final.message, final.message
    documents = [name for name in blobs.files(prefix) if name.startswith("error")]
    assert documents, "no error document"
    for name in documents:
        summary = parse_error_document((Path(prefix.removeprefix("file://")) / name).read_bytes(), name).summary
        assert summary.startswith("HangError: rank 1 (of 3)"), summary
    print(f"[hang drill {target}] connector message: {final.message[:400]}")
