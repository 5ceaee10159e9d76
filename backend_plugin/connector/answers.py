"""A job read (from the watch cache or a GET) becomes a poll's answer: what its kind's status needs read besides it
(pods, events, the task's error documents), the phase and message (`JobTarget.status`), the log links
(`JobTarget.links`, over the pods `log_pods` holds), and the job's status for Flyte's task details. Also the answer
for a job that is gone.

The kinds' readers are our code: they get what was read after its shape was checked where it came in
(`connector.shapes`), so an exception from them is a bug and surfaces as one. What the API or the blob store could
not answer is said: pods or events that cannot be read make the message poorer, never the phase (the job's own
conditions decide it); blob storage that does not answer raises `StorageUnavailable` (unknown is never a phase).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskExecution, TaskLog

from backend_plugin.connector import blobs, shapes
from backend_plugin.connector.log_pods import HeldPods, run_key, with_pods_gone
from backend_plugin.connector.metadata import Answer, JobMetadata
from backend_plugin.connector.recovery import of_attempt, recoveries
from backend_plugin.connector.session import Session
from backend_plugin.errors import KubeApiError
from backend_plugin.kube.api import PAGE, Request
from backend_plugin.kube.retry import Deadline
from backend_plugin.kube.timestamps import parse_time
from backend_plugin.status import failed_job_status, fresh_errors
from backend_plugin.targets.registry import DEFAULT, JobTarget, Observed
from backend_plugin.task_errors import ErrorReport

__all__ = ["JobReader", "POD_PAGE", "same_uid"]

logger = logging.getLogger(__name__)

POD_PAGE = PAGE
"""`limit` of each page of a pod or event list (`api.PAGE`, client-go's pager size)."""


def same_uid(job: dict, meta: JobMetadata) -> bool:
    """Whether `job` is the one `meta` names, or the job the connector created again for the same attempt after a
    preemption (`recovery.of_attempt`); always, when either uid is unknown (old metadata).

    Args:
        job: a job as read.
        meta: what `create` returned.

    Returns:
        True unless both uids are known and differ and `job` was not created again for `meta`'s attempt.
    """
    return of_attempt(job, meta.uid)


class JobReader:
    """The answers of one session (one API client, one config).

    Args:
        session: the clients, caches and memories the answers use.
        now: the current time on the API server's clock.
        monotonic: a monotonic clock (what the log-link pods' idleness is measured on).
    """

    def __init__(self, session: Session, now: Callable[[], datetime.datetime], monotonic: Callable[[], float]) -> None:
        self.session = session
        self.now = now
        self.monotonic = monotonic
        self.pods: Optional[list[dict]] = None
        """The pods the last `answer` listed for its status (None: not listed), for the recovery to judge."""

    def inline(self, job: dict, meta: JobMetadata, target: JobTarget) -> Optional[Answer]:
        """The answer when it needs no I/O: the status needs neither pods, events nor error documents, and the log
        links' pods are held for the job as it is. Safe to call in an event loop.

        Args:
            job: the job, from the watch cache.
            meta: what `create` returned.
            target: the job's kind.

        Returns:
            The answer, or None when something must be read first.
        """
        config = self.session.config
        now = self.now()
        reads = target.reads(job, config, now)
        if reads.pods or reads.events or (reads.error_report and meta.output_prefix):
            return None
        pods: Optional[HeldPods] = None
        if reads.link_pods:
            pods = self.session.log_pods.get(_uid(job), run_key(job), self.monotonic())
            if pods is None:
                return None
        return self._compose(job, meta, target, Observed(), pods, "", now)

    def answer(self, job: dict, meta: JobMetadata, target: JobTarget, deadline: Deadline) -> Answer:
        """Phase, message, links and info of a job read: pods, events and error documents are read only when the
        status needs them, the links' pods only when none are held for the job as it is.

        Args:
            job: the job (shape checked).
            meta: what `create` returned.
            target: the job's kind.
            deadline: the `get`'s deadline.

        Returns:
            The answer, without live progress.

        Raises:
            KubeApiError: the job itself could not be read (never for its pods or events).
            StorageUnavailable: the task's error documents are needed and the store did not answer.
        """
        ns, name = meta.namespace, meta.name
        uid = str((job.get("metadata") or {}).get("uid", ""))
        if not same_uid(job, meta):
            return Answer(
                TaskExecution.RETRYABLE_FAILED,
                f"{target.kind} {ns}/{name} was deleted outside Flyte and a different job of the same name now exists "
                f"(uid {uid}, ours was {meta.uid})",
                custom_info={**meta.identity, "replaced_by": uid},
            )
        config, now = self.session.config, self.now()
        reads = target.reads(job, config, now)
        pods: Optional[Sequence[Mapping[str, Any]]] = None
        listed: Optional[list[dict]] = None
        note = ""
        if reads.pods or reads.link_pods:
            held = None if reads.pods else self.session.log_pods.get(_uid(job), run_key(job), self.monotonic())
            if held is not None:
                pods = held
            else:
                try:
                    listed = self._list("pods", ns, name, target, deadline)
                    # the links also name the pods held before that are gone now (a finished JobSet's workers)
                    pods = with_pods_gone(listed, self.session.log_pods.last(_uid(job)))
                    self.session.log_pods.put(_uid(job), run_key(job), pods, target.link_pod_keys, self.monotonic())
                except KubeApiError as e:  # the job's own conditions still decide the phase
                    logger.warning("%s", e)
                    note = f" (replica details unavailable: {e.reason})"
        errors: Optional[ErrorReport] = None
        if reads.error_report and meta.output_prefix:
            errors = blobs.read_error_report(meta.output_prefix, config.status.error_document_max_bytes)
            if recoveries(job):  # a job created again: what the runs before it wrote is not its error
                errors = fresh_errors(errors, parse_time((job.get("metadata") or {}).get("creationTimestamp")))
        events: Optional[list[dict]] = None
        events_problem = ""
        if reads.events:
            try:
                events = self._list("events", ns, name, target, deadline)
            except KubeApiError as e:
                logger.warning("%s", e)
                events_problem = e.reason
        observed = Observed(listed if reads.pods else None, errors, events, events_problem)
        self.pods = listed if reads.pods and not note else None
        return self._compose(job, meta, target, observed, pods, note, now)

    def _compose(
        self,
        job: dict,
        meta: JobMetadata,
        target: JobTarget,
        observed: Observed,
        pods: Optional[Sequence[Mapping[str, Any]]],
        note: str,
        now: datetime.datetime,
    ) -> Answer:
        config = self.session.config
        status = target.status(job, observed, config, now)
        answer = Answer(
            status.phase,
            status.message + note + (f"; note: {meta.dropped}" if meta.dropped else ""),
            self._links(job, meta, target, pods, now, fresh=observed.pods is not None),
            custom_info(job, target),
        )
        if answer.terminal:
            self.session.log_pods.forget(_uid(job))
        return answer

    def _links(
        self,
        job: dict,
        meta: JobMetadata,
        target: JobTarget,
        pods: Optional[Sequence[Mapping[str, Any]]],
        now: datetime.datetime,
        fresh: bool,
    ) -> tuple[TaskLog, ...]:
        """The job's log links: made of the pods held (or none, for a kind that names its pods from its spec) once
        per job status and kept, unless a template reads a time (a running pod's finish is now) or the pods were
        listed for the status (`fresh`: they may change within one status)."""
        config = self.session.config
        if not config.status.log_links:
            return ()
        if fresh or config.status.log_links_read_time:
            return tuple(target.links(job, pods, config, now, meta.task_config))
        uid, key, variant = _uid(job), run_key(job), tuple(sorted(meta.task_config.items()))
        links = self.session.log_pods.links(uid, key, variant, self.monotonic())
        if links is None:
            links = tuple(target.links(job, pods, config, now, meta.task_config))
            self.session.log_pods.put_links(uid, key, variant, links, self.monotonic())
        return links

    def gone(self, meta: JobMetadata) -> Answer:
        """The job is not there: what the task wrote before it went decides (a TTL of 0 deletes a finished job).

        Args:
            meta: what `create` returned.

        Returns:
            The answer.

        Raises:
            StorageUnavailable: the store did not answer whether the task wrote its outputs or an error.
        """
        ns, name = meta.namespace, meta.name
        info = {**meta.identity, "deleted": True}
        deleted = f"{meta.kind} {ns}/{name} no longer exists"
        self.session.log_pods.forget(meta.uid)
        if meta.output_prefix:
            errors = blobs.read_error_report(meta.output_prefix, self.session.config.status.error_document_max_bytes)
            if errors.errors:
                status = failed_job_status(f"{deleted}; it failed before it was deleted.", [], errors)
                return Answer(status.phase, status.message, custom_info=info)
            if blobs.outputs_written(meta.output_prefix):
                return Answer(
                    TaskExecution.SUCCEEDED,
                    f"{deleted}, but the task wrote its outputs: it finished and was deleted before this poll "
                    "(ttlSecondsAfterFinished)",
                    custom_info=info,
                )
        return Answer(
            TaskExecution.RETRYABLE_FAILED,
            f"{deleted}: it was deleted outside Flyte (for example with kubectl, by ttlSecondsAfterFinished, or with "
            "its namespace) before it finished, and the task wrote neither outputs nor an error; a retryable failure",
            custom_info=info,
        )

    def list_pods(self, namespace: str, name: str, target: JobTarget, deadline: Deadline) -> list[dict]:
        """The job's pods, as the answers list them (by the kind's selector, each of core/v1's shape).

        Args:
            namespace: the job's namespace.
            name: its name.
            target: its kind.
            deadline: the poll's deadline.

        Returns:
            The pods.

        Raises:
            KubeApiError: they could not be listed.
        """
        return self._list("pods", namespace, name, target, deadline)

    def _list(self, what: str, namespace: str, name: str, target: JobTarget, deadline: Deadline) -> list[dict]:
        """The core/v1 pods or events of one job (`what`: "pods" or "events"), by the target's selector, each of
        the shape core/v1 writes (`shapes`)."""
        api = self.session.api
        list_call: Callable[..., Any]
        problem: Callable[[Any], Optional[str]]
        if what == "pods":
            list_call, selector = api.core.list_namespaced_pod, {"label_selector": target.pod_selector(name)}
            problem = shapes.pod_problem
        else:
            list_call, selector = api.core.list_namespaced_event, {"field_selector": target.events_selector(name)}
            problem = shapes.event_problem
        request = Request(f"list {what} of", f"{target.kind} {namespace}/{name}", namespace, "list", what, "")
        return api.list_pages(request, list_call, selector, what, deadline, problem)


def _uid(job: dict) -> str:
    """The job's own uid: what its log-link pods are held under."""
    return str((job.get("metadata") or {}).get("uid") or "")


def custom_info(job: dict, target: JobTarget) -> dict[str, Any]:
    """The job's identity and status as a JSON-able dict (shown in Flyte's task details); the kind only when it is
    not the default kind's, so that kind's info reads as before.

    Args:
        job: the job.
        target: its kind.

    Returns:
        The info.
    """
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    info: dict[str, Any] = {"namespace": meta.get("namespace", ""), "name": meta.get("name", "")}
    info["uid"] = meta.get("uid", "")
    if target is not DEFAULT:
        info["kind"] = target.kind
    for key in target.status_keys:
        if key in status:
            info[key] = status[key]
    return info
