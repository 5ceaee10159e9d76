"""What a watch holds: the jobs of one scope (a namespace, or every namespace), slimmed and stored as compact JSON,
and the tombstones of the jobs it saw deleted. Identity is the uid; the order is the resourceVersion.

- a job is stored unless the copy held is newer (a replayed event, a GET that lost the race), or the watch saw this
  very job (its uid) deleted after the copy was read;
- a DELETED forgets the job of that uid only (a late DELETED of an earlier job never removes its successor) and
  remembers the deletion;
- a relist replaces what is held with the list, keeping, job by job, the copy with the larger resourceVersion: a copy
  a GET fed while the LIST ran is newer than the LIST's snapshot, and a job the LIST lacks but fed after the snapshot
  stays;
- what is kept of a job is `slim` (the model being client-go's transform functions): metadata name, namespace, uid,
  labels, annotations, resourceVersion, creationTimestamp, deletionTimestamp; the spec without its pod templates'
  bulk (each container's name and image remain); the status. About 1.4 KiB as compact JSON for the golden job
  instead of about 8 KiB as Python objects, decoded on every `get` (which also hands the caller a copy of its own).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["KEPT_METADATA", "DROPPED_SPEC_KEYS", "Held", "Store", "rv_newer", "slim"]

KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
)
"""The metadata fields the status, log links and connector read; everything else (managedFields, ownerReferences,
finalizers, generation, ...) is dropped from cached jobs."""

DROPPED_SPEC_KEYS = frozenset(
    {"env", "envFrom", "command", "args", "volumes", "volumeMounts", "resources", "resourcesPerNode",
     "podSpecOverrides", "podTemplateOverrides", "affinity", "tolerations", "securityContext", "initContainers"}
)  # fmt: skip
"""Keys of a job's spec no status or log link reads, at any depth: a pod template's bulk (and the environment)."""

TOMBSTONES = 10_000
"""Deleted jobs remembered per scope, so that a late GET does not put a job the watch saw deleted back."""


def _slim_spec(value: Any) -> Any:
    if isinstance(value, dict):
        if "containers" in value and isinstance(value["containers"], list):  # a PodSpec: who runs what, nothing more
            return {"containers": [{k: c[k] for k in ("name", "image") if k in c} for c in value["containers"]
                                   if isinstance(c, dict)]}  # fmt: skip
        out = {}
        for key, item in value.items():
            if key in DROPPED_SPEC_KEYS or (key == "metadata" and isinstance(item, dict)):
                continue  # a pod template's labels and annotations are the pods', not the job's
            out[key] = _slim_spec(item)
        return out
    if isinstance(value, list):
        return [_slim_spec(item) for item in value]
    return value


def slim(job: dict) -> dict:
    """The part of a job the cache keeps: apiVersion, kind, the metadata in `KEPT_METADATA`, the spec without what
    no status or link reads (`DROPPED_SPEC_KEYS`, pod templates down to their containers' names and images), the
    status.

    Args:
        job: a job as the API server returns it (its shape checked).

    Returns:
        A new dict (sharing the status values with `job`).
    """
    meta = job.get("metadata") or {}
    out: dict[str, Any] = {k: job[k] for k in ("apiVersion", "kind", "status") if k in job}
    if "spec" in job:
        out["spec"] = _slim_spec(job["spec"])
    out["metadata"] = {k: meta[k] for k in KEPT_METADATA if k in meta}
    return out


def rv_newer(candidate: Optional[str], current: Optional[str]) -> bool:
    """Whether resourceVersion `candidate` is not older than `current` (both as the API server sets them).

    resourceVersions are opaque by contract but are etcd revisions in practice; when both are integers they are
    compared, otherwise the candidate wins (the API server's order cannot be known).

    Args:
        candidate: a resourceVersion.
        current: the one held.

    Returns:
        True unless both are integers and `candidate` is the smaller.
    """
    if current is None or candidate is None:
        return True
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True


class Held:
    """A cached job: its resourceVersion and uid, read on every event, and the slimmed job as compact JSON."""

    __slots__ = ("blob", "rv", "uid")

    def __init__(self, job: Mapping[str, Any]) -> None:
        """Hold a slimmed job.

        Args:
            job: the job as the cache keeps it.
        """
        meta = job.get("metadata") or {}
        self.rv = str(meta.get("resourceVersion") or "")
        self.uid = str(meta.get("uid") or "")
        self.blob = json.dumps(job, separators=(",", ":"), ensure_ascii=False).encode()

    def job(self) -> dict:
        """The job, decoded: a copy of the caller's own.

        Returns:
            The slimmed job.
        """
        return json.loads(self.blob)


Key = tuple[str, str]
"""(namespace, name)."""


class Store:
    """The jobs of one scope and the deletions seen. Thread-safe (the watch thread writes, `get` and `feed` read and
    write)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[Key, Held] = {}
        self.deleted: OrderedDict[Key, tuple[str, str]] = OrderedDict()
        """(namespace, name) -> (resourceVersion, uid) of the deletion the watch reported."""

    def get(self, key: Key) -> Optional[dict]:
        """A copy of the job held under `key`.

        Args:
            key: (namespace, name).

        Returns:
            The job, or None.
        """
        with self.lock:
            held = self.jobs.get(key)
        return held.job() if held is not None else None  # decoded outside the lock: a copy of the caller's own

    def holds(self, key: Key) -> bool:
        """Whether a job is held under `key`.

        Args:
            key: (namespace, name).

        Returns:
            True when one is.
        """
        with self.lock:
            return key in self.jobs

    def put(self, key: Key, held: Held, from_watch: bool) -> bool:
        """Store `held` unless the copy held is newer, or (a fed copy) the watch saw this very job deleted after it
        was read.

        Args:
            key: (namespace, name).
            held: the job.
            from_watch: whether a watch event brought it (a fed copy never revives a job the watch saw deleted).

        Returns:
            False when the copy held is newer (a replayed event) or the deletion wins; True when stored.
        """
        with self.lock:
            current = self.jobs.get(key)
            if current is not None and not rv_newer(held.rv, current.rv):
                return False
            gone = self.deleted.get(key)
            after_deletion = gone is not None and rv_newer(held.rv, gone[0]) and held.rv != gone[0]
            if not from_watch and gone is not None and gone[1] == held.uid and not after_deletion:
                return False  # the watch saw this very job deleted after this copy was read
            self.deleted.pop(key, None)
            self.jobs[key] = held
            return True

    def remove(self, key: Key, rv: str, uid: str) -> Optional[str]:
        """A DELETED event: forget the job of that uid (never a successor of the same name), remember the deletion.

        Args:
            key: (namespace, name).
            rv: the event's resourceVersion.
            uid: the deleted job's uid.

        Returns:
            Why the event was not applied ("" when it was), or None for a late DELETED of an earlier job.
        """
        with self.lock:
            current = self.jobs.get(key)
            if current is not None:
                if uid and current.uid and current.uid != uid:
                    return None  # a late DELETED of an earlier job of this name: its successor stays
                if not rv_newer(rv, current.rv):
                    return "an event older than the job held (a replayed resourceVersion)"
            self.jobs.pop(key, None)
            self.deleted[key] = (rv, uid)
            self.deleted.move_to_end(key)
            while len(self.deleted) > TOMBSTONES:
                self.deleted.popitem(last=False)
            return ""

    def discard(self, key: Key) -> None:
        """Forget a job without a tombstone (its newest copy has a shape no API server writes: GETs say so).

        Args:
            key: (namespace, name).
        """
        with self.lock:
            self.jobs.pop(key, None)

    def replace(self, listed: dict[Key, Held], rv: str) -> None:
        """A relist: the listed jobs, keeping a held copy whose resourceVersion is larger than the listed one's (or,
        for a job the list lacks, than the list's).

        Args:
            listed: the LIST's jobs.
            rv: the LIST's resourceVersion.
        """
        with self.lock:
            for key, held in self.jobs.items():
                newest = listed[key].rv if key in listed else rv
                if held.rv != newest and held.rv.isdigit() and newest.isdigit() and int(held.rv) > int(newest):
                    listed[key] = held
            self.jobs = listed

    def is_deleted(self, key: Key, uid: str) -> bool:
        """Whether the watch reported the job deleted and no newer copy came since.

        Args:
            key: (namespace, name).
            uid: the job's uid ("" for any).

        Returns:
            True when the deletion is remembered.
        """
        with self.lock:
            gone = self.deleted.get(key)
            return gone is not None and key not in self.jobs and (not uid or gone[1] == uid)

    def sizes(self) -> tuple[int, int]:
        """How much is held.

        Returns:
            (jobs held, deletions remembered).
        """
        with self.lock:
            return len(self.jobs), len(self.deleted)
