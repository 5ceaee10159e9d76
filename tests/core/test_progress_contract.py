"""pytorch_contract.progress: the record beside the outputs, its staleness rule and the message a reader shows.

The connector will read records with no SDK installed, so the module must import alone (checked in a child
interpreter with every non-standard package blocked).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytorch_contract.progress import (
    FILE_NAME,
    MAX_RECORD_BYTES,
    STALE_AFTER_MIN_S,
    ProgressRecord,
    eta_at,
    format_duration,
    format_line,
    format_message,
    is_stale,
    message_from_file,
    parse_record,
    percent,
    record_path,
    stale_after,
)

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0


def _record(**changes: object) -> ProgressRecord:
    base: dict[str, object] = dict(
        step=1200,
        total=5000,
        metrics={"loss": 0.1244, "acc": 0.93, "lr": 0.001, "grad_norm": 1.5},
        rate=20.0,
        eta_s=190.0,
        started_at=T0 - 60,
        reported_at=T0,
        interval_s=10.0,
        stale_after_s=60.0,
    )
    base.update(changes)
    return ProgressRecord(**base)  # type: ignore[arg-type]


def test_a_record_round_trips_through_its_file_form() -> None:
    record = _record(metrics={"loss": 0.5, "bad": float("nan"), "big": float("inf")}, done=True)
    data = record.to_json()
    assert len(data) < 400
    assert json.loads(data)["metrics"] == {"loss": 0.5, "bad": "nan", "big": "inf"}
    back = parse_record(data)
    assert back.step == 1200 and back.total == 5000 and back.done is True
    assert back.metrics["loss"] == 0.5 and back.metrics["big"] == float("inf")
    assert back.metrics["bad"] != back.metrics["bad"]  # nan


def test_a_reader_ignores_fields_it_does_not_know() -> None:
    body = json.loads(_record().to_json())
    body["written_by"] = "a later writer"
    assert parse_record(json.dumps(body)).step == 1200


@pytest.mark.parametrize(
    ("change", "names"),
    [
        pytest.param({"step": -1}, "step=-1", id="negative-step"),
        pytest.param({"step": True}, "step=True", id="bool-step"),
        pytest.param({"total": "5000"}, "total='5000'", id="string-total"),
        pytest.param({"version": 2}, "version 2 is newer", id="newer-version"),
        pytest.param({"metrics": {"loss": "low"}}, "metric 'loss'='low'", id="metric-not-a-number"),
        pytest.param({"reported_at": None}, "reported_at=None", id="no-time"),
        pytest.param({"done": "yes"}, "done='yes'", id="done-not-bool"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_field(change: dict[str, object], names: str) -> None:
    body = json.loads(_record().to_json())
    body.update(change)
    with pytest.raises(ValueError, match="progress record: ") as caught:
        parse_record(json.dumps(body))
    assert names in str(caught.value)


def test_a_record_that_is_not_json_or_too_long_is_refused() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        parse_record(b"{not json")
    with pytest.raises(ValueError, match="a JSON object is expected"):
        parse_record(b"[1]")
    with pytest.raises(ValueError, match=f"more than the {MAX_RECORD_BYTES}"):
        parse_record(b" " * (MAX_RECORD_BYTES + 1))


def test_the_record_lives_beside_the_outputs() -> None:
    assert record_path("s3://bucket/metadata/exec/n0/data/0") == f"s3://bucket/metadata/exec/n0/data/0/{FILE_NAME}"
    assert record_path("s3://bucket/out/") == f"s3://bucket/out/{FILE_NAME}"


@pytest.mark.parametrize(
    ("interval", "step_s", "expected"),
    [
        pytest.param(10.0, 0.05, STALE_AFTER_MIN_S, id="fast-steps"),
        pytest.param(30.0, None, 90.0, id="three-intervals"),
        pytest.param(10.0, 100.0, 300.0, id="slow-steps-three-steps"),
        pytest.param(10.0, float("inf"), STALE_AFTER_MIN_S, id="no-rate"),
    ],
)
def test_the_staleness_threshold(interval: float, step_s: float | None, expected: float) -> None:
    assert stale_after(interval, step_s) == expected


def test_a_healthy_run_is_never_stale_between_writes() -> None:
    """False positives first: a run whose steps take 100 s writes a record after each step; a reader that looks
    just before the next step's record sees it 110 s old, which is current (the threshold is 3 steps)."""
    record = _record(rate=0.01, stale_after_s=stale_after(10.0, 100.0))
    assert not is_stale(record, T0 + 110)
    assert not is_stale(_record(), T0 + 10 + 30)  # a fast run, read every 30 s, one write interval late
    assert not is_stale(_record(done=True), T0 + 86400)  # a finished run stays as it ended
    assert is_stale(_record(), T0 + 61)


def test_the_message_shows_where_the_run_stands() -> None:
    assert format_message(_record(), T0) == "step 1,200/5,000 (24%), ETA 3m10s, loss 0.1244, acc 0.93, lr 0.001"
    # the ETA moves with the reader's clock
    assert format_message(_record(), T0 + 20) == "step 1,200/5,000 (24%), ETA 2m50s, loss 0.1244, acc 0.93, lr 0.001"


def test_a_stale_record_is_never_shown_as_current() -> None:
    message = format_message(_record(), T0 + 723)
    assert message == "step 1,200/5,000 (24%), loss 0.1244, acc 0.93, lr 0.001 (stale: rank 0 silent for 12m03s)"
    assert "ETA" not in message
    assert eta_at(_record(), T0 + 723) is None


def test_without_a_total_the_message_has_no_percent_nor_eta() -> None:
    record = _record(total=None, eta_s=None, metrics={})
    assert format_message(record, T0) == "step 1,200"
    assert percent(record) is None


def test_a_done_record_has_no_eta_and_says_how_long_it_took() -> None:
    record = _record(step=5000, eta_s=0.0, done=True)
    assert format_message(record, T0 + 5) == "step 5,000/5,000 (100%), loss 0.1244, acc 0.93, lr 0.001"
    assert format_line(record, T0 + 5, elapsed_s=60) == (
        "step 5,000/5,000 (100%), took 1m00s, loss 0.1244, acc 0.93, lr 0.001, grad_norm 1.5"
    )


def test_the_console_line_has_the_rate_and_every_metric() -> None:
    assert format_line(_record(), T0, elapsed_s=61) == (
        "step 1,200/5,000 (24%), 20 steps/s, ETA 3m10s, elapsed 1m01s, loss 0.1244, acc 0.93, lr 0.001, grad_norm 1.5"
    )


def test_the_readers_one_call_never_raises() -> None:
    assert message_from_file(_record().to_json(), T0) == format_message(_record(), T0)
    assert message_from_file(None, T0) is None  # no file: a run that reports nothing
    assert message_from_file(b"{broken", T0) is None
    assert message_from_file(b'{"version": 9, "step": 1}', T0) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.4, "59s"), (60, "1m00s"), (190, "3m10s"), (3600, "1h00m"), (7500, "2h05m"), (273600, "3d04h")],
)
def test_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_percent_is_rounded_down_and_bounded() -> None:
    assert percent(_record(step=4999)) == 99
    assert percent(_record(step=6000)) == 100
    assert percent(_record(total=0)) is None


BLOCKER = """
import builtins, sys
real = builtins.__import__
ALLOWED = set(sys.stdlib_module_names) | {"pytorch_contract"}
def guarded(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name.split(".")[0] not in ALLOWED:
        raise ImportError(f"blocked: {name}")
    return real(name, globals, locals, fromlist, level)
builtins.__import__ = guarded
from pytorch_contract.progress import parse_record, format_message, ProgressRecord
record = parse_record(ProgressRecord(step=3, total=4, reported_at=100.0).to_json())
print(format_message(record, 100.0))
"""


def test_the_module_imports_with_the_standard_library_alone() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCKER], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "step 3/4 (75%)"
