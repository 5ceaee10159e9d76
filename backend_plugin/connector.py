"""flytekit connector for `pytorch` tasks: create / get / delete the Kubeflow job a task becomes.

The connector only talks to the API; everything else is pure and lives elsewhere: the execution from
`execution.execution_metadata` (shared with `pytorchjob render`), the job kind from `targets.registry`
(`BackendConfig.target`; `auto` asks the API server once), the job from `build.build_job` (the one build path, which
`render` prints: read, plan, write, stamp, admission), and from the kind's `JobTarget` which reads its status needs
(`reads`), the phase (`status`) and log links (`links`). The API client, each request as a value and the
deadline-bounded retry live in `api`; inputs.pb, error documents and outputs.pb in `blobs`; the watch cache in
`watch`. It never names or compares a kind: messages
take the kind's name from the target. Importing this module registers the connector for task type "pytorch" versions
0 and 1 with flytekit's `ConnectorRegistry`; it loads neither the kubernetes client nor any kube config (the API
client is built on first use by a replaceable factory, see `api.set_api_client_factory`).

Serve it with `pyflyte serve connector --modules backend_plugin.connector`.

Failure handling:
- each create, get and delete has one deadline (`api_create_budget_s`, `api_get_budget_s`, `api_delete_budget_s`,
  sized to propeller's CreateTask/GetTask/DeleteTask timeouts) covering every API call inside it: 429/5xx,
  timeouts and malformed answers are retried with exponential backoff and full jitter while an attempt still fits,
  a `Retry-After` is waited out when it fits, each attempt may read for all the budget has left, and the
  kubernetes client's own (urllib3) retries are off, so this loop is the only one (see `api`);
- errors never carry a response body: they are raised `from None` with the status, the reason and our message;
- every job is stamped with the digest of its spec (`admission.stamp`, annotation `pytorch.flyte.org/spec-sha256`)
  and put through the admission model (`admission.check_admission`) before anything is sent, inputs.pb included:
  a job the API server would reject or silently prune, or whose pods could never start, is a permanent failure
  naming the user's setting, and the create is sent with `fieldValidation=Strict`, so that a cluster whose CRD
  declares less than the vendored one refuses a field rather than dropping it;
- the job is written for the kind's installed CRD (`cluster_crds.ClusterCrds`: read once per kind before its first
  create where RBAC allows, else learnt from a strict 400) and judged by it: what an older release has in another
  form is written so, what the task does not need is dropped and said (in every `get`'s message too), and a task
  the release cannot run fails at once naming the release and what to do; a strict 400 is never passed on nor sent
  again: the job is built once more for what it named and created, or the task fails in our words;
- a create that got no answer is followed by a GET before it is retried, so a slow API server never gets two jobs;
- AlreadyExists, or a create whose answer was lost, adopts the existing job when it is ours (`admission.is_our_job`:
  its stamp is our digest, so defaults, pruning and mutating webhooks do not count), and is a `Conflict` otherwise
  (`JobConnector.adopt_existing`, the one place that decides);
- `get` only reports what it read: API trouble is an exception (Flyte polls again), never an invented phase;
- a failed job's phase (retryable or not) and message come from the task's own error document, read from the
  output prefix kept in the resource meta (`status.failed_job_status`); a read failure never hides the phase;
- a job that never starts is failed after `job_start_timeout_s`, with its warning events as the reason;
- a template that cannot be built (an image the kubelet would refuse included), or a job the API server rejects
  (invalid, too large, ...), can never run: `create` records why in the resource meta and the first `get` reports a
  permanent FAILED (an exception from `create` would be retried by propeller as if it could heal);
- an answer that is not the JSON asked for is an error naming the job (the next poll heals); malformed pods or events
  only make the explanation poorer: the job's own conditions still decide the phase;
- a job is ours by its uid: the watch cache answers only for the uid the task created; "deleted" is reported only
  once a GET confirms it (404, or a job of another uid, which is reported as a replacement), never from a watch's
  DELETED alone (a label change or a lagging watch sends one for a job that still exists);
- ages (the pickup and start timeouts) are measured on the API server's clock, learnt from its `Date` header
  (`api.ServerClock`), never by comparing ours with it;
- a job deleted behind Flyte's back is reported RETRYABLE_FAILED with that reason (as propeller reports a deleted
  pod), unless the task already wrote its outputs or an error document; `delete` of a missing job is success;
- a RUNNING answer carries the task's live progress after the kind's message ("running (3/3 replicas active); step
  1,200/5,000 (24%), ETA 3m10s, loss 0.124"), from the record global rank 0 writes beside the outputs, read through
  `blobs` at most once per `progress_read_interval_s` per task attempt on a pool of its own, never in the event loop
  (`backend_plugin.progress`); a read that fails or finds nothing leaves the message as the kind says it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.extend.backend.base_connector import AsyncConnectorBase, ConnectorRegistry, Resource, ResourceMeta
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate

from backend_plugin import admission, blobs
from backend_plugin import api as api_module
from backend_plugin.admission import crds, structural
from backend_plugin.admission.installed import strict_refusal, unknown_fields
from backend_plugin.api import (
    PAGE,
    Api,
    ApiClientFactory,
    Request,
    ServerClock,
    default_api_client,
    set_api_client_factory,
    shape,
    with_pool_size,
    without_client_retries,
)
from backend_plugin.build import BuiltJob, WrittenJob, finish_job, write_job
from backend_plugin.cluster_crds import ClusterCrds
from backend_plugin.config import BackendConfig, load_config
from backend_plugin.errors import (
    Conflict,
    KubeApiError,
    MalformedAnswer,
    NotFound,
    Rejected,
    TemplateError,
    Unavailable,
)
from backend_plugin.execution import ExecutionMetadata, execution_metadata, identity_of
from backend_plugin.progress import LiveProgress, Read
from backend_plugin.retry import Backoff, Deadline, retry
from backend_plugin.status import failed_job_status
from backend_plugin.targets.registry import DEFAULT, KINDS, JobTarget, Observed, target_for_config, target_for_kind
from backend_plugin.task_errors import ErrorReport
from backend_plugin.template import template_to_dict
from backend_plugin.watch import JobWatchCache
from pytorch_contract.template_keys import CONFIG_PREFIX, TASK_TYPE

__all__ = [
    "JobConnector",
    "JobMetadata",
    "ServedJobConnector",
    "default_api_client",
    "set_api_client_factory",
    "spec_differences",
    "with_pool_size",
    "without_client_retries",
]

logger = logging.getLogger(__name__)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""The label (from `BackendConfig.default_labels`) the watch cache selects our jobs by."""

POD_PAGE = PAGE
"""`limit` of each page of a pod or event list (`api.PAGE`, client-go's pager size)."""

PROGRESS_READ_THREADS = 8
"""Threads that read progress records (`blobs.read_progress_record`), apart from the `get` pool so that a slow blob
store never holds the threads API reads need: at 30 ms a read, 8 threads read 260 records a second, the 333 a second of
10,000 running tasks read every 30 s less the polls a read's wait covers; a read they cannot start at once waits its
turn in their queue (one per task attempt at most) while the polls show the record held."""

PROGRESS_READ_WAIT_S = 0.5
"""How long a poll waits for the progress read it starts when there is nothing to show before it (the attempt's first
read) or the record held would be called stale (off the event loop: the served `get` awaits it); every other read runs
in the background. A blob read takes milliseconds, so the poll that waits shows what it read; a slower store delays
that poll by at most this, inside propeller's 15 s for a GetTask, and its read, once done, serves the next poll."""

TERMINAL_PHASES = frozenset(
    {TaskExecution.SUCCEEDED, TaskExecution.FAILED, TaskExecution.RETRYABLE_FAILED, TaskExecution.ABORTED}
)
"""Phases after which a task attempt's job runs no more: its progress is forgotten."""


@dataclass
class JobMetadata(ResourceMeta):
    """What Flyte stores between calls: enough to find the job again, to notice a same-named replacement, and to
    read what the task itself reported. Metadata stored by an older connector (namespace, name, uid only) still
    decodes; `get` then reads no error document and renders no dynamic log links.

    Attributes:
        namespace: the job's namespace.
        name: the job's name.
        uid: `metadata.uid` of the job we created or adopted ("" if unknown).
        output_prefix: the execution's output prefix, where the replicas write `error.pb` / `error-<uuid>.pb` and
            `outputs.pb` ("" if unknown).
        task_config: the task template's config entries outside `pytorch.*` (`link_type` and the values of
            `{{ .taskConfig.<key> }}` in log links).
        error: why the job can never run (a template that cannot be built, a spec the API server rejects); no job
            was created, and `get` reports FAILED with this message. "" for a created job.
        kind: the job's kind (a registered kind's `kind`); metadata stored before kinds were recorded has none and
            is the default kind's (`targets.DEFAULT`).
        dropped: what the job was created without because the cluster's CRD is older than the vendored one (the
            job's meaning kept), said in every `get`'s message; "" when nothing was dropped.
    """

    namespace: str
    name: str
    uid: str = ""
    output_prefix: str = ""
    task_config: dict[str, str] = field(default_factory=dict)
    error: str = ""
    kind: str = DEFAULT.kind
    dropped: str = ""

    def encode(self) -> bytes:
        """JSON of the fields; `kind` only when it is not the default kind's and `dropped` only when set, so such
        metadata reads as before.

        Returns:
            The encoded metadata.
        """
        fields = dataclasses.asdict(self)
        if target_for_kind(self.kind) is DEFAULT:
            del fields["kind"]
        if not self.dropped:
            del fields["dropped"]
        return json.dumps(fields).encode("utf-8")


def spec_differences(desired: Any, stored: Any, path: str = "spec") -> list[str]:
    """Fields where a stored object differs from the one we would create, ignoring what the server added.

    Every value we set must be present and equal in `stored`; keys only in `stored` are defaults filled in by the
    API server or the operator's webhook and do not count.

    Args:
        desired: the value we would send.
        stored: the value the API server holds.
        path: the dotted path of these values, for the report.

    Returns:
        Dotted paths that differ (empty when `stored` matches).
    """
    if isinstance(desired, dict) and isinstance(stored, dict):
        out: list[str] = []
        for key, value in desired.items():
            if key not in stored:
                out.append(f"{path}.{key}")
            else:
                out.extend(spec_differences(value, stored[key], f"{path}.{key}"))
        return out
    if isinstance(desired, list) and isinstance(stored, list):
        if len(desired) != len(stored):
            return [path]
        out = []
        for i, (a, b) in enumerate(zip(desired, stored, strict=True)):
            out.extend(spec_differences(a, b, f"{path}[{i}]"))
        return out
    if desired == stored or str(desired) == str(stored) and isinstance(stored, (int, float, str)):
        return []
    return [path]


class JobConnector(AsyncConnectorBase):
    """Runs `pytorch` tasks as Kubeflow jobs of the configured kind (`BackendConfig.target`).

    Args:
        task_type_version: 1 for templates from this SDK and flytekit's kfpytorch plugin, 0 for legacy ones.
        config: backend config; `load_config()` on first use when None.
        api_client_factory: builds the kubernetes ApiClient on first use; the module-level factory when None.
        clock: returns the current time (tests freeze it); ages are shifted onto the API server's clock. When
            given, it also times the reads of progress records (else a monotonic clock does).
        sleep: sleeps between retries (tests make it instant).
    """

    name = "Kubeflow Job Connector"

    def __init__(
        self,
        task_type_version: int = 1,
        config: Optional[BackendConfig] = None,
        api_client_factory: Optional[ApiClientFactory] = None,
        clock: Optional[Callable[[], datetime.datetime]] = None,
        sleep: Optional[Callable[[float], None]] = None,
    ) -> None:
        super().__init__(task_type_name=TASK_TYPE, task_type_version=task_type_version, metadata_type=JobMetadata)
        self._config = config
        self._factory = api_client_factory
        self._clock = clock or (lambda: datetime.datetime.now(datetime.timezone.utc))
        self._monotonic: Callable[[], float] = (lambda: clock().timestamp()) if clock else time.monotonic
        self._sleep = sleep or time.sleep
        self._client: Optional[tuple[ApiClientFactory, Api]] = None
        self._lock = threading.Lock()
        self._auto_target: Optional[JobTarget] = None
        self._caches: dict[str, Optional[JobWatchCache]] = {}
        self._progress: Optional[LiveProgress] = None
        self._progress_reads: Optional[ThreadPoolExecutor] = None
        self.crds = ClusterCrds()
        self.server_clock = ServerClock()

    # ------------------------------------------------------------------ lazy dependencies
    @property
    def config(self) -> BackendConfig:
        """The backend config (loaded and checked on first use)."""
        if self._config is None:
            self._config = load_config()  # checked when built
        return self._config

    def api(self) -> Api:
        """The `Api` over the current factory's ApiClient, built once per factory.

        Each operation asks for it before its deadline starts: the first time, the kubernetes client imports its
        API modules (seconds on a busy machine), a one-time cost that is not the API's time.

        Returns:
            The `Api`.
        """
        factory = self._factory or api_module.current_factory()
        with self._lock:
            if self._client is None or self._client[0] is not factory:
                config = self.config
                api = config.api
                api_client = with_pool_size(without_client_retries(factory()), api.get_threads + 4)
                backoff = Backoff(api.backoff_initial_s, api.backoff_max_s, sleep=self._sleep)
                self._client = (factory, Api(api_client, backoff, api.connect_timeout_s, self.server_clock))
                self._stop_caches()  # built over the previous factory's client
                self.crds.clear()  # another client may talk to another cluster
            return self._client[1]

    def now(self) -> datetime.datetime:
        """The current time on the API server's clock (ours, shifted by what its `Date` headers said).

        Returns:
            A timezone-aware time.
        """
        return self.server_clock.now(self._clock())

    # ------------------------------------------------------------------ the watch cache
    def cache(self, target: JobTarget) -> Optional[JobWatchCache]:
        """The watch cache of `target`'s jobs, built on first use; None when `watch_cache` is off or
        `default_labels` has no `app.kubernetes.io/managed-by` label to select our jobs by.

        Args:
            target: the job kind.

        Returns:
            The cache (its namespaces start watching on their first `get` or `feed`), or None.
        """
        key = _resource_of(target)
        if key in self._caches:
            return self._caches[key]
        self.api()
        with self._lock:
            if key not in self._caches:
                self._caches[key] = self._new_cache(target)
            return self._caches[key]

    def _new_cache(self, target: JobTarget) -> Optional[JobWatchCache]:
        config = self.config
        managed_by = config.job.default_labels.get(MANAGED_BY_LABEL)
        if not config.watch.cache:
            return None
        if not managed_by:
            logger.warning(
                "watch_cache is on but default_labels has no %s label to select our jobs by; every get reads the API",
                MANAGED_BY_LABEL,
            )
            return None
        assert self._client is not None
        selector = f"{MANAGED_BY_LABEL}={managed_by}"
        return JobWatchCache(self._client[1].api_client, target.group, target.version, target.plural, selector,
                             config.watch, server_clock=self.server_clock)  # fmt: skip

    def _stop_caches(self) -> None:
        caches, self._caches = list(self._caches.values()), {}
        for cache in caches:
            if cache is not None:
                try:
                    cache.stop()
                except RuntimeError as e:  # a thread still in a read: a daemon, it ends with its read
                    logger.warning("%s", e)

    def close(self) -> None:
        """Stop the watch caches' threads (a later `get` starts them again).

        Raises:
            Nothing: a watch thread that does not end in time is logged and left to end on its own.
        """
        with self._lock:
            self._stop_caches()

    # ------------------------------------------------------------------ API calls
    def deadline(self, operation: str) -> Deadline:
        """A new deadline for one operation, from its budget (`api_<operation>_budget_s`).

        Args:
            operation: `create`, `get` or `delete`.

        Returns:
            The deadline, counting from now.
        """
        return Deadline(self.config.api.budget_s(operation), f"api_{operation}_budget_s")

    def _read_job(self, namespace: str, name: str, target: JobTarget, deadline: Deadline, verb: str = "get") -> dict:
        request = Request(verb, f"{target.kind} {namespace}/{name}", namespace, "get", target.plural, target.group)
        return self.api().read_object(request, target.group, target.version, target.plural, name,
                                      f"a {target.kind} object", deadline)  # fmt: skip

    def _list(self, what: str, namespace: str, name: str, target: JobTarget, deadline: Deadline) -> list[dict]:
        """The core/v1 pods or events of one job (`what`: "pods" or "events"), by the target's selector."""
        api = self.api()
        list_call: Callable[..., Any]
        if what == "pods":
            list_call, selector = api.core.list_namespaced_pod, {"label_selector": target.pod_selector(name)}
        else:
            list_call, selector = api.core.list_namespaced_event, {"field_selector": target.events_selector(name)}
        request = Request(f"list {what} of", f"{target.kind} {namespace}/{name}", namespace, "list", what, "")
        return api.list_pages(request, list_call, selector, what, deadline)

    # ------------------------------------------------------------------ target
    def target(self, deadline: Optional[Deadline] = None) -> JobTarget:
        """The job kind this connector creates: `BackendConfig.target`, or for `auto` the first registered kind whose
        CRD the API server serves (asked once per connector, and logged).

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
        if self._auto_target is None:
            self._auto_target = self._discover_target(deadline or self.deadline("create"))
        return self._auto_target

    def _discover_target(self, deadline: Deadline) -> JobTarget:
        """Ask the API server which CRD it serves (`GET /apis/<group>/<version>`), in registry order."""
        api = self.api()
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
        raise NotFound(
            "discover",
            "the job kind (target: auto)",
            f"the API server serves neither {served}; install one, or set target explicitly",
        )

    # ------------------------------------------------------------------ the output prefix (blob storage)
    def read_error_report(self, output_prefix: str) -> ErrorReport:
        """The task's error documents under `output_prefix` (`blobs.read_error_report`, never raising).

        Args:
            output_prefix: the execution's output prefix.

        Returns:
            The documents read and what went wrong.
        """
        return blobs.read_error_report(output_prefix, self.config.status.error_document_max_bytes)

    def outputs_written(self, output_prefix: str) -> bool:
        """Whether `outputs.pb` exists under `output_prefix` (`blobs.outputs_written`).

        Args:
            output_prefix: the execution's output prefix.

        Returns:
            True when the task wrote its outputs.
        """
        return blobs.outputs_written(output_prefix)

    # ------------------------------------------------------------------ live progress
    @property
    def progress(self) -> LiveProgress:
        """The progress records of the running task attempts this connector polls (`backend_plugin.progress`), read
        at most once per `progress_read_interval_s` each; built on first use."""
        progress = self._progress
        if progress is not None:
            return progress  # no lock: the event loop asks on every poll, and `api` holds the lock while it builds
        with self._lock:
            if self._progress is None:
                self._progress = LiveProgress(self.config.status.progress_read_interval_s, self.config.watch.idle_s)
            return self._progress

    def start_progress_read(self, answer: Resource, resource_meta: JobMetadata) -> Optional[Future]:
        """Start reading the attempt's progress record when the answer is RUNNING and a read is due (the attempt is
        forgotten when the answer is terminal). No I/O here: the read runs on the progress pool.

        Args:
            answer: the job's answer, without progress.
            resource_meta: what `create` returned (its `output_prefix` is where the record is).

        Returns:
            The read this poll should wait for (the attempt's first, or the one before its record is called stale:
            `progress.Read.AWAITED`), or None: no read is due, or one was started that the record held covers meanwhile.
        """
        prefix = resource_meta.output_prefix
        if not prefix:
            return None  # metadata of an older connector: no output prefix, no progress
        progress = self.progress
        if answer.phase in TERMINAL_PHASES:
            progress.forget(prefix)
            return None
        if answer.phase != TaskExecution.RUNNING:
            return None
        due = progress.claim(prefix, self._monotonic(), self._wall())
        if due is Read.NONE:
            return None
        pool = self._progress_reads
        if pool is None:
            with self._lock:
                if self._progress_reads is None:
                    self._progress_reads = ThreadPoolExecutor(PROGRESS_READ_THREADS, "connector-progress")
                pool = self._progress_reads
        try:
            read = pool.submit(self._read_progress, prefix)
        except RuntimeError:  # the pool is shut down (the interpreter is exiting)
            progress.release(prefix)
            return None
        return read if due is Read.AWAITED else None

    def _read_progress(self, prefix: str) -> None:
        """On the progress pool: read the record and hand it over (a claim is always settled)."""
        try:
            found = blobs.read_progress_record(prefix)  # never raises
        except Exception as e:  # noqa: BLE001 - whatever it was, the attempt's claim must not stay under way
            found = blobs.RecordRead(problem=f"{type(e).__name__}: {e}")
        self.progress.store(prefix, found.data, found.problem, self._monotonic())

    def with_progress(self, answer: Resource, resource_meta: JobMetadata) -> Resource:
        """The answer with the attempt's progress line added to a RUNNING message: "running (3/3 replicas active);
        step 1,200/5,000 (24%), ETA 3m10s, loss 0.124". No I/O: the record held (see `start_progress_read`).

        Args:
            answer: the job's answer, without progress.
            resource_meta: what `create` returned.

        Returns:
            The answer, with the line when the job runs and a record is held; else `answer` itself.
        """
        if answer.phase != TaskExecution.RUNNING or not resource_meta.output_prefix:
            return answer
        line = self.progress.message(resource_meta.output_prefix, self._wall())
        if not line:
            return answer
        return replace(answer, message=f"{answer.message}; {line}" if answer.message else line)

    def _wall(self) -> float:
        """What staleness and ETAs are judged on: the API server's clock (as ages are), seconds since the epoch."""
        return self.now().timestamp()

    # ------------------------------------------------------------------ create
    def execution_metadata(
        self,
        template: dict,
        output_prefix: str,
        task_execution_metadata: Optional[TaskExecutionMetadata],
    ) -> ExecutionMetadata:
        """The writer's `ExecutionMetadata` for a create request (`execution.execution_metadata`, which is pure).

        Args:
            template: the task template dict.
            output_prefix: where the task writes outputs.pb.
            task_execution_metadata: from the create request; None for local runs.

        Returns:
            The execution metadata for the target's writer.
        """
        identity = identity_of(task_execution_metadata, template.get("id") or {}, output_prefix)
        return execution_metadata(identity, output_prefix, self.config, task_execution_metadata)

    def create(
        self,
        task_template: TaskTemplate,
        output_prefix: str,
        inputs: Optional[LiteralMap] = None,
        task_execution_metadata: Optional[TaskExecutionMetadata] = None,
        **kwargs: Any,
    ) -> JobMetadata:
        """Build the job, write the inputs where it reads them, and create it (or adopt the identical job that already
        exists). The inputs are written at the execution's `input_path` only when the job reads them there
        (`BuiltJob.reads`): Flyte's connector plugin renders a container task's arguments before it calls
        `CreateTask`, so such a job reads the run's own inputs file.

        Args:
            task_template: the task's template.
            output_prefix: the execution's output prefix (inputs.pb is written under it when the job reads it there).
            inputs: the task's inputs, written by `write_inputs` (an empty map when None: pyflyte-execute always
                reads one).
            task_execution_metadata: execution identity, namespace, labels, annotations, env, service account.
            **kwargs: ignored (future flytekit arguments).

        Returns:
            The job's namespace, name, uid, output prefix and the task config log links need; for a template that
            cannot be built, a job the admission model refuses (nothing is sent, not even inputs.pb) or a job the API
            server rejects as invalid (it can never run), no job and the reason in `error`, which the next `get`
            reports as a permanent failure.

        Raises:
            Conflict: a different job with the same name exists.
            Forbidden: RBAC denies creating the job (the message names the permission).
            KubeApiError: any other API failure, after retries for transient ones.
        """
        self.api()
        admission.prepare()  # one-time: the vendored CRDs read and their rules compiled, outside the budget
        deadline = self.deadline("create")
        template = template_to_dict(task_template)
        meta = self.execution_metadata(template, output_prefix, task_execution_metadata)
        config = template.get("config")
        task_config = {
            str(k): str(v)
            for k, v in (config if isinstance(config, dict) else {}).items()
            if not str(k).startswith(CONFIG_PREFIX)
        }
        target = self.target(deadline)
        base = JobMetadata(
            meta.namespace or self.config.job.namespace,
            meta.job_name,
            kind=target.kind,
            output_prefix=meta.output_prefix,
            task_config=task_config,
        )
        try:
            written = write_job(template, meta, self.config, target)
            built = self.for_cluster(written, deadline)
            job = self.admitted(built)
        except TemplateError as e:  # admission.JobNotAdmitted included: nothing has been sent
            logger.warning("task template for %s/%s cannot run as a %s: %s", base.namespace, base.name, target.kind, e)
            return replace(base, error=f"the task template cannot run: {e}")
        _log_warnings(job, built)
        if built.reads(meta.input_path):  # not when Flyte rendered `{{.input}}` to the run's own inputs file
            self.write_inputs(inputs, meta.input_path)
        try:
            created = self.create_job(job, deadline)
        except Rejected as e:
            fields = unknown_fields(e.status.message if e.status is not None else "")
            if fields:  # the installed CRD lacks what we sent: never the raw 400, never the same request again
                return self._create_for_installed_crd(written, base, job, fields, deadline)
            logger.warning("%s", e)
            return replace(base, error=f"the API server rejected the job: {e}")
        return replace(base, namespace=created.namespace, name=created.name, uid=created.uid, kind=created.kind,
                       dropped="; ".join(built.dropped))  # fmt: skip

    def for_cluster(self, written: WrittenJob, deadline: Deadline) -> BuiltJob:
        """A written job fitted to the cluster's installed CRD of its kind and judged by it (`build.finish_job`;
        `ClusterCrds` reads the CRD before the kind's first create); when that CRD changes the job (fits it, or
        refuses it) and was read more than `api_crd_recheck_s` ago, it is read again first.

        Args:
            written: the job as its kind wrote it (`build.write_job`).
            deadline: the create's deadline.

        Returns:
            The built job.
        """
        api = self.api()
        target = written.kind
        crd = self.crds.current(target, api, deadline)
        built = finish_job(written, crd)
        if crd is not None and built.fitted is not None and (built.fitted.notes or built.refusals):
            fresh, changed = self.crds.recheck(target, api, deadline, self.config.api.crd_recheck_s)
            if changed:
                built = finish_job(written, fresh)
        return built

    def _create_for_installed_crd(
        self, written: WrittenJob, base: JobMetadata, sent: dict, fields: list[str], deadline: Deadline
    ) -> JobMetadata:
        """After a strict 400 naming `fields`: learn what the installed CRD declares (`ClusterCrds.learn`), and
        create the job built for it, once; or fail for good, naming the fields, the release and what to do."""
        target = written.kind
        crd, unmapped = self.crds.learn(target, fields, self.api(), deadline)
        refused = f"the API server rejected the job: {strict_refusal(crd, target.declaration, fields)}"
        if unmapped:
            logger.warning("%s", refused)
            return replace(base, error=refused)
        try:
            built = finish_job(written, crd)
            job = self.admitted(built)
        except TemplateError as e:
            logger.warning("task template for %s/%s cannot run as a %s: %s", base.namespace, base.name, target.kind, e)
            return replace(base, error=f"the task template cannot run: {e}")
        if job == sent:  # nothing the kind can write otherwise: the same request would be refused again
            logger.warning("%s", refused)
            return replace(base, error=refused)
        _log_warnings(job, built)
        try:
            created = self.create_job(job, deadline)
        except Rejected as e:
            again = unknown_fields(e.status.message if e.status is not None else "")
            if again:
                crd, _ = self.crds.learn(target, again, self.api(), deadline, read=False)
                message = f"the API server rejected the job: {strict_refusal(crd, target.declaration, again)}"
            else:
                message = f"the API server rejected the job: {e}"
            logger.warning("%s", message)
            return replace(base, error=message)
        return replace(base, namespace=created.namespace, name=created.name, uid=created.uid, kind=created.kind,
                       dropped="; ".join(built.dropped))  # fmt: skip

    def write_inputs(self, inputs: Any, path: str) -> None:
        """Write the task's inputs where its pods read them (`{{.input}}`), in the form their entrypoint reads.

        Flyte 1's: a `LiteralMap`, empty when None (`blobs.write_inputs`; pyflyte-execute always reads one). A
        connector for another Flyte generation overrides this with its own message (Flyte 2's `Inputs`).

        Args:
            inputs: what `create` was given.
            path: the execution's `inputs.pb`.
        """
        blobs.write_inputs(inputs, path)

    def admitted(self, built: BuiltJob) -> dict:
        """The job as the connector sends it (stamped by `build_job`), once the admission model admits it; its notes
        (a job close to the size limit, a rule not evaluated) are logged.

        Args:
            built: what `build_job` returned.

        Returns:
            The stamped job.

        Raises:
            admission.JobNotAdmitted: the cluster would reject it, prune part of it, or never start its pods (a
                permanent `TemplateError` naming each user setting and what to do).
        """
        job = built.admitted()
        meta = job["metadata"]
        for note in built.notes:
            logger.warning("%s %s/%s: %s", job.get("kind"), meta.get("namespace"), meta.get("name"), note.message)
        return job

    def create_job(self, job: dict, deadline: Optional[Deadline] = None) -> JobMetadata:
        """POST a built job with `fieldValidation=Strict`, never creating a second copy (see the module docstring).

        Args:
            job: the job dict as `admitted` returns it (its `kind` picks the target); sent as it is.
            deadline: the create's deadline; a new one (`api_create_budget_s`) when None.

        Returns:
            The job's namespace, name and uid.

        Raises:
            Conflict: a different job with the same name exists.
            Rejected: the API server refuses the job and always will (invalid, too large, ...).
            KubeApiError: the create failed (retried within the deadline for transient failures).
        """
        deadline = deadline or self.deadline("create")
        api = self.api()
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        target = target_for_kind(str(job.get("kind") or ""))
        request = Request("create", f"{target.kind} {namespace}/{name}", namespace, "create", target.plural,
                          target.group, retry_transient=False, secrets=_env_values(job))  # fmt: skip

        def post(timeout: tuple[float, float]) -> Any:
            return api.custom.create_namespaced_custom_object(
                target.group, target.version, namespace, target.plural, job, field_validation="Strict",
                _request_timeout=timeout, _preload_content=False,
            )  # fmt: skip

        def decode(created: Any) -> dict:
            if not isinstance(created, dict) or not isinstance(created.get("metadata"), dict):
                # The create may have happened: the adopting read finds out.
                raise MalformedAnswer("create", request.subject,
                                      f"the API answered with {shape(created)}, not a {target.kind}")  # fmt: skip
            return created

        def attempt() -> JobMetadata:
            try:
                created = api.call(request, post, deadline, decode)
            except Conflict:
                return self.adopt_existing(job, deadline)
            except Unavailable as e:
                # The create may have happened without us seeing the answer: look before trying again.
                try:
                    return self.adopt_existing(job, deadline)
                except (NotFound, Unavailable):
                    pass  # not there (or unknown): a repeated POST is safe, the name is deterministic (409)
                raise e from None
            logger.info("created %s %s/%s", target.kind, namespace, name)
            return JobMetadata(namespace, name, str(created["metadata"].get("uid", "")), kind=target.kind)

        return retry(
            attempt,
            lambda e: isinstance(e, Unavailable),
            api.backoff,
            deadline,
            lambda error, attempts, elapsed: request.gave_up(error, attempts, elapsed, deadline),
            lambda e, n, delay: logger.info("%s; job not found, retrying create in %.2fs", e, delay),
            min_attempt_s=api_module.MIN_ATTEMPT_S,
            least_delay=lambda e: float(getattr(e, "retry_after_s", 0.0) or 0.0),
        )

    def adopt_existing(self, job: dict, deadline: Deadline) -> JobMetadata:
        """After a 409, or a create whose answer was lost: take over the job of this name when it is ours, else raise
        `Conflict`. The one place that decides whether an existing job is ours.

        Ours is `admission.is_our_job`: the stored job's `pytorch.flyte.org/spec-sha256` annotation is the digest of
        the job we would send (the API server keeps annotations as sent, so its defaults, pruning and mutating
        webhooks do not count); a stored job without the annotation is ours when the job we sent, pruned by its
        CRD, is contained in it.

        Args:
            job: the job we tried to create.
            deadline: the create's deadline.

        Returns:
            The existing job's namespace, name and uid.

        Raises:
            Conflict: the job of this name is being deleted, or is another job (the message names where it differs).
            NotFound: there is no job of this name (the create did not happen).
            KubeApiError: it could not be read.
        """
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        target = target_for_kind(str(job.get("kind") or ""))
        subject = f"{target.kind} {namespace}/{name}"
        stored = self._read_job(namespace, name, target, deadline, verb="create")
        if (stored.get("metadata") or {}).get("deletionTimestamp"):
            raise Conflict("create", subject, "a job with this name exists and is being deleted; retry once it is gone")
        if not admission.is_our_job(stored, job):
            raise Conflict(
                "create",
                subject,
                f"a different {target.kind} with this name already exists ({_how_it_differs(job, stored)}); delete "
                f"it with `kubectl delete {target.kind.lower()} -n {namespace} {name}` or rerun under a new execution",
            )
        logger.info("adopted existing %s %s/%s: it is the job we create", target.kind, namespace, name)
        return JobMetadata(namespace, name, str(stored["metadata"].get("uid", "")), kind=target.kind)

    # ------------------------------------------------------------------ get
    def get(self, resource_meta: JobMetadata, **kwargs: Any) -> Resource:
        """Read the job (and its pods only when needed to explain it) and report phase, message and log links.

        With `watch_cache` on, the job comes from the watch cache when it is fresh and holds the job of our uid;
        otherwise from a GET, which feeds the cache. A job the cache does not hold (deleted, relabelled, of another
        uid, not yet seen) is always read with a GET: only the API's own answer (404, or another uid) says it is
        gone. With the cache off, every call is a GET.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.

        Returns:
            A `Resource` with the phase, a message saying why (while the job runs, with the task's live progress:
            `with_progress`), log links for every replica and the job's status (conditions, replica counts, times)
            as `custom_info`.

        Raises:
            KubeApiError: the job could not be read (after retries, within `api_get_budget_s`); Flyte polls again.
        """
        ns, name = resource_meta.namespace, resource_meta.name
        target = target_for_kind(getattr(resource_meta, "kind", "") or "")
        identity = {"namespace": ns, "name": name, "uid": resource_meta.uid}
        if resource_meta.error:
            return Resource(phase=TaskExecution.FAILED, message=resource_meta.error, custom_info=identity)
        self.api()
        cache = self.cache(target)
        deadline = self.deadline("get")  # from here: the client is built (see `api`)
        job = cache.get(ns, name) if cache is not None else None
        if job is not None and not _same_uid(job, resource_meta):
            job = None  # the cache holds another job of this name: the API says which one is there now
        if job is None:
            try:
                job = self._read_job(ns, name, target, deadline)
            except NotFound:
                return self._progress_of(self._gone(resource_meta), resource_meta)  # terminal: forgets the progress
            if cache is not None:
                cache.feed(job)
        return self._progress_of(self._answer(job, resource_meta, target, deadline), resource_meta)

    def _progress_of(self, answer: Resource, resource_meta: JobMetadata) -> Resource:
        """`answer` with the attempt's progress line, after waiting (in this thread) up to `PROGRESS_READ_WAIT_S`
        for the read this poll starts, if it is one to wait for (`start_progress_read`)."""
        read = self.start_progress_read(answer, resource_meta)
        if read is not None:
            try:
                read.result(PROGRESS_READ_WAIT_S)
            except FutureTimeout:
                pass  # a slow store: this poll shows the record held, the read serves the next one
        return self.with_progress(answer, resource_meta)

    def answer_from_cache(self, resource_meta: JobMetadata) -> Optional[Resource]:
        """The `get` answer when it needs no I/O: the job's cache is built and holds the job of our uid, and its
        status needs neither pods, events nor error documents. Safe to call in an event loop.

        Args:
            resource_meta: what `create` returned.

        Returns:
            The `Resource` `get` would return before its live progress is added (`with_progress`), or None when `get`
            must read something.
        """
        if resource_meta.error:
            return None
        target = target_for_kind(getattr(resource_meta, "kind", "") or "")
        cache = self._caches.get(_resource_of(target))
        if cache is None:
            return None  # not built yet (or off): building it imports the client, not for the event loop
        job = cache.get(resource_meta.namespace, resource_meta.name)
        if job is None or not _same_uid(job, resource_meta):
            return None
        try:
            reads = target.reads(job, self.config, self.now())
            if reads.pods or reads.events or (reads.error_report and resource_meta.output_prefix):
                return None
            return self._answer(job, resource_meta, target, None)
        except (KubeApiError, AttributeError, TypeError, ValueError, KeyError):
            return None  # a job of a shape no API server writes: `get` says so, naming it

    def _answer(
        self, job: dict, resource_meta: JobMetadata, target: JobTarget, deadline: Optional[Deadline]
    ) -> Resource:
        """Phase, message, links and info of a job read (from the API or the cache): pods, events and error documents
        are read only when the status needs them (`deadline` is None only when it needs none)."""
        ns, name, kind = resource_meta.namespace, resource_meta.name, target.kind
        identity = {"namespace": ns, "name": name, "uid": resource_meta.uid}
        uid = str((job.get("metadata") or {}).get("uid", ""))
        if resource_meta.uid and uid and uid != resource_meta.uid:
            return Resource(
                phase=TaskExecution.RETRYABLE_FAILED,
                message=f"{kind} {ns}/{name} was deleted outside Flyte and a different job of the same name "
                f"now exists (uid {uid}, ours was {resource_meta.uid})",
                custom_info={**identity, "replaced_by": uid},
            )
        now = self.now()
        reads = target.reads(job, self.config, now)
        pods: Optional[list[dict]] = None
        note = ""
        if reads.pods:
            assert deadline is not None
            try:
                pods = self._list("pods", ns, name, target, deadline)
            except KubeApiError as e:
                # The job's own conditions still decide the phase; only the explanation is poorer.
                logger.warning("%s", e)
                note = f" (replica details unavailable: {e.reason})"
        errors: Optional[ErrorReport] = None
        if reads.error_report and resource_meta.output_prefix:
            errors = self.read_error_report(resource_meta.output_prefix)
        events: Optional[list[dict]] = None
        events_problem = ""
        if reads.events:
            assert deadline is not None
            try:
                events = self._list("events", ns, name, target, deadline)
            except KubeApiError as e:
                logger.warning("%s", e)
                events_problem = e.reason
        observed = Observed(pods, errors, events, events_problem)
        try:
            status = target.status(job, observed, self.config, now)
            links = target.links(job, pods, self.config, now, resource_meta.task_config)
        except (AttributeError, TypeError, ValueError, KeyError) as e:
            # Something read has a shape no API server writes. Without pods and events, the job's own conditions
            # decide; if the job itself is the problem, say so (naming the job) and let Flyte poll again.
            logger.warning("%s %s/%s: an answer of the wrong shape (%s); judging the job alone", kind, ns, name, e)
            note = " (replica details unavailable: the pods or events were not of the shape the API writes)"
            try:
                status = target.status(job, Observed(None, errors), self.config, now)
                links = []
            except (AttributeError, TypeError, ValueError, KeyError):
                raise MalformedAnswer(
                    "get", f"{kind} {ns}/{name}", f"the job's status is not of the shape the API writes ({e})"
                ) from None
        return Resource(
            phase=status.phase,
            message=status.message + note + (f"; note: {resource_meta.dropped}" if resource_meta.dropped else ""),
            log_links=links,
            custom_info=_custom_info(job, target),
        )

    def _gone(self, meta: JobMetadata) -> Resource:
        """The job is not there: what the task wrote before it went decides (a TTL of 0 deletes a finished job)."""
        ns, name = meta.namespace, meta.name
        info = {"namespace": ns, "name": name, "uid": meta.uid, "deleted": True}
        deleted = f"{meta.kind} {ns}/{name} no longer exists"
        if meta.output_prefix:
            errors = self.read_error_report(meta.output_prefix)
            if errors.errors:
                headline = f"{deleted}; it failed before it was deleted."
                status = failed_job_status(headline, [], errors)
                return Resource(phase=status.phase, message=status.message, custom_info=info)
            if self.outputs_written(meta.output_prefix):
                return Resource(
                    phase=TaskExecution.SUCCEEDED,
                    message=f"{deleted}, but the task wrote its outputs: it finished and was deleted before this poll "
                    "(ttlSecondsAfterFinished)",
                    custom_info=info,
                )
        return Resource(
            phase=TaskExecution.RETRYABLE_FAILED,
            message=f"{deleted}: it was deleted outside Flyte (for example with kubectl, by ttlSecondsAfterFinished, "
            "or with its namespace) before it finished, and the task wrote neither outputs nor an error; a "
            "retryable failure",
            custom_info=info,
        )

    # ------------------------------------------------------------------ delete
    def delete(self, resource_meta: JobMetadata, **kwargs: Any) -> None:
        """Delete the job and its pods (foreground, or as its kind's `delete_propagation` says); a job that is
        already gone is success.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.

        Raises:
            KubeApiError: the delete failed (after retries for transient failures, within `api_delete_budget_s`).
        """
        if resource_meta.error:
            return  # create recorded why the job could never run: nothing was created
        api = self.api()
        deadline = self.deadline("delete")
        from kubernetes import client

        ns, name = resource_meta.namespace, resource_meta.name
        target = target_for_kind(getattr(resource_meta, "kind", "") or "")
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


def _log_warnings(job: dict, built: BuiltJob) -> None:
    """The kind's warnings for a job about to be created: backend defaults it drops, and what fitting it to the
    cluster's installed CRD wrote otherwise or dropped."""
    meta = job["metadata"]
    for warning in built.warnings:
        logger.warning("%s %s/%s: %s", built.kind.kind, meta.get("namespace"), meta.get("name"), warning)


def _how_it_differs(sent: dict, stored: dict) -> str:
    """Where another job under our name differs from ours, for the Conflict: the fields of our spec (pruned by the
    CRD, as the server stores it) it lacks or holds otherwise, else what else tells them apart."""
    schema = crds.schema_for(str(sent.get("apiVersion")), str(sent.get("kind")))
    diffs = spec_differences(structural.prune(sent, schema).get("spec"), stored.get("spec"))
    if diffs:
        return "differs in " + ", ".join(diffs[:5]) + (f" and {len(diffs) - 5} more" if len(diffs) > 5 else "")
    digest = ((stored.get("metadata") or {}).get("annotations") or {}).get(admission.SPEC_DIGEST_ANNOTATION)
    if digest is not None:
        return f"its {admission.SPEC_DIGEST_ANNOTATION} annotation is the digest of another spec, labels or annotations"
    return "differs in its labels or annotations"


def _resource_of(target: JobTarget) -> str:
    """`<plural>.<group>/<version>`: what a watch cache is kept per."""
    return f"{target.plural}.{target.api_version}"


def _same_uid(job: dict, meta: JobMetadata) -> bool:
    """Whether `job` is the one `meta` names (always, when either uid is unknown: old metadata)."""
    uid = str((job.get("metadata") or {}).get("uid", ""))
    return not (meta.uid and uid and uid != meta.uid)


def _env_values(job: Any) -> tuple[str, ...]:
    """Every `env[].value` in a job: the values an API server's message must not carry into our errors."""
    out: list[str] = []
    if isinstance(job, dict):
        for key, value in job.items():
            if key == "env" and isinstance(value, list):
                out.extend(str(e["value"]) for e in value if isinstance(e, dict) and isinstance(e.get("value"), str))
            else:
                out.extend(_env_values(value))
    elif isinstance(job, list):
        for item in job:
            out.extend(_env_values(item))
    return tuple(out)


def _custom_info(job: dict, target: JobTarget) -> dict[str, Any]:
    """The job's identity and status as a JSON-able dict (shown in Flyte's task details); the kind only when it is
    not the default kind's, so that kind's info reads as before."""
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


class ServedJobConnector(JobConnector):
    """The connector as `pyflyte serve connector` runs it: `get` is a coroutine, so flytekit awaits it in the event
    loop instead of queueing it on asyncio's default pool of min(32, CPUs + 4) threads.

    A poll the watch cache answers without I/O (`answer_from_cache`) is answered inline, in microseconds, with the
    progress record held; a poll that finds a read of the record due (one per task attempt every
    `progress_read_interval_s`) starts it on the progress pool, and awaits it for at most `PROGRESS_READ_WAIT_S`,
    leaving the event loop free, only when it is the attempt's first or a record held is about to be called stale.
    Every other poll runs the sync `JobConnector.get` on a pool of `get_threads` threads, whose API calls keep their
    deadline and retries. `create` and `delete` stay sync (flytekit runs them in its default pool; they are rare).
    """

    name = JobConnector.name
    _pool: Optional[ThreadPoolExecutor] = None

    def _get_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.api.get_threads, thread_name_prefix="connector-get")
            return self._pool

    async def get(self, resource_meta: JobMetadata, **kwargs: Any) -> Resource:
        """`JobConnector.get`, answered inline when the cache can, else on the `get_threads` pool.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.

        Returns:
            What `JobConnector.get` returns.

        Raises:
            KubeApiError: the job could not be read (after retries, within `api_get_budget_s`); Flyte polls again.
        """
        answer = self.answer_from_cache(resource_meta)
        if answer is not None:
            read = self.start_progress_read(answer, resource_meta)
            if read is not None:
                await _settled(read, PROGRESS_READ_WAIT_S)
            return self.with_progress(answer, resource_meta)
        call = functools.partial(JobConnector.get, self, resource_meta)
        return await asyncio.get_running_loop().run_in_executor(self._get_pool(), call)


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


def register() -> None:
    """Register the served connector for `pytorch` task versions 0 and 1 (idempotent)."""
    for version in (0, 1):
        try:
            if isinstance(ConnectorRegistry.get_connector(TASK_TYPE, version), ServedJobConnector):
                continue
        except Exception:  # noqa: BLE001 - FlyteConnectorNotFound: not registered yet
            pass
        ConnectorRegistry.register(ServedJobConnector(task_type_version=version), override=True)


register()
