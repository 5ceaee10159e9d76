"""What each job kind's installed CRD declares, as the connector knows it: `ClusterCrds`, one per connector process
(and API client: one cluster).

Before the first create of a kind the connector reads its `CustomResourceDefinition`
(`GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/<plural>.<group>`), once, and builds every job of the
kind for it (`build.build_job(..., crd)`). Where RBAC forbids the read (403) the vendored CRD is assumed, and what a
create's strict 400 names is learnt instead (`admission.installed.learned`). A CRD that is not installed (404) is
assumed vendored too: the create then says what is missing.

When to read again, never on the path of a `get`:

- at once after a strict 400 (the CRD changed under us, or was never readable): the fields it named are taken out of
  what is known, and the connector builds the job again, once;
- when a create would be changed by what is known (fitted to an older CRD, or refused) and that is older than
  `api_crd_recheck_s`: an upgraded controller is noticed within that time; knowledge learnt from 400s is forgotten
  then, so that the next create tries the job as written.

A job the known CRD accepts as written never causes a read: a steady stream of creates costs one read per kind. Each
kind's entry is read by one thread at a time, so creates that start together read it once. Talks to the API only
through `api.Api`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from backend_plugin.admission.installed import InstalledCrd, from_crd, learned
from backend_plugin.errors import Forbidden, KubeApiError, MalformedAnswer, NotFound
from backend_plugin.kube.api import Api, Request, shape
from backend_plugin.kube.retry import Deadline
from backend_plugin.targets.base import JobTarget

__all__ = ["ClusterCrds", "CRD_GROUP", "CRD_RESOURCE"]

logger = logging.getLogger(__name__)

CRD_GROUP = "apiextensions.k8s.io"
CRD_RESOURCE = "customresourcedefinitions"


@dataclass(frozen=True)
class _Entry:
    """What is known of one kind's CRD, and when it was last asked.

    Attributes:
        crd: the installed CRD as read or learnt; None: the vendored one is assumed.
        readable: False when the last read was forbidden (learn from 400s instead).
        at: when it was last read (or its reading was refused), on the process's monotonic clock.
    """

    crd: Optional[InstalledCrd]
    readable: bool
    at: float


class ClusterCrds:
    """The installed CRD of each job kind, read once and kept.

    Args:
        clock: a monotonic clock (tests move it).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget everything (a new API client may talk to another cluster)."""
        with self._lock:
            self._entries.clear()

    def current(self, target: JobTarget, api: Api, deadline: Deadline) -> Optional[InstalledCrd]:
        """The kind's installed CRD, read on its first create.

        Args:
            target: the kind.
            api: the API.
            deadline: the create's deadline.

        Returns:
            The CRD as read or learnt; None where the vendored one is assumed (no RBAC to read it and nothing learnt
            yet, not installed, or the API could not be asked: then the next create asks again).
        """
        with self._key_lock(target):
            entry = self._entries.get(target.declaration.crd_name)
            if entry is None:
                entry = self._read(target, api, deadline, None, keep_learned=False)
            return entry.crd if entry is not None else None

    def recheck(self, target: JobTarget, api: Api, deadline: Deadline, max_age_s: float
                ) -> tuple[Optional[InstalledCrd], bool]:  # fmt: skip
        """Read the CRD again when what is known is older than `max_age_s` (a create it changes calls this).

        Args:
            target: the kind.
            api: the API.
            deadline: the create's deadline.
            max_age_s: `api_crd_recheck_s`.

        Returns:
            (the CRD as now known, whether that differs from what was known).
        """
        key = target.declaration.crd_name
        with self._key_lock(target):
            entry = self._entries.get(key)
            before = entry.crd if entry is not None else None
            if entry is not None and self._clock() - entry.at < max_age_s:
                return before, False
            entry = self._read(target, api, deadline, entry, keep_learned=False)
            now = entry.crd if entry is not None else None
            changed = (now is None) != (before is None) or (now is not None and not now.same_as(before))
            if changed:
                logger.info("the %s CRD changed: %s", target.kind, now.describe() if now else "the vendored one")
            return now, changed

    def learn(self, target: JobTarget, fields: Sequence[str], api: Api, deadline: Deadline, read: bool = True
              ) -> tuple[InstalledCrd, list[str]]:  # fmt: skip
        """After a create the API server refused for undeclared `fields` (a strict 400): read the CRD again where
        allowed, and take the fields out of what is known.

        Args:
            target: the kind.
            fields: the fields the 400 named.
            api: the API.
            deadline: the create's deadline.
            read: whether to read the CRD again first (it is not when the last read was forbidden).

        Returns:
            (the CRD as now known, the fields that lead nowhere in its schema).
        """
        key = target.declaration.crd_name
        with self._key_lock(target):
            previous = self._entries.get(key)
            if read and (previous is None or previous.readable):  # not again when RBAC just said no
                entry = self._read(target, api, deadline, previous, keep_learned=True)
            else:
                entry = previous
            base = entry.crd if entry is not None else None
            crd, unmapped = learned(target.declaration, fields, base)
            readable = entry.readable if entry is not None else True
            self._entries[key] = _Entry(crd, readable, entry.at if entry is not None else self._clock())
            logger.warning(
                "create of a %s: the API server refused %s as undeclared; %s as known now",
                target.kind, ", ".join(fields), crd.describe(),
            )  # fmt: skip
            return crd, unmapped

    def _key_lock(self, target: JobTarget) -> threading.Lock:
        key = target.declaration.crd_name
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def _read(self, target: JobTarget, api: Api, deadline: Deadline, previous: Optional[_Entry], keep_learned: bool
              ) -> Optional[_Entry]:  # fmt: skip
        """GET the CRD and record what it declares. Forbidden: what was learnt from 400s is kept when `keep_learned`,
        else forgotten. When the API could not be asked, nothing is recorded and `previous` is returned."""
        key = target.declaration.crd_name
        now = self._clock()
        try:
            crd = read_crd(api, target, deadline)
        except Forbidden:
            # Optional permission: without it, what a strict 400 names is learnt (kept from before, when fresh).
            kept = previous.crd if keep_learned and previous is not None and not previous.readable else None
            if previous is None or previous.readable:
                logger.info(
                    "cannot read customresourcedefinitions/%s: the connector's service account needs permission to "
                    "get customresourcedefinitions (apiGroup apiextensions.k8s.io) cluster-wide (rbac.yaml's optional "
                    "rule); the %s CRD is learnt from the API server's strict answers instead", key, target.kind,
                )  # fmt: skip
            entry = _Entry(kept, False, now)
        except NotFound:
            logger.warning("the cluster has no CRD %s: creating a %s will fail", key, target.kind)
            entry = _Entry(None, True, now)
        except (KubeApiError, ValueError) as e:
            logger.warning("could not read customresourcedefinitions/%s (%s); assuming the vendored CRD", key, e)
            return previous
        else:
            entry = _Entry(crd, True, now)
            logger.info("%s, resourceVersion %s", crd.describe(), crd.resource_version or "?")
        self._entries[key] = entry
        return entry


def read_crd(api: Api, target: JobTarget, deadline: Deadline) -> InstalledCrd:
    """GET `customresourcedefinitions/<plural>.<group>` and read what it declares.

    Args:
        api: the API.
        target: the kind.
        deadline: the operation's deadline (the read takes at most half of what it has left).

    Returns:
        The installed CRD.

    Raises:
        KubeApiError: the read failed (`Forbidden` without RBAC, `NotFound` when not installed).
        ValueError: the answer is not the CRD of the kind.
    """
    from kubernetes import client

    name = target.declaration.crd_name
    extensions = client.ApiextensionsV1Api(api.api_client)
    request = Request("read", f"CustomResourceDefinition {name}", "", "get", CRD_RESOURCE, CRD_GROUP)

    def send(timeout: tuple[float, float]) -> Any:
        return extensions.read_custom_resource_definition(name, _request_timeout=timeout, _preload_content=False)

    def decode(answer: Any) -> dict:
        if not isinstance(answer, dict) or answer.get("kind") != "CustomResourceDefinition":
            raise MalformedAnswer("read", request.subject,
                                  f"the API answered with {shape(answer)}, not a CustomResourceDefinition")  # fmt: skip
        return answer

    # An optional read: it may take half of what the create has left, so that an API failing it leaves the create
    # its time (the vendored CRD is then assumed, and the next create asks again).
    share = Deadline(deadline.remaining() / 2, f"half of what was left of {deadline.describe()}", deadline.clock)
    crd = from_crd(api.call(request, send, share, decode), "read from the cluster")
    if crd.declaration is not target.declaration:
        raise ValueError(f"{name} defines another kind than {target.kind}")
    return crd
