"""Preemption: how a pod that stopped for a SIGTERM says so, and what a reader (the connector) can rely on.

When a rank's pod gets SIGTERM (a node drain, a higher-priority pod, host maintenance, Kueue's preemption), every
rank of the job stops at one agreed step, global rank 0 saves a checkpoint, and each pod ends in a way that tells
the job's controller, Flyte and the connector that nobody's code failed (``pytorch_core.preemption`` has the
protocol). Three things carry that, and this module defines them:

- **the exit code** :data:`PREEMPTED_EXIT_CODE` of every pod (container) that stopped at the agreed step;
- **the error document** each such pod's SDK writes: ``ContainerError(kind=RECOVERABLE, origin=SYSTEM)``, so Flyte
  spends a system retry, not one of the user's (its message starts :data:`ERROR_PREFIX`);
- **the record** :data:`FILE_NAME` beside the task's outputs (the output prefix Flyte gave the pod, where
  ``outputs.pb`` and the error documents go), one JSON object of a few hundred bytes:

=========================  ==========================================================================================
``version``                :data:`VERSION`
``stopped_at``             the step every rank stopped after (an integer), or ``null`` when the ranks had to leave
                           before they reached one (the termination grace ran out first)
``checkpoint_step``        the step of the checkpoint global rank 0 saved at the stop, or ``null`` when none was
                           saved then (``resumes_from`` says what the next run starts from)
``signal``                 the signal the first rank got (``"SIGTERM"``, ``"SIGINT"``)
``rank``, ``pod``          that rank and its pod (Flyte's worker name, else the host name)
``by``                     who got the signal: ``"rank"`` (that rank's own process), or ``"launcher"`` (the
                           launcher of that pod, or of a local run, whose agent passed it on to its ranks; ``rank``
                           is then the lowest rank it started); absent in older records: ``"rank"``
``before_first_step``      ``true`` when no rank had reached a step boundary yet (the ranks were still starting, or
                           the loop uses none of the API): nothing could be saved; absent in older records: ``false``
``resumes_from``           the step of the checkpoint the next run resumes from (``null``: none, it starts from the
                           beginning); absent when the writer could not tell (older records, and a pod whose ranks
                           stopped before their first step: its checkpoints are in a prefix the launcher does not read)
``requested_at``           when it got the signal, seconds since the epoch (its clock)
``grace_s``                the termination grace the ranks counted on (:data:`TERMINATION_GRACE_ENV`)
=========================  ==========================================================================================

Why :data:`PREEMPTED_EXIT_CODE` is 200:

- it is 128 or more, so the training operator's ``ExitCode`` restart policy restarts the pod (kubeflow/trainer v1.9.4
  ``IsRetryableExitCode``: ``exitCode >= 128``). The operator deletes the pod and creates a new one, whose container
  restart count starts at 0, so the restart is not counted against ``runPolicy.backoffLimit`` (``PastBackoffLimit``
  adds the restart counts of running pods);
- it is not ``128 + n`` for a signal a process can die of (129 to 192 cover signals 1 to 64), so a reader tells "stopped
  at an agreed step after its checkpoint" (200) from "killed by SIGTERM before it could" (143) or "killed by SIGKILL
  or the OOM killer" (137);
- a Job's ``podFailurePolicy`` can name it (``onExitCodes: {operator: In, values: [200]}``, action ``Ignore``), so a
  JobSet's child Job recreates a pod that stopped for a peer's preemption without counting it as a failure.

Only the standard library is imported: the connector reads the record with no SDK installed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Union

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "TERMINATION_GRACE_ENV",
    "DEFAULT_TERMINATION_GRACE_S",
    "FILE_NAME",
    "VERSION",
    "MAX_RECORD_BYTES",
    "ERROR_PREFIX",
    "DISRUPTION_CONDITION",
    "DISRUPTION_REASONS",
    "PreemptionRecord",
    "record_path",
    "parse_record",
    "record_from_file",
    "format_message",
    "who_got_it",
    "what_comes_next",
    "BY",
    "disruption_message",
    "is_preempted_exit",
    "positive_seconds",
    "termination_grace_s",
]

PREEMPTED_EXIT_CODE = 200
"""Exit code of a rank, and of the pod's container, that stopped at the agreed step of a preemption (see the module
docstring for why 200)."""

TERMINATION_GRACE_ENV = "FLYTE_PYTORCH_TERMINATION_GRACE_S"
"""Seconds between the SIGTERM and the SIGKILL that the ranks count on: the pod's
``terminationGracePeriodSeconds`` on a cluster (a pod cannot read it; the backend may set this variable from it),
the launcher's own SIGTERM-to-SIGKILL wait in a local run (the variable sets that wait too)."""

DEFAULT_TERMINATION_GRACE_S = 30.0
"""The grace in a pod when :data:`TERMINATION_GRACE_ENV` is not set: Kubernetes' default
``terminationGracePeriodSeconds``."""

FILE_NAME = "pytorch-preemption.json"
"""The record's name under the task's output prefix (beside ``outputs.pb``, the error documents and
``pytorch-progress.json``)."""

VERSION = 1
"""The record's format version."""

BY = ("rank", "launcher")
"""Who may have got the signal (the record's ``by``)."""

MAX_RECORD_BYTES = 16 * 1024
"""A reader reads at most this much; the writer's records are a few hundred bytes."""

ERROR_PREFIX = "preempted: "
"""How the message of a preempted attempt's error document starts (after the SDK's own traceback header, on the
exception's line: ``PreemptedError: preempted: ...``)."""

DISRUPTION_CONDITION = "DisruptionTarget"
"""The pod condition Kubernetes sets (status ``"True"``) on a pod it is about to end for a reason that is not the
pod's own failure."""

DISRUPTION_REASONS = {
    "PreemptionByScheduler": "preempted by the scheduler for a pod of higher priority",
    "EvictionByEvictionAPI": "evicted through the Eviction API (a node drain, a descheduler)",
    "DeletionByTaintManager": "deleted by the taint manager (its node got a NoExecute taint)",
    "TerminationByKubelet": "terminated by the kubelet (a node shutdown or node pressure)",
}
"""The reasons of a ``DisruptionTarget`` condition (Kubernetes 1.26 and later), each with the words a message uses."""


@dataclass(frozen=True)
class PreemptionRecord:
    """One preemption record (see the module docstring for each field)."""

    stopped_at: Optional[int]
    checkpoint_step: Optional[int]
    signal: str
    rank: int
    pod: str
    requested_at: float
    grace_s: float
    version: int = VERSION
    by: str = "rank"
    before_first_step: bool = False
    resumes_from: Optional[int] = None
    resume_known: bool = False

    def to_json(self) -> bytes:
        """The record as the file holds it (compact JSON, UTF-8).

        Returns:
            bytes: the file's content.
        """
        body = {
            "version": self.version,
            "stopped_at": self.stopped_at,
            "checkpoint_step": self.checkpoint_step,
            "signal": self.signal,
            "rank": self.rank,
            "pod": self.pod,
            "by": self.by,
            "before_first_step": self.before_first_step,
            "requested_at": round(self.requested_at, 3),
            "grace_s": self.grace_s,
        }
        if self.resume_known:
            body["resumes_from"] = self.resumes_from
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def record_path(output_prefix: str) -> str:
    """Where the record of an attempt is: :data:`FILE_NAME` under its output prefix.

    Args:
        output_prefix: the attempt's output prefix (``s3://.../n0/data/0``, or a local folder).

    Returns:
        str: the record's path.
    """
    return f"{output_prefix.rstrip('/')}/{FILE_NAME}"


def _optional_step(body: dict[str, Any], key: str) -> Optional[int]:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key}={value!r} is not a step (a whole number >= 0, or null)")
    return value


def parse_record(data: Union[bytes, str]) -> PreemptionRecord:
    """Read a record.

    Args:
        data: the file's content.

    Returns:
        PreemptionRecord: the record.

    Raises:
        ValueError: the content is not a record of this major version (the message says what is wrong).
    """
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"a preemption record is at most {MAX_RECORD_BYTES} bytes; this one has {len(data)}")
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(body, dict):
        raise ValueError(f"a record is a JSON object, not {type(body).__name__}")
    version = body.get("version")
    if version != VERSION:
        raise ValueError(f"version={version!r}: this reader knows version {VERSION}")
    signal = body.get("signal")
    pod = body.get("pod")
    rank = body.get("rank")
    if not isinstance(signal, str) or not isinstance(pod, str):
        raise ValueError("signal and pod must be strings")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank={rank!r} is not a rank")
    by = body.get("by", "rank")
    if by not in BY:
        raise ValueError(f"by={by!r} is not one of {', '.join(BY)}")
    before_first_step = body.get("before_first_step", False)
    if not isinstance(before_first_step, bool):
        raise ValueError(f"before_first_step={before_first_step!r} is not true or false")
    numbers = {}
    for key in ("requested_at", "grace_s"):
        value = body.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{key}={value!r} is not a number of seconds")
        numbers[key] = float(value)
    return PreemptionRecord(
        stopped_at=_optional_step(body, "stopped_at"),
        checkpoint_step=_optional_step(body, "checkpoint_step"),
        signal=signal,
        rank=rank,
        pod=pod,
        requested_at=numbers["requested_at"],
        grace_s=numbers["grace_s"],
        by=by,
        before_first_step=before_first_step,
        resumes_from=_optional_step(body, "resumes_from"),
        resume_known="resumes_from" in body,
    )


def record_from_file(data: Optional[Union[bytes, str]]) -> Optional[PreemptionRecord]:
    """The reader's call: a record file's content (``None`` when there is none) -> the record, never raising.

    Args:
        data: what the reader read from :func:`record_path` (at most :data:`MAX_RECORD_BYTES`), or ``None``.

    Returns:
        Optional[PreemptionRecord]: the record; ``None`` without a file or for a malformed one.
    """
    if data is None:
        return None
    try:
        return parse_record(data)
    except ValueError:
        return None


def who_got_it(record: PreemptionRecord) -> str:
    """Who got the signal, in words: ``rank 1 (pod job-worker-0)`` or ``the launcher (pod job-node-0-0)``.

    Args:
        record: the record.

    Returns:
        str: the words.
    """
    if record.by == "launcher":
        return f"the launcher (pod {record.pod})"
    return f"rank {record.rank} (pod {record.pod})"


def what_comes_next(record: PreemptionRecord) -> str:
    """What was saved at the stop and where the next run starts, in words: ``checkpoint saved at step 37``, ``nothing
    was saved: the next run starts from the beginning``, ``no checkpoint saved at the stop: the next run resumes from
    the checkpoint of step 30``.

    Args:
        record: the record.

    Returns:
        str: the words.
    """
    if record.checkpoint_step is not None and record.checkpoint_step == record.stopped_at:
        return f"checkpoint saved at step {record.checkpoint_step}"
    if not record.resume_known:
        return "no checkpoint saved at the stop: the next run resumes from the last checkpoint saved before it, if any"
    if record.resumes_from is None:
        return "nothing was saved: the next run starts from the beginning"
    return f"no checkpoint saved at the stop: the next run resumes from the checkpoint of step {record.resumes_from}"


def format_message(record: PreemptionRecord) -> str:
    """One line for a preempted attempt, e.g. ``preempted: rank 1 (pod job-worker-0) got SIGTERM; every rank stopped
    after step 37; checkpoint saved at step 37``.

    Args:
        record: the record.

    Returns:
        str: the message (it starts with :data:`ERROR_PREFIX`).
    """
    head = f"{ERROR_PREFIX}{who_got_it(record)} got {record.signal}"
    if record.before_first_step:
        stop = "the ranks stopped before their first step"
    elif record.stopped_at is None:
        stop = f"the ranks left before they reached an agreed step (termination grace {record.grace_s:g}s)"
    else:
        stop = f"every rank stopped after step {record.stopped_at}"
    return f"{head}; {stop}; {what_comes_next(record)}"


def disruption_message(reason: str, message: str = "") -> str:
    """The words for a pod's ``DisruptionTarget`` condition, e.g. ``DisruptionTarget (PreemptionByScheduler):
    preempted by the scheduler for a pod of higher priority``.

    Args:
        reason: the condition's ``reason``.
        message: the condition's ``message`` (added after the known words when given).

    Returns:
        str: the text; an unknown reason is named as it is.
    """
    known = DISRUPTION_REASONS.get(reason)
    text = f"{DISRUPTION_CONDITION} ({reason})" if reason else DISRUPTION_CONDITION
    if known:
        text += f": {known}"
    if message.strip():
        text += f" ({message.strip()})" if known else f": {message.strip()}"
    return text


def is_preempted_exit(exit_code: Optional[int]) -> bool:
    """Whether a container's exit code says it stopped at the agreed step of a preemption.

    Args:
        exit_code: the container's ``state.terminated.exitCode``.

    Returns:
        bool: it is :data:`PREEMPTED_EXIT_CODE`.
    """
    return exit_code == PREEMPTED_EXIT_CODE


def positive_seconds(env: Any, name: str, default: float) -> float:
    """A positive number of seconds from the variable ``name`` in ``env``, else ``default``.

    Args:
        env: the environment (a mapping).
        name: the variable.
        default: used when the variable is unset or empty.

    Returns:
        float: seconds.

    Raises:
        ValueError: the variable is set but not a positive number of seconds.
    """
    raw = env.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={raw!r} is not valid; use a positive number of seconds")
    return value


def termination_grace_s(env: Any, default: float = DEFAULT_TERMINATION_GRACE_S) -> float:
    """The termination grace from :data:`TERMINATION_GRACE_ENV` in ``env``, else ``default``.

    Args:
        env: the environment (a mapping).
        default: used when the variable is unset or empty.

    Returns:
        float: seconds.

    Raises:
        ValueError: the variable is set but not a positive number of seconds.
    """
    return positive_seconds(env, TERMINATION_GRACE_ENV, default)
