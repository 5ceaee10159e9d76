"""Fault drill 4: a recoverable error on rank 1 makes Flyte retry the task, and the retry resumes from the checkpoint.

One drill run (module-scoped: three ``pyflyte-execute`` runs of the MNIST loop on a slice of real MNIST) feeds every
assertion. Before ``examples.mnist.train`` settled DDP's gradient buckets before the first step, the resumed attempt's
losses and weights differed from the uninterrupted run's in the last bits (3 gloo ranks sum in another order when the
bucket layout changes); ``test_the_retry_ends_exactly_where_an_uninterrupted_run_ends`` is the regression test.
"""

from __future__ import annotations

from typing import Any

import pytest
from flyteidl.core import errors_pb2, execution_pb2

from tests.faults.drills_retry import RESUME_LOG, DrillInputs, expected_fault_message, run_retry_drill
from tests.mnist_data import HOW, find_mnist

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    # without the real MNIST files the drill fails with one line saying how to provide them (tests/mnist_data.py)
    pytest.mark.usefixtures("mnist_present"),
]

INPUTS = DrillInputs(epochs=3, fail_after_epoch=1)
#: Seconds from rank 1's raise to attempt 0's exit; generous because the CI machine is shared (a few s idle).
DETECT_BOUND_S = 30.0
COMPARED = ["accuracies", "epoch_losses", "weights_sha256", "weights_file_bytes", "weights_tensors"]


@pytest.fixture(scope="module")
def mnist_present() -> None:
    """The drill's data is there (``MNIST_DIR``); otherwise the test fails with how to provide it."""
    if find_mnist(download=False) is None:
        pytest.fail(HOW, pytrace=False)


@pytest.fixture(scope="module")
def drill() -> dict[str, Any]:
    return run_retry_drill(INPUTS)


def test_attempt_0_fails_with_a_recoverable_user_error_naming_rank_1(drill: dict[str, Any]) -> None:
    attempt0 = drill["attempt0"]
    error = drill["error"]
    assert attempt0.returncode != 0, attempt0.log[-3000:]  # FLYTE_FAIL_ON_ERROR=true, as on every replica
    assert error is not None, sorted(p.name for p in attempt0.output_prefix.iterdir())
    assert error.error.kind == errors_pb2.ContainerError.Kind.RECOVERABLE
    assert error.error.origin == execution_pb2.ExecutionError.ErrorKind.USER
    assert "rank 1 (of 3) failed" in error.error.message
    assert expected_fault_message(INPUTS) in error.error.message
    assert not (attempt0.output_prefix / "outputs.pb").exists()


def test_attempt_0_left_the_checkpoint_of_the_finished_epoch(drill: dict[str, Any]) -> None:
    assert drill["checkpoint0"] == ["_dst_cp"]  # flytekit's SyncCheckpoint.write: one file per attempt


def test_no_process_outlives_its_attempt(drill: dict[str, Any]) -> None:
    assert drill["leftover_procs"] == []  # ranks, forkserver and agent of all three runs, found by an env marker


def test_the_fault_is_reported_promptly(drill: dict[str, Any]) -> None:
    assert drill["detect_s"] is not None  # the rank's raise time travels into error.pb's timestamp
    assert 0 <= drill["detect_s"] < DETECT_BOUND_S


def test_the_retry_resumes_after_the_failed_epoch_not_from_scratch(drill: dict[str, Any]) -> None:
    attempt1 = drill["attempt1"]
    assert attempt1.returncode == 0, attempt1.log[-3000:]
    assert drill["outputs"]["attempt-1"]["resumed_from_epoch"] == INPUTS.fail_after_epoch
    assert drill["outputs"]["baseline"]["resumed_from_epoch"] == 0
    assert RESUME_LOG.format(epoch=INPUTS.fail_after_epoch, epochs=INPUTS.epochs) in attempt1.log
    trained = [f"epoch {e}/{INPUTS.epochs}: test accuracy" for e in range(1, INPUTS.epochs + 1)]
    assert [t in attempt1.log for t in trained] == [e > INPUTS.fail_after_epoch for e in range(1, INPUTS.epochs + 1)]


@pytest.mark.parametrize("what", COMPARED)
def test_the_retry_ends_exactly_where_an_uninterrupted_run_ends(drill: dict[str, Any], what: str) -> None:
    assert drill["identical"] is not None, "an attempt wrote no outputs.pb"
    assert drill["identical"][what], (drill["outputs"]["baseline"], drill["outputs"]["attempt-1"])
    assert len(drill["outputs"]["attempt-1"]["accuracies"]) == INPUTS.epochs
