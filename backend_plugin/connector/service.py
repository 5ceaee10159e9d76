"""The job service: create, get and delete the Kubeflow job a `pytorch` task becomes, for any Flyte SDK.

One per process (`shared_service`): flytekit's connectors for task versions 0 and 1 and Flyte 2's connector are thin
wrappers over it, so one namespace has one watch per job kind whichever SDK and task version poll it, one API client
and one pair of pools. Its answers are `Answer`s and its metadata `JobMetadata`, in no SDK's types.

- each create, get and delete has one deadline (`api_<operation>_budget_s`, sized to propeller's timeouts) covering
  every API call inside it (`kube.api`, `kube.retry`); errors never carry a response body;
- `get` only reports what it read: API or blob-store trouble is an exception (Flyte polls again), never an invented
  phase; a job is ours by its uid, and "deleted" is reported only once a GET confirms it;
- the served `get` (`get_async`) answers a poll the watch cache can answer without I/O in the event loop
  (`answer_from_cache`), and runs every other one on the session's pool; it takes no lock: the session is built once,
  off the event loop, and published;
- a RUNNING answer carries the task's live progress (`progress`), read on a pool of its own at most once per
  `progress_read_interval_s` per task attempt, never in the event loop;
- ages are measured on the API server's clock (`kube.api.ServerClock`).

The create path is `create.JobCreator`; a job read becomes an answer in `answers.JobReader`; what is built once is
`session.Session`.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin import admission
from backend_plugin.build import write_job
from backend_plugin.config import BackendConfig, load_config
from backend_plugin.connector import blobs, shapes
from backend_plugin.connector.answers import JobReader, same_uid
from backend_plugin.connector.create import InputsWriter, JobCreator
from backend_plugin.connector.metadata import Answer, JobMetadata
from backend_plugin.connector.progress import Read
from backend_plugin.connector.recovery import Recovery, recoveries
from backend_plugin.connector.session import Session
from backend_plugin.errors import MalformedAnswer, NotFound, StorageUnavailable, TemplateError
from backend_plugin.execution import execution_metadata, identity_of
from backend_plugin.kube import api as kube_api
from backend_plugin.kube.api import ApiClientFactory, Request, ServerClock, shape
from backend_plugin.kube.retry import Deadline
from backend_plugin.targets.registry import KINDS, JobTarget, target_for_config, target_for_kind
from backend_plugin.template import template_to_dict
from pytorch_contract.template_keys import CONFIG_PREFIX

__all__ = ["JobService", "shared_service", "PROGRESS_READ_WAIT_S"]

logger = logging.getLogger(__name__)

PROGRESS_READ_WAIT_S = 0.5
"""How long a poll waits for the progress read it starts when there is nothing to show before it (the attempt's first
read) or the record held would be called stale (off the event loop: the served `get` awaits it); every other read runs
in the background. A blob read takes milliseconds, so the poll that waits shows what it read; a slower store delays
that poll by at most this, inside propeller's 30 s for a GetTask, and its read, once done, serves the next poll."""


class JobService:
    """Creates, reads and deletes the jobs of `pytorch` tasks.

    Args:
        config: backend config; `load_config()` on first use when None.
        api_client_factory: builds the kubernetes ApiClient on first use; the module-level factory when None
            (`kube.api.set_api_client_factory`).
        clock: the current time (tests freeze it); ages are shifted onto the API server's clock. When given, it also
            times the reads of progress records (else a monotonic clock does).
        sleep: sleeps between retries (tests make it instant).
    """

    def __init__(
        self,
        config: Optional[BackendConfig] = None,
        api_client_factory: Optional[ApiClientFactory] = None,
        clock: Optional[Callable[[], datetime.datetime]] = None,
        sleep: Optional[Callable[[float], None]] = None,
    ) -> None:
        self._config = config
        self._factory = api_client_factory
        self._clock = clock or (lambda: datetime.datetime.now(datetime.timezone.utc))
        self._monotonic: Callable[[], float] = (lambda: self._clock().timestamp()) if clock else time.monotonic
        self._sleep = sleep or time.sleep
        self._lock = threading.Lock()  # taken only to build or replace the session, never on a poll
        self._session: Optional[Session] = None
        self.server_clock = ServerClock()

    # ------------------------------------------------------------------ what is built once
    @property
    def config(self) -> BackendConfig:
        """The backend config (loaded and checked on first use)."""
        if self._config is None:
            self._config = load_config()
        return self._config

    def _current_factory(self) -> ApiClientFactory:
        return self._factory or kube_api.current_factory()

    def published(self) -> Optional[Session]:
        """The session built over the current client factory, if there is one; builds nothing, takes no lock (what
        the event loop asks).

        Returns:
            The session, or None.
        """
        session = self._session
        return session if session is not None and session.factory is self._current_factory() else None

    def session(self) -> Session:
        """The session, built on first use (the kubernetes client's modules imported, seconds on a busy machine: a
        one-time cost outside every operation's budget) and again when the client factory changed (another cluster:
        the previous session is closed).

        Returns:
            The session.
        """
        session = self.published()
        if session is not None:
            return session
        factory = self._current_factory()
        with self._lock:
            old = self._session
            if old is not None and old.factory is factory:
                return old
            session = Session.build(factory, self.config, self.server_clock, self._sleep)
            self._session = session
        if old is not None:
            old.close()  # joins the old watches: outside the lock
        return session

    def close(self) -> None:
        """Shut the pools and stop every watch (a later call builds a new session)."""
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()

    def api(self) -> kube_api.Api:
        """The API client (the session's).

        Returns:
            The `Api`.
        """
        return self.session().api

    def now(self) -> datetime.datetime:
        """The current time on the API server's clock (ours, shifted by what its `Date` headers said).

        Returns:
            A timezone-aware time.
        """
        return self.server_clock.now(self._clock())

    def deadline(self, operation: str) -> Deadline:
        """A new deadline for one operation, from its budget (`api_<operation>_budget_s`).

        Args:
            operation: `create`, `get` or `delete`.

        Returns:
            The deadline, counting from now.
        """
        return Deadline(self.config.api.budget_s(operation), f"api_{operation}_budget_s")

    def target(self, deadline: Optional[Deadline] = None) -> JobTarget:
        """The job kind this service creates: `BackendConfig.target`, or for `auto` the first registered kind whose
        CRD the API server serves (asked once per session, and logged).

        Args:
            deadline: the calling operation's deadline; a new create deadline when None.

        Returns:
            The target.

        Raises:
            KubeApiError: the API server could not be asked (after retries); the next create asks again.
            NotFound: `auto` and the API server serves no registered kind.
        """
        chosen = target_for_config(self.config.target)
        if chosen is not None:
            return chosen
        session = self.session()
        if session.auto_target is None:
            session.auto_target = _discover(session, deadline or self.deadline("create"))
        return session.auto_target

    # ------------------------------------------------------------------ create, delete
    def create(
        self,
        task_template: Any,
        output_prefix: str,
        inputs: Any,
        task_execution_metadata: Any,
        write_inputs: InputsWriter = blobs.write_inputs,
    ) -> JobMetadata:
        """Build the job, write the inputs where it reads them, and create it (or adopt the identical job that
        already exists): `create.JobCreator`.

        Args:
            task_template: the task's template (anything `template_to_dict` takes).
            output_prefix: the execution's output prefix.
            inputs: the task's inputs, as `write_inputs` takes them.
            task_execution_metadata: flyteidl's execution metadata (identity, namespace, labels, env, service
                account); None for a local run.
            write_inputs: writes the inputs in the form the SDK's pods read (Flyte 1's `LiteralMap` by default).

        Returns:
            The job's metadata; for a template that cannot be built, or a job the cluster refuses, no job and the
            reason in `error`, which the next `get` reports as a permanent failure.

        Raises:
            Conflict: a different job with the same name exists.
            Forbidden: RBAC denies creating the job (the message names the permission).
            KubeApiError: any other API failure, after retries for transient ones.
        """
        session = self.session()
        admission.prepare()  # one-time: the vendored CRDs read and their rules compiled, outside the budget
        deadline = self.deadline("create")
        template = template_to_dict(task_template)
        identity = identity_of(task_execution_metadata, template.get("id") or {}, output_prefix)
        execution = execution_metadata(identity, output_prefix, self.config, task_execution_metadata)
        config = template.get("config")
        task_config = {str(k): str(v) for k, v in (config if isinstance(config, dict) else {}).items()
                       if not str(k).startswith(CONFIG_PREFIX)}  # fmt: skip
        target = self.target(deadline)
        base = JobMetadata(execution.namespace or self.config.job.namespace, execution.job_name, kind=target.kind,
                           output_prefix=execution.output_prefix, task_config=task_config)  # fmt: skip
        try:
            written = write_job(template, execution, self.config, target)
        except TemplateError as e:
            logger.warning("task template for %s/%s cannot run as a %s: %s", base.namespace, base.name, target.kind, e)
            return replace(base, error=f"the task template cannot run: {e}")
        return JobCreator(session).create(written, base, execution, inputs, write_inputs, deadline)

    def delete(self, meta: JobMetadata) -> None:
        """Delete the job and its pods (foreground, or as its kind's `delete_propagation` says); a job that is
        already gone is success.

        Args:
            meta: what `create` returned.

        Raises:
            KubeApiError: the delete failed (after retries for transient failures, within `api_delete_budget_s`).
        """
        if meta.error:
            return  # create recorded why the job could never run: nothing was created
        session = self.session()
        session.recoveries.deleted(meta.namespace, meta.name, meta.uid or "")  # a job held to be created again never is
        api = session.api
        deadline = self.deadline("delete")
        from kubernetes import client

        ns, name, target = meta.namespace, meta.name, target_for_kind(meta.kind or "")
        body = client.V1DeleteOptions(propagation_policy=target.declaration.delete_propagation)

        def send(timeout: tuple[float, float]) -> Any:
            return api.custom.delete_namespaced_custom_object(
                target.group, target.version, ns, target.plural, name, body=body, _request_timeout=timeout,
                _preload_content=False,
            )  # fmt: skip

        try:
            api.call(Request("delete", f"{target.kind} {ns}/{name}", ns, "delete", target.plural, target.group), send,
                     deadline)  # fmt: skip
        except NotFound:
            logger.info("%s %s/%s already deleted", target.kind, ns, name)

    # ------------------------------------------------------------------ get
    def get(self, meta: JobMetadata) -> Answer:
        """Read the job (from the watch cache when it holds the job of our uid, else with a GET, which feeds the
        cache) and what its status needs, and report the phase, why, log links and live progress.

        Args:
            meta: what `create` returned.

        Returns:
            The answer.

        Raises:
            KubeApiError: the job could not be read (after retries, within `api_get_budget_s`); Flyte polls again.
            StorageUnavailable: blob storage did not answer a read a phase depends on; Flyte polls again.
        """
        if meta.error:
            return Answer(TaskExecution.FAILED, meta.error, custom_info=meta.identity)
        session = self.session()
        target = target_for_kind(meta.kind or "")
        cache = session.cache(target)
        deadline = self.deadline("get")  # from here: the client is built
        job = cache.get(meta.namespace, meta.name) if cache is not None else None
        if job is not None and not same_uid(job, meta):
            job = None  # the cache holds another job of this name: the API says which one is there now
        reader = JobReader(session, self.now, self._monotonic)
        recovery = Recovery(session, reader.list_pods, self.now)
        if job is None:
            try:
                job = _read_job(session, meta, target, deadline)
            except NotFound:
                recovering = recovery.gone(meta, target, deadline)
                answer = recovering if recovering is not None else reader.gone(meta)
                return self._with_progress_read(session, session.started.hold(meta, answer), meta)
            if cache is not None:
                cache.feed(job)
        answer = reader.answer(job, meta, target, deadline)
        if same_uid(job, meta):
            session.recoveries.settle(meta.namespace, meta.name, job)
            if answer.phase == TaskExecution.RETRYABLE_FAILED:
                answer = recovery.failed(job, meta, target, answer, deadline, reader.pods)
            elif recoveries(job):
                answer = recovery.restarted(job, answer)
        return self._with_progress_read(session, session.started.hold(meta, answer, job), meta)

    def answer_from_cache(self, meta: JobMetadata, session: Optional[Session] = None) -> Optional[Answer]:
        """The answer when it needs no I/O (`answers.JobReader.inline`), before its live progress is added. Safe to
        call in an event loop: builds nothing, takes no lock.

        Args:
            meta: what `create` returned.
            session: the published session (looked up when None).

        Returns:
            The answer, or None when `get` must read something.
        """
        session = session or self.published()
        if meta.error or session is None:
            return None
        target = target_for_kind(meta.kind or "")
        cache = session.cache(target)
        job = cache.get(meta.namespace, meta.name) if cache is not None else None
        if job is None or not same_uid(job, meta):
            return None
        answer = JobReader(session, self.now, self._monotonic).inline(job, meta, target)
        if answer is None or answer.phase == TaskExecution.RETRYABLE_FAILED:
            return None  # a failed job may be a preemption to recover from: `get` reads what decides it
        if recoveries(job):
            answer = Recovery(session, _no_pods, self.now).restarted(job, answer)
        return session.started.hold(meta, answer, job)

    async def get_async(self, meta: JobMetadata) -> Answer:
        """`get` for an event loop: answered inline when the cache can, else on the session's pool (the first call,
        which builds the session, on the loop's default executor).

        Args:
            meta: what `create` returned.

        Returns:
            What `get` returns.

        Raises:
            KubeApiError: as `get`.
            StorageUnavailable: as `get`.
        """
        loop = asyncio.get_running_loop()
        session = self.published()
        if session is None:
            return await loop.run_in_executor(None, self.get, meta)
        answer = self.answer_from_cache(meta, session)
        if answer is not None:
            read = self.start_progress_read(session, answer, meta)
            if read is not None:
                await _settled(read, PROGRESS_READ_WAIT_S)
            return self.with_progress(session, answer, meta)
        try:
            running = loop.run_in_executor(session.get_pool, functools.partial(self.get, meta))
        except RuntimeError:  # closed meanwhile: the next session is built off the loop
            running = loop.run_in_executor(None, self.get, meta)
        return await running

    # ------------------------------------------------------------------ live progress
    def _with_progress_read(self, session: Session, answer: Answer, meta: JobMetadata) -> Answer:
        """`answer` with the attempt's progress line, after waiting (in this thread) up to `PROGRESS_READ_WAIT_S`
        for the read this poll starts, if it is one to wait for."""
        read = self.start_progress_read(session, answer, meta)
        if read is not None:
            try:
                read.result(PROGRESS_READ_WAIT_S)
            except FutureTimeout:
                pass  # a slow store: this poll shows the record held, the read serves the next one
        return self.with_progress(session, answer, meta)

    def start_progress_read(self, session: Session, answer: Answer, meta: JobMetadata) -> Optional[Future]:
        """Start reading the attempt's progress record when the answer is RUNNING and a read is due (the attempt is
        forgotten when the answer is terminal). No I/O here: the read runs on the progress pool.

        Args:
            session: the session.
            answer: the job's answer, without progress.
            meta: what `create` returned (its `output_prefix` is where the record is).

        Returns:
            The read this poll should wait for (the attempt's first, or the one before its record is called stale:
            `Read.AWAITED`), or None.
        """
        prefix = meta.output_prefix
        if not prefix:
            return None  # metadata of an older connector: no output prefix, no progress
        if answer.terminal:
            session.progress.forget(prefix)
            return None
        if answer.phase != TaskExecution.RUNNING:
            return None
        due = session.progress.claim(prefix, self._monotonic(), self.now().timestamp())
        if due is Read.NONE:
            return None
        try:
            read = session.progress_pool.submit(self._read_progress, session, prefix)
        except RuntimeError:  # the pool is shut down (closed, or the interpreter is exiting)
            session.progress.release(prefix)
            return None
        return read if due is Read.AWAITED else None

    def _read_progress(self, session: Session, prefix: str) -> None:
        """On the progress pool: read the record and hand it over (a claim is always settled)."""
        try:
            found = blobs.read_progress_record(prefix)
        except StorageUnavailable as e:  # unknown: the record held stays (`LiveProgress.store`)
            found = blobs.RecordRead(problem=e.reason)
        except Exception:
            session.progress.release(prefix)  # a bug: the claim is let go, and the error is logged with its traceback
            logger.exception("reading the progress record under %s raised an unexpected error", prefix)
            raise
        session.progress.store(prefix, found.data, found.problem, self._monotonic())

    def with_progress(self, session: Session, answer: Answer, meta: JobMetadata) -> Answer:
        """The answer with the attempt's progress line added to a RUNNING message: "running (3/3 replicas active);
        step 1,200/5,000 (24%), ETA 3m10s, loss 0.124". No I/O: the record held.

        Args:
            session: the session.
            answer: the job's answer, without progress.
            meta: what `create` returned.

        Returns:
            The answer, with the line when the job runs and a record is held; else `answer` itself.
        """
        if answer.phase != TaskExecution.RUNNING or not meta.output_prefix:
            return answer
        line = session.progress.message(meta.output_prefix, self.now().timestamp())
        if not line:
            return answer
        return replace(answer, message=f"{answer.message}; {line}" if answer.message else line)


def _no_pods(namespace: str, name: str, target: JobTarget, deadline: Deadline) -> list[dict]:
    """The pod list of a `Recovery` that reads nothing (the event loop's: `restarted` lists no pods)."""
    raise AssertionError("the inline answer lists no pods")  # pragma: no cover


def _read_job(session: Session, meta: JobMetadata, target: JobTarget, deadline: Deadline) -> dict:
    """GET the job, of the shape its CRD declares (`shapes.job_problem`)."""
    ns, name = meta.namespace, meta.name
    request = Request("get", f"{target.kind} {ns}/{name}", ns, "get", target.plural, target.group)
    return session.api.read_object(request, target.group, target.version, target.plural, name,
                                   f"a {target.kind} object", deadline, shapes.job_problem)  # fmt: skip


def _discover(session: Session, deadline: Deadline) -> JobTarget:
    """Ask the API server which CRD it serves (`GET /apis/<group>/<version>`), in registry order."""
    api = session.api
    for t in KINDS:
        request = Request("discover", f"API group {t.api_version}", "", "get", t.plural, t.group)

        def send(timeout: tuple[float, float], t: JobTarget = t) -> Any:
            return api.custom.get_api_resources(t.group, t.version, _preload_content=False,
                                                _request_timeout=timeout)  # fmt: skip

        def decode(answer: Any, request: Request = request) -> list:
            resources = answer.get("resources") if isinstance(answer, dict) else None
            if not isinstance(resources, list):
                raise MalformedAnswer(request.verb, request.subject,
                                      f"the API answered with {shape(answer)}, not an APIResourceList")  # fmt: skip
            return resources

        try:
            resources = api.call(request, send, deadline, decode)
        except NotFound:
            continue
        if t.serves(resources):
            logger.info("target auto: the API server serves %s.%s; creating %ss", t.plural, t.group, t.kind)
            return t
    served = " nor ".join(t.description for t in KINDS)
    raise NotFound("discover", "the job kind (target: auto)",
                   f"the API server serves neither {served}; install one, or set target explicitly")  # fmt: skip


async def _settled(work: Future, timeout: float) -> None:
    """Wait, without blocking the event loop, until `work` is done or `timeout` passes; never cancels `work` (a read
    that outlives the wait serves the next poll), and a loop that closed meanwhile is no error."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def wake() -> None:
        if not done.done():
            done.set_result(None)

    def notify(_: Future) -> None:
        try:
            loop.call_soon_threadsafe(wake)
        except RuntimeError:  # the loop closed: nobody waits any more
            pass

    work.add_done_callback(notify)
    try:
        await asyncio.wait_for(done, timeout)
    except asyncio.TimeoutError:
        pass


_SHARED: list[JobService] = []
_SHARED_LOCK = threading.Lock()


def shared_service() -> JobService:
    """The process's one service, over the backend config (`load_config`, on first use) and the module-level API
    client factory: what the registered connectors of every SDK and task version use.

    Returns:
        The service.
    """
    if not _SHARED:
        with _SHARED_LOCK:
            if not _SHARED:
                _SHARED.append(JobService())
    return _SHARED[0]
