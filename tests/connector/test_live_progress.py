"""Live progress in GetTask's message: the record global rank 0 writes beside the outputs, read by the connector at
most once per `progress_read_interval_s` per task attempt, through the real kubernetes client against the fake API
server, for every registered kind.

The connector's clock is a clock the tests move: it times the reads' interval and judges staleness and ETAs, so
no test sleeps through an interval. The record is a real file under the attempt's output prefix (a local folder),
read through flytekit's file access as on a cluster.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import random
import threading
import time
from pathlib import Path

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin import connector as connector_module
from backend_plugin.connector import PROGRESS_READ_WAIT_S, JobConnector, JobMetadata, blobs
from backend_plugin.connector.progress import LiveProgress, Read
from backend_plugin.errors import StorageUnavailable
from backend_plugin.targets.registry import KINDS
from pytorch_contract.progress import FILE_NAME, MAX_RECORD_BYTES, ProgressRecord, stale_after
from tests.connector.helpers import NOW, Propeller, execution_metadata, load_template, make_connector
from tests.fakeapi.objects import condition
from tests.targets.conftest import Kind, facts_of

NS = "flytesnacks-development"
LINE = "step 1,200/5,000 (24%), ETA 3m06s, loss 0.124"
"""The line of `record()` read 4 s after rank 0 wrote it: its ETA of 190 s, less those 4 s."""


class Clock:
    """The connector's clock: moved by the tests."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=KINDS, ids=[t.config_name for t in KINDS])
def kind(request) -> Kind:
    """Each registered job kind in turn."""
    return Kind(request.param, facts_of(request.param))


@pytest.fixture
def connector(fake_api, kind, clock) -> JobConnector:
    """The sync connector (the cache off: every poll reads the job), creating jobs of `kind`."""
    return make_connector(fake_api.client, clock=clock, target=kind.name)


def record(clock: Clock, age_s: float = 4.0, **fields) -> bytes:
    """A record as rank 0 writes it, `age_s` after its latest report (on the connector's clock)."""
    now = clock().timestamp()
    body = {"step": 1200, "total": 5000, "metrics": {"loss": 0.124}, "rate": 6.3, "eta_s": 190.0,
            "started_at": now - 600, "reported_at": now - age_s, "interval_s": 10.0, "stale_after_s": 60.0}  # fmt: skip
    body.update(fields)
    return ProgressRecord(**body).to_json()


def start(fake_api, connector: JobConnector, kind: Kind, tmp_path: Path, execution: str = "abc123") -> JobMetadata:
    """Create a job of `kind` and make it run steadily (its status needs no pods)."""
    server, _ = fake_api
    meta = connector.create(
        load_template("sdk_seed_gpu"), str(tmp_path / execution), None, execution_metadata(execution)
    )
    job = server.get_job(NS, meta.name, plural=kind.target.plural)
    server.set_job_status(NS, meta.name, kind.running(job), kind.target.plural)
    return meta


def put(meta: JobMetadata, content: bytes) -> None:
    """Write the attempt's record, as rank 0's launcher does."""
    path = Path(meta.output_prefix) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def held(connector: JobConnector) -> LiveProgress:
    """The progress records the connector's service holds."""
    return connector.service.session().progress


def reads(connector: JobConnector) -> int:
    return held(connector).stats()["reads"]


def settled(connector: JobConnector) -> None:
    """Wait until no read of a record is under way (a refresh runs in the background)."""
    deadline = time.monotonic() + 10
    while held(connector).stats()["reading"]:
        assert time.monotonic() < deadline, "a progress read never ended"
        time.sleep(0.005)


def poll(connector: JobConnector, meta: JobMetadata) -> str:
    """One poll's message, once the read it may have started in the background is done."""
    message = connector.get(meta).message
    settled(connector)
    return message


# --- the message -----------------------------------------------------------------------------------------------------


def test_a_running_jobs_message_carries_its_progress_after_what_the_kind_says(fake_api, kind, connector, tmp_path):
    quiet = start(fake_api, connector, kind, tmp_path, "quiet")
    busy = start(fake_api, connector, kind, tmp_path, "busy")
    put(busy, record(connector.service._clock))
    without = connector.get(quiet)
    assert without.phase == TaskExecution.RUNNING and "step" not in without.message  # a run that reports nothing
    answer = connector.get(busy)
    assert answer.phase == TaskExecution.RUNNING
    assert answer.message == f"{without.message}; {LINE}"


def test_polls_between_reads_count_the_eta_down_and_read_nothing(fake_api, kind, connector, clock, tmp_path):
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(clock))
    assert connector.get(meta).message.endswith(LINE)
    put(meta, record(clock, step=1300, eta_s=170.0))  # rank 0 writes again: not read before 30 s have passed
    clock.advance(20)
    assert connector.get(meta).message.endswith("step 1,200/5,000 (24%), ETA 2m46s, loss 0.124")
    clock.advance(9.9)
    assert connector.get(meta).message.endswith("step 1,200/5,000 (24%), ETA 2m36s, loss 0.124")
    assert reads(connector) == 1
    clock.advance(3.1)  # 33 s after the first read: the interval and its jitter (at most 10%) have passed
    # the poll that starts the refresh shows the record held; the next one what was read
    assert poll(connector, meta).endswith("step 1,200/5,000 (24%), ETA 2m33s, loss 0.124")
    assert connector.get(meta).message.endswith("step 1,300/5,000 (26%), ETA 2m13s, loss 0.124")
    assert reads(connector) == 2


def test_the_interval_is_the_configured_one(fake_api, kind, clock, tmp_path):
    connector = make_connector(fake_api.client, clock=clock, target=kind.name, progress_read_interval_s=5)
    meta = start(fake_api, connector, kind, tmp_path)
    connector.get(meta)
    put(meta, record(clock))
    clock.advance(4.9)
    assert "step" not in connector.get(meta).message
    clock.advance(0.7)  # 5 s and its jitter
    assert "step" not in poll(connector, meta)
    assert connector.get(meta).message.endswith("step 1,200/5,000 (24%), ETA 3m00s, loss 0.124")
    assert reads(connector) == 2


def test_a_stale_record_is_shown_stale_never_as_current(fake_api, kind, connector, clock, tmp_path):
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(clock, age_s=200))
    message = connector.get(meta).message
    assert message.endswith("; step 1,200/5,000 (24%), loss 0.124 (stale: rank 0 silent for 3m20s)"), message
    assert "ETA" not in message


def test_a_record_turning_stale_before_the_next_read_is_read_again_first(fake_api, kind, connector, clock, tmp_path):
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(clock, age_s=50))  # fresh: rank 0 may be silent 60 s
    assert connector.get(meta).message.endswith("step 1,200/5,000 (24%), ETA 2m20s, loss 0.124")
    clock.advance(15)  # 65 s since its report: before saying stale, the connector looks again
    put(meta, record(clock, age_s=3, step=1250, eta_s=180.0))  # rank 0 had written again: no false "stale"
    assert connector.get(meta).message.endswith("step 1,250/5,000 (25%), ETA 2m57s, loss 0.124")
    assert reads(connector) == 2
    clock.advance(60)  # rank 0 silent since: the next read (due anyway) finds the same record
    message = connector.get(meta).message
    assert message.endswith("step 1,250/5,000 (25%), loss 0.124 (stale: rank 0 silent for 1m03s)"), message
    clock.advance(10)  # known stale at its read: no read before the interval
    assert connector.get(meta).message.endswith("(stale: rank 0 silent for 1m13s)")
    assert reads(connector) == 3


def test_a_stale_record_read_again_unchanged_is_called_stale(fake_api, kind, connector, clock, tmp_path):
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(clock, age_s=50))
    connector.get(meta)
    clock.advance(15)
    assert connector.get(meta).message.endswith("loss 0.124 (stale: rank 0 silent for 1m05s)")
    assert reads(connector) == 2
    clock.advance(5)
    connector.get(meta)
    assert reads(connector) == 2  # one read more, once: the record was stale when read


class RankZero:
    """Rank 0's record writer as the launcher runs it: a report every `step_s`, handed to the launcher within 2 s, and
    the record written on a new report once `interval_s` has passed since the last write."""

    def __init__(self, meta: JobMetadata, clock: Clock, interval_s: float, step_s: float) -> None:
        self.meta, self.clock, self.interval_s, self.step_s = meta, clock, interval_s, step_s
        self.begin = clock().timestamp()
        self.written_at: float | None = None
        self.silent_from: float | None = None

    def catch_up(self) -> None:
        """Write what rank 0 would have written by now."""
        now = self.clock().timestamp()
        k = 0
        while True:
            report = self.begin + k * self.step_s
            handed_over = report + 2.0
            if handed_over > now or (self.silent_from is not None and report > self.silent_from):
                return
            if self.written_at is None or handed_over - self.written_at >= self.interval_s:
                self.written_at = handed_over
                put(self.meta, self.record(k, report))
            k += 1

    def record(self, step: int, reported_at: float) -> bytes:
        body = ProgressRecord(
            step=step,
            total=100_000,
            metrics={"loss": 0.5},
            rate=1 / self.step_s,
            eta_s=(100_000 - step) * self.step_s,
            started_at=self.begin,
            reported_at=reported_at,
            interval_s=self.interval_s,
            stale_after_s=stale_after(self.interval_s, self.step_s),
        )
        return body.to_json()


@pytest.mark.parametrize(
    "interval_s, step_s, poll_s, read_s",
    [(10, 0.1, 10, 30), (10, 0.1, 45, 30), (10, 19.5, 30, 30), (20, 20, 7, 30), (10, 45, 10, 30), (60, 5, 30, 30),
     (10, 0.1, 7, 60), (20, 20, 5, 120)],
    ids=["fast-steps", "sparse-polls", "20s-steps", "20s-writes", "slow-steps", "60s-writes", "60s-reads",
         "120s-reads"],
)  # fmt: skip
def test_a_healthy_run_is_never_called_stale_and_is_read_once_per_interval(
    fake_api, clock, tmp_path, interval_s, step_s, poll_s, read_s
):
    """The false positives of "stale": whatever rank 0's write interval and step time, Flyte's poll rate and the
    connector's read interval, a run that reports is never called stale; at the default interval it costs one read
    per interval (a longer one adds a read where the record held would turn stale first)."""
    connector = make_connector(fake_api.client, clock=clock, progress_read_interval_s=read_s)
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    meta = start(fake_api, connector, kind, tmp_path)
    rank0 = RankZero(meta, clock, interval_s, step_s)
    polls = 0
    for _ in range(int(600 / poll_s)):
        clock.advance(poll_s)
        rank0.catch_up()
        message = poll(connector, meta)
        polls += 1
        assert "stale" not in message and "step" in message, (polls, message)
    if read_s == 30:
        assert reads(connector) <= 600 / 30 + 1 if poll_s <= 30 else reads(connector) == polls
    else:
        assert reads(connector) <= 600 / 30


def test_a_silent_rank_zero_is_called_stale_at_the_first_poll_past_its_allowance(fake_api, clock, tmp_path):
    connector = make_connector(fake_api.client, clock=clock)
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    meta = start(fake_api, connector, kind, tmp_path)
    rank0 = RankZero(meta, clock, 10, 1)
    clock.advance(100)
    rank0.catch_up()
    rank0.silent_from = clock().timestamp()  # a hang: no report after this
    verdicts = []
    for _ in range(30):
        clock.advance(5)
        rank0.catch_up()
        message = poll(connector, meta)
        # what rank 0 last wrote decides, never an older read
        silent = clock().timestamp() - json.loads((Path(meta.output_prefix) / FILE_NAME).read_bytes())["reported_at"]
        assert ("(stale: rank 0 silent for" in message) == (silent > 60), (silent, message)
        assert ("ETA" in message) == (silent <= 60), (silent, message)
        verdicts.append(silent > 60)
    assert verdicts.index(True) > 0 and all(verdicts[verdicts.index(True) :])


# --- nothing to show -------------------------------------------------------------------------------------------------


def test_a_missing_record_is_looked_for_once_per_interval(fake_api, kind, connector, clock, tmp_path):
    meta = start(fake_api, connector, kind, tmp_path)
    first = connector.get(meta)
    for _ in range(5):
        clock.advance(5)
        assert connector.get(meta).message == first.message
    put(meta, record(clock))
    clock.advance(4.9)
    assert connector.get(meta).message == first.message
    assert held(connector).stats() | {"attempts": 1, "reads": 1, "missing": 1} == held(connector).stats()
    clock.advance(3.1)  # the interval and its jitter
    shown = f"{first.message}; step 1,200/5,000 (24%), ETA 2m58s, loss 0.124"
    # this poll starts the read in the background: it shows the record when the read ends first (a race it may win)
    assert poll(connector, meta) in (first.message, shown)
    assert connector.get(meta).message == shown
    assert reads(connector) == 2


MALFORMED = {
    "not JSON": b"step 1200 of 5000",
    "a list": b"[1200, 5000]",
    "a newer version": b'{"version": 2, "step": 1200}',
    "a negative step": b'{"version": 1, "step": -1, "reported_at": 1}',
    "a string step": b'{"version": 1, "step": "1200", "reported_at": 1}',
    "cut short": b'{"version": 1, "step": 1200, "tot',
    "empty": b"",
}


@pytest.mark.parametrize("content", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_record_shows_the_message_without_progress_logged_once(
    fake_api, kind, connector, clock, tmp_path, caplog, content
):
    meta = start(fake_api, connector, kind, tmp_path)
    expected = connector.get(meta).message
    put(meta, content)
    with caplog.at_level(logging.WARNING, logger="backend_plugin.connector.progress"):
        for _ in range(3):
            clock.advance(33)
            assert poll(connector, meta) == expected
    assert reads(connector) == 4
    warnings = [r.getMessage() for r in caplog.records if r.name == "backend_plugin.connector.progress"]
    assert len(warnings) == 1 and "is not a progress record" in warnings[0], warnings


def test_an_oversized_record_is_refused(fake_api, kind, connector, tmp_path, clock):
    meta = start(fake_api, connector, kind, tmp_path)
    valid = record(clock)
    put(meta, valid[:-1] + b" " * (MAX_RECORD_BYTES - len(valid) + 1) + b"}")  # valid JSON, one byte too long
    message = connector.get(meta).message
    assert "step" not in message and held(connector).stats()["malformed"] == 1
    clock.advance(33)
    put(meta, valid[:-1] + b" " * (MAX_RECORD_BYTES - len(valid)) + b"}")  # exactly the limit
    assert "step" not in poll(connector, meta)
    assert connector.get(meta).message.endswith("step 1,200/5,000 (24%), ETA 2m33s, loss 0.124")


def test_the_read_is_bounded_whatever_the_file_holds(tmp_path):
    (tmp_path / FILE_NAME).write_bytes(b"x" * (8 * MAX_RECORD_BYTES))
    found = blobs.read_progress_record(str(tmp_path))
    assert found.problem == "" and found.data == b"x" * (MAX_RECORD_BYTES + 1)
    assert blobs.read_progress_record(str(tmp_path / "elsewhere")) == blobs.RecordRead(None, "")


def test_a_store_that_cannot_be_read_is_unknown_named_never_absent(tmp_path):
    """Found, absent, or unknown: a read the store fails raises, naming the prefix; it is never "no record"."""
    (tmp_path / FILE_NAME).mkdir()  # not a file: the open fails
    with pytest.raises(StorageUnavailable, match="IsADirectoryError") as raised:
        blobs.read_progress_record(str(tmp_path))
    assert str(tmp_path) in str(raised.value) and "Error" in raised.value.reason


def test_a_record_unreadable_after_a_good_one_keeps_the_one_held(fake_api, kind, connector, clock, tmp_path, caplog):
    """A store that writes in place (a local or NFS path) can be read mid-write; a failed read the same."""
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(clock))
    assert connector.get(meta).message.endswith(LINE)
    clock.advance(33)
    put(meta, b'{"version": 1, "st')
    assert poll(connector, meta).endswith("step 1,200/5,000 (24%), ETA 2m33s, loss 0.124")
    assert connector.get(meta).message.endswith("step 1,200/5,000 (24%), ETA 2m33s, loss 0.124")
    clock.advance(33)
    (Path(meta.output_prefix) / FILE_NAME).unlink()
    (Path(meta.output_prefix) / FILE_NAME).mkdir()
    with caplog.at_level(logging.WARNING, logger="backend_plugin.connector.progress"):
        message = connector.get(meta).message
    assert message.endswith("step 1,200/5,000 (24%), loss 0.124 (stale: rank 0 silent for 1m10s)")
    assert held(connector).stats() | {"malformed": 1, "failed": 1, "found": 1} == held(connector).stats()


def test_metadata_without_an_output_prefix_reads_nothing(fake_api, kind, connector, tmp_path):
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(connector.service._clock))
    old = JobMetadata(meta.namespace, meta.name, meta.uid, kind=meta.kind)  # as an older connector stored it
    assert "step" not in connector.get(old).message
    assert held(connector).stats()["attempts"] == 0


# --- when the job ends -----------------------------------------------------------------------------------------------


def test_the_progress_is_dropped_when_the_job_ends(fake_api, kind, connector, clock, tmp_path):
    server, _ = fake_api
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(clock))
    assert connector.get(meta).message.endswith(LINE)
    put(meta, record(clock, step=5000, eta_s=0.0, done=True))
    server.set_job_status(NS, meta.name, {"conditions": [condition(kind.SUCCEEDED)]}, kind.target.plural)
    clock.advance(30)
    answer = connector.get(meta)
    assert answer.phase == TaskExecution.SUCCEEDED and "step" not in answer.message
    assert held(connector).stats() | {"attempts": 0, "reads": 1} == held(connector).stats()


def test_the_progress_is_dropped_when_the_job_is_gone(fake_api, kind, connector, clock, tmp_path):
    server, _ = fake_api
    meta = start(fake_api, connector, kind, tmp_path)
    put(meta, record(clock))
    connector.get(meta)
    server.remove_job(NS, meta.name, plural=kind.target.plural)
    assert connector.get(meta).phase == TaskExecution.RETRYABLE_FAILED
    assert held(connector).stats()["attempts"] == 0


def test_a_job_that_is_not_running_yet_reads_nothing(fake_api, kind, connector, clock, tmp_path):
    server, _ = fake_api
    meta = connector.create(load_template("sdk_seed_gpu"), str(tmp_path / "q"), None, execution_metadata("q"))
    put(meta, record(clock))
    answer = connector.get(meta)  # no status yet: QUEUED
    assert answer.phase == TaskExecution.QUEUED and "step" not in answer.message
    assert held(connector).stats()["attempts"] == 0


# --- the served connector: the watch cache's fast path ---------------------------------------------------------------


@pytest.fixture
def served(fake_api, kind, clock):
    connector = make_connector(fake_api.client, clock=clock, served=True, target=kind.name, watch_cache=True)
    yield connector
    connector.close()


def cached(served, meta: JobMetadata) -> None:
    """Wait until the watch cache answers for the job without I/O."""
    deadline = time.monotonic() + 10
    while (answer := served.service.answer_from_cache(meta)) is None or answer.phase != TaskExecution.RUNNING:
        assert time.monotonic() < deadline, "the watch cache never held the running job"
        time.sleep(0.01)


def test_gettask_from_the_cache_carries_the_progress_read_off_the_event_loop(
    fake_api, kind, served, clock, tmp_path, monkeypatch
):
    server, _ = fake_api
    meta = start(fake_api, served, kind, tmp_path)
    put(meta, record(clock))
    asyncio.run(served.get(meta))  # starts the namespace's watch
    cached(served, meta)
    held(served).forget(meta.output_prefix)
    threads: list[str] = []
    real_read = blobs.read_progress_record

    def spied(prefix: str) -> blobs.RecordRead:
        threads.append(threading.current_thread().name)
        return real_read(prefix)

    monkeypatch.setattr(blobs, "read_progress_record", spied)
    server.reset_log()
    propeller = Propeller(server, served)
    for _ in range(20):
        answer = propeller.get(meta.encode())
        assert answer.name == "RUNNING" and answer.message.endswith(LINE), answer
    assert [r for r in server.requests if r.verb in ("get", "list")] == []  # the cache answered every poll
    assert len(threads) == 1 and threads[0].startswith("connector-progress"), threads


def test_a_slow_store_delays_a_poll_by_the_wait_at_most_and_its_read_serves_the_next(
    fake_api, kind, served, clock, tmp_path, monkeypatch
):
    meta = start(fake_api, served, kind, tmp_path)
    asyncio.run(served.get(meta))
    cached(served, meta)
    held(served).forget(meta.output_prefix)
    before = reads(served)
    put(meta, record(clock))
    release = threading.Event()
    real_read = blobs.read_progress_record

    def slow(prefix: str) -> blobs.RecordRead:
        assert release.wait(30)
        return real_read(prefix)

    monkeypatch.setattr(blobs, "read_progress_record", slow)
    started = time.monotonic()
    answer = asyncio.run(asyncio.wait_for(served.get(meta), 30))
    assert answer.phase == TaskExecution.RUNNING and "step" not in answer.message
    assert time.monotonic() - started >= PROGRESS_READ_WAIT_S * 0.9  # it waited for the read, then answered
    assert held(served).stats()["reading"] == 1
    assert "step" not in asyncio.run(served.get(meta)).message  # a read is under way: none more is started
    release.set()
    deadline = time.monotonic() + 10
    while held(served).stats()["reading"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert asyncio.run(served.get(meta)).message.endswith(LINE)
    assert reads(served) == before + 1


def test_a_refresh_never_holds_a_poll_the_record_held_answers_it(fake_api, kind, served, clock, tmp_path, monkeypatch):
    meta = start(fake_api, served, kind, tmp_path)
    put(meta, record(clock))
    asyncio.run(served.get(meta))
    cached(served, meta)
    assert asyncio.run(served.get(meta)).message.endswith(LINE)
    release = threading.Event()
    real_read = blobs.read_progress_record

    def stuck(prefix: str) -> blobs.RecordRead:
        assert release.wait(60)
        return real_read(prefix)

    monkeypatch.setattr(blobs, "read_progress_record", stuck)
    monkeypatch.setattr(connector_module, "PROGRESS_READ_WAIT_S", 60.0)  # were it waited for, the poll would hang
    clock.advance(33)
    started = time.monotonic()
    answer = asyncio.run(asyncio.wait_for(served.get(meta), 30))
    assert time.monotonic() - started < 30 and held(served).stats()["reading"] == 1
    assert answer.message.endswith("step 1,200/5,000 (24%), ETA 2m33s, loss 0.124")
    release.set()
    settled(served)


# --- the bookkeeping alone -------------------------------------------------------------------------------------------


def test_attempts_are_bounded_and_the_least_recently_polled_go_first() -> None:
    progress = LiveProgress(30, 300, max_attempts=2)
    for key in ("a", "b", "a", "c"):
        progress.claim(key, 0.0, 0.0)
    assert progress.stats()["attempts"] == 2 and progress.stats()["dropped"] == 1
    assert progress.claim("a", 1.0, 0.0) is Read.NONE  # still held: its first read under way
    assert progress.claim("b", 1.0, 0.0) is Read.AWAITED  # dropped, so new


def test_attempts_nobody_polls_are_swept() -> None:
    progress = LiveProgress(30, 300)
    assert progress.claim("idle", 0.0, 0.0) is progress.claim("busy", 0.0, 0.0) is Read.AWAITED
    progress.store("idle", None)
    progress.store("busy", None)
    assert progress.claim("busy", 290.0, 0.0) is Read.BACKGROUND
    progress.store("busy", None, now=301.0)  # the sweep runs with a store
    assert progress.stats() | {"attempts": 1, "dropped": 1} == progress.stats()
    assert progress.message("idle", 0.0) is None


def test_a_read_under_way_for_a_forgotten_attempt_is_discarded() -> None:
    progress = LiveProgress(30, 300)
    assert progress.claim("a", 0.0, 1000.0) is Read.AWAITED
    progress.forget("a")
    progress.store("a", record(Clock()))
    assert progress.message("a", 1000.0) is None and progress.stats()["attempts"] == 0


def test_a_released_claim_may_be_claimed_again() -> None:
    progress = LiveProgress(30, 300)
    assert progress.claim("a", 0.0, 0.0) is Read.AWAITED and progress.claim("a", 0.0, 0.0) is Read.NONE
    progress.release("a")
    assert progress.claim("a", 0.0, 0.0) is Read.AWAITED


def test_only_the_first_read_and_the_one_before_stale_are_awaited() -> None:
    clock = Clock()
    wall = clock().timestamp()
    progress = LiveProgress(30, 300, draw=lambda: 0.0)
    assert progress.claim("a", 0.0, wall) is Read.AWAITED
    progress.store("a", record(clock, age_s=10))
    assert progress.claim("a", 29.0, wall + 29) is Read.NONE
    assert progress.claim("a", 30.0, wall + 30) is Read.BACKGROUND  # a refresh: the record held serves meanwhile
    progress.store("a", record(clock, age_s=10))  # rank 0 went silent at wall - 10
    assert progress.claim("a", 49.0, wall + 49) is Read.NONE  # 59 s of silence: allowed
    assert progress.claim("a", 51.0, wall + 51) is Read.AWAITED  # 61 s: read before saying so
    progress.store("a", record(clock, age_s=10))
    assert progress.claim("a", 52.0, wall + 52) is Read.NONE  # stale when read: the interval again


def test_only_the_metrics_the_line_shows_are_held() -> None:
    progress = LiveProgress(30, 300)
    clock = Clock()
    metrics = {f"m{i}": float(i) for i in range(16)}
    assert progress.claim("a", 0.0, clock().timestamp()) is Read.AWAITED
    progress.store("a", record(clock, metrics=metrics))
    held = progress._attempts["a"].record
    assert held is not None and list(held.metrics) == ["m0", "m1", "m2"]
    assert progress.message("a", clock().timestamp()) == "step 1,200/5,000 (24%), ETA 3m06s, m0 0, m1 1, m2 2"


@pytest.mark.parametrize("bad", [{"interval_s": 0}, {"idle_s": -1}, {"max_attempts": 0}])
def test_the_bookkeeping_refuses_nonsense(bad) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        LiveProgress(**{"interval_s": 30, "idle_s": 300, **bad})


def test_a_read_is_due_after_the_interval_and_a_jitter_of_at_most_a_tenth() -> None:
    progress = LiveProgress(30, 300, draw=lambda: 0.999)
    assert progress.claim("a", 0.0, 0.0) is Read.AWAITED
    progress.store("a", None)
    assert progress.claim("a", 29.99, 0.0) is progress.claim("a", 32.99, 0.0) is Read.NONE
    assert progress.claim("a", 33.0, 0.0) is Read.BACKGROUND


def test_reads_begun_together_come_due_spread_over_the_jitter() -> None:
    progress = LiveProgress(30, 300, draw=random.Random(7).random)
    keys = [f"attempt-{i}" for i in range(1000)]
    for key in keys:
        assert progress.claim(key, 0.0, 0.0) is Read.AWAITED
        progress.store(key, None)
    due = {
        second: sum(progress.claim(key, second, 0.0) is Read.BACKGROUND for key in keys)
        for second in (29.9, 30.5, 31.5, 32.5, 33.0)
    }
    assert due[29.9] == 0 and sum(due.values()) == 1000
    assert 100 < due[30.5] < 250 and 250 < due[31.5] < 420 and 250 < due[32.5] < 420, due  # about 1/6, 1/3, 1/3
