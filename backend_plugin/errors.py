"""Every error the backend raises: bad input (template, config) and Kubernetes API failures by HTTP status.

Bad input is a `ValueError` whose message names the field, the value and what is allowed: `TemplateError` for a
task template the backend cannot run, `ConfigError` for a backend setting.

Every infrastructure fault the connector raises reads "<verb> <subject> failed: <reason>", where the subject names
what the call was about in the caller's words (`<kind> <namespace>/<name>`, `API group <group>/<version>`); nothing
here knows a job kind. The API server's `Status` body is parsed for its reason, message and code; raw response bodies
(which may echo the whole job spec, environment variables included, or, from a proxy, the request's Authorization
header) are never logged nor put into messages, and the client's exception, whose text carries the body, is never
chained: the connector raises these errors `from None`, outside the handler of the client's exception. A Status
message is kept (it says what the API server refused), with bearer tokens and the values the caller names as secret
(the job's environment) replaced by `<redacted>`.

Statuses that never succeed on a retry (`PERMANENT_STATUSES`: a malformed or invalid object, one larger than the API
server accepts, a method or media type it does not serve) are `Rejected`; the connector turns a rejected create into a
permanent task failure. Throttling, server errors and no answer at all are `Unavailable` and retried within the
operation's deadline.

A failed *training job* is not an exception: it is a FAILED phase with the root cause (see `status.py`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class TemplateError(ValueError):
    """A task template the backend cannot turn into a job; the message names the field, value and rule."""


class ConfigError(ValueError):
    """A backend configuration value that is not allowed; the message names the field, the value and the rule."""


class StorageUnavailable(Exception):
    """Blob storage did not answer a read whose answer decides a phase (the task's outputs, its error documents):
    unknown, which is never a phase. `get` raises it, so that propeller polls again; the next poll reads again.

    Args:
        what: what was read (`outputs.pb`, `the error documents`).
        prefix: the output prefix it was read under.
        error: what the store's client raised (only its type and text are kept: no credentials are in them).
    """

    def __init__(self, what: str, prefix: str, error: BaseException) -> None:
        self.what, self.prefix = what, prefix
        self.reason = redact(f"{type(error).__name__}: {error}")
        super().__init__(
            f"blob storage could not be read for {what} under {prefix} ({self.reason}): whether it is there is "
            "unknown, so no phase is reported; Flyte polls again"
        )


RBAC_MANIFEST = "backend_plugin/deploy/rbac.yaml"
"""The ClusterRole/Role the connector's service account needs (written next to the builder)."""

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth retrying: throttling and transient server-side failures."""

PERMANENT_STATUSES = frozenset({400, 405, 413, 415, 422, 501})
"""HTTP statuses that the same request meets again on every retry: bad request, method not allowed, entity too large,
unsupported media type, unprocessable (invalid), not implemented."""

REQUEST_SIZE_LIMIT = "3 MiB"
"""The API server's limit on a request body (`--max-request-bytes`'s default); etcd stores objects up to 1.5 MiB."""

REDACTED = "<redacted>"
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_AUTH_HEADER = re.compile(r"(?i)\b(authorization|proxy-authorization|cookie|x-api-key)\s*[:=]\s*[^\s,;\"']+")
_MESSAGE_LIMIT = 2000


@dataclass(frozen=True)
class ApiStatus:
    """The parsed Kubernetes `Status` body of an error response.

    Attributes:
        code: HTTP status code (0 when there was no response, e.g. a timeout).
        reason: the machine-readable reason (`NotFound`, `AlreadyExists`, `Forbidden`, ...), or the HTTP reason.
        message: the API server's human-readable message ("" when none).
    """

    code: int
    reason: str
    message: str


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with bearer and basic credentials, Authorization-like header values and every one of `secrets`
    replaced by `<redacted>`, cut to 2000 characters.

    Args:
        text: a message from the API server (or a proxy).
        secrets: values that must not appear (the job's environment values); values shorter than 4 characters are
            left alone (they would blank out ordinary words).

    Returns:
        The redacted text.
    """
    out = _AUTH_HEADER.sub(
        lambda m: f"{m.group(1)}: {REDACTED}", _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    )
    for secret in sorted({s for s in secrets if isinstance(s, str) and len(s) >= 4}, key=len, reverse=True):
        out = out.replace(secret, REDACTED)
    return out if len(out) <= _MESSAGE_LIMIT else out[: _MESSAGE_LIMIT - 3] + "..."


def parse_status(exc: BaseException) -> ApiStatus:
    """Extract code, reason and message from a kubernetes-client `ApiException` (or any exception).

    Only a Kubernetes `Status` body is read, and only its code, reason and message; any other body (a proxy's error
    page, a JSON of another shape) is not looked at beyond that, and the result falls back to the HTTP status line.

    Args:
        exc: the exception the client raised.

    Returns:
        The parsed status (message not yet redacted: see `classify`).
    """
    code = int(getattr(exc, "status", 0) or 0)
    http_reason = str(getattr(exc, "reason", "") or "")
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str) and body:
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            return ApiStatus(
                code=int(parsed.get("code") or code),
                reason=str(parsed.get("reason") or http_reason),
                message=str(parsed.get("message") or ""),
            )
    if code == 0:
        return ApiStatus(0, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    return ApiStatus(code, http_reason, "")


class KubeApiError(Exception):
    """A Kubernetes API call failed.

    Args:
        verb: what was attempted (create, get, delete, list pods of, discover).
        subject: what the call was about, as the caller names it (`<kind> <namespace>/<name>`).
        reason: why, in words (the API server's message, or a hint).
        status: the parsed API status, when there was a response.

    Attributes:
        verb, subject, reason, status: as given.
    """

    retryable = False

    def __init__(self, verb: str, subject: str, reason: str, status: ApiStatus | None = None) -> None:
        self.verb = verb
        self.subject = subject
        self.reason = reason
        self.status = status
        super().__init__(f"{verb} {subject} failed: {reason}")


class NotFound(KubeApiError):
    """404: the object (or its namespace, or its API group) does not exist."""


class Conflict(KubeApiError):
    """409: a job with this name exists and is not the one we would create."""


class Forbidden(KubeApiError):
    """403: the connector's service account lacks an RBAC permission."""


class Unavailable(KubeApiError):
    """429/5xx or no answer (timeout, connection refused): transient, retried within the budget.

    Attributes:
        retry_after_s: the wait the API server asked for (`Retry-After`, in seconds), 0 when it named none.
    """

    retryable = True
    retry_after_s = 0.0


class Rejected(KubeApiError):
    """A status in `PERMANENT_STATUSES`: the same request would be refused again; never retried."""


class InvalidJob(Rejected):
    """400/422: the API server or the operator's webhook rejected the job."""


class TooLarge(Rejected):
    """413: the job is larger than the API server accepts."""


class MalformedAnswer(Unavailable):
    """The API answered 2xx with something that is not the object asked for (not JSON, or of another shape).

    Retried within the deadline like any `Unavailable` (a proxy or an API server in trouble); the next poll heals.
    """


def forbidden_reason(verb: str, resource: str, group: str, namespace: str, message: str) -> str:
    """The reason text for a 403: the API server's message, the missing permission and where it is granted.

    Args:
        verb: the Kubernetes verb that was denied (create, get, list, delete).
        resource: the plural resource (the job kind's, pods, events).
        group: its API group ("" for core).
        namespace: the namespace of the request.
        message: the API server's message (names the user).

    Returns:
        A message naming the missing permission and pointing at the RBAC manifest.
    """
    api_group = group or '"" (core)'
    where = f"in namespace {namespace}" if namespace else "cluster-wide"
    return (
        f"{message or 'forbidden'}. The connector's service account needs permission to {verb} {resource} "
        f"(apiGroup {api_group}) {where}; apply the Role/ClusterRole in {RBAC_MANIFEST} and bind it to that "
        "service account."
    )


MAX_RETRY_AFTER_S = 600.0
"""The longest `Retry-After` taken as it is; a larger (or a date-valued) one is read as this long, which no operation's
budget holds, so the call gives up at once instead of waiting."""


def retry_after(exc: BaseException) -> float:
    """The seconds a 429/503 answer asks the client to wait (its `Retry-After` header), as client-go honours it.

    Args:
        exc: the exception the client raised (a kubernetes `ApiException` carries the response headers).

    Returns:
        The delay in seconds; 0 when the header is absent or empty; `MAX_RETRY_AFTER_S` when it is not a number of
        seconds (an HTTP date) or is larger.
    """
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
    if value is None or not str(value).strip():
        return 0.0
    try:
        seconds = float(str(value).strip())
    except ValueError:
        return MAX_RETRY_AFTER_S
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


def classify(
    exc: BaseException,
    verb: str,
    subject: str,
    namespace: str,
    k8s_verb: str,
    resource: str,
    group: str,
    secrets: Iterable[str] = (),
) -> KubeApiError:
    """Turn a kubernetes-client exception into the matching `KubeApiError` subclass (to be raised `from exc`).

    Args:
        exc: the exception the client raised (ApiException, urllib3 timeout, connection error, ...).
        verb: the connector's verb for the message ("create", "get", "delete", "list pods of").
        subject: what the call was about, for the message (`<kind> <namespace>/<name>`).
        namespace: the request's namespace (for RBAC hints; "" for cluster-scoped calls).
        k8s_verb: the Kubernetes verb (for RBAC hints).
        resource: the resource the request was about (for RBAC hints).
        group: that resource's API group.
        secrets: values the message must not carry (the job's environment values), see `redact`.

    Returns:
        NotFound, Conflict, Forbidden, InvalidJob, TooLarge, Rejected or Unavailable; a `KubeApiError` for other
        statuses. Raise it `from None`: the client's exception carries the raw body.
    """
    parsed = parse_status(exc)
    status = ApiStatus(parsed.code, redact(parsed.reason, secrets), redact(parsed.message, secrets))
    code = status.code
    message = status.message or status.reason or "no message"
    if code == 404:
        return NotFound(verb, subject, message, status)
    if code == 409:
        return Conflict(verb, subject, message, status)
    if code == 403:
        reason = forbidden_reason(k8s_verb, resource, group, namespace, status.message)
        return Forbidden(verb, subject, reason, status)
    if code in (400, 422):
        return InvalidJob(verb, subject, message, status)
    if code == 413:
        reason = (
            f"HTTP 413 {status.reason}: {message}; the job is larger than the API server accepts (a request body of "
            f"at most {REQUEST_SIZE_LIMIT} by default, and etcd stores objects of at most 1.5 MiB): make the task's "
            "pod template, environment or annotations smaller"
        )
        return TooLarge(verb, subject, reason, status)
    if code in PERMANENT_STATUSES:
        return Rejected(
            verb,
            subject,
            f"HTTP {code} {status.reason}: {message} (a request the API server refuses every time; not retried)",
            status,
        )
    if code == 0:
        return Unavailable(verb, subject, f"no answer from the Kubernetes API ({message})", status)
    if code in RETRYABLE_STATUSES:
        error = Unavailable(verb, subject, f"HTTP {code} {status.reason}: {message}", status)
        error.retry_after_s = retry_after(exc)
        return error
    if code == 401:
        hint = "the API server rejected the connector's credentials (expired token or wrong kubeconfig)"
        return KubeApiError(verb, subject, f"{message}; {hint}", status)
    return KubeApiError(verb, subject, f"HTTP {code} {status.reason}: {message}", status)
