"""Kubeflow Trainer's own progress contract: global rank 0 of a TrainJob POSTs ``status.trainerStatus``.

Kubeflow Trainer (v2.2+, alpha feature gate ``TrainJobStatus``) injects three variables into every trainer
container (its ``trainjobstatus`` runtime plugin) and serves ``POST`` at the URL it gives (its status server, the
controller's webhook service):

=====================================  ===========================================================================
``KUBEFLOW_TRAINER_SERVER_URL``        ``https://<webhook service>.<namespace>.svc:<port>/apis/trainer.kubeflow.org/
                                       v1alpha1/namespaces/<ns>/trainjobs/<name>/status``: the whole URL
``KUBEFLOW_TRAINER_SERVER_CA_CERT``    a file: the CA that signed the server's certificate (TLS is verified with it)
``KUBEFLOW_TRAINER_SERVER_TOKEN``      a file: a projected service-account token (audience of this TrainJob, one
                                       hour), which the kubelet rotates: it is read again at each send
=====================================  ===========================================================================

The body is ``UpdateTrainJobStatusRequest``: ``{"trainerStatus": {"progressPercentage": int 0..100,
"estimatedRemainingSeconds": int >= 0, "metrics": [{"name": ..., "value": "..."}], "lastUpdatedTime": RFC 3339}}``,
with the CRD's limits: at most 256 metrics, a name and a value of 1 to 64 characters each, the value a string. The
server answers 200 with the payload, or a ``metav1.Status`` (403 for a token it refuses, 422 for a body the CRD
refuses, 404, 500).

:class:`TrainerStatusClient` sends at most one request per :data:`MIN_INTERVAL_S` (the rate Kubeflow's SDK and HF
Transformers' ``KubeflowCallback`` keep), logs the first failure once and never raises: a status report must not fail
training. Only the standard library is used (``urllib``, ``ssl``).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Optional

from pytorch_contract.progress import ProgressRecord, eta_at, percent

__all__ = [
    "URL_ENV",
    "CA_ENV",
    "TOKEN_ENV",
    "MIN_INTERVAL_S",
    "trainer_status_body",
    "TrainerStatusClient",
    "client_from_env",
]

logger = logging.getLogger(__name__)

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"

MIN_INTERVAL_S = 5.0
"""Least seconds between two requests."""
TIMEOUT_S = 5.0
"""Seconds a request may take (connect and read)."""
MAX_METRICS = 256
"""``trainerStatus.metrics``: ``maxItems: 256``."""
MAX_NAME = 64
"""A metric's ``name``: 1 to 64 characters."""
MAX_VALUE = 64
"""A metric's ``value``: 1 to 64 characters, a string."""
_INT32_MAX = 2**31 - 1


def _rfc3339(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(int(seconds), tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _value_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(float(value)) if abs(value) < 1e16 else f"{value:.9g}"
    return text[:MAX_VALUE]


def trainer_status_body(record: ProgressRecord, now: float, *, final: bool = False) -> dict[str, Any]:
    """The request body for ``record``. Pure.

    Args:
        record: the latest progress record.
        now: seconds since the epoch (``lastUpdatedTime``, and the ETA at that time).
        final: the function returned: 100 % and 0 s left.

    Returns:
        dict[str, Any]: ``{"trainerStatus": {...}}``. ``progressPercentage`` is left out without a total and stays at
        99 until the function returns (Kubeflow's convention: 100 means finished); the metrics are ``step`` and
        ``total_steps`` (when known), then the run's own, within the CRD's limits.
    """
    status: dict[str, Any] = {}
    share = percent(record)
    if final:
        status["progressPercentage"] = 100
        status["estimatedRemainingSeconds"] = 0
    else:
        if share is not None:
            status["progressPercentage"] = min(share, 99)
        eta = eta_at(record, now)
        if eta is not None:
            status["estimatedRemainingSeconds"] = min(_INT32_MAX, int(round(eta)))
    metrics = [{"name": "step", "value": str(record.step)}]
    if record.total is not None:
        metrics.append({"name": "total_steps", "value": str(record.total)})
    for name, value in record.metrics.items():
        if len(metrics) >= MAX_METRICS:
            break
        cut = name[:MAX_NAME]
        if cut:
            metrics.append({"name": cut, "value": _value_text(value)})
    status["metrics"] = metrics
    status["lastUpdatedTime"] = _rfc3339(now)
    return {"trainerStatus": status}


class TrainerStatusClient:
    """Sends ``trainerStatus`` updates to Kubeflow Trainer's status server.

    Args:
        url: ``KUBEFLOW_TRAINER_SERVER_URL`` (HTTPS).
        token_path: ``KUBEFLOW_TRAINER_SERVER_TOKEN``: the token file, read at each send.
        ca_path: ``KUBEFLOW_TRAINER_SERVER_CA_CERT``: the CA file the server's certificate is verified with.
        clock: a monotonic clock (tests pass their own).
        timeout_s: seconds a request may take.
    """

    def __init__(
        self,
        url: str,
        token_path: Optional[str],
        ca_path: Optional[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.url = url
        self.token_path = token_path
        self.ca_path = ca_path
        self.clock = clock
        self.timeout_s = timeout_s
        self.last_sent: Optional[float] = None
        self.sent = 0
        self.failed = 0
        self._complained = False

    def due(self) -> bool:
        """Whether a request may be sent now (none in the last :data:`MIN_INTERVAL_S`)."""
        return self.last_sent is None or self.clock() - self.last_sent >= MIN_INTERVAL_S

    def wait_s(self) -> float:
        """Seconds until a request may be sent."""
        return 0.0 if self.last_sent is None else max(0.0, MIN_INTERVAL_S - (self.clock() - self.last_sent))

    def post(self, body: Mapping[str, Any]) -> bool:
        """Send ``body`` if a request is due; never raises.

        Args:
            body: the request body (:func:`trainer_status_body`).

        Returns:
            bool: the server answered 200. ``False`` when not due (nothing sent), or on any failure (logged once).
        """
        if not self.due():
            return False
        self.last_sent = self.clock()
        try:
            self._send(json.dumps(body).encode())
        except Exception as e:  # noqa: BLE001 - a status report never fails training
            self.failed += 1
            self._complain(e)
            return False
        self.sent += 1
        return True

    def _send(self, data: bytes) -> None:
        if not self.url.lower().startswith("https://"):
            raise ValueError(f"{URL_ENV}={self.url!r} is not an https URL; the token is sent only over TLS")
        if not self.token_path:
            raise ValueError(f"{TOKEN_ENV} is not set: no token to send")
        with open(self.token_path, encoding="utf-8") as f:  # rotated by the kubelet: read at each send
            token = f.read().strip()
        if not token:
            raise ValueError(f"the token file {self.token_path} ({TOKEN_ENV}) is empty")
        context = ssl.create_default_context(cafile=self.ca_path) if self.ca_path else ssl.create_default_context()
        request = urllib.request.Request(
            self.url,
            data=data,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s, context=context) as response:
            response.read(1 << 16)

    def _complain(self, error: Exception) -> None:
        if self._complained:
            return
        self._complained = True
        if isinstance(error, urllib.error.HTTPError):
            reason = f"HTTP {error.code} {_status_reason(error)}".strip()
        else:
            reason = f"{type(error).__name__}: {error}"
        logger.warning(
            "could not send the TrainJob's trainerStatus to %s (%s); training goes on, and later failures are not "
            "logged",
            self.url,
            reason,
        )


def _status_reason(error: urllib.error.HTTPError) -> str:
    """The ``reason`` of the ``metav1.Status`` the server answers with (never the raw body)."""
    try:
        status = json.loads(error.read(4096) or b"{}")
    except (ValueError, OSError):
        return ""
    reason = status.get("reason") if isinstance(status, dict) else None
    return str(reason) if isinstance(reason, str) and reason.isalnum() else ""


def client_from_env(env: Mapping[str, str]) -> Optional[TrainerStatusClient]:
    """A client when ``KUBEFLOW_TRAINER_SERVER_URL`` is set (a TrainJob with the ``TrainJobStatus`` gate), else None.

    Args:
        env: the environment.

    Returns:
        Optional[TrainerStatusClient]: the client.
    """
    url = env.get(URL_ENV, "").strip()
    if not url:
        return None
    return TrainerStatusClient(url, env.get(TOKEN_ENV) or None, env.get(CA_ENV) or None)
