"""flytekit connector for `pytorch` tasks: create / get / delete the Kubeflow job a task becomes.

The connector only talks to the API; everything else is pure and lives elsewhere: the task from
`template.read_template` (read once per create), the execution from `execution.execution_metadata` (shared with
`pytorchjob render`), the job kind from `targets` (`BackendConfig.target`; `auto` asks the API server once), and
from that kind's `JobTarget` the job (`write`), which reads its status needs (`reads`), the phase (`status`) and
log links (`links`); errors from `errors.classify`, retries from `retry.retry`. It never names or compares a kind:
messages take the kind's name from the target. Importing this module registers the
connector for task type "pytorch" versions 0 and 1 with flytekit's `ConnectorRegistry`; it loads neither the
kubernetes client nor any kube config (the API client is built on first use by a replaceable factory, see
`set_api_client_factory`).

Serve it with `pyflyte serve connector --modules backend_plugin.connector`.

Failure handling:
- each create, get and delete has one deadline (`api_create_budget_s`, `api_get_budget_s`, `api_delete_budget_s`,
  sized to propeller's CreateTask/GetTask/DeleteTask timeouts) covering every API call inside it: 429/5xx,
  timeouts and malformed answers are retried with exponential backoff and full jitter while an attempt still fits,
  each attempt's connect and read timeouts are cut to what is left, and the kubernetes client's own (urllib3)
  retries are off, so this loop is the only one;
- errors never carry a response body: they are raised `from None` with the status, the reason and our message;
- a create that got no answer is followed by a GET before it is retried, so a slow API server never gets two jobs;
- AlreadyExists adopts the existing job when its spec is the one we would create, and is a `Conflict` otherwise;
- `get` only reports what it read: API trouble is an exception (Flyte polls again), never an invented phase;
- a failed job's phase (retryable or not) and message come from the task's own error document, read from the
  output prefix kept in the resource meta (`status.failed_job_status`); a read failure never hides the phase;
- a job that never starts is failed after `job_start_timeout_s`, with its warning events as the reason;
- a template that cannot be built (an image the kubelet would refuse included), or a job the API server rejects
  (invalid, too large, ...), can never run: `create` records why in the resource meta and the first `get` reports a
  permanent FAILED (an exception from `create` would be retried by propeller as if it could heal);
- an answer that is not the JSON asked for is an error naming the job (the next poll heals); malformed pods or events
  only make the explanation poorer: the job's own conditions still decide the phase;
- a job deleted behind Flyte's back is reported RETRYABLE_FAILED with that reason (as propeller reports a deleted
  pod), unless the task already wrote its outputs or an error document; `delete` of a missing job is success.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Optional, TypeVar

from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.extend.backend.base_connector import AsyncConnectorBase, ConnectorRegistry, Resource, ResourceMeta
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate

from backend_plugin.config import BackendConfig, load_config
from backend_plugin.errors import (
    Conflict,
    KubeApiError,
    MalformedAnswer,
    NotFound,
    Rejected,
    TemplateError,
    Unavailable,
    classify,
)
from backend_plugin.execution import ExecutionMetadata, execution_metadata, identity_of
from backend_plugin.retry import Backoff, Deadline, retry
from backend_plugin.status import failed_job_status
from backend_plugin.targets import DEFAULT, KINDS, JobTarget, Observed, target_for_config, target_for_kind
from backend_plugin.task_errors import MAX_ERROR_FILES, ErrorReport, is_error_file, report_of
from backend_plugin.template import read_template, template_to_dict
from backend_plugin.watch import JobWatchCache
from pytorch_contract.template_keys import CONFIG_PREFIX, TASK_TYPE

logger = logging.getLogger(__name__)

T = TypeVar("T")

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""The label (from `BackendConfig.default_labels`) the watch cache selects our jobs by."""

POD_PAGE = 500
"""`limit` of each page of a pod or event list (client-go's pager uses 500): a 1,000-worker job's 1,001 pods come in
three bounded answers rather than one of 2 MB."""

MIN_ATTEMPT_S = 0.2
"""The least time left in an operation's budget for a retry to be worth starting (a first attempt needs 10 ms)."""

ApiClientFactory = Callable[[], Any]


def default_api_client() -> Any:
    """A kubernetes `ApiClient` from the in-cluster service account, else from the local kubeconfig.

    Returns:
        A new `kubernetes.client.ApiClient`.

    Raises:
        kubernetes.config.ConfigException: neither in-cluster config nor a kubeconfig is available.
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    configuration.retries = False  # our retry loop is the only one (see `without_client_retries`)
    return client.ApiClient(configuration)


def without_client_retries(api_client: Any) -> Any:
    """Turn the kubernetes client's own retries off: urllib3's (3 by default, each waiting out a full read timeout)
    and the client-go-style read retries. The connector's loop is then the only one, inside the operation's deadline.

    Args:
        api_client: a `kubernetes.client.ApiClient` (from any factory).

    Returns:
        The same client; its REST client is rebuilt when its configuration still allowed retries.
    """
    from kubernetes.client import rest

    configuration = api_client.configuration
    if configuration.retries is not False or getattr(configuration, "client_go_retries", False):
        configuration.retries = False
        configuration.client_go_retries = False
        old = api_client.rest_client
        api_client.rest_client = rest.RESTClientObject(configuration)
        old.pool_manager.clear()
    return api_client


def with_pool_size(api_client: Any, size: int) -> Any:
    """Let the client keep `size` connections open, so that every thread of the get pool (and each watch) has one.

    urllib3 keeps 4 per host by default (`Configuration.connection_pool_maxsize`); more concurrent requests open
    connections that are closed after use, a TCP (and TLS) handshake per request.

    Args:
        api_client: a `kubernetes.client.ApiClient`.
        size: the least number of pooled connections.

    Returns:
        The same client; its REST client is rebuilt when its pool was smaller.
    """
    from kubernetes.client import rest

    configuration = api_client.configuration
    if (configuration.connection_pool_maxsize or 0) < size:
        configuration.connection_pool_maxsize = size
        old = api_client.rest_client
        api_client.rest_client = rest.RESTClientObject(configuration)
        old.pool_manager.clear()
    return api_client


_factory: ApiClientFactory = default_api_client


def set_api_client_factory(factory: Optional[ApiClientFactory]) -> None:
    """Replace the function that builds the kubernetes `ApiClient` (tests point it at a fake API server).

    Connectors built without their own factory pick the new one up on their next call.

    Args:
        factory: a zero-argument callable returning an ApiClient; None restores `default_api_client`.
    """
    global _factory
    _factory = factory or default_api_client


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
    """

    namespace: str
    name: str
    uid: str = ""
    output_prefix: str = ""
    task_config: dict[str, str] = field(default_factory=dict)
    error: str = ""
    kind: str = DEFAULT.kind

    def encode(self) -> bytes:
        """JSON of the fields; `kind` only when it is not the default kind's, so such metadata reads as before.

        Returns:
            The encoded metadata.
        """
        fields = dataclasses.asdict(self)
        if target_for_kind(self.kind) is DEFAULT:
            del fields["kind"]
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
        clock: returns the current time (tests freeze it).
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
        self._sleep = sleep or time.sleep
        self._client: Optional[tuple[ApiClientFactory, Any]] = None
        self._lock = threading.Lock()
        self._auto_target: Optional[JobTarget] = None
        self._caches: dict[str, Optional[JobWatchCache]] = {}

    # ------------------------------------------------------------------ lazy dependencies
    @property
    def config(self) -> BackendConfig:
        """The backend config (loaded and checked on first use)."""
        if self._config is None:
            self._config = load_config()  # checked when built
        return self._config

    def _apis(self) -> tuple[Any, Any]:
        """(CustomObjectsApi, CoreV1Api) over the current factory's ApiClient, built once per factory.

        Each operation asks for them before its deadline starts: the first time, the kubernetes client imports its
        API modules (seconds on a busy machine), a one-time cost that is not the API's time."""
        factory = self._factory or _factory
        with self._lock:
            if self._client is None or self._client[0] is not factory:
                from kubernetes import client

                api_client = with_pool_size(without_client_retries(factory()), self.config.get_threads + 4)
                self._client = (factory, (client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)))
                self._stop_caches()  # built over the previous factory's client
            apis: tuple[Any, Any] = self._client[1]
        return apis

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
        self._apis()
        with self._lock:
            if key not in self._caches:
                self._caches[key] = self._new_cache(target)
            return self._caches[key]

    def _new_cache(self, target: JobTarget) -> Optional[JobWatchCache]:
        config = self.config
        managed_by = config.default_labels.get(MANAGED_BY_LABEL)
        if not config.watch_cache:
            return None
        if not managed_by:
            logger.warning(
                "watch_cache is on but default_labels has no %s label to select our jobs by; every get reads the API",
                MANAGED_BY_LABEL,
            )
            return None
        assert self._client is not None
        api_client = self._client[1][0].api_client
        selector = f"{MANAGED_BY_LABEL}={managed_by}"
        return JobWatchCache(api_client, target.group, target.version, target.plural, selector)

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

    # ------------------------------------------------------------------ API calls with retries
    def deadline(self, operation: str) -> Deadline:
        """A new deadline for one operation, from its budget (`api_<operation>_budget_s`).

        Args:
            operation: `create`, `get` or `delete`.

        Returns:
            The deadline, counting from now.
        """
        name = f"api_{operation}_budget_s"
        return Deadline(float(getattr(self.config, name)), name)

    def _backoff(self) -> Backoff:
        config = self.config
        return Backoff(config.api_backoff_initial_s, config.api_backoff_max_s, sleep=self._sleep)

    def _timeout(self, deadline: Deadline) -> tuple[float, float]:
        """(connect, read) timeouts of one attempt: the configured ones, cut to what is left of the deadline."""
        left = round(max(0.001, deadline.remaining()), 3)
        return min(float(self.config.api_connect_timeout_s), left), min(float(self.config.api_timeout_s), left)

    def _call(
        self,
        fn: Callable[[tuple[float, float]], T],
        verb: str,
        subject: str,
        namespace: str,
        k8s_verb: str,
        resource: str,
        group: str,
        deadline: Deadline,
        retry_transient: bool = True,
        secrets: tuple[str, ...] = (),
    ) -> T:
        """Run one API call (given its timeouts) within `deadline`: retry transient failures with backoff while an
        attempt still fits, raise classified errors without the client's exception (its text carries the body)."""
        if deadline.remaining() < 0.01:
            raise Unavailable(
                verb,
                subject,
                f"no time left for the API call ({deadline.elapsed():.1f}s of {deadline.describe()} spent)",
            )

        def attempt() -> T:
            try:
                return fn(self._timeout(deadline))
            except Exception as e:  # noqa: BLE001 - classified below
                if not _is_api_failure(e):
                    raise
                error = classify(e, verb, subject, namespace, k8s_verb, resource, group, secrets)
            raise error from None  # outside the handler: no __context__ either

        def gave_up(error: Exception, attempts: int, elapsed: float) -> Exception:
            assert isinstance(error, KubeApiError)
            return Unavailable(verb, subject, _gave_up(error.reason, attempts, elapsed, deadline), error.status)

        return retry(
            attempt,
            lambda e: retry_transient and isinstance(e, KubeApiError) and e.retryable,
            self._backoff(),
            deadline,
            gave_up,
            lambda e, n, delay: logger.info("%s (attempt %d); retrying in %.2fs", e, n, delay),
            min_attempt_s=MIN_ATTEMPT_S,
        )

    def _read_job(self, namespace: str, name: str, target: JobTarget, deadline: Deadline, verb: str = "get") -> dict:
        custom, _ = self._apis()
        subject = f"{target.kind} {namespace}/{name}"

        def read(timeout: tuple[float, float]) -> dict:
            response = custom.get_namespaced_custom_object(
                target.group, target.version, namespace, target.plural, name, _request_timeout=timeout,
                _preload_content=False,
            )  # fmt: skip
            job = _decode(response, verb, subject, f"a {target.kind} object")
            if not isinstance(job, dict) or not isinstance(job.get("metadata") or {}, dict):
                raise MalformedAnswer(verb, subject, f"the API answered with {_shape(job)}, not a {target.kind} object")
            return job

        return self._call(read, verb, subject, namespace, "get", target.plural, target.group, deadline)

    def _list(self, what: str, namespace: str, name: str, target: JobTarget, deadline: Deadline) -> list[dict]:
        """The core/v1 pods or events of one job (`what`: "pods" or "events"), by the target's selector.

        Items that are not objects are dropped; an answer that is not a list is a `MalformedAnswer`."""
        _, core = self._apis()
        if what == "pods":
            list_call, selector = core.list_namespaced_pod, {"label_selector": target.pod_selector(name)}
        else:
            list_call, selector = core.list_namespaced_event, {"field_selector": target.events_selector(name)}
        verb, subject = f"list {what} of", f"{target.kind} {namespace}/{name}"
        token = ""

        def read(timeout: tuple[float, float]) -> tuple[list[dict], str]:
            page = {"limit": POD_PAGE, **({"_continue": token} if token else {})}
            response = list_call(namespace, **selector, **page, _request_timeout=timeout, _preload_content=False)
            answer = _decode(response, verb, subject, f"a {what} list")
            if not isinstance(answer, dict):
                raise MalformedAnswer(verb, subject, f"the API answered with {_shape(answer)}, not a {what} list")
            meta = answer.get("metadata")
            following = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            items = answer.get("items")
            if items is None:
                return [], following  # a list without items (`null` or left out) is an empty list
            if not isinstance(items, list):
                raise MalformedAnswer(verb, subject, f"the API answered with {_shape(answer)}, not a {what} list")
            return [item for item in items if isinstance(item, dict)], following

        out: list[dict] = []
        while True:  # every page inside the same deadline; an expired token (410) is an error like any other
            items, token = self._call(read, verb, subject, namespace, "list", what, "", deadline)
            out.extend(items)
            if not token:
                return out

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
        custom, _ = self._apis()

        def resources_of(t: JobTarget) -> Callable[[tuple[float, float]], Any]:
            def read(timeout: tuple[float, float]) -> Any:
                response = custom.get_api_resources(
                    t.group, t.version, _preload_content=False, _request_timeout=timeout
                )
                answer = _decode(response, "discover", f"API group {t.api_version}", "an APIResourceList")
                resources = answer.get("resources") if isinstance(answer, dict) else None
                if not isinstance(resources, list):
                    raise MalformedAnswer(
                        "discover", f"API group {t.api_version}", f"the API answered with {_shape(answer)}, not an "
                        "APIResourceList"
                    )  # fmt: skip
                return resources

            return read

        for t in KINDS:
            try:
                resources = self._call(
                    resources_of(t), "discover", f"API group {t.api_version}", "", "get", t.plural, t.group, deadline
                )
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
        """Read the task's error documents under `output_prefix` (`error.pb`, `error-<uuid>.pb`), bounded.

        Through flytekit's file access (fsspec), so s3, gcs, abfs and local prefixes all work. Every failure is
        reported in the result, never raised: the job's own status still decides the phase.

        Args:
            output_prefix: the execution's output prefix.

        Returns:
            The documents read (at most `MAX_ERROR_FILES`, `error_document_max_bytes` each), and what went wrong.
        """
        try:
            fs, base = _filesystem(output_prefix)
            try:
                entries = fs.ls(base, detail=False)
            except FileNotFoundError:
                return ErrorReport()
            names = sorted(str(e) for e in entries if is_error_file(str(e).rstrip("/").rsplit("/", 1)[-1]))
            limit = self.config.error_document_max_bytes
            documents, problems = [], []
            for path in names[:MAX_ERROR_FILES]:
                with fs.open(path, "rb") as f:
                    data = f.read(limit + 1)
                source = path.rsplit("/", 1)[-1]
                if len(data) > limit:
                    problems.append(f"{source} is larger than error_document_max_bytes={limit}")
                    continue
                documents.append((source, data))
            return report_of(documents, "; ".join(problems), max(0, len(names) - MAX_ERROR_FILES))
        except Exception as e:  # noqa: BLE001 - any storage failure is reported, never allowed to hide the phase
            logger.warning("reading error documents under %s failed: %s", output_prefix, e)
            return ErrorReport(problem=f"{type(e).__name__}: {e} (under {output_prefix})")

    def outputs_written(self, output_prefix: str) -> bool:
        """Whether `outputs.pb` exists under `output_prefix` (False when it cannot be told).

        Args:
            output_prefix: the execution's output prefix.

        Returns:
            True when the task wrote its outputs.
        """
        try:
            fs, base = _filesystem(output_prefix)
            return bool(fs.exists(f"{base}/outputs.pb"))
        except Exception as e:  # noqa: BLE001 - unknown is "not written": the caller then reports what it knows
            logger.warning("checking outputs.pb under %s failed: %s", output_prefix, e)
            return False

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
        """Write the inputs, build the job and create it (or adopt the identical job that already exists).

        Args:
            task_template: the task's template.
            output_prefix: the execution's output prefix (inputs.pb is written under it).
            inputs: the task's inputs; an empty map is written when None (pyflyte-execute always reads one).
            task_execution_metadata: execution identity, namespace, labels, annotations, env, service account.
            **kwargs: ignored (future flytekit arguments).

        Returns:
            The job's namespace, name, uid, output prefix and the task config log links need; for a template that
            cannot be built or a job the API server rejects as invalid (it can never run), no job and the reason in
            `error`, which the next `get` reports as a permanent failure.

        Raises:
            Conflict: a different job with the same name exists.
            Forbidden: RBAC denies creating the job (the message names the permission).
            KubeApiError: any other API failure, after retries for transient ones.
        """
        self._apis()
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
            meta.namespace or self.config.namespace,
            meta.job_name,
            kind=target.kind,
            output_prefix=meta.output_prefix,
            task_config=task_config,
        )
        try:
            spec = read_template(template)
            job = target.write(spec, meta, self.config)
        except TemplateError as e:
            logger.warning("task template for %s/%s cannot run as a %s: %s", base.namespace, base.name, target.kind, e)
            return replace(base, error=f"the task template cannot run: {e}")
        for warning in target.warnings(spec, self.config):
            logger.warning("%s %s/%s: %s", target.kind, job["metadata"]["namespace"], job["metadata"]["name"], warning)
        _write_inputs(inputs, meta.input_path)
        try:
            created = self.create_job(job, deadline)
        except Rejected as e:
            logger.warning("%s", e)
            return replace(base, error=f"the API server rejected the job: {e}")
        return replace(base, namespace=created.namespace, name=created.name, uid=created.uid, kind=created.kind)

    def create_job(self, job: dict, deadline: Optional[Deadline] = None) -> JobMetadata:
        """POST a built job, never creating a second copy (see the module docstring).

        Args:
            job: the job dict (its `kind` picks the target).
            deadline: the create's deadline; a new one (`api_create_budget_s`) when None.

        Returns:
            The job's namespace, name and uid.

        Raises:
            Conflict: a different job with the same name exists.
            Rejected: the API server refuses the job and always will (invalid, too large, ...).
            KubeApiError: the create failed (retried within the deadline for transient failures).
        """
        deadline = deadline or self.deadline("create")
        custom, _ = self._apis()
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        target = target_for_kind(str(job.get("kind") or ""))
        subject = f"{target.kind} {namespace}/{name}"
        secrets = _env_values(job)

        def post(timeout: tuple[float, float]) -> dict:
            response = custom.create_namespaced_custom_object(
                target.group, target.version, namespace, target.plural, job, _request_timeout=timeout,
                _preload_content=False,
            )  # fmt: skip
            created = _decode(response, "create", subject, f"a {target.kind} object")
            if not isinstance(created, dict) or not isinstance(created.get("metadata"), dict):
                # The create may have happened: the adopting read below finds out.
                raise MalformedAnswer(
                    "create", subject, f"the API answered with {_shape(created)}, not a {target.kind}"
                )
            return created

        def attempt() -> JobMetadata:
            try:
                created = self._call(
                    post, "create", subject, namespace, "create", target.plural, target.group, deadline,
                    retry_transient=False, secrets=secrets,
                )  # fmt: skip
            except Conflict:
                return self._adopt(job, namespace, name, deadline)
            except Unavailable as e:
                # The create may have happened without us seeing the answer: look before trying again.
                try:
                    return self._adopt(job, namespace, name, deadline)
                except (NotFound, Unavailable):
                    pass  # not there (or unknown): a repeated POST is safe, the name is deterministic (409)
                raise e from None
            logger.info("created %s %s/%s", target.kind, namespace, name)
            return JobMetadata(namespace, name, str(created["metadata"].get("uid", "")), kind=target.kind)

        def gave_up(error: Exception, attempts: int, elapsed: float) -> Exception:
            assert isinstance(error, KubeApiError)
            return Unavailable("create", subject, _gave_up(error.reason, attempts, elapsed, deadline), error.status)

        return retry(
            attempt,
            lambda e: isinstance(e, Unavailable),
            self._backoff(),
            deadline,
            gave_up,
            lambda e, n, delay: logger.info("%s; job not found, retrying create in %.2fs", e, delay),
            min_attempt_s=MIN_ATTEMPT_S,
        )

    def _adopt(self, job: dict, namespace: str, name: str, deadline: Deadline) -> JobMetadata:
        """Take over an existing job of this name when it is the one we would create; else raise Conflict."""
        target = target_for_kind(str(job.get("kind") or ""))
        subject = f"{target.kind} {namespace}/{name}"
        stored = self._read_job(namespace, name, target, deadline, verb="create")
        if (stored.get("metadata") or {}).get("deletionTimestamp"):
            raise Conflict("create", subject, "a job with this name exists and is being deleted; retry once it is gone")
        diffs = spec_differences(job.get("spec"), stored.get("spec"))
        if diffs:
            shown = ", ".join(diffs[:5]) + (f" and {len(diffs) - 5} more" if len(diffs) > 5 else "")
            raise Conflict(
                "create",
                subject,
                f"a different {target.kind} with this name already exists (differs in {shown}); delete it with "
                f"`kubectl delete {target.kind.lower()} -n {namespace} {name}` or rerun under a new execution",
            )
        logger.info("adopted existing %s %s/%s with the same spec", target.kind, namespace, name)
        return JobMetadata(namespace, name, str(stored["metadata"].get("uid", "")), kind=target.kind)

    # ------------------------------------------------------------------ get
    def get(self, resource_meta: JobMetadata, **kwargs: Any) -> Resource:
        """Read the job (and its pods only when needed to explain it) and report phase, message and log links.

        With `watch_cache` on, the job comes from the watch cache when it is synced and holds it; otherwise from a GET,
        which feeds the cache; a job the watch saw deleted is not read again. With it off, every call is a GET.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.

        Returns:
            A `Resource` with the phase, a message saying why, log links for every replica and the job's status
            (conditions, replica counts, times) as `custom_info`.

        Raises:
            KubeApiError: the job could not be read (after retries, within `api_get_budget_s`); Flyte polls again.
        """
        ns, name = resource_meta.namespace, resource_meta.name
        target = target_for_kind(getattr(resource_meta, "kind", "") or "")
        identity = {"namespace": ns, "name": name, "uid": resource_meta.uid}
        if resource_meta.error:
            return Resource(phase=TaskExecution.FAILED, message=resource_meta.error, custom_info=identity)
        self._apis()
        cache = self.cache(target)
        deadline = self.deadline("get")  # from here: the client is built (see `_apis`)
        job = cache.get(ns, name) if cache is not None else None
        if job is None:
            if cache is not None and cache.is_deleted(ns, name):
                return self._gone(resource_meta)
            try:
                job = self._read_job(ns, name, target, deadline)
            except NotFound:
                return self._gone(resource_meta)
            if cache is not None:
                cache.feed(job)
        return self._answer(job, resource_meta, target, deadline)

    def answer_from_cache(self, resource_meta: JobMetadata) -> Optional[Resource]:
        """The `get` answer when it needs no I/O: the job's cache is built and holds the job, and its status needs
        neither pods, events nor error documents. Safe to call in an event loop.

        Args:
            resource_meta: what `create` returned.

        Returns:
            The same `Resource` `get` would return, or None when `get` must read something.
        """
        if resource_meta.error:
            return None
        target = target_for_kind(getattr(resource_meta, "kind", "") or "")
        cache = self._caches.get(_resource_of(target))
        if cache is None:
            return None  # not built yet (or off): building it imports the client, not for the event loop
        job = cache.get(resource_meta.namespace, resource_meta.name)
        if job is None:
            return None
        uid = str((job.get("metadata") or {}).get("uid", ""))
        if resource_meta.uid and uid and uid != resource_meta.uid:
            return None
        try:
            reads = target.reads(job, self.config, self._clock())
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
        now = self._clock()
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
            message=status.message + note,
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
        """Delete the job and, in the foreground, its pods; a job that is already gone is success.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.

        Raises:
            KubeApiError: the delete failed (after retries for transient failures, within `api_delete_budget_s`).
        """
        if resource_meta.error:
            return  # create recorded why the job could never run: nothing was created
        self._apis()
        deadline = self.deadline("delete")
        from kubernetes import client

        custom, _ = self._apis()
        ns, name = resource_meta.namespace, resource_meta.name
        target = target_for_kind(getattr(resource_meta, "kind", "") or "")
        body = client.V1DeleteOptions(propagation_policy="Foreground")

        def delete(timeout: tuple[float, float]) -> None:
            custom.delete_namespaced_custom_object(
                target.group, target.version, ns, target.plural, name, body=body, _request_timeout=timeout,
                _preload_content=False,
            )  # fmt: skip

        try:
            self._call(
                delete, "delete", f"{target.kind} {ns}/{name}", ns, "delete", target.plural, target.group, deadline
            )
        except NotFound:
            logger.info("%s %s/%s already deleted", target.kind, ns, name)


def _resource_of(target: JobTarget) -> str:
    """`<plural>.<group>/<version>`: what a watch cache is kept per."""
    return f"{target.plural}.{target.api_version}"


def _is_api_failure(e: BaseException) -> bool:
    """Whether `e` came from the API round trip (HTTP error status, timeout, connection failure)."""
    if hasattr(e, "status") and hasattr(e, "body"):  # kubernetes ApiException
        return True
    import urllib3

    return isinstance(e, (urllib3.exceptions.HTTPError, TimeoutError, ConnectionError))


def _gave_up(reason: str, attempts: int, elapsed: float, deadline: Deadline) -> str:
    """The reason of an error raised when no attempt fits the deadline any more."""
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    return f"{reason} (gave up after {tries} in {elapsed:.1f}s, {deadline.describe()})"


def _decode(response: Any, verb: str, subject: str, what: str) -> Any:
    """The JSON of a raw (`_preload_content=False`) answer; `MalformedAnswer` naming `subject` when it is not JSON.
    The body itself is never quoted."""
    data = getattr(response, "data", b"")
    try:
        return json.loads(data)
    except (ValueError, TypeError, UnicodeDecodeError):
        status, size = getattr(response, "status", "?"), len(data or b"")
        reason = f"the API answered HTTP {status} with {size} bytes that are not JSON, not {what}"
        raise MalformedAnswer(verb, subject, reason) from None


def _shape(value: Any) -> str:
    """A JSON value's shape for a message, never its content: `a list of 2 strings`, `null`, `an object`."""
    if value is None:
        return "null"
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a list of {len(value)} ({', '.join(kinds) or 'nothing'})"
    if isinstance(value, dict):
        return f"an object with keys {sorted(value)[:8]}"
    return f"a JSON {type(value).__name__}"


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


def _filesystem(prefix: str) -> tuple[Any, str]:
    """(fsspec filesystem, prefix without a trailing '/') for a blob prefix, through flytekit's file access."""
    from flytekit.core.context_manager import FlyteContextManager

    file_access = FlyteContextManager.current_context().file_access
    return file_access.get_filesystem_for_path(prefix), prefix.rstrip("/")


def _write_inputs(inputs: Optional[LiteralMap], path: str) -> None:
    """Write the inputs LiteralMap (empty when None) to `path` through flytekit's file access."""
    from flytekit.core import utils
    from flytekit.core.context_manager import FlyteContextManager

    ctx = FlyteContextManager.current_context()
    local = ctx.file_access.get_random_local_path()
    utils.write_proto_to_file((inputs or LiteralMap(literals={})).to_flyte_idl(), local)
    ctx.file_access.put_data(local, path)


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

    A poll the watch cache answers without I/O (`answer_from_cache`) is answered inline, in microseconds; every other
    poll runs the sync `JobConnector.get` on a pool of `get_threads` threads, whose API calls keep their deadline and
    retries. `create` and `delete` stay sync (flytekit runs them in its default pool; they are rare).
    """

    name = JobConnector.name
    _pool: Optional[ThreadPoolExecutor] = None

    def _get_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.get_threads, thread_name_prefix="connector-get")
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
            return answer
        call = functools.partial(JobConnector.get, self, resource_meta)
        return await asyncio.get_running_loop().run_in_executor(self._get_pool(), call)


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
