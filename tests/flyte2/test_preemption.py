"""Flyte 2's side of preemption and checkpoints: a preempted attempt becomes a recoverable error of system origin
in Flyte 2's own conversion (what its runtime uploads as the error document), and a rank finds the action's
checkpoint prefixes as the task process saw them."""

from __future__ import annotations

from pathlib import Path

from flyte._internal.runtime.convert import convert_from_native_to_error
from flyte.errors import RuntimeSystemError
from flyteidl2.core import execution_pb2

import flyte2_pytorch
from flyte2_pytorch._frontend import FLYTE2, Flyte2Snapshot
from pytorch_core.frontend import PreemptedError


def test_a_preempted_attempt_is_a_recoverable_system_error() -> None:
    error = FLYTE2.preempted("preempted: rank 1 (pod p) got SIGTERM; every rank stopped after step 3")
    assert isinstance(error, PreemptedError) and isinstance(error, RuntimeSystemError)
    converted = convert_from_native_to_error(error)
    assert converted.recoverable is True  # Flyte 2 writes ContainerError kind RECOVERABLE ...
    assert converted.err.kind == execution_pb2.ExecutionError.SYSTEM  # ... with origin SYSTEM
    assert converted.err.code == "Preempted"
    assert "every rank stopped after step 3" in converted.err.message


def test_a_rank_uses_the_checkpoint_prefixes_the_task_process_saw(tmp_path: Path) -> None:
    snapshot = Flyte2Snapshot(working_dir=str(tmp_path), checkpoint=(str(tmp_path / "a1"), str(tmp_path / "a0")))
    with FLYTE2.rank_scope(snapshot, tmp_path / "rank-0"):
        place = FLYTE2.checkpoint_place()
    assert place is not None and (place.dest, place.src) == (str(tmp_path / "a1"), str(tmp_path / "a0"))
    fs = place.filesystem(place.dest)
    fs.makedirs(place.dest, exist_ok=True)
    fs.pipe_file(f"{place.dest}/x", b"through flyte's storage")
    assert (tmp_path / "a1" / "x").read_bytes() == b"through flyte's storage"


def test_the_api_is_exported() -> None:
    for name in ("save_checkpoint", "load_checkpoint", "preemption_requested", "on_preemption", "CheckpointError"):
        assert name in flyte2_pytorch.__all__ and callable(getattr(flyte2_pytorch, name))
