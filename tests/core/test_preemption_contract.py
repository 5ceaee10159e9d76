"""``pytorch_contract.preemption``: the exit code, the record a preempted pod leaves beside the outputs and what a
reader (the connector) makes of it, the termination-grace variable, and the words for a DisruptionTarget."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pytorch_contract import preemption as contract

RECORD = contract.PreemptionRecord(
    stopped_at=37,
    checkpoint_step=37,
    signal="SIGTERM",
    rank=1,
    pod="job-worker-0",
    requested_at=1_800_000_000.25,
    grace_s=30.0,
)


def test_the_exit_code_is_retryable_under_exitcode_and_no_signals_death() -> None:
    code = contract.PREEMPTED_EXIT_CODE
    assert code >= 128  # kubeflow/trainer v1.9.4 IsRetryableExitCode: exitCode >= 128
    assert code > 128 + 64  # not 128 + n for a signal n a process can die of
    assert code <= 255
    assert contract.is_preempted_exit(code) and not contract.is_preempted_exit(143)
    assert not contract.is_preempted_exit(None)


def test_a_record_reads_back_as_written() -> None:
    data = RECORD.to_json()
    assert len(data) < 400
    assert contract.parse_record(data) == RECORD
    assert contract.record_from_file(data) == RECORD
    assert contract.record_path("s3://bucket/n0/data/0/") == "s3://bucket/n0/data/0/pytorch-preemption.json"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"[1]", id="a-list"),
        pytest.param({"version": 2}, id="newer-version"),
        pytest.param({"stopped_at": -1}, id="negative-step"),
        pytest.param({"stopped_at": True}, id="bool-step"),
        pytest.param({"rank": "1"}, id="rank-text"),
        pytest.param({"grace_s": float("inf")}, id="grace-inf"),
        pytest.param({"signal": None}, id="no-signal"),
        pytest.param({"by": "kubelet"}, id="unknown-by"),
        pytest.param({"before_first_step": "yes"}, id="before-first-step-text"),
        pytest.param({"resumes_from": -3}, id="negative-resume"),
        pytest.param(b"x" * (contract.MAX_RECORD_BYTES + 1), id="too-large"),
    ],
)
def test_a_malformed_record_is_refused_and_the_reader_gets_none(body) -> None:
    if isinstance(body, dict):
        good = json.loads(RECORD.to_json())
        good.update(body)
        body = json.dumps(good, allow_nan=True).encode()
    with pytest.raises(ValueError):
        contract.parse_record(body)
    assert contract.record_from_file(body) is None
    assert contract.record_from_file(None) is None


def test_the_message_says_who_got_the_signal_where_the_ranks_stopped_and_what_was_saved() -> None:
    assert contract.format_message(RECORD) == (
        "preempted: rank 1 (pod job-worker-0) got SIGTERM; every rank stopped after step 37; "
        "checkpoint saved at step 37"
    )
    never = contract.PreemptionRecord(None, None, "SIGINT", 0, "p", 0.0, 3.0)
    assert "before they reached an agreed step (termination grace 3s)" in contract.format_message(never)
    assert contract.format_message(RECORD).startswith(contract.ERROR_PREFIX)


@pytest.mark.parametrize(
    ("changes", "ending"),
    [
        pytest.param({}, "checkpoint saved at step 37", id="saved-at-the-stop"),
        pytest.param(
            {"checkpoint_step": None, "resume_known": True, "resumes_from": None},
            "every rank stopped after step 37; nothing was saved: the next run starts from the beginning",
            id="nothing-to-save-and-none-before",
        ),
        pytest.param(
            {"checkpoint_step": None, "resume_known": True, "resumes_from": 30},
            "no checkpoint saved at the stop: the next run resumes from the checkpoint of step 30",
            id="an-earlier-checkpoint-stands",
        ),
        pytest.param(
            {"checkpoint_step": None},
            "no checkpoint saved at the stop: the next run resumes from the last checkpoint saved before it, if any",
            id="an-older-record-that-cannot-tell",
        ),
        pytest.param(
            {"stopped_at": None, "checkpoint_step": None, "before_first_step": True, "resume_known": True},
            "the ranks stopped before their first step; nothing was saved: the next run starts from the beginning",
            id="before-the-first-step",
        ),
    ],
)
def test_the_message_promises_no_checkpoint_that_does_not_exist(changes: dict, ending: str) -> None:
    record = dataclasses.replace(RECORD, **changes)
    assert contract.format_message(record).endswith(ending)
    assert contract.parse_record(record.to_json()) == record  # what the record says, a reader reads back


def test_a_signal_to_the_launcher_is_said_as_such() -> None:
    record = dataclasses.replace(RECORD, by="launcher", pod="laptop")
    assert contract.format_message(record).startswith("preempted: the launcher (pod laptop) got SIGTERM; ")
    assert contract.parse_record(record.to_json()).by == "launcher"


def test_an_older_record_reads_as_before() -> None:
    """A record written before ``by``, ``before_first_step`` and ``resumes_from`` existed."""
    body = json.loads(RECORD.to_json())
    for key in ("by", "before_first_step"):
        del body[key]
    record = contract.parse_record(json.dumps(body))
    assert (record.by, record.before_first_step, record.resume_known) == ("rank", False, False)


@pytest.mark.parametrize(
    ("reason", "message", "expected"),
    [
        ("PreemptionByScheduler", "", "DisruptionTarget (PreemptionByScheduler): preempted by the scheduler for a pod"),
        (
            "EvictionByEvictionAPI",
            "drain",
            "DisruptionTarget (EvictionByEvictionAPI): evicted through the Eviction API",
        ),
        ("DeletionByTaintManager", "", "DisruptionTarget (DeletionByTaintManager): deleted by the taint manager"),
        ("TerminationByKubelet", "", "DisruptionTarget (TerminationByKubelet): terminated by the kubelet"),
        ("SomethingNew", "why", "DisruptionTarget (SomethingNew): why"),
    ],
)
def test_each_disruption_reason_has_its_words(reason: str, message: str, expected: str) -> None:
    text = contract.disruption_message(reason, message)
    assert text.startswith(expected)
    if message:
        assert message in text


@pytest.mark.parametrize(("raw", "expected"), [(None, 30.0), ("", 30.0), ("12", 12.0), ("2.5", 2.5)])
def test_the_grace_comes_from_the_variable_or_the_default(raw, expected) -> None:
    env = {} if raw is None else {contract.TERMINATION_GRACE_ENV: raw}
    assert contract.termination_grace_s(env) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_grace_names_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=f"{contract.TERMINATION_GRACE_ENV}={raw!r} is not valid"):
        contract.termination_grace_s({contract.TERMINATION_GRACE_ENV: raw})
