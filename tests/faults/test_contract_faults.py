"""Fault drills 12 and 13: a failed job is retried by Flyte exactly when it should be (see drills_contract.py)."""

from __future__ import annotations

import pytest

from tests.faults import drills_contract as drills
from tests.faults.contract_tasks import NON_RECOVERABLE, RECOVERABLE

pytestmark = pytest.mark.faults

RETRIED = {"non-recoverable": False, "recoverable": True, "oom-killed": True}
LEADS_WITH = {
    "non-recoverable": "{worker} failed: ValueError: ",
    "recoverable": "{worker} failed: FlyteRecoverableException: ",
    "oom-killed": "PyTorchJob",
}


def _check(row: dict, case: str, worker: str, *, others_may_be_unreported: bool = False) -> None:
    """The phase, Flyte's retry, and a message that leads with the user's exception or names the killed replica.

    ``others_may_be_unreported``: the replicas that lost their peer are real processes, and the job is failed (and
    read) as soon as the killed replica is gone; whether their own error documents landed before that read is a race
    the real operator has too. The phase and the root cause are the same either way; only the note differs.
    """
    observed = row["observed"]
    assert observed["flyte_retries"] is RETRIED[case], observed["full_message"]
    assert observed["phase"] == ("RETRYABLE_FAILED" if RETRIED[case] else "FAILED")
    assert observed["message"].startswith(LEADS_WITH[case].format(worker=worker)), observed["full_message"]
    if case == "oom-killed":
        assert f"Root cause: {worker} (pytorch): OOMKilled, exit code 137" in observed["full_message"]
        notes = [f"({worker} was stopped by the system before any task error, a retryable failure; the other replicas"]
        if others_may_be_unreported:
            notes.append("(no error document: the replicas stopped before the task could report one; a retryable")
        assert any(note in observed["full_message"] for note in notes), observed["full_message"]
    assert row["leftover"] == 0


@pytest.mark.parametrize("case", drills.CASES)
def test_drill_12_fake_api(case: str, tmp_path) -> None:
    row = drills.drill_fake_api(case, tmp_path)
    _check(row, case, "worker-1")
    if case == "non-recoverable":
        # the root cause is worker-1's document, not rank 0's later lost-peer error
        assert "--- traceback (worker-1, error-1111" in row["observed"]["full_message"]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("case", drills.CASES)
def test_drill_13_end_to_end(case: str, tmp_path) -> None:
    row = drills.drill_e2e(case, tmp_path)
    observed = row["observed"]
    assert "operator_errors" not in observed, observed["operator_errors"]
    _check(row, case, "worker-0", others_may_be_unreported=True)  # rank 1 is the only worker
    text = {"non-recoverable": NON_RECOVERABLE, "recoverable": RECOVERABLE}.get(case)
    if text is not None:
        assert text in observed["message"]
        assert any(name.startswith("error-") for name in observed["error_documents"])  # _F_DES: per-replica files
    else:
        assert observed["replica_exits"]["worker-0"] == 137  # the whole replica was killed, nothing written by it
