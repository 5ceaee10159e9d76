"""The connector recovers a task attempt whose job failed because of a preemption: it deletes the failed job and
creates it again under the same name, so the pods resume from the attempt's checkpoint, and the task is RUNNING
throughout. Why the connector and not Flyte: the connector protocol carries no error origin, so a `RETRYABLE_FAILED`
answer costs one of the task's `retries` (a task with `retries=0` fails) even when every error document says the
system stopped it; why not a restart policy that restarts on exit codes: `ExitCode` restarts a container the OOM
killer ended too (exit 137 is retryable), a loop (docs/faults.md, "The connector's recovery").

A preemption is what `status.preemption_cause` says it is (a disrupted pod, ranks stopped at the agreed step, this
run's preemption record), never an OOM kill nor the task's own error. The recovery, over as many polls as it takes,
any of them on any replica of the connector:

1. a poll reads the failed job: when this attempt's job has been created again fewer than `preemption_recoveries`
   times (the count is the annotation `RECOVERIES_ANNOTATION` of the job, 0 on the first), the job as it will be
   created again (`copy_for_recovery`) is held in memory and the failed job is deleted, with its uid as the
   precondition (a delete never reaches a newer job of the name) and its kind's propagation;
2. while the failed job is being deleted, every poll that reads it holds the copy too (a replica that never saw it
   learns it here);
3. a poll that finds no job of the name, holding a copy for this attempt, waits until the old job's pods are gone
   (a PyTorchJob's pod names repeat; a TrainJob's JobSet and Jobs are collected after it), then creates the copy; an
   AlreadyExists from another replica's create of this attempt is success;
4. the job created again carries the count and the uid of the attempt's first job (`ATTEMPT_UID_ANNOTATION`): Flyte's
   metadata names that uid, and the connector takes the job of the name that carries it for the attempt's
   (`of_attempt`). While it waits to start (QUEUED, INITIALIZING, a queue's admission) the answer stays RUNNING, so
   the task's phase never goes back.

Past the bound, the failure is reported as before (`RETRYABLE_FAILED`), saying so. The copy lives in the memory of the
replicas that saw the failed job: a replica that finds the job gone and holds nothing waits `GONE_WAIT_S` after the
preemption (its record) for the replica that holds it; a connector restarted in the moment between the old job's end
and the new job's create finds neither, and reports the job gone (a retryable failure, as before this recovery
existed).
"""

from __future__ import annotations

import copy
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.connector import blobs, shapes
from backend_plugin.connector.metadata import Answer, JobMetadata
from backend_plugin.errors import Conflict, KubeApiError, NotFound
from backend_plugin.kube.api import Request
from backend_plugin.kube.retry import Deadline
from backend_plugin.kube.timestamps import parse_time
from backend_plugin.status import fresh_errors, preemption_cause, replica_failures
from backend_plugin.targets.registry import JobTarget
from pytorch_contract.preemption import PreemptionRecord, record_from_file, what_comes_next, who_got_it

__all__ = [
    "RECOVERIES_ANNOTATION",
    "ATTEMPT_UID_ANNOTATION",
    "Recoveries",
    "Pending",
    "recoveries",
    "attempt_uid",
    "of_attempt",
    "copy_for_recovery",
    "Recovery",
    "GONE_WAIT_S",
    "EVIDENCE_WAIT_S",
]

logger = logging.getLogger(__name__)

RECOVERIES_ANNOTATION = "pytorch.flyte.org/preemption-recoveries"
"""How many times the connector has created this attempt's job again after a preemption (on the job created again)."""

ATTEMPT_UID_ANNOTATION = "pytorch.flyte.org/attempt-uid"
"""The uid of the attempt's first job, which Flyte's metadata names (on a job the connector created again)."""

EVIDENCE_WAIT_S = 90.0
"""How long after a job failed the connector waits, while no failed pod is left to read and a pod still runs, for
what tells a preemption from a failure (the peers' exit code 200, the preemption record, an error document): the
ranks stop within the termination grace (Kubernetes' default 30 s), and a loaded node takes a while to end their pods.
A task's own error writes its document before its pod ends, so a failure of the task is rarely waited on."""

GONE_WAIT_S = 120.0
"""How long after a preemption (its record's `requested_at`) a replica that finds the job gone, holding nothing to
create, waits for the replica that holds it (RUNNING) before it reports the job gone: the foreground delete of a job
whose pods stopped at the agreed step, and the next poll's create, take seconds to a minute."""

_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "managedFields", "finalizers", "selfLink")  # fmt: skip
"""What the API server and controllers write into a job's metadata: not sent again."""


def _annotations(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return (job.get("metadata") or {}).get("annotations") or {}


def recoveries(job: Mapping[str, Any]) -> int:
    """How many times this attempt's job was created again after a preemption (0 for the first job).

    Args:
        job: the job as read.

    Returns:
        The count from `RECOVERIES_ANNOTATION` (0 when absent or not a count).
    """
    raw = _annotations(job).get(RECOVERIES_ANNOTATION)
    try:
        return max(0, int(str(raw))) if raw is not None else 0
    except ValueError:
        return 0


def attempt_uid(job: Mapping[str, Any]) -> str:
    """The uid of the attempt's first job: `ATTEMPT_UID_ANNOTATION` on a job created again, else its own uid.

    Args:
        job: the job as read.

    Returns:
        The uid ("" when unknown).
    """
    return str(_annotations(job).get(ATTEMPT_UID_ANNOTATION) or (job.get("metadata") or {}).get("uid") or "")


def of_attempt(job: Mapping[str, Any], uid: str) -> bool:
    """Whether `job` is the attempt's whose first job had `uid`: that job, or one the connector created again for it.

    Args:
        job: the job as read.
        uid: the uid Flyte's metadata names ("" when unknown: any job is).

    Returns:
        True when it is.
    """
    own = str((job.get("metadata") or {}).get("uid") or "")
    return not uid or not own or own == uid or _annotations(job).get(ATTEMPT_UID_ANNOTATION) == uid


def copy_for_recovery(job: Mapping[str, Any], count: int, first_uid: str) -> dict[str, Any]:
    """The failed job as it is created again: its `apiVersion`, `kind`, name, namespace, labels, annotations (the
    count and the attempt's first uid added) and `spec` as stored (with what the API server and webhooks defaulted,
    which a create accepts again); no status, nothing the server or controllers wrote into its metadata.

    Args:
        job: the failed job as read.
        count: this recovery's number (1 for the first).
        first_uid: the uid of the attempt's first job.

    Returns:
        The job to create (a new object; `job` is not changed).
    """
    meta = {k: copy.deepcopy(v) for k, v in (job.get("metadata") or {}).items()
            if k not in _SERVER_FIELDS and k not in ("ownerReferences",)}  # fmt: skip
    meta = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    meta["annotations"] = {**(meta.get("annotations") or {}), RECOVERIES_ANNOTATION: str(count),
                           ATTEMPT_UID_ANNOTATION: first_uid}  # fmt: skip
    return {"apiVersion": job.get("apiVersion"), "kind": job.get("kind"), "metadata": meta,
            "spec": copy.deepcopy(job.get("spec") or {})}  # fmt: skip


@dataclass(frozen=True)
class Pending:
    """A job waiting to be created again.

    Attributes:
        body: what is created (`copy_for_recovery`).
        old_uid: the failed job's uid.
        first_uid: the uid of the attempt's first job.
        count: this recovery's number.
        cause: the preemption, in words.
        resume: where the next run starts, in words ("" when unknown).
    """

    body: dict[str, Any]
    old_uid: str
    first_uid: str
    count: int
    cause: str
    resume: str


class Recoveries:
    """The jobs held to be created again, by (namespace, name): one session's memory, safe across threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """An empty memory.

        Args:
            clock: a monotonic clock, seconds (what `deleted` entries age on; tests move it).
        """
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], Pending] = {}
        self._deleted: dict[tuple[str, str, str], float] = {}  # (namespace, name, the attempt's uid) -> when
        self._clock = clock

    def deleted(self, namespace: str, name: str, uid: str) -> None:
        """Remember that the task's DeleteTask deleted the attempt's job: its pods' SIGTERM makes the ranks write a
        preemption record, which is not one (`Recovery.gone` must not wait for another replica to create it again).
        Kept for `GONE_WAIT_S`, the longest a record is believed.

        Args:
            namespace: the job's namespace.
            name: its name.
            uid: the uid Flyte's metadata names ("" when none).
        """
        with self._lock:
            now = self._clock()
            self._deleted = {k: t for k, t in self._deleted.items() if now - t <= GONE_WAIT_S}
            self._deleted[(namespace, name, uid)] = now
            self._pending.pop((namespace, name), None)  # a job held to be created again never is

    def was_deleted(self, namespace: str, name: str, uid: str) -> bool:
        """Whether this replica's DeleteTask deleted the attempt's job within `GONE_WAIT_S` (`deleted`).

        Args:
            namespace: the job's namespace.
            name: its name.
            uid: the uid Flyte's metadata names ("" when none).

        Returns:
            True when it did.
        """
        with self._lock:
            at = self._deleted.get((namespace, name, uid))
            return at is not None and self._clock() - at <= GONE_WAIT_S

    def hold(self, namespace: str, name: str, pending: Pending) -> None:
        """Hold `pending`, unless a later recovery of the same attempt is held.

        Args:
            namespace: the job's namespace.
            name: its name.
            pending: the job to create again.
        """
        with self._lock:
            held = self._pending.get((namespace, name))
            if held is None or held.first_uid != pending.first_uid or held.count <= pending.count:
                self._pending[(namespace, name)] = pending

    def get(self, namespace: str, name: str) -> Optional[Pending]:
        """The job held for (namespace, name).

        Args:
            namespace: the job's namespace.
            name: its name.

        Returns:
            What is held, or None.
        """
        with self._lock:
            return self._pending.get((namespace, name))

    def settle(self, namespace: str, name: str, job: Mapping[str, Any]) -> None:
        """Let go what is held for (namespace, name) when `job`, a job of the attempt read from the API, shows it done
        (its count is at least the one held). A task's delete lets go of all of it (`deleted`).

        Args:
            namespace: the job's namespace.
            name: its name.
            job: a job of the name as read.
        """
        with self._lock:
            held = self._pending.get((namespace, name))
            if held is not None and attempt_uid(job) == held.first_uid and recoveries(job) >= held.count:
                del self._pending[(namespace, name)]


def _failed_since(job: Mapping[str, Any]) -> Optional[datetime.datetime]:
    """When the job's true `Failed` condition turned true (every kind's controller writes one), or None."""
    for c in (job.get("status") or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == "Failed" and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def _still_running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Pending", "Running")


def _created(job: Mapping[str, Any]) -> Optional[datetime.datetime]:
    return parse_time((job.get("metadata") or {}).get("creationTimestamp"))


def _fresh_record(record: Optional[PreemptionRecord], since: Optional[datetime.datetime]) -> Optional[PreemptionRecord]:
    """This run's preemption record: one written after the job was created (an earlier run's record of the same
    attempt stays under the prefix)."""
    if record is None or since is None:
        return record
    return record if record.requested_at >= since.timestamp() - 1.0 else None


def _resume_words(record: Optional[PreemptionRecord]) -> str:
    if record is None:
        return "resumes from the attempt's last checkpoint, if any"
    if record.checkpoint_step is not None and record.checkpoint_step == record.stopped_at:
        return f"resumes from the checkpoint of step {record.checkpoint_step}"
    return what_comes_next(record).replace("the next run", "it")


class Recovery:
    """The recovery of one session's jobs (see the module docstring).

    Args:
        session: the API client, the config and the memory of held jobs (`Session.recoveries`).
        pod_list: lists the job's pods (namespace, name, target, deadline), as the answers list them.
        now: the current time on the API server's clock.
    """

    def __init__(
        self,
        session: Any,
        pod_list: Callable[[str, str, JobTarget, Deadline], list[dict]],
        now: Callable[[], datetime.datetime],
    ) -> None:
        self.session = session
        self.pod_list = pod_list
        self.now = now

    @property
    def bound(self) -> int:
        """`preemption_recoveries`: the most times one attempt's job is created again."""
        return int(self.session.config.status.preemption_recoveries)

    def failed(
        self,
        job: dict,
        meta: JobMetadata,
        target: JobTarget,
        answer: Answer,
        deadline: Deadline,
        pods: Optional[list[dict]] = None,
    ) -> Answer:
        """A poll that read this attempt's job failed (`answer` is `RETRYABLE_FAILED`): recover it when a preemption
        is the whole of its failure and the bound allows, else `answer` (saying the bound was reached).

        Args:
            job: the failed job as read.
            meta: what `create` returned.
            target: its kind.
            answer: the failed job's answer.
            deadline: the poll's deadline.
            pods: the job's pods, when the answer listed them (else they are listed here).

        Returns:
            RUNNING while the job is deleted and created again; else `answer`.

        Raises:
            KubeApiError: the delete failed (Flyte polls again, and the next poll tries again).
            StorageUnavailable: the task's error documents or preemption record could not be read.
        """
        ns, name = meta.namespace, meta.name
        since = _created(job)
        try:
            pods = pods if pods is not None else self.pod_list(ns, name, target, deadline)
        except KubeApiError as e:  # without the pods a preemption cannot be told from an OOM kill: not recovered
            logger.warning("%s; %s/%s is not recovered from a preemption without its pods", e, ns, name)
            return answer
        errors, record = None, None
        if meta.output_prefix:
            max_bytes = self.session.config.status.error_document_max_bytes
            errors = blobs.read_error_report(meta.output_prefix, max_bytes)
            record = record_from_file(blobs.read_preemption_record(meta.output_prefix).data)
            if recoveries(job):  # what the runs before this one left under the attempt's prefix is not its own
                errors, record = fresh_errors(errors, since), _fresh_record(record, since)
        cause = preemption_cause(pods, errors, record is not None)
        if cause is None:
            return self._undecided(job, pods, errors, record, answer)
        count = recoveries(job)
        if count < self.bound:
            # the job as the API server holds it: the watch cache keeps a slimmed copy (pod templates down to their
            # containers' names and images), which created again would run containers without a command
            try:
                whole = self._read(ns, name, target, deadline)
            except NotFound:
                whole = None
            if whole is None or str((whole.get("metadata") or {}).get("uid")) != str(job["metadata"].get("uid")):
                # deleted (or already created again) since it was read: another poll's recovery
                held = self.session.recoveries.get(ns, name)
                said = Pending({}, "", "", count + 1, cause, _resume_words(record)) if held is None else held
                return self._running(said, "the failed job is deleted by another poll; it is then created again under "
                                           f"the same name and {said.resume}", answer)  # fmt: skip
            job = whole
        if count >= self.bound:
            said = ("preemption recovery is off (preemption_recoveries=0)" if self.bound == 0 else
                    f"the connector already created this attempt's job again {count} time(s) after a preemption "
                    f"(preemption_recoveries={self.bound})")  # fmt: skip
            return replace(answer, message=f"{answer.message}; preempted ({cause}), not recovered: {said}")
        first = attempt_uid(job) or meta.uid
        pending = Pending(copy_for_recovery(job, count + 1, first), str(job["metadata"].get("uid") or ""), first,
                          count + 1, cause, _resume_words(record))  # fmt: skip
        self.session.recoveries.hold(ns, name, pending)
        if not (job.get("metadata") or {}).get("deletionTimestamp"):
            self._delete(pending, ns, name, target, deadline)
            step = "the failed job is being deleted; it is then created again under the same name"
        else:
            step = "waiting for the failed job to be deleted; it is then created again under the same name"
        return self._running(pending, f"{step} and {pending.resume}", answer)

    def _undecided(self, job: dict, pods: list[dict], errors: Any, record: Any, answer: Answer) -> Answer:
        """`answer`, unless nothing yet tells a preemption from a failure: no failed pod is left to read (a pod deleted
        with its grace is gone once it ends; training-operator v1.9 counts a running pod being deleted as failed, fails
        the job at once and deletes the running peers, `cleanPodPolicy: Running`), the task wrote neither an error
        document nor its preemption record, and a pod still runs (its ranks stopping at the agreed step, which writes
        them). Then RUNNING for up to `EVIDENCE_WAIT_S` after the job failed, so that the next poll decides: it reads
        the store again (`blobs`), never a listing an earlier poll made: the record, once the ranks wrote it."""
        if replica_failures(pods) or (errors is not None and errors.errors) or record is not None:
            return answer
        if not any(_still_running(p) for p in pods):
            return answer
        since = _failed_since(job) or _created(job)
        waited = (self.now() - since).total_seconds() if since is not None else EVIDENCE_WAIT_S
        if waited >= EVIDENCE_WAIT_S:
            return answer
        message = (f"the job failed and the pod that failed is gone; waiting for the others to stop ({waited:.0f}s of "
                   f"at most {EVIDENCE_WAIT_S:g}s) to tell a preemption (its ranks stop at the agreed step) from the "
                   f"task's failure: {answer.message}")  # fmt: skip
        return replace(answer, phase=TaskExecution.RUNNING, message=message)

    def gone(self, meta: JobMetadata, target: JobTarget, deadline: Deadline) -> Optional[Answer]:
        """A poll found no job of the name: create the one held for this attempt once the old job's pods are gone.

        Args:
            meta: what `create` returned.
            target: its kind.
            deadline: the poll's deadline.

        Returns:
            RUNNING while it waits for the pods, or once the job is created; None when nothing is held for this
            attempt (the job is gone: the caller says so).

        Raises:
            KubeApiError: the pods could not be listed, or the create failed (Flyte polls again).
        """
        ns, name = meta.namespace, meta.name
        pending = self.session.recoveries.get(ns, name)
        if pending is None or (meta.uid and pending.first_uid != meta.uid):
            return self._another_replica(meta)
        left = self.pod_list(ns, name, target, deadline)
        if left:
            return self._running(pending, f"the failed job is deleted; waiting for its {len(left)} pod(s) to go "
                                          f"before it is created again; it then {pending.resume}")  # fmt: skip
        created = self._create(pending, ns, name, target, deadline)
        self.session.recoveries.settle(ns, name, created)
        uid = str((created.get("metadata") or {}).get("uid") or "")
        logger.info("%s %s/%s created again after a preemption (uid %s, recovery %d of at most %d)", target.kind, ns,
                    name, uid, pending.count, self.bound)  # fmt: skip
        return self._running(pending, f"the job is created again (uid {uid}) and {pending.resume}")

    def _another_replica(self, meta: JobMetadata) -> Optional[Answer]:
        """Nothing held here for a job that is gone: when the attempt's preemption record is younger than
        `GONE_WAIT_S`, another replica of the connector (one that saw the failed job) is creating it again, and this
        poll waits for it; else None (the job is gone)."""
        if not meta.output_prefix or self.session.recoveries.was_deleted(meta.namespace, meta.name, meta.uid or ""):
            return None  # a record the task's own DeleteTask made the ranks write is no preemption
        record = record_from_file(blobs.read_preemption_record(meta.output_prefix).data)
        if record is None:
            return None
        age = self.now().timestamp() - record.requested_at
        if age > GONE_WAIT_S:
            return None
        message = (f"recovering from a preemption ({who_got_it(record)} got {record.signal} {max(0.0, age):.0f}s "
                   "ago): the failed job is deleted and another replica of the connector creates it again; "
                   f"waiting up to {GONE_WAIT_S:g}s after the preemption for it; not charged to the task's "
                   "retries")  # fmt: skip
        return Answer(TaskExecution.RUNNING, message, custom_info={**meta.identity, "deleted": True})

    def restarted(self, job: dict, answer: Answer) -> Answer:
        """The answer of a job the connector created again, not yet running (QUEUED, INITIALIZING, waiting for
        resources): RUNNING, saying so, so that the task's phase never goes back; any other answer as it is.

        Args:
            job: the job as read (its count `recoveries` > 0).
            answer: its answer.

        Returns:
            The answer.
        """
        if answer.phase not in (TaskExecution.QUEUED, TaskExecution.INITIALIZING,
                                TaskExecution.WAITING_FOR_RESOURCES):  # fmt: skip
            return answer
        count = recoveries(job)
        message = (f"created again after a preemption (recovery {count} of at most {self.bound}, not charged to the "
                   f"task's retries); {answer.message}")  # fmt: skip
        return replace(answer, phase=TaskExecution.RUNNING, message=message)

    def _running(self, pending: Pending, step: str, answer: Optional[Answer] = None) -> Answer:
        message = (f"recovering from a preemption of {pending.cause}: {step}; recovery {pending.count} of at most "
                   f"{self.bound}; not charged to the task's retries")  # fmt: skip
        info = dict(answer.custom_info) if answer is not None else {}
        info["preemption_recoveries"] = pending.count
        return Answer(TaskExecution.RUNNING, message, answer.log_links if answer is not None else (), info)

    def _read(self, ns: str, name: str, target: JobTarget, deadline: Deadline) -> dict:
        """GET the job, whole (not the watch cache's slimmed copy)."""
        request = Request("get", f"{target.kind} {ns}/{name}", ns, "get", target.plural, target.group)
        return self.session.api.read_object(request, target.group, target.version, target.plural, name,
                                            f"a {target.kind} object", deadline, shapes.job_problem)  # fmt: skip

    def _delete(self, pending: Pending, ns: str, name: str, target: JobTarget, deadline: Deadline) -> None:
        """Delete the failed job, only it (its uid as the precondition), with its kind's propagation; gone already
        or replaced already (another replica's recovery) is success."""
        from kubernetes import client

        api = self.session.api
        body = client.V1DeleteOptions(propagation_policy=target.declaration.delete_propagation,
                                      preconditions=client.V1Preconditions(uid=pending.old_uid))  # fmt: skip

        def send(timeout: tuple[float, float]) -> Any:
            return api.custom.delete_namespaced_custom_object(
                target.group, target.version, ns, target.plural, name, body=body, _request_timeout=timeout,
                _preload_content=False,
            )  # fmt: skip

        request = Request("delete", f"{target.kind} {ns}/{name}", ns, "delete", target.plural, target.group)
        try:
            api.call(request, send, deadline)
            logger.info("%s %s/%s failed because of a preemption (%s): deleted, to be created again (recovery %d)",
                        target.kind, ns, name, pending.cause, pending.count)  # fmt: skip
        except (NotFound, Conflict):
            pass  # gone, or the name holds another uid now: another poll's delete was first

    def _create(self, pending: Pending, ns: str, name: str, target: JobTarget, deadline: Deadline) -> dict:
        """POST the held job (strict field validation); an AlreadyExists whose job is this attempt's, at least this
        recovery, is another replica's create: success."""
        api = self.session.api
        request = Request("create", f"{target.kind} {ns}/{name}", ns, "create", target.plural, target.group)

        def send(timeout: tuple[float, float]) -> Any:
            return api.custom.create_namespaced_custom_object(
                target.group, target.version, ns, target.plural, pending.body, field_validation="Strict",
                _request_timeout=timeout, _preload_content=False,
            )  # fmt: skip

        try:
            return dict(api.call(request, send, deadline, _object))
        except Conflict:
            existing = self._read(ns, name, target, deadline)
            if attempt_uid(existing) == pending.first_uid and recoveries(existing) >= pending.count:
                return existing
            raise


def _object(answer: Any) -> dict:
    if not isinstance(answer, dict) or not isinstance(answer.get("metadata"), dict):
        from backend_plugin.errors import MalformedAnswer

        raise MalformedAnswer("create", "the job created again", "the API answered without an object")
    return answer
