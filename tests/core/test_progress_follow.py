"""The launcher's progress thread: snapshots in; console line, page, record beside the outputs out."""

from __future__ import annotations

import json
import os
import pty
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from pytorch_contract.progress import FILE_NAME, parse_record
from pytorch_core import launcher, progress
from pytorch_core._control import ControlDir
from pytorch_core._progress_follow import MAX_POINTS, ProgressFollower, Tracker
from pytorch_core.config import PyTorch
from pytorch_core.frontend import PlainFrontEnd
from pytorch_core.progress import report_progress


class RecordingFrontEnd(PlainFrontEnd):
    """A front-end whose page and output files are recorded (a pod's, when ``local`` is False)."""

    def __init__(self, outputs: Optional[Path] = None, *, local: bool = True, page: bool = True) -> None:
        self.outputs = outputs
        self.local = local
        self.page = page
        self.pages: list[tuple[str, bool]] = []
        self.writes: list[bytes] = []

    def is_local(self) -> bool:
        return self.local

    def publish_progress(self, task: Any, html: str, final: bool) -> bool:
        if not self.page:
            return False
        self.pages.append((html, final))
        return True

    def write_output_file(self, name: str, data: bytes) -> Optional[str]:
        if self.outputs is None:
            return None
        self.writes.append(data)
        (self.outputs / name).write_bytes(data)
        return str(self.outputs / name)


def snapshot(step: int, when: float, total: Optional[int] = 100, final: bool = False, **metrics: float) -> dict:
    return {"step": step, "total": total, "metrics": metrics, "time": when, "final": final, "trainer_status": True}


def test_the_tracker_measures_rate_and_eta_over_recent_snapshots() -> None:
    tracker = Tracker(interval_s=10.0)
    assert tracker.add(snapshot(0, 100.0)) is not None
    record = tracker.add(snapshot(20, 102.0, loss=0.5))
    assert record is not None and record.rate == 10.0 and record.eta_s == 8.0
    assert record.started_at == 100.0 and record.reported_at == 102.0
    assert record.stale_after_s == 60.0 and not record.done
    assert tracker.elapsed_s(110.0) == 10.0


def test_a_loop_that_went_back_is_measured_anew() -> None:
    """A restart resumed from a checkpoint at an earlier step: no negative rate, no rate from before."""
    tracker = Tracker()
    tracker.add(snapshot(0, 0.0))
    tracker.add(snapshot(50, 10.0))
    record = tracker.add(snapshot(40, 30.0))
    assert record is not None and record.rate is None and record.eta_s is None
    record = tracker.add(snapshot(60, 32.0))
    assert record is not None and record.rate == 10.0


def test_slow_steps_raise_the_staleness_threshold() -> None:
    tracker = Tracker(interval_s=10.0)
    tracker.add(snapshot(0, 0.0))
    record = tracker.add(snapshot(1, 120.0))  # two minutes a step
    assert record is not None and record.stale_after_s == 360.0


def test_the_history_keeps_its_shape_within_its_bound() -> None:
    tracker = Tracker()
    for step in range(3 * MAX_POINTS):
        tracker.add(snapshot(step, float(step), total=None, loss=1.0 / (step + 1)))
    assert len(tracker.history) <= MAX_POINTS
    assert tracker.history[0][0] == 0 and tracker.history[-1][0] == 3 * MAX_POINTS - 1
    steps = [s for s, _ in tracker.history]
    assert steps == sorted(steps)


def _follower(frontend: RecordingFrontEnd, fd: int, **env: str) -> ProgressFollower:
    defaults = {"FLYTE_PYTORCH_PROGRESS_INTERVAL_S": "0.3", "FLYTE_PYTORCH_PROGRESS_LOG_S": "0.3"}
    return ProgressFollower(frontend, SimpleNamespace(name="t"), local=frontend.local, env={**defaults, **env}, fd=fd)


def _read_all(fd: int) -> str:
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_a_log_gets_a_line_at_intervals_and_the_last_state(tmp_path: Path) -> None:
    read, write = os.pipe()
    frontend = RecordingFrontEnd()
    follower = _follower(frontend, write)
    follower.start()
    start = time.time()
    for step in range(1, 21):
        follower.offer(snapshot(step, start + step * 0.05, loss=1.0 / step))
        time.sleep(0.05)
    follower.offer(snapshot(20, time.time(), final=True, loss=0.05))
    follower.stop()
    os.close(write)
    lines = _read_all(read).splitlines()
    os.close(read)
    assert all(line.startswith("progress: step ") for line in lines), lines
    assert 2 <= len(lines) <= 6, lines  # about one per 0.3 s over a second, not one per snapshot
    assert lines[0].startswith("progress: step 1/100 (1%)")
    assert lines[-1].startswith("progress: step 20/100 (20%), took ") and lines[-1].endswith("loss 0.05")
    assert "\r" not in "".join(lines)  # a log is never redrawn in place


def test_a_terminal_gets_one_line_redrawn_in_place() -> None:
    leader, follower_fd = pty.openpty()
    frontend = RecordingFrontEnd()
    follower = _follower(frontend, follower_fd)
    follower.start()
    now = time.time()
    for step in (10, 20, 30):
        follower.offer(snapshot(step, now + step / 10, loss=0.5))
        time.sleep(0.35)
    follower.offer(snapshot(30, time.time(), final=True, loss=0.5))
    follower.stop()
    output = _read_all(leader)
    os.close(leader)
    os.close(follower_fd)
    draws = output.split("\r\x1b[K")
    assert len(draws) >= 4, output  # one erase-and-draw per redraw
    assert output.count("\n") == 1 and output.endswith("\n")  # the final state stays, on its own line
    assert "step 30/100 (30%)" in draws[-1]


def test_a_local_run_publishes_pages_but_writes_no_record() -> None:
    read, write = os.pipe()
    frontend = RecordingFrontEnd(local=True)
    follower = _follower(frontend, write, FLYTE_PYTORCH_PROGRESS_LINE="0")
    follower.start()
    now = time.time()
    for step in range(1, 9):
        follower.offer(snapshot(step, now + step * 0.1, loss=1.0 / step))
        time.sleep(0.1)
    follower.stop()
    os.close(write)
    assert _read_all(read) == ""  # FLYTE_PYTORCH_PROGRESS_LINE=0
    os.close(read)
    assert frontend.writes == []
    mid_run = [html for html, final in frontend.pages if not final]
    assert 2 <= len(mid_run) <= 4  # every 0.3 s over 0.8 s
    assert "<svg" in mid_run[-1] and "loss" in mid_run[-1]  # the curve grows
    assert mid_run[-1].count(",") > mid_run[0].count(",") or "point(s) so far" in mid_run[0]
    assert frontend.pages[-1][1] is True  # the final page is set, not published


def test_a_cluster_run_writes_the_record_at_intervals_and_marks_it_done(tmp_path: Path) -> None:
    frontend = RecordingFrontEnd(tmp_path, local=False)
    read, write = os.pipe()
    follower = _follower(frontend, write)
    follower.start()
    now = time.time()
    for step in range(1, 11):
        follower.offer(snapshot(step, now + step * 0.1, loss=1.0 / step))
        time.sleep(0.1)
    follower.offer(snapshot(10, time.time(), final=True, loss=0.1))
    follower.stop()
    os.close(write)
    os.close(read)
    assert 3 <= len(frontend.writes) <= 6  # every 0.3 s over a second, and the final one
    records = [parse_record(data) for data in frontend.writes]
    assert [r.done for r in records].count(True) == 1 and records[-1].done
    assert records[-1].step == 10 and records[-1].interval_s == 0.3
    assert parse_record((tmp_path / FILE_NAME).read_bytes()) == records[-1]


def test_a_failed_run_leaves_its_last_record_not_done(tmp_path: Path) -> None:
    frontend = RecordingFrontEnd(tmp_path, local=False)
    follower = _follower(frontend, os.open(os.devnull, os.O_WRONLY))
    follower.start()
    follower.offer(snapshot(3, time.time()))
    time.sleep(0.5)
    follower.stop(failed=True)
    assert all(not parse_record(data).done for data in frontend.writes) and frontend.writes


def test_a_run_that_reports_nothing_writes_and_prints_nothing(tmp_path: Path) -> None:
    read, write = os.pipe()
    frontend = RecordingFrontEnd(tmp_path, local=False)
    follower = _follower(frontend, write)
    follower.start()
    time.sleep(0.4)
    assert follower._thread is None  # the in-process channel starts its thread at the first snapshot only
    follower.stop()
    os.close(write)
    assert _read_all(read) == ""
    os.close(read)
    assert frontend.writes == [] and frontend.pages == [] and list(tmp_path.iterdir()) == []


def test_a_task_without_decks_is_not_asked_again() -> None:
    frontend = RecordingFrontEnd(page=False)
    calls = []
    original = frontend.publish_progress

    def counting(task: Any, html: str, final: bool) -> bool:
        calls.append(final)
        return original(task, html, final)

    frontend.publish_progress = counting  # type: ignore[method-assign]
    follower = _follower(frontend, os.open(os.devnull, os.O_WRONLY), FLYTE_PYTORCH_PROGRESS_LINE="0")
    follower.start()
    for step in range(5):
        follower.offer(snapshot(step, time.time()))
        time.sleep(0.2)
    follower.stop()
    assert calls == [False]


def test_a_page_that_fails_is_logged_once_and_training_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(RecordingFrontEnd):
        def publish_progress(self, task: Any, html: str, final: bool) -> bool:
            raise OSError("disk full")

    follower = _follower(Broken(), os.open(os.devnull, os.O_WRONLY), FLYTE_PYTORCH_PROGRESS_LINE="0")
    follower.start()
    for step in range(5):
        follower.offer(snapshot(step, time.time()))
        time.sleep(0.2)
    follower.stop()
    warnings = [r for r in caplog.records if "could not publish the progress page" in r.getMessage()]
    assert len(warnings) == 1 and "disk full" in warnings[0].getMessage()


def test_an_interval_that_is_not_a_number_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match=r"FLYTE_PYTORCH_PROGRESS_INTERVAL_S='soon' is not valid"):
        ProgressFollower(RecordingFrontEnd(), None, local=True, env={"FLYTE_PYTORCH_PROGRESS_INTERVAL_S": "soon"})


def test_the_follower_reads_the_control_directory_file(tmp_path: Path) -> None:
    """The rank-process channel: rank 0 replaces progress.json; the follower reads each new version once."""
    frontend = RecordingFrontEnd(tmp_path, local=False)
    control = ControlDir(tmp_path)
    follower = _follower(frontend, os.open(os.devnull, os.O_WRONLY))
    follower.start(control.progress_file)
    for step in (1, 2, 3):
        control.write_progress(snapshot(step, time.time(), loss=0.1 * step))
        time.sleep(0.4)
    control.write_progress(snapshot(3, time.time(), final=True, loss=0.3))
    follower.stop()
    assert follower.tracker.snapshots == 4
    final = parse_record((tmp_path / FILE_NAME).read_bytes())
    assert final.done and final.step == 3 and final.metrics == {"loss": 0.3}
    assert json.loads(control.progress_file.read_text())["final"] is True


def test_a_pod_with_one_rank_writes_the_record_through_its_front_end(tmp_path: Path, monkeypatch) -> None:
    """A pod whose replica runs the function in its own process (nproc_per_node=1): global rank 0 hands its
    snapshots to the launcher's thread in the same process, which writes the record beside the outputs."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLYTE_PYTORCH_PROGRESS_INTERVAL_S", "0.3")
    monkeypatch.setenv("FLYTE_PYTORCH_PROGRESS_LINE", "0")
    frontend = RecordingFrontEnd(tmp_path, local=False)

    def train(steps: int) -> int:
        for step in range(1, steps + 1):
            time.sleep(0.05)
            report_progress(step, steps, loss=1.0 / step)
        return steps

    task = SimpleNamespace(task_config=PyTorch(preflight=False), _task_function=train, name="t")
    assert launcher.run_distributed(task, {"steps": 40}, frontend) == 40
    record = parse_record((tmp_path / FILE_NAME).read_bytes())
    assert record.done and record.step == 40 and record.total == 40 and record.metrics == {"loss": 1 / 40}
    assert len(frontend.writes) >= 2
    assert not progress.active() and progress._reporter is None  # nothing left behind in the pod process


def test_a_pod_replica_that_is_not_rank_zero_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    frontend = RecordingFrontEnd(tmp_path, local=False)

    def train() -> int:
        for step in range(20):
            report_progress(step, 20, loss=1.0)
        return 1

    task = SimpleNamespace(task_config=PyTorch(preflight=False), _task_function=train, name="t")
    with pytest.raises(Exception, match="only rank 0 writes the task outputs"):
        launcher.run_distributed(task, {}, frontend)
    assert frontend.writes == [] and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the last word, and a line that moves as one ------


@pytest.mark.parametrize("tty", [False, True], ids=["log", "terminal"])
def test_a_stopped_run_ends_with_the_step_the_ranks_stopped_at(tty: bool) -> None:
    """After a stop (a preemption, Ctrl-C, a rank's failure) rank 0 hands over where it stood, marked stopped: the
    last line is that step, with neither a rate nor an ETA, and not rank 0's last periodic report."""
    if tty:
        leader, fd = pty.openpty()
    else:
        leader, fd = os.pipe()
    follower = _follower(RecordingFrontEnd(), fd)
    follower.start()
    now = time.time()
    follower.offer(snapshot(1, now, total=40, loss=4.2))
    time.sleep(0.4)  # the follower takes the latest snapshot offered: let it take each
    follower.offer(snapshot(15, now + 2, total=40, loss=0.5))
    time.sleep(0.4)
    follower.offer({**snapshot(20, now + 2.6, total=40, loss=0.25), "stopped": True})
    follower.stop(failed=True)
    os.close(fd)
    output = _read_all(leader)
    os.close(leader)
    last = output.replace("\r\x1b[K", "\n").strip().splitlines()[-1]
    assert last == "progress: stopped at step 20/40 (50%) after 3s, loss 0.25", output


def test_a_run_whose_rank_0_could_not_say_where_it_stopped_says_what_it_last_reported() -> None:
    read, write = os.pipe()
    follower = _follower(RecordingFrontEnd(), write)
    follower.start()
    now = time.time()
    follower.offer(snapshot(1, now, total=40, loss=4.2))
    time.sleep(0.3)
    follower.stop(failed=True)  # rank 0 was killed: no last word
    os.close(write)
    lines = _read_all(read).splitlines()
    os.close(read)
    assert lines[-1] == "progress: stopped; rank 0's last report: step 1/40 (2%) after 0s, loss 4.2", lines


def test_on_a_terminal_the_step_and_the_eta_move_together() -> None:
    """The line is drawn as of rank 0's last report: between two reports neither the ETA nor the elapsed time ticks
    on while the step stands still."""
    leader, fd = pty.openpty()
    follower = _follower(RecordingFrontEnd(), fd)
    follower.start()
    now = time.time()
    follower.offer(snapshot(0, now - 4, total=100, loss=1.0))
    follower.offer(snapshot(20, now - 2, total=100, loss=0.5))
    time.sleep(2.3)  # two or more redraw periods with no new report
    follower.offer(snapshot(40, now + 0.3, total=100, loss=0.25))
    time.sleep(0.4)
    follower.stop()
    output = _read_all(leader)
    os.close(leader)
    os.close(fd)
    draws = [d for d in output.split("\r\x1b[K") if d.strip()]
    by_step: dict[str, set[str]] = {}
    for draw in draws:
        step = re.search(r"step (\d+)/", draw)
        eta = re.search(r"ETA (\S+?),", draw)
        if step and eta:
            by_step.setdefault(step[1], set()).add(eta[1])
    assert by_step, output
    assert all(len(etas) == 1 for etas in by_step.values()), by_step  # one ETA per step shown


def test_the_curves_get_a_point_per_reported_step() -> None:
    tracker = Tracker()
    start = 1000.0
    tracker.add({**snapshot(1, start, loss=4.0), "points": [[1, {"loss": 4.0}]]})
    points = [[step, {"loss": 4.0 / step}] for step in range(2, 26)]
    tracker.add({**snapshot(25, start + 2, loss=4.0 / 25), "points": points})
    assert [step for step, _ in tracker.history] == list(range(1, 26))
    tracker.add({**snapshot(26, start + 4, loss=0.1), "points": []})  # nothing reported since: no new point
    assert len(tracker.history) == 25


def test_a_fork_waits_until_the_thread_is_between_two_snapshots(tmp_path: Path) -> None:
    """``start_method="fork"`` forks the ranks from the launcher while this thread runs: a fork taken while it held a
    lock mid-work (a module being imported, a stream being written) would leave the rank with that lock held forever.
    A fork made while a sink works waits until the sink returned; the child starts with nothing held."""
    import threading

    in_update, released = threading.Event(), threading.Event()
    ended_at: list[float] = []

    class SlowSink:
        def update(self, tracker: Any, now: float, new: bool) -> None:
            if new and not in_update.is_set():
                in_update.set()
                released.wait(5)
                time.sleep(0.3)
                ended_at.append(time.monotonic())

        def close(self, tracker: Any, now: float, final: bool) -> None:
            pass

    path = tmp_path / "progress.json"
    devnull = os.open(os.devnull, os.O_WRONLY)
    follower = _follower(RecordingFrontEnd(), devnull)
    follower.sinks = [SlowSink()]
    follower.start(path)
    try:
        path.write_text(json.dumps(snapshot(1, time.time())))
        assert in_update.wait(10), "the sink never ran"
        released.set()
        pid = os.fork()
        if pid == 0:  # the child: the guard is free here, as a rank's imports need it to be
            from pytorch_core import _progress_follow

            os._exit(0 if _progress_follow._FORK_GUARD.acquire(timeout=5) else 1)
        forked_at = time.monotonic()
        _, status = os.waitpid(pid, 0)
    finally:
        follower.stop()
        os.close(devnull)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ended_at and forked_at >= ended_at[0], (forked_at, ended_at)
