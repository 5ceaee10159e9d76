"""The checkpoint API (``pytorch_core.checkpoint``) in one process: what is saved and restored, where (a named folder,
this attempt's prefix before the previous attempt's, a pointer for the next retry), and that a save cut short
leaves the last complete checkpoint.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytorch_core import _checkpoints, preemption, progress
from pytorch_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from pytorch_core.frontend import CheckpointPrefixes

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh run of the API as global rank 0; the signal handlers it arms are given back afterwards."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv(_checkpoints.CHECKPOINT_DIR_ENV, raising=False)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    _checkpoints.reset()
    progress.start_rank()
    preemption.start()
    yield
    preemption.end()
    progress.set_step_boundary_hook(None)
    _checkpoints.reset()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def _state(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return {"model": model, "optimizer": optimizer, "losses": [0.5, 0.25]}


def _train(state: dict) -> None:
    loss = state["model"](torch.ones(2, 3)).sum()
    state["optimizer"].zero_grad()
    loss.backward()
    state["optimizer"].step()


def test_a_saved_state_is_restored_in_place_and_its_step_returned(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    state = _state()
    _train(state)
    save_checkpoint(state, 7)
    _checkpoints.reset()
    fresh = _state(seed=1)
    assert load_checkpoint(fresh) == 7
    for name in ("weight", "bias"):
        assert torch.equal(getattr(fresh["model"], name), getattr(state["model"], name))
    assert (
        fresh["optimizer"]
        .state_dict()["state"][0]["momentum_buffer"]
        .equal(state["optimizer"].state_dict()["state"][0]["momentum_buffer"])
    )
    assert fresh["losses"] == [0.5, 0.25]  # a plain value comes back in the mapping
    assert progress.last_step() == 7  # the rank stands at the restored step


def test_no_checkpoint_means_step_0_and_nothing_changed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path / "empty"))
    state = _state()
    weight = state["model"].weight.clone()
    assert load_checkpoint(state) == 0
    assert torch.equal(state["model"].weight, weight)


def test_only_the_latest_payload_is_kept_and_the_manifest_names_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    state = _state()
    for step in (2, 4, 6):
        save_checkpoint(state, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytorch-checkpoint-6.pt", "pytorch-checkpoint.json"]
    manifest = json.loads((tmp_path / "pytorch-checkpoint.json").read_text())
    assert manifest["step"] == 6 and manifest["bytes"] == (tmp_path / "pytorch-checkpoint-6.pt").stat().st_size


def test_a_save_cut_short_leaves_the_last_complete_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """The SIGKILL at the end of the grace may come mid-write: only a temporary file is left, the manifest still
    names the previous payload, and a resumed run reads that one."""
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    state = _state()
    save_checkpoint(state, 4)

    def killed(self, path: str, data: bytes) -> None:
        Path(f"{path}.tmp-1").write_bytes(data[: len(data) // 2])  # what a process killed mid-write leaves
        raise SystemExit(-9)

    monkeypatch.setattr(_checkpoints.LocalFiles, "write", killed)
    with pytest.raises(SystemExit):
        save_checkpoint(state, 6)
    monkeypatch.undo()
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    _checkpoints.reset()
    assert load_checkpoint(_state(seed=3)) == 4


def test_this_attempts_checkpoint_wins_over_the_previous_attempts(tmp_path: Path, monkeypatch) -> None:
    """After a restart within the attempt its own prefix holds the newer checkpoint; after a Flyte retry only the
    previous attempt's does, and rank 0 leaves a pointer to it in the new prefix for the retry after."""
    fsspec = pytest.importorskip("fsspec")
    local = fsspec.filesystem("file")
    attempt0, attempt1, attempt2 = (str(tmp_path / f"attempt-{n}") for n in range(3))

    def prefixes(dest: str, src: str | None) -> None:
        monkeypatch.setattr(  # the PLAIN front-end of tests/core, as a pod's front-end answers
            _checkpoints.current(), "checkpoint_place", lambda: CheckpointPrefixes(dest, src, lambda path: local)
        )
        _checkpoints.reset()

    state = _state()
    prefixes(attempt0, None)
    save_checkpoint(state, 3)
    prefixes(attempt1, attempt0)  # a retry: reads attempt 0's, points attempt 1's prefix at it
    assert load_checkpoint(_state(seed=2)) == 3
    pointer = json.loads(Path(attempt1, "pytorch-checkpoint.json").read_text())
    assert pointer["file"] == f"{attempt0}/pytorch-checkpoint-3.pt"
    prefixes(attempt2, attempt1)  # attempt 1 saved nothing of its own: its pointer still leads to step 3
    assert load_checkpoint(_state(seed=2)) == 3
    prefixes(attempt1, attempt0)
    save_checkpoint(state, 5)  # attempt 1 saves, then restarts within the attempt: its own prefix wins
    _checkpoints.reset()
    assert load_checkpoint(_state(seed=2)) == 5


def test_a_checkpoint_of_another_loop_is_refused_naming_what_to_remove(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    save_checkpoint({"model": torch.nn.Linear(3, 1)}, 2)
    _checkpoints.reset()
    with pytest.raises(CheckpointError, match=r"holds \['model'\], not \['scheduler'\].*remove .* to start over"):
        load_checkpoint({"model": torch.nn.Linear(3, 1), "scheduler": torch.nn.Linear(3, 1)})


@pytest.mark.parametrize(
    ("state", "step", "error"),
    [
        pytest.param([1, 2], 1, TypeError, id="not-a-mapping"),
        pytest.param({1: "x"}, 1, TypeError, id="names-not-strings"),
        pytest.param({}, 1.5, TypeError, id="fractional-step"),
        pytest.param({}, True, TypeError, id="bool-step"),
        pytest.param({}, -1, ValueError, id="negative-step"),
    ],
)
def test_bad_arguments_name_the_call(state, step, error, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    with pytest.raises(error, match=r"save_checkpoint\("):
        save_checkpoint(state, step)


def test_only_global_rank_0_writes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "2")
    save_checkpoint(_state(), 3)
    assert list(tmp_path.iterdir()) == []
    assert progress.last_step() == 3  # but the rank passed the step boundary


def test_the_local_folder_is_one_per_task_and_inputs() -> None:
    one = _checkpoints.local_checkpoint_dir("file.train", "a" * 64)
    assert one == _checkpoints.local_checkpoint_dir("file.train", "a" * 64)
    assert one != _checkpoints.local_checkpoint_dir("file.train", "b" * 64)
    assert one != _checkpoints.local_checkpoint_dir("file.other", "a" * 64)
    assert "/checkpoints/file.train-" in one


def test_a_run_that_resumes_says_from_which_step_and_place_and_a_fresh_one_says_nothing(
    tmp_path: Path, monkeypatch, capfd
) -> None:
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    assert load_checkpoint(_state()) == 0
    assert "resuming" not in capfd.readouterr().err  # nothing to resume from: not a word
    save_checkpoint(_state(), 20)
    _checkpoints.reset()
    assert load_checkpoint(_state()) == 20
    assert capfd.readouterr().err == f"checkpoint: resuming from the checkpoint of step 20 in {tmp_path}\n"
    _checkpoints.reset()
    monkeypatch.setenv("RANK", "1")
    assert load_checkpoint(_state()) == 20
    assert capfd.readouterr().err == ""  # every rank loads it; rank 0 says it


def test_the_step_a_folder_resumes_from(tmp_path: Path, monkeypatch) -> None:
    assert _checkpoints.folder_step(str(tmp_path)) is None
    assert _checkpoints.folder_step("") is None
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    save_checkpoint(_state(), 12)
    assert _checkpoints.folder_step(str(tmp_path)) == 12
    (tmp_path / _checkpoints.MANIFEST_NAME).write_text("{not json")
    assert _checkpoints.folder_step(str(tmp_path)) is None
