"""One checkpoint API on every restart layer (``_context.resume_source``) and the clean-up of recovered error
documents (``launcher.remove_recovered_errors``), on local folders."""

from __future__ import annotations

from pathlib import Path

from flytekit.core.checkpointer import SyncCheckpoint
from flytekit.core.context_manager import ExecutionParameters, FlyteContextManager
from flytekit.core.data_persistence import FileAccessProvider

from flytekitplugins_pytorch._context import resume_source, resumed_checkpoint
from pytorch_core.launcher import remove_recovered_errors


def _access(tmp_path: Path) -> FileAccessProvider:
    return FileAccessProvider(local_sandbox_dir=str(tmp_path / "sandbox"), raw_output_prefix=str(tmp_path / "raw"))


def test_a_first_run_reads_the_previous_attempt(tmp_path: Path) -> None:
    dest, prev = tmp_path / "attempt-1", tmp_path / "attempt-0"
    dest.mkdir()  # flytekit may create it empty: still nothing written by this attempt
    assert resume_source(_access(tmp_path), str(dest), str(prev)) == str(prev)
    assert resume_source(_access(tmp_path), str(tmp_path / "missing"), None) is None


def test_a_restarted_run_reads_what_this_attempt_wrote(tmp_path: Path) -> None:
    dest, prev = tmp_path / "attempt-1", tmp_path / "attempt-0"
    prev.mkdir()
    (prev / "_dst_cp").write_bytes(b"step 3")
    first = SyncCheckpoint(checkpoint_dest=str(dest), checkpoint_src=str(prev))
    assert first.read() == b"step 3"
    first.write(b"step 5")  # then the container is restarted
    again = resumed_checkpoint(SyncCheckpoint(checkpoint_dest=str(dest), checkpoint_src=str(prev)), _access(tmp_path))
    assert again.read() == b"step 5"


def test_error_documents_of_recovered_runs_are_removed_after_success(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("error.pb", f"error-{'a' * 32}.pb", "outputs.pb", "error-notes.txt"):
        (out / name).write_bytes(b"x")
    ctx = FlyteContextManager.current_context()
    params = ExecutionParameters.new_builder(ctx.user_space_params).build()
    params._output_metadata_prefix = str(out)  # noqa: SLF001
    state = ctx.execution_state.with_params(user_space_params=params)
    builder = ctx.with_execution_state(state).with_file_access(_access(tmp_path))
    with FlyteContextManager.with_context(builder):
        remove_recovered_errors()
    assert sorted(p.name for p in out.iterdir()) == ["error-notes.txt", "outputs.pb"]
