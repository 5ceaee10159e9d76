"""devcluster's record of the processes it starts: `down` stops each one, and `restart` starts one again as it was."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devcluster.procs import Processes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def procs(tmp_path: Path):
    p = Processes(tmp_path)
    yield p
    p.stop_all(grace_s=2.0)


def test_restart_stops_the_process_and_starts_it_again_as_recorded(procs: Processes, tmp_path: Path) -> None:
    first = procs.start("sleeper", SLEEPER, cwd=tmp_path)
    assert first.alive() and first.restartable and first.argv == tuple(SLEEPER)
    second = procs.restart("sleeper", grace_s=2.0)
    assert not first.alive() and second.alive() and second.pid != first.pid
    assert second.argv == first.argv and second.cwd == str(tmp_path)
    assert [p.pid for p in procs.recorded()] == [first.pid, second.pid]  # both recorded: down reads them all
    assert procs.stop_all(grace_s=2.0) == [] and not second.alive()


def test_restart_refuses_what_it_cannot_start_again(procs: Processes) -> None:
    with pytest.raises(RuntimeError, match="no running process 'absent'"):
        procs.restart("absent")
    procs.start("with-env", SLEEPER, env={"PATH": "/usr/bin"})
    with pytest.raises(RuntimeError, match="environment of its own"):
        procs.restart("with-env")


def test_an_older_record_without_argv_still_reads(procs: Processes, tmp_path: Path) -> None:
    (tmp_path / "processes.jsonl").write_text('{"name": "etcd", "pid": 1, "ticks": 0, "log": "x"}\n')
    (old,) = procs.recorded()
    assert old.argv == () and not old.restartable
