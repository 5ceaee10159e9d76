"""flytekit's side of preemption and checkpoints: where ``save_checkpoint`` writes in a pod (the execution's
checkpoint prefixes, through flytekit's file access), that a local run leaves that to the launcher's folder, and that
a preempted attempt reaches ``pyflyte-execute`` as a recoverable error of system origin, not the user's."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flytekit.core.checkpointer import SyncCheckpoint
from flytekit.core.context_manager import ExecutionParameters, ExecutionState, FlyteContextManager
from flytekit.exceptions.user import FlyteUserRuntimeException
from flytekit.models.literals import LiteralMap

import flytekitplugins_pytorch
from flytekitplugins_pytorch import PreemptedError, pytorch_task
from flytekitplugins_pytorch._frontend import FLYTEKIT


def _context(tmp_path: Path, mode: ExecutionState.Mode, prev: str | None) -> object:
    ctx = FlyteContextManager.current_context()
    params = ExecutionParameters(
        execution_date=datetime.datetime.now(datetime.timezone.utc),
        tmp_dir=str(tmp_path / "work"),
        stats=None,
        execution_id=None,
        logging=logging.getLogger("test"),
        raw_output_prefix=str(tmp_path / "raw"),
        output_metadata_prefix=str(tmp_path / "outputs"),
        checkpoint=SyncCheckpoint(checkpoint_dest=str(tmp_path / "attempt-1"), checkpoint_src=prev),
    )
    state = ExecutionState(working_dir=str(tmp_path), mode=mode, user_space_params=params)
    return ctx.with_execution_state(state)


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[None]:
    with FlyteContextManager.with_context(_context(tmp_path, ExecutionState.Mode.TASK_EXECUTION, str(tmp_path / "a0"))):
        yield


def test_in_a_pod_checkpoints_go_to_the_executions_prefixes(pod, tmp_path: Path) -> None:
    place = FLYTEKIT.checkpoint_place()
    assert place is not None
    assert (place.dest, place.src) == (str(tmp_path / "attempt-1"), str(tmp_path / "a0"))
    fs = place.filesystem(place.dest)
    fs.makedirs(place.dest, exist_ok=True)
    fs.pipe_file(f"{place.dest}/x", b"written through flytekit's file access")
    assert (tmp_path / "attempt-1" / "x").read_bytes().startswith(b"written")


def test_a_local_run_leaves_the_place_to_the_launcher(tmp_path: Path) -> None:
    local = _context(tmp_path, ExecutionState.Mode.LOCAL_TASK_EXECUTION, None)
    with FlyteContextManager.with_context(local):
        assert FLYTEKIT.checkpoint_place() is None


@pytorch_task(workers_count=1)
def _preempted_task() -> int:
    return 0


def test_a_preempted_attempt_is_not_the_users_error(pod, monkeypatch: pytest.MonkeyPatch) -> None:
    """flytekit wraps what ``execute`` raises as the user's error; the preemption is raised outside that wrapper, so
    ``pyflyte-execute`` writes it with kind RECOVERABLE and origin SYSTEM (drilled end to end in
    tests/faults/test_preemption_drills.py). Any other error stays the user's."""

    def preempted(**kwargs: object) -> int:
        raise FLYTEKIT.preempted("preempted: rank 1 (pod p) got SIGTERM; every rank stopped after step 3")

    monkeypatch.setattr(_preempted_task, "execute", preempted)
    ctx = FlyteContextManager.current_context()
    with pytest.raises(PreemptedError, match="^preempted: rank 1"):
        _preempted_task.dispatch_execute(ctx, LiteralMap({}))

    def fails(**kwargs: object) -> int:
        raise ValueError("the user's own")

    monkeypatch.setattr(_preempted_task, "execute", fails)
    with pytest.raises(FlyteUserRuntimeException):
        _preempted_task.dispatch_execute(ctx, LiteralMap({}))


def test_the_api_is_exported() -> None:
    for name in ("save_checkpoint", "load_checkpoint", "preemption_requested", "on_preemption", "CheckpointError"):
        assert name in flytekitplugins_pytorch.__all__ and callable(getattr(flytekitplugins_pytorch, name))
