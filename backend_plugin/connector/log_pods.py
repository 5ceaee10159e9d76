"""The pods a job's log links name, learned by one list and kept while the job stays as it was, and the links made of
them.

A JobSet's or a TrainJob's pods end in a random suffix (the Job controller names them), so their log links need the
pod list; listing the pods on every poll made a steady poll cost one API request per job whenever log links are
configured. Instead the connector lists them once and keeps what the links read (`slim_pod`), and the links it made
(where no template reads a time, which moves while a pod runs), under the job's uid and resourceVersion: a restart, a
replaced pod, a job that became ready or ended all change the status the controllers write, and so the job's
resourceVersion, and the next poll that needs links lists again (a finished job's list gives its pods' finish times).
A steady poll then costs no request, and makes no link again. A pod replaced and ready again between two polls, with
the job as it was before, keeps the old pod's link until the job next changes.

Memory: of each pod, only what the links read (of its labels and annotations, the kind's `link_pod_keys`), as compact
JSON text read back when links are made, and the links as serialized messages: a JobSet's three pods as an API server
lists them (3.6 KB of JSON each) and one link are about 2.5 KiB held (the pods' dicts with every label and annotation
were 12 KiB, and each link's protobuf message 0.6 KiB more outside Python's heap). A job is forgotten when its answer
is terminal, when no poll asked for it for `idle_s`, and, oldest first, past `max_jobs`. Thread-safe: the event loop
reads, pool threads store.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Hashable, Iterator, Mapping, Sequence
from typing import Any, Optional, Union, overload

from flyteidl.core.execution_pb2 import TaskLog

__all__ = ["HeldPods", "LogPods", "MAX_JOBS", "run_key", "slim_pod", "with_pods_gone"]

MAX_JOBS = 100_000
"""The most jobs whose pods are held (the least recently polled go first), as `progress.MAX_ATTEMPTS`."""


def run_key(job: Mapping[str, Any]) -> str:
    """What the pods and links held for a job were made under: its resourceVersion, which the API server changes with
    every change of the job (a restart, a replaced pod, a job that became ready or ended: its status); a digest of its
    status where it has none.

    Args:
        job: the job as read (from the watch cache or a GET).

    Returns:
        A short string; another version of the job gives another.
    """
    rv = (job.get("metadata") or {}).get("resourceVersion")
    if rv:
        return str(rv)
    status = json.dumps(job.get("status"), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(status.encode(), digest_size=12).hexdigest()


def slim_pod(pod: Mapping[str, Any], keys: Collection[str]) -> dict[str, Any]:
    """What a log link reads of a pod: its name, uid and creation time, of its labels and annotations those named
    `keys` (the kind's `JobTarget.link_pod_keys`: its replica, index, restart), its node, its start time and its
    containers' names and finish times.

    Args:
        pod: a pod as listed.
        keys: the labels (or annotations) the kind's links read.

    Returns:
        A new dict of the pod's shape, with what is absent left out.
    """
    meta = pod.get("metadata") or {}
    slim_meta = {k: meta[k] for k in ("name", "uid", "creationTimestamp") if k in meta}
    for part in ("labels", "annotations"):
        values = meta.get(part)
        kept = {k: values[k] for k in keys if k in values} if isinstance(values, Mapping) else {}
        if kept:
            slim_meta[part] = kept
    out: dict[str, Any] = {"metadata": slim_meta}
    spec = pod.get("spec") or {}
    if "nodeName" in spec:
        out["spec"] = {"nodeName": spec["nodeName"]}
    status = pod.get("status") or {}
    slim_status: dict[str, Any] = {k: status[k] for k in ("startTime",) if k in status}
    containers = []
    for c in status.get("containerStatuses") or []:
        if not isinstance(c, Mapping):
            continue
        slim_c = {k: c[k] for k in ("name",) if k in c}
        finished = ((c.get("state") or {}).get("terminated") or {}).get("finishedAt")
        if finished is not None:
            slim_c["state"] = {"terminated": {"finishedAt": finished}}
        containers.append(slim_c)
    if containers:
        slim_status["containerStatuses"] = containers
    if slim_status:
        out["status"] = slim_status
    return out


def with_pods_gone(
    listed: Sequence[Mapping[str, Any]], held: Optional[Sequence[Mapping[str, Any]]]
) -> list[Mapping[str, Any]]:
    """The pods as listed, and the pods held before that the list no longer has: a JobSet that met its success policy
    deletes its workers' Jobs, and their pods, while the master's completes, so the final answer would otherwise link
    the master alone. A kind's links take the newest pod of each replica of the job's current run, so a pod replaced
    since (a restart, a new pod of the same replica) gives way to the new one.

    Args:
        listed: the job's pods as listed now.
        held: the pods held for it before (`LogPods.last`), or None.

    Returns:
        The pods for the links.
    """
    names = {str((p.get("metadata") or {}).get("name", "")) for p in listed if isinstance(p, Mapping)}
    gone = [p for p in held or () if str((p.get("metadata") or {}).get("name", "")) not in names]
    return [*gone, *listed]  # listed last: of two pods of a replica created in the same second, the listed one


class HeldPods(Sequence[Mapping[str, Any]]):
    """The pods held for a job, read back from their text when a link reads them (a poll whose links are held reads
    none of them).

    Args:
        text: the slim pods as compact JSON.
        count: how many.
    """

    __slots__ = ("_text", "_count", "_pods")

    def __init__(self, text: str, count: int) -> None:
        self._text, self._count = text, count
        self._pods: Optional[list[dict[str, Any]]] = None

    def _read(self) -> list[dict[str, Any]]:
        if self._pods is None:
            self._pods = json.loads(self._text)
        return self._pods

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[dict[str, Any], list[dict[str, Any]]]:
        return self._read()[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._read())


class _Held:
    __slots__ = ("key", "pods", "count", "links", "used_at")

    def __init__(self, key: str, pods: Optional[str], count: int, used_at: float) -> None:
        self.key, self.pods, self.count, self.used_at = key, pods, count, used_at
        self.links: dict[Hashable, tuple[bytes, ...]] = {}


class LogPods:
    """Per job, the pods its links name and the links made of them, while its status is the one they were made
    under.

    Args:
        idle_s: a job no poll asked for this long is forgotten (`watch_idle_s`, as a namespace's watch stops).
        max_jobs: the most jobs held; the least recently polled go first.

    Raises:
        ValueError: `idle_s` not positive or `max_jobs` below 1.
    """

    def __init__(self, idle_s: float, max_jobs: int = MAX_JOBS) -> None:
        if not idle_s > 0 or max_jobs < 1:
            raise ValueError(f"idle_s={idle_s!r} must be positive and max_jobs={max_jobs!r} at least 1")
        self.idle_s = float(idle_s)
        self.max_jobs = max_jobs
        self._jobs: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()
        self._swept_at = 0.0
        self.lists = 0

    def _current(self, uid: str, key: str, now: float) -> Optional[_Held]:
        held = self._jobs.get(uid)
        if held is None or held.key != key:
            return None
        held.used_at = now
        self._jobs.move_to_end(uid)
        return held

    def get(self, uid: str, key: str, now: float) -> Optional[HeldPods]:
        """The pods held for the job, when they were listed under `key`.

        Args:
            uid: the job's uid.
            key: `run_key` of the job as read now.
            now: a monotonic clock, seconds.

        Returns:
            The pods (`slim_pod`'s, read when a link reads them), or None: list them.
        """
        with self._lock:
            held = self._current(uid, key, now)
            return HeldPods(held.pods, held.count) if held is not None and held.pods is not None else None

    def put(self, uid: str, key: str, pods: Sequence[Mapping[str, Any]], keys: Collection[str], now: float) -> None:
        """Hold what the links read of the job's pods, under `key` (links made before are let go).

        Args:
            uid: the job's uid ("" holds nothing).
            key: `run_key` of the job the pods were listed for.
            pods: the job's pods as listed.
            keys: the labels (or annotations) the kind's links read (`JobTarget.link_pod_keys`).
            now: a monotonic clock, seconds.
        """
        if uid:
            slim = [slim_pod(p, keys) for p in pods if isinstance(p, Mapping)]
            text = json.dumps(slim, separators=(",", ":"))
            with self._lock:
                self.lists += 1
                self._hold(uid, _Held(key, text, len(slim), now), now)

    def last(self, uid: str) -> Optional[HeldPods]:
        """The pods held for the job under whatever status they were listed for (those a new list no longer has still
        name their replica: `with_pods_gone`).

        Args:
            uid: the job's uid.

        Returns:
            The pods, or None when none are held.
        """
        with self._lock:
            held = self._jobs.get(uid)
            return HeldPods(held.pods, held.count) if held is not None and held.pods is not None else None

    def links(self, uid: str, key: str, variant: Hashable, now: float) -> Optional[tuple[TaskLog, ...]]:
        """The links made for the job under `key` and `variant` (what else they depend on: the task's config).

        Args:
            uid: the job's uid.
            key: `run_key` of the job as read now.
            variant: what else the links were made of.
            now: a monotonic clock, seconds.

        Returns:
            The links (new objects, read from what is held), or None: make them.
        """
        with self._lock:
            held = self._current(uid, key, now)
            kept = held.links.get(variant) if held is not None else None
        return None if kept is None else tuple(TaskLog.FromString(link) for link in kept)

    def put_links(self, uid: str, key: str, variant: Hashable, links: Sequence[TaskLog], now: float) -> None:
        """Keep the links made for the job under `key` and `variant`.

        Args:
            uid: the job's uid ("" keeps nothing).
            key: `run_key` of the job they were made for.
            variant: what else they were made of.
            links: the links.
            now: a monotonic clock, seconds.
        """
        if not uid:
            return
        kept = tuple(link.SerializeToString() for link in links)
        with self._lock:
            held = self._current(uid, key, now)
            if held is None:
                held = _Held(key, None, 0, now)
                self._hold(uid, held, now)
            held.links[variant] = kept

    def _hold(self, uid: str, held: _Held, now: float) -> None:
        self._jobs[uid] = held
        self._jobs.move_to_end(uid)
        while len(self._jobs) > self.max_jobs:
            self._jobs.popitem(last=False)
        if now - self._swept_at >= self.idle_s:
            self._swept_at = now
            for stale in [u for u, h in self._jobs.items() if now - h.used_at > self.idle_s]:
                del self._jobs[stale]

    def forget(self, uid: str) -> None:
        """Let the job's pods and links go (its answer is terminal, or it is gone).

        Args:
            uid: the job's uid.
        """
        with self._lock:
            self._jobs.pop(uid, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)
