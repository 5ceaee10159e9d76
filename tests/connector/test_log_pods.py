"""What the connector holds for a job's log links (`connector.log_pods`): of each pod only what the links read, so the
links made of the pods held are the links made of the pods as listed, for every kind and every template variable;
the kinds' links read no label or annotation beyond the ones they declare; what a held job costs."""

from __future__ import annotations

import copy
import datetime
import inspect
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.config import BackendConfig
from backend_plugin.connector.log_pods import HeldPods, LogPods, slim_pod, with_pods_gone
from backend_plugin.log_templates import VARIABLES
from backend_plugin.targets.registry import KINDS
from backend_plugin.template import read_template
from tests.helpers.jobs import META, load
from tests.targets.conftest import Kind, facts_of

NOW = datetime.datetime(2025, 1, 1, 2, 0, tzinfo=datetime.timezone.utc)
EVERY_VARIABLE = "https://logs.example.com/" + "/".join(f"{{{{ .{v} }}}}" for v in sorted(VARIABLES))
LINKS = [
    {"name": "All", "template": EVERY_VARIABLE + "?team={{ .taskConfig.team }}"},
    {"name": "Shell", "template": "https://shell/{{ .podName }}/{{ .hostname }}", "link_type": "shell"},
]
"""A link of every variable the docs list (and a task config key), and a dynamic link."""
CONFIG = BackendConfig.from_dict({"log_links": LINKS})
TASK_CONFIG = {"team": "ml", "link_type": "shell"}


@pytest.fixture(params=KINDS, ids=[t.config_name for t in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    """Each registered job kind in turn."""
    return Kind(request.param, facts_of(request.param))


def job_of(kind: Kind, **status: Any) -> dict:
    """The kind's job for a committed template, as the API server answers it, with this status."""
    job = kind.target.write(kind.target.plan(read_template(load("hand_cpu")), copy.deepcopy(META), CONFIG))
    job["metadata"].update(creationTimestamp="2025-01-01T00:00:00Z", uid="0b6e3c52-job", resourceVersion="4711")
    job["status"] = status
    return job


def as_listed(pod: dict, index: int) -> dict:
    """A pod as an API server lists it: its uid, node, owner, managed fields, the labels and annotations the
    controllers and admission add, more containers (a sidecar, an init container) and the kubelet's status."""
    out = copy.deepcopy(pod)
    meta = out["metadata"]
    name = meta["name"]
    meta.setdefault("creationTimestamp", "2025-01-01T00:01:00Z")
    meta.update(
        uid=f"7f9d{index:04d}-5b2a-4c1e-9d0a-1c2b3c4d5e6f",
        resourceVersion=str(9000 + index),
        generateName=name.rsplit("-", 1)[0] + "-",
        ownerReferences=[
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "owner",
                "uid": "1d2c",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        managedFields=[
            {
                "manager": m,
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2025-01-01T00:01:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {f"f:{k}": {} for k in range(30)}},
            }
            for m in ("kube-controller-manager", "kubelet")
        ],
    )
    meta["labels"] = {
        **meta.get("labels", {}),
        "batch.kubernetes.io/controller-uid": "1d2c3b4a-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        "controller-uid": "1d2c3b4a-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        "job-name": name.rsplit("-", 2)[0],
        "app.kubernetes.io/managed-by": "flytekitplugins-pytorch",
        "execution-id": "abc123",
    }
    meta["annotations"] = {
        **meta.get("annotations", {}),
        "kubectl.kubernetes.io/default-container": "pytorch",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "jobset.sigs.k8s.io/job-key": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    }
    spec = out.setdefault("spec", {})
    spec.update(nodeName=f"gpu-node-{index % 2}", serviceAccountName="default", restartPolicy="Never",
                tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                volumes=[{"name": "shm", "emptyDir": {"medium": "Memory"}}])  # fmt: skip
    status = out.setdefault("status", {})
    status.update(
        hostIP="10.0.0.7", podIP=f"10.1.0.{index}", podIPs=[{"ip": f"10.1.0.{index}"}], qosClass="Guaranteed",
        conditions=[{"type": t, "status": "True", "lastTransitionTime": "2025-01-01T00:01:04Z"}
                    for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
        initContainerStatuses=[{"name": "init", "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
                                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                         "finishedAt": "2025-01-01T00:01:03Z"}}}],
    )  # fmt: skip
    sidecar = {"name": "fluent-bit", "ready": True, "restartCount": 0, "image": "fluent-bit", "imageID": "",
               "state": {"terminated": {"exitCode": 0, "finishedAt": "2025-01-01T00:59:00Z"}}}  # fmt: skip
    status["containerStatuses"] = [*status.get("containerStatuses", []), sidecar]
    for c in status["containerStatuses"]:
        c["containerID"] = f"containerd://{index:064d}"
        c.setdefault("started", True)
    return out


def finished(container: dict, at: str) -> None:
    """The container as the kubelet writes it once it exited."""
    container["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2025-01-01T00:01:05Z",
                                         "finishedAt": at}}  # fmt: skip


def scenarios(kind: Kind) -> Iterator[tuple[str, dict, list[dict]]]:
    """(what, job, its pods as listed): running; ended (the primary container's finish); without a start time (the
    job's); one pod replaced (two of one index); the pods carrying their index only as an annotation; where a kind's
    pods say which run they belong to, a pod of the run before left beside the current run's."""
    job = job_of(kind, startTime="2025-01-01T00:00:30Z")
    running = [as_listed(kind.pod(job, i), i) for i in range(3)]
    yield "running", job, running
    ended = copy.deepcopy(running)
    for i, pod in enumerate(ended):
        for c in pod["status"]["containerStatuses"]:
            finished(c, f"2025-01-01T01:0{i}:00Z")
    yield "ended", job_of(kind, startTime="2025-01-01T00:00:30Z", completionTime="2025-01-01T01:30:00Z"), ended
    unstarted = copy.deepcopy(running)
    for pod in unstarted:
        del pod["status"]["startTime"]
    yield "no start time", job_of(kind), unstarted
    replaced = copy.deepcopy(running[0])
    replaced["metadata"].update(name=replaced["metadata"]["name"] + "r", creationTimestamp="2025-01-01T00:30:00Z")
    yield "replaced", job, [*running, replaced]
    annotated = copy.deepcopy(running)
    for pod in annotated:
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        for key in kind.target.link_pod_keys:
            if key in labels:
                annotations[key] = labels.pop(key)
    yield "keys as annotations", job, annotated
    if "attempt" in inspect.signature(kind.pod).parameters:  # a kind whose pods carry the run they belong to
        restarted = job_of(kind, startTime="2025-01-01T00:00:30Z", restarts=1)
        current = [as_listed(kind.pod(restarted, i, attempt=1), i) for i in range(3)]
        yield "a previous run's pod left", restarted, [*current, as_listed(kind.pod(restarted, 0, attempt=0), 0)]


def held(pods: list[dict], keys: tuple[str, ...]) -> HeldPods:
    """The pods as `LogPods` holds them and gives them back."""
    memory = LogPods(idle_s=60)
    memory.put("uid", "rv", pods, keys, 0.0)
    out = memory.get("uid", "rv", 1.0)
    assert out is not None
    return out


def test_the_pods_held_give_the_links_the_pods_as_listed_give(kind: Kind) -> None:
    """Every kind, every template variable, running and ended pods, a replaced pod, keys as annotations."""
    for what, job, pods in scenarios(kind):
        full = kind.target.links(job, pods, CONFIG, NOW, TASK_CONFIG)
        slim = kind.target.links(job, held(pods, kind.target.link_pod_keys), CONFIG, NOW, TASK_CONFIG)
        assert full, what
        assert slim == full, what
        assert len({link.uri for link in full}) == len(full), what  # each pod's link its own


def test_what_is_held_of_a_pod_is_what_the_links_read() -> None:
    pod = as_listed(facts_of(KINDS[0]).pod(job_of(Kind(KINDS[0], facts_of(KINDS[0]))), 1), 1)
    finished(pod["status"]["containerStatuses"][0], "2025-01-01T01:00:00Z")
    pod["metadata"]["annotations"]["some/key"] = "x"
    assert slim_pod(pod, ("some/key", "absent/key")) == {
        "metadata": {
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
            "creationTimestamp": pod["metadata"]["creationTimestamp"],
            "annotations": {"some/key": "x"},
        },
        "spec": {"nodeName": "gpu-node-1"},
        "status": {
            "startTime": pod["status"]["startTime"],
            "containerStatuses": [
                {"name": "pytorch", "state": {"terminated": {"finishedAt": "2025-01-01T01:00:00Z"}}},
                {"name": "fluent-bit", "state": {"terminated": {"finishedAt": "2025-01-01T00:59:00Z"}}},
            ],
        },
    }
    assert slim_pod({}, ("a",)) == {"metadata": {}}


class _Reads(Mapping[str, Any]):
    """A pod's labels or annotations that note every key read."""

    def __init__(self, values: dict[str, Any], read: set[str]) -> None:
        self._values, self._read = values, read

    def __getitem__(self, key: str) -> Any:
        self._read.add(key)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        self._read.update(self._values)  # reading them all: every key counts as read
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        self._read.add(str(key))
        return key in self._values


def test_the_links_read_no_label_beyond_the_kinds_link_pod_keys(kind: Kind) -> None:
    """What `slim_pod` keeps of the labels and annotations is what the kind declares: a key its links read and it does
    not declare would be dropped from the pods held (and the links made of them differ). Every key declared is read."""
    read: set[str] = set()
    for _, job, pods in list(scenarios(kind)):
        for pod in pods:
            meta = pod["metadata"]
            meta["labels"], meta["annotations"] = _Reads(meta["labels"], read), _Reads(meta["annotations"], read)
        kind.target.links(job, pods, CONFIG, NOW, TASK_CONFIG)
    assert read == set(kind.target.link_pod_keys)


def test_links_held_are_given_back_as_made() -> None:
    memory = LogPods(idle_s=60)
    links = (TaskLog(uri="https://logs/a", name="Logs master-0"), TaskLog(uri="https://logs/b", name="Logs worker-0"))
    memory.put_links("uid", "rv", ("variant",), links, 0.0)
    again = memory.links("uid", "rv", ("variant",), 1.0)
    assert again == links and again is not None and again[0] is not links[0]
    assert memory.links("uid", "rv2", ("variant",), 1.0) is None and memory.links("uid", "rv", (), 1.0) is None


def test_pods_held_are_read_only_when_a_link_reads_them() -> None:
    pods = HeldPods('[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]', 2)
    assert len(pods) == 2 and bool(pods) and pods._pods is None  # a kind's `if not pods` reads nothing
    assert [p["metadata"]["name"] for p in pods] == ["a", "b"] and pods[1] == {"metadata": {"name": "b"}}
    assert pods[:1] == [{"metadata": {"name": "a"}}]


def _size(obj: Any, seen: set[int]) -> int:
    """Bytes of `obj` and of everything it holds (objects shared with others counted once)."""
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_size(k, seen) + _size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(_size(x, seen) for x in obj)
    elif hasattr(obj, "__slots__"):
        size += sum(_size(getattr(obj, s), seen) for s in obj.__slots__ if hasattr(obj, s))
    return size


def test_a_held_jobset_of_three_pods_and_its_link_costs_under_3_kib() -> None:
    """The figure `connector.log_pods` gives: a JobSet's three pods as an API server lists them (3.6 KB of JSON
    each) and one link, held, are about 2.5 KiB; the pods' slim dicts with every label and annotation, as they were
    held before, were 12 KiB, and each link's protobuf message another 0.6 KiB of the process's memory."""
    target = next(t for t in KINDS if t.config_name == "jobset")
    kind = Kind(target, facts_of(target))
    config = BackendConfig.from_dict({"log_links": [{"name": "Logs", "template": "https://logs/{{ .podName }}"}]})
    job = job_of(kind)
    pods = [as_listed(kind.pod(job, i, role="master" if i == 0 else "worker"), i) for i in range(3)]
    memory = LogPods(idle_s=60)
    uid, key = str(job["metadata"]["uid"]), str(job["metadata"]["resourceVersion"])
    memory.put(uid, key, pods, target.link_pod_keys, 0.0)
    memory.put_links(uid, key, (), target.links(job, memory.get(uid, key, 0.0), config, NOW, {}), 0.0)
    entry = memory._jobs[uid]
    cost = _size(entry, {id(key)})  # the key is the job's own resourceVersion, held by the job too
    assert 1500 < cost < 3 * 1024, cost


def test_the_pods_a_finished_job_deleted_keep_their_links(kind: Kind) -> None:
    """A JobSet that met its success policy deletes its workers' Jobs, and their pods, while the master's completes:
    the list of the final answer has the master's pod alone. The links are made of it and of the pods held before that
    it no longer has (`with_pods_gone`), so every replica keeps its link; a pod replaced since gives way to the new."""
    job = job_of(kind, startTime="2025-01-01T00:00:30Z")
    running = [as_listed(kind.pod(job, i), i) for i in range(3)]
    memory = LogPods(idle_s=60)
    memory.put("uid", "rv-running", running, kind.target.link_pod_keys, 0.0)
    assert memory.last("uid") is not None and len(memory.last("uid") or ()) == 3
    final = running[:1]
    every = kind.target.links(job, running, CONFIG, NOW, TASK_CONFIG)
    assert kind.target.links(job, with_pods_gone(final, memory.last("uid")), CONFIG, NOW, TASK_CONFIG) == every
    if len(kind.target.links(job, final, CONFIG, NOW, TASK_CONFIG)) < len(every):  # a kind whose links need its pods
        replaced = copy.deepcopy(running[1])
        replaced["metadata"].update(name=replaced["metadata"]["name"] + "r", creationTimestamp="2025-01-01T00:30:00Z")
        links = kind.target.links(job, with_pods_gone([*final, replaced], memory.last("uid")), CONFIG, NOW, TASK_CONFIG)
        assert links == kind.target.links(job, [*final, replaced, running[2]], CONFIG, NOW, TASK_CONFIG)
        assert links != every  # the replaced replica's link names its new pod
    assert with_pods_gone(final, None) == final and memory.last("other") is None
