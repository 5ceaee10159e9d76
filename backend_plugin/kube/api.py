"""The connector's Kubernetes API client: how it is built, how one request is described, retried and decoded.

- `default_api_client` builds the kubernetes `ApiClient` (in-cluster, else the kubeconfig); `set_api_client_factory`
  replaces it (tests point it at a fake API server). `without_client_retries` turns urllib3's own retries off, so the
  loop here is the only one, and `with_pool_size` keeps a connection per thread.
- `Request` is one frozen value per API request: what the connector calls it in messages (verb, subject), what RBAC
  calls it (namespace, verb, resource, group), whether it may be retried and which values must never appear in an
  error (the job's environment).
- `Api.call` runs one request within its operation's `Deadline`, as client-go's request retry does: 429/5xx, no answer
  and a 2xx that is not the JSON asked for are retried with backoff and full jitter while an attempt still fits; a
  `Retry-After` is waited out (never less) when it fits the budget, else the call gives up at once; each attempt's
  read timeout is everything the budget has left (an API that answers in 7 s succeeds in a 10 s budget, as under
  client-go's context deadline), its connect timeout `api_connect_timeout_s` cut to that. Errors never carry a
  response body: they are raised `from None` with the status, the reason and our message.
- `Api.read_object` GETs one object, `Api.list_pages` reads a core/v1 list page by page (client-go's pager size).
- `ServerClock` learns the API server's clock from the `Date` header of its answers, so that ages are measured on
  the server's clock (a job's `creationTimestamp` is written by it) and never by comparing ours with it.

Models: kopf's `_cogs/clients` (api, fetching, errors) and lightkube's `prepare_request` (a request as a value).
"""

from __future__ import annotations

import datetime
import email.utils
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from backend_plugin.errors import KubeApiError, MalformedAnswer, Unavailable, classify
from backend_plugin.kube.retry import Backoff, Deadline, retry

logger = logging.getLogger(__name__)

T = TypeVar("T")

PAGE = 500
"""`limit` of each page of a pod or event list (client-go's pager uses 500): a 1,000-worker job's 1,001 pods come in
three bounded answers rather than one of 2 MB."""

MIN_ATTEMPT_S = 0.2
"""The least time left in an operation's budget for a retry to be worth starting (a first attempt needs 10 ms)."""

ApiClientFactory = Callable[[], Any]

Problem = Callable[[Any], Optional[str]]
"""A check of an answer's shape: what is wrong with it, naming the field, or None."""


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


def _rebuild(api_client: Any) -> None:
    from kubernetes.client import rest

    old = api_client.rest_client
    api_client.rest_client = rest.RESTClientObject(api_client.configuration)
    old.pool_manager.clear()


def without_client_retries(api_client: Any) -> Any:
    """Turn the kubernetes client's own retries off: urllib3's (3 by default, each waiting out a full read timeout)
    and the client-go-style read retries. `Api.call` is then the only loop, inside the operation's deadline, and it
    honours `Retry-After` itself.

    Args:
        api_client: a `kubernetes.client.ApiClient` (from any factory).

    Returns:
        The same client; its REST client is rebuilt when its configuration still allowed retries.
    """
    configuration = api_client.configuration
    if configuration.retries is not False or getattr(configuration, "client_go_retries", False):
        configuration.retries = False
        configuration.client_go_retries = False
        _rebuild(api_client)
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
    configuration = api_client.configuration
    if (configuration.connection_pool_maxsize or 0) < size:
        configuration.connection_pool_maxsize = size
        _rebuild(api_client)
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


def current_factory() -> ApiClientFactory:
    """The factory `set_api_client_factory` set last (`default_api_client` when none).

    Returns:
        The factory.
    """
    return _factory


class ServerClock:
    """The API server's clock, learnt from the `Date` header of its answers.

    `Date` has a resolution of one second, so an offset within `TOLERANCE_S` of ours is taken as none: what matters
    is that a clock minutes off never turns a job's age into a verdict.
    """

    TOLERANCE_S = 2.0

    def __init__(self) -> None:
        self._offset_s = 0.0
        self._lock = threading.Lock()

    @property
    def offset_s(self) -> float:
        """Seconds the server's clock is ahead of ours (negative: behind); 0 until an answer said otherwise."""
        return self._offset_s

    def observe(self, headers: Optional[Mapping[str, Any]], received: Optional[float] = None) -> None:
        """Learn the server's time from an answer's headers (nothing happens when there is no usable `Date`).

        Args:
            headers: the response headers.
            received: `time.time()` when the answer arrived (now when None).
        """
        value = headers.get("Date") if headers is not None and hasattr(headers, "get") else None
        if not value:
            return
        try:
            stamp = email.utils.parsedate_to_datetime(str(value)).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        offset = stamp + 0.5 - (time.time() if received is None else received)  # Date is truncated to the second
        with self._lock:
            self._offset_s = offset if abs(offset) > self.TOLERANCE_S else 0.0

    def now(self, local: datetime.datetime) -> datetime.datetime:
        """The server's time when ours is `local`.

        Args:
            local: our time (the connector's clock).

        Returns:
            `local` shifted by the learnt offset.
        """
        return local + datetime.timedelta(seconds=self._offset_s) if self._offset_s else local


@dataclass(frozen=True)
class Request:
    """One API request as the connector describes it: for messages, for RBAC hints, for retries and redaction.

    Attributes:
        verb: the connector's verb in messages (`get`, `create`, `delete`, `list pods of`, `discover`).
        subject: what the request is about, in the caller's words (`PyTorchJob ns/name`).
        namespace: the request's namespace ("" for cluster-scoped requests).
        k8s_verb: the Kubernetes verb (RBAC hints).
        resource: the plural resource (RBAC hints).
        group: its API group ("" for core).
        retry_transient: whether 429/5xx/no answer is retried here (a create is not: it looks first).
        secrets: values no error may carry (the job's environment values).
    """

    verb: str
    subject: str
    namespace: str
    k8s_verb: str
    resource: str
    group: str
    retry_transient: bool = True
    secrets: tuple[str, ...] = ()

    def error(self, e: BaseException) -> KubeApiError:
        """The classified error of a failed attempt (never the client's exception, whose text carries the body).

        Args:
            e: what the kubernetes client raised.

        Returns:
            The `KubeApiError`.
        """
        return classify(e, self.verb, self.subject, self.namespace, self.k8s_verb, self.resource, self.group,
                        self.secrets)  # fmt: skip

    def gave_up(self, error: Exception, attempts: int, elapsed: float, deadline: Deadline) -> Unavailable:
        """The error raised when no further attempt fits `deadline`.

        Args:
            error: the last attempt's error.
            attempts: attempts made.
            elapsed: seconds spent.
            deadline: the operation's deadline.

        Returns:
            An `Unavailable` naming the last reason, the attempts and the budget.
        """
        reason = error.reason if isinstance(error, KubeApiError) else str(error)
        status = error.status if isinstance(error, KubeApiError) else None
        wait = getattr(error, "retry_after_s", 0.0)
        if wait and wait + MIN_ATTEMPT_S > deadline.remaining():
            reason += f"; the API server asked to retry after {wait:g}s, past what is left"
        return Unavailable(self.verb, self.subject, gave_up(reason, attempts, elapsed, deadline), status)


def gave_up(reason: str, attempts: int, elapsed: float, deadline: Deadline) -> str:
    """The reason of an error raised when no attempt fits the deadline any more.

    Args:
        reason: the last attempt's reason.
        attempts: attempts made.
        elapsed: seconds spent.
        deadline: the operation's deadline.

    Returns:
        `<reason> (gave up after N attempts in Ss, <budget>)`.
    """
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    return f"{reason} (gave up after {tries} in {elapsed:.1f}s, {deadline.describe()})"


def is_api_failure(e: BaseException) -> bool:
    """Whether `e` came from the API round trip (HTTP error status, timeout, connection failure).

    Args:
        e: an exception.

    Returns:
        True for a kubernetes `ApiException`, a urllib3 error, a timeout or a connection error.
    """
    if hasattr(e, "status") and hasattr(e, "body"):  # kubernetes ApiException
        return True
    import urllib3

    return isinstance(e, (urllib3.exceptions.HTTPError, TimeoutError, ConnectionError))


def shape(value: Any) -> str:
    """A JSON value's shape for a message, never its content: `a list of 2 (str)`, `null`, `an object`.

    Args:
        value: a decoded JSON value.

    Returns:
        The description.
    """
    if value is None:
        return "null"
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a list of {len(value)} ({', '.join(kinds) or 'nothing'})"
    if isinstance(value, dict):
        return f"an object with keys {sorted(value)[:8]}"
    return f"a JSON {type(value).__name__}"


class Api:
    """Runs `Request`s against one kubernetes `ApiClient` with deadline-bounded retries.

    Args:
        api_client: the kubernetes `ApiClient`.
        backoff: the sleeps between attempts.
        connect_timeout_s: the connect timeout of each attempt (cut to what the budget has left).
        clock: learns the server's time from every answer's `Date` header.
    """

    def __init__(self, api_client: Any, backoff: Backoff, connect_timeout_s: float, clock: ServerClock) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.backoff = backoff
        self.connect_timeout_s = float(connect_timeout_s)
        self.clock = clock

    def timeout(self, deadline: Deadline) -> tuple[float, float]:
        """(connect, read) timeouts of one attempt: the read may take all that is left of the deadline.

        Args:
            deadline: the operation's deadline.

        Returns:
            The timeouts in seconds.
        """
        left = round(max(0.001, deadline.remaining()), 3)
        return min(self.connect_timeout_s, left), left

    def call(self, request: Request, fn: Callable[[tuple[float, float]], Any], deadline: Deadline,
             decode: Optional[Callable[[Any], T]] = None) -> T:  # fmt: skip
        """Run one request within `deadline`: retry what may heal while an attempt fits, raise classified errors.

        Args:
            request: what the request is.
            fn: sends it, given (connect, read) timeouts, with `_preload_content=False`; returns the raw answer.
            deadline: the operation's deadline.
            decode: turns the answer's JSON into the result (raising `MalformedAnswer` for a wrong shape); None
                returns the raw answer unread.

        Returns:
            What `decode` returned (or the raw answer).

        Raises:
            KubeApiError: the classified failure; `Unavailable` once no attempt fits.
        """
        if deadline.remaining() < 0.01:
            raise Unavailable(request.verb, request.subject,
                              f"no time left for the API call ({deadline.elapsed():.1f}s of {deadline.describe()} "
                              "spent)")  # fmt: skip

        def attempt() -> Any:
            try:
                response = fn(self.timeout(deadline))
            except Exception as e:  # noqa: BLE001 - classified below
                if not is_api_failure(e):
                    raise
                headers = getattr(e, "headers", None)
                self.clock.observe(headers)
                error = request.error(e)
            else:
                self.clock.observe(getattr(response, "headers", None))
                if decode is None:
                    return response
                return decode(read_json(response, request))
            raise error from None  # outside the handler: no __context__ either

        return retry(
            attempt,
            lambda e: request.retry_transient and isinstance(e, KubeApiError) and e.retryable,
            self.backoff,
            deadline,
            lambda error, attempts, elapsed: request.gave_up(error, attempts, elapsed, deadline),
            lambda e, n, delay: logger.info("%s (attempt %d); retrying in %.2fs", e, n, delay),
            min_attempt_s=MIN_ATTEMPT_S,
            least_delay=lambda e: float(getattr(e, "retry_after_s", 0.0) or 0.0),
        )

    def read_object(self, request: Request, group: str, version: str, plural: str, name: str, what: str,
                    deadline: Deadline, problem: Optional[Problem] = None) -> dict:  # fmt: skip
        """GET one custom object.

        Args:
            request: the request's description.
            group, version, plural: the object's resource.
            name: its name.
            what: what it should be, for messages (`a PyTorchJob object`).
            deadline: the operation's deadline.
            problem: what is wrong with the object's shape, or None (the caller's check, run once, here).

        Returns:
            The object.

        Raises:
            KubeApiError: as `call`; `MalformedAnswer` (retried, then `Unavailable`) for an answer of another shape,
                naming the field.
        """

        def send(timeout: tuple[float, float]) -> Any:
            return self.custom.get_namespaced_custom_object(
                group, version, request.namespace, plural, name, _request_timeout=timeout, _preload_content=False
            )

        def decode(answer: Any) -> dict:
            if not isinstance(answer, dict) or not isinstance(answer.get("metadata") or {}, dict):
                reason = f"the API answered with {shape(answer)}, not {what}"
                raise MalformedAnswer(request.verb, request.subject, reason)
            wrong = problem(answer) if problem is not None else None
            if wrong:
                raise MalformedAnswer(request.verb, request.subject, f"the API answered {what} whose {wrong}")
            return answer

        return self.call(request, send, deadline, decode)

    def list_pages(self, request: Request, list_call: Callable[..., Any], selector: Mapping[str, str], what: str,
                   deadline: Deadline, problem: Optional[Problem] = None) -> list[dict]:  # fmt: skip
        """Every item of a core/v1 list, `PAGE` at a time, all inside the same deadline.

        A list without items is empty; an answer that is not a list, or an item of another shape (not an object, or
        what `problem` finds), is a `MalformedAnswer` naming it; an expired continue token (410) is an error like any
        other.

        Args:
            request: the request's description.
            list_call: the client's list method (`CoreV1Api.list_namespaced_pod`, ...).
            selector: `label_selector` or `field_selector`.
            what: what is listed, for messages (`pods`).
            deadline: the operation's deadline.
            problem: what is wrong with an item's shape, or None (the caller's check, run once, here).

        Returns:
            The items.
        """
        token = ""

        def send(timeout: tuple[float, float]) -> Any:
            page = {"limit": PAGE, **({"_continue": token} if token else {})}
            return list_call(request.namespace, **selector, **page, _request_timeout=timeout, _preload_content=False)

        def decode(answer: Any) -> tuple[list[dict], str]:
            if not isinstance(answer, dict):
                raise MalformedAnswer(request.verb, request.subject,
                                      f"the API answered with {shape(answer)}, not a {what} list")  # fmt: skip
            meta = answer.get("metadata")
            following = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            items = answer.get("items")
            if items is None:
                return [], following
            if not isinstance(items, list):
                raise MalformedAnswer(request.verb, request.subject,
                                      f"the API answered with {shape(answer)}, not a {what} list")  # fmt: skip
            for i, item in enumerate(items):
                wrong = problem(item) if problem is not None else None if isinstance(item, dict) else "not an object"
                if wrong:
                    raise MalformedAnswer(request.verb, request.subject,
                                          f"the API answered a {what} list whose item {i}: {wrong}")  # fmt: skip
            return items, following

        out: list[dict] = []
        while True:
            items, token = self.call(request, send, deadline, decode)
            out.extend(items)
            if not token:
                return out


def read_json(response: Any, request: Request) -> Any:
    """The JSON of a raw (`_preload_content=False`) answer; `MalformedAnswer` naming the subject when it is not JSON.
    The body itself is never quoted.

    Args:
        response: the urllib3 response.
        request: the request it answers.

    Returns:
        The decoded JSON value.

    Raises:
        MalformedAnswer: the body is not JSON (retried by `Api.call`, then an `Unavailable` naming the subject).
    """
    data = getattr(response, "data", b"")
    try:
        return json.loads(data)
    except (ValueError, TypeError, UnicodeDecodeError):
        status, size = getattr(response, "status", "?"), len(data or b"")
        reason = f"the API answered HTTP {status} with {size} bytes that are not JSON"
        raise MalformedAnswer(request.verb, request.subject, reason) from None
