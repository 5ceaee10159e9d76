"""Every error the backend raises: bad input (template, config) and Kubernetes API failures by HTTP status.

Bad input is a `ValueError` whose message names the field, the value and what is allowed: `TemplateError` for a
task template the backend cannot run, `ConfigError` for a backend setting.

Every infrastructure fault the connector raises reads "<verb> <subject> failed: <reason>", where the subject names
what the call was about in the caller's words (`<kind> <namespace>/<name>`, `API group <group>/<version>`); nothing
here knows a job kind. It chains the client's exception (`raise ... from e`). The API server's `Status` body is
parsed for its reason, message and code; raw response bodies (which may echo the whole job spec, including
environment variables) are never logged nor put into messages.

A failed *training job* is not an exception: it is a FAILED phase with the root cause (see `status.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class TemplateError(ValueError):
    """A task template the backend cannot turn into a job; the message names the field, value and rule."""


class ConfigError(ValueError):
    """A backend configuration value that is not allowed; the message names the field, the value and the rule."""


RBAC_MANIFEST = "backend_plugin/deploy/rbac.yaml"
"""The ClusterRole/Role the connector's service account needs (written next to the builder)."""

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth retrying: throttling and transient server-side failures."""


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


def parse_status(exc: BaseException) -> ApiStatus:
    """Extract code, reason and message from a kubernetes-client `ApiException` (or any exception).

    Args:
        exc: the exception the client raised.

    Returns:
        The parsed status. A body that is not a `Status` JSON falls back to the HTTP status line.
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
    """429/5xx or no answer (timeout, connection refused): transient, retried within the budget."""

    retryable = True


class InvalidJob(KubeApiError):
    """400/422: the API server or the operator's webhook rejected the job."""


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


def classify(
    exc: BaseException,
    verb: str,
    subject: str,
    namespace: str,
    k8s_verb: str,
    resource: str,
    group: str,
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

    Returns:
        NotFound, Conflict, Forbidden, InvalidJob or Unavailable; a `KubeApiError` for other statuses.
    """
    status = parse_status(exc)
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
    if code == 0:
        return Unavailable(verb, subject, f"no answer from the Kubernetes API ({message})", status)
    if code in RETRYABLE_STATUSES:
        return Unavailable(verb, subject, f"HTTP {code} {status.reason}: {message}", status)
    if code == 401:
        hint = "the API server rejected the connector's credentials (expired token or wrong kubeconfig)"
        return KubeApiError(verb, subject, f"{message}; {hint}", status)
    return KubeApiError(verb, subject, f"HTTP {code} {status.reason}: {message}", status)
