"""Backend fault drills 6-10: the connector against a misbehaving API server (see drills_backend.py)."""

from __future__ import annotations

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.errors import RBAC_MANIFEST
from tests.faults import drills_backend as drills

pytestmark = pytest.mark.faults


def test_drill_6_flaky_api_retries_without_duplicates_or_invented_phases():
    row = drills.drill_flaky_api()
    observed = row["observed"]
    assert observed["injected_5xx"] > 0, "the drill must actually inject faults"
    assert observed["jobs_on_server"] == observed["creates_201"] == observed["jobs"]
    assert observed["premature_terminal"] == 0
    assert (row["leftover"], row["data_lost"]) == (0, False)


def test_drill_7_conflict_same_spec_adopted_different_spec_explained():
    row = drills.drill_conflict()
    observed = row["observed"]
    assert observed["adopted_same_uid"] and observed["jobs_on_server"] == 1
    assert "a different PyTorchJob with this name already exists" in observed["conflict_message"]
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in observed["conflict_message"]


def test_drill_8_deleted_job_reported_failed():
    row = drills.drill_deleted_behind_back()
    observed = row["observed"]
    assert observed["phase_before"] == "RUNNING"
    assert observed["phase"] == TaskExecution.Phase.Name(TaskExecution.RETRYABLE_FAILED)
    assert "deleted outside Flyte" in observed["message"]


@pytest.mark.slow
def test_drill_9_thousand_jobs_every_get_answers_with_few_calls():
    row = drills.drill_many_jobs(n=1000)
    observed = row["observed"]
    assert observed["answered"] == 1000
    assert 1.0 <= observed["calls_per_get"] <= 1.3  # 1 per steady job, 2 where pods explain the state
    assert observed["p99_ms"] < 1000


def test_drill_10_forbidden_names_permission_and_manifest():
    row = drills.drill_forbidden()
    observed = row["observed"]
    assert observed["create_attempts"] == 1
    assert 'cannot create resource "pytorchjobs" in API group "kubeflow.org"' in observed["message"]
    assert RBAC_MANIFEST in observed["message"]
    assert row["leftover"] == 0
