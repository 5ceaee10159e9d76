"""flytekit's side of live progress: the Progress Deck published mid-run (deck.html in the output metadata prefix,
in a pod), ahead of flytekit's Timeline, nothing for a task without Decks, and a file beside the outputs through the
context's file access."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flytekit.core.context_manager import ExecutionParameters, ExecutionState, FlyteContextManager
from flytekit.deck.deck import TimeLineDeck
from flytekit.models.core.identifier import Identifier, ResourceType

from flytekitplugins_pytorch._frontend import FLYTEKIT


@pytest.fixture
def pod_context(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ExecutionParameters]:
    """A task execution context, as in a pod: Decks on (unless the test says otherwise), outputs in ``tmp_path``."""
    enable_deck = getattr(request, "param", True)
    ctx = FlyteContextManager.current_context()
    params = ExecutionParameters(
        execution_date=datetime.datetime.now(datetime.timezone.utc),
        tmp_dir=str(tmp_path / "work"),
        stats=None,
        execution_id=None,
        logging=logging.getLogger("test"),
        raw_output_prefix=str(tmp_path / "raw"),
        output_metadata_prefix=str(tmp_path / "outputs"),
        decks=[TimeLineDeck("Timeline", auto_add_to_deck=False)],
        task_id=Identifier(ResourceType.TASK, "p", "d", "train", "v1"),
        enable_deck=enable_deck,
    )
    (tmp_path / "outputs").mkdir()
    state = ExecutionState(working_dir=str(tmp_path), mode=ExecutionState.Mode.TASK_EXECUTION, user_space_params=params)
    with FlyteContextManager.with_context(ctx.with_execution_state(state)):
        yield params


def test_the_progress_deck_is_published_mid_run_ahead_of_the_timeline(pod_context, tmp_path: Path) -> None:
    assert FLYTEKIT.publish_progress(None, "<h3>step 1/10 (10%)</h3>", False) is True
    first = (tmp_path / "outputs" / "deck.html").read_text()
    assert "step 1/10 (10%)" in first
    assert first.index(">Progress<") < first.index(">Timeline<")  # the Deck opens on it
    assert FLYTEKIT.publish_progress(None, "<h3>step 6/10 (60%)</h3>", False) is True
    second = (tmp_path / "outputs" / "deck.html").read_text()
    assert "step 6/10 (60%)" in second and "step 1/10" not in second
    assert [d.name for d in pod_context.decks] == ["Progress", "Timeline"]  # one Deck, updated


def test_the_final_page_updates_the_deck_without_publishing(pod_context, tmp_path: Path) -> None:
    FLYTEKIT.publish_progress(None, "<h3>step 9/10</h3>", False)
    FLYTEKIT.publish_progress(None, "<h3>step 10/10</h3>", True)
    assert "step 9/10" in (tmp_path / "outputs" / "deck.html").read_text()  # flytekit writes the last one itself
    (deck,) = [d for d in pod_context.decks if d.name == "Progress"]
    assert deck.html == "<h3>step 10/10</h3>"


def test_rank_0s_decks_open_ahead_of_the_progress_deck_once_the_run_ends(pod_context, tmp_path: Path) -> None:
    FLYTEKIT.publish_progress(None, "<h3>step 9/10</h3>", False)
    FLYTEKIT.adopt([("Training", "<p>curves</p>"), ("Extra", "<p>more</p>")], None, None)
    assert [d.name for d in pod_context.decks] == ["Training", "Extra", "Progress", "Timeline"]


def test_rank_0s_decks_without_progress_keep_their_place(pod_context, tmp_path: Path) -> None:
    FLYTEKIT.adopt([("Training", "<p>curves</p>")], None, None)
    assert [d.name for d in pod_context.decks] == ["Timeline", "Training"]


@pytest.mark.parametrize("pod_context", [False], indirect=True)
def test_a_task_without_decks_gets_none_and_no_warning(pod_context, tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        assert FLYTEKIT.publish_progress(None, "<h3>step 1</h3>", False) is False
    assert not (tmp_path / "outputs" / "deck.html").exists()
    assert [d.name for d in pod_context.decks] == ["Timeline"]
    assert "enable_deck" not in caplog.text


def test_a_file_is_written_beside_the_outputs(pod_context, tmp_path: Path) -> None:
    path = FLYTEKIT.write_output_file("pytorch-progress.json", b'{"step": 3}')
    assert path == f"{tmp_path / 'outputs'}/pytorch-progress.json"
    assert (tmp_path / "outputs" / "pytorch-progress.json").read_bytes() == b'{"step": 3}'


def test_without_an_output_prefix_nothing_is_written() -> None:
    assert FLYTEKIT.write_output_file("pytorch-progress.json", b"{}") is None


def test_both_front_ends_export_the_one_function() -> None:
    import importlib
    import importlib.util

    import flytekitplugins_pytorch
    from pytorch_core.progress import report_progress

    assert flytekitplugins_pytorch.report_progress is report_progress
    if importlib.util.find_spec("flyte") is not None:  # the flyte2 extra (CI's lowest job has no flyte)
        assert importlib.import_module("flyte2_pytorch").report_progress is report_progress
