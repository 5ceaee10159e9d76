"""The cluster tier's harness: a real control plane (`python -m devcluster up`), the connector deployed on it from
`backend_plugin/deploy/` (its ServiceAccount, RBAC and Deployment, one Deployment per job kind), and a client that
calls the connector over gRPC as flytepropeller does (CreateTask, then GetTask polls, DeleteTask).

What is real: the API server (RBAC, admission, CRD validation, webhooks, watches), the Job controller, the scheduler,
the garbage collector, training-operator, Trainer, JobSet and Kueue, the connector's pod and its token. The node agent
runs every pod as local processes (`devcluster/agent`); the blob store is an S3 stand-in in the cluster. A task's pods
run `pyflyte-execute` from this checkout and its venv: the "image" is ignored.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from flyteidl.admin.agent_pb2 import CreateTaskRequest, DeleteTaskRequest, GetTaskRequest, TaskCategory
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate

from devcluster.kube import ApiError, Kube, wait_for
from devcluster.paths import container_log

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "backend_plugin" / "deploy"
CONNECTOR_NS = "flyte"
TASK_NS = "flytesnacks-development"
BUCKET = "flyte-blobs"
TERMINAL = (TaskExecution.SUCCEEDED, TaskExecution.FAILED, TaskExecution.RETRYABLE_FAILED, TaskExecution.ABORTED)


@dataclass(frozen=True)
class ClusterInfo:
    """A running devcluster, as `up` described it in its state folder."""

    state: Path
    kubeconfig: Path
    server: str
    blob_endpoint: str
    kubectl: Path

    @classmethod
    def read(cls, state: Path) -> ClusterInfo:
        info = json.loads((state / "cluster.json").read_text())
        return cls(state, Path(info["kubeconfig"]), info["server"], info["blob_endpoint"], state / "bin" / "kubectl")


def blob_env(info: ClusterInfo) -> dict[str, str]:
    """The variables flytekit reads for an S3-compatible store (the sandbox sets the same for its MinIO)."""
    return {
        "FLYTE_AWS_ENDPOINT": info.blob_endpoint,
        "FLYTE_AWS_ACCESS_KEY_ID": "devcluster",
        "FLYTE_AWS_SECRET_ACCESS_KEY": "devcluster",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def ensure_bucket(info: ClusterInfo) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=info.blob_endpoint, aws_access_key_id="devcluster",
                      aws_secret_access_key="devcluster", region_name="us-east-1")  # fmt: skip
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def connector_name(kind: str, variant: str = "") -> str:
    return f"pytorch-connector-{kind}" + (f"-{variant}" if variant else "")


def connector_objects(kind: str, config: dict[str, Any], info: ClusterInfo, variant: str = "") -> list[dict]:
    """`deploy/rbac.yaml` as shipped, and `deploy/connector.yaml` for one job kind: one replica, named after the kind
    (and `variant`, a second connector of the kind with other settings), its config (`target: <kind>` and the given
    settings) in a ConfigMap of its own, the blob store's variables added. Nothing else of the manifests changes (the
    image is ignored: the node agent runs `pyflyte serve connector` of this checkout's venv)."""
    objects = _docs(DEPLOY / "rbac.yaml")
    name = connector_name(kind, variant)
    for doc in _docs(DEPLOY / "connector.yaml"):
        doc = copy.deepcopy(doc)
        if doc["kind"] == "Deployment":
            doc["metadata"]["name"] = name
            doc["spec"]["replicas"] = 1
            # a name of its own too: the shipped Service (the one propeller calls in test_flyte.py, in the same
            # namespace) selects `app.kubernetes.io/name: pytorch-connector`, and took this pod for one of its own
            doc["spec"]["selector"]["matchLabels"] = {
                "app.kubernetes.io/name": name,
                "app.kubernetes.io/instance": name,
            }
            tpl = doc["spec"]["template"]
            tpl["metadata"]["labels"].update({"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name})
            for vol in tpl["spec"]["volumes"]:
                if "configMap" in vol:
                    vol["configMap"]["name"] = name
            container = tpl["spec"]["containers"][0]
            container["env"] += [{"name": k, "value": v} for k, v in blob_env(info).items()]
        elif doc["kind"] == "ConfigMap":
            doc["metadata"]["name"] = name
            doc["data"]["config.yaml"] = yaml.safe_dump({**yaml.safe_load(doc["data"]["config.yaml"]),
                                                         "target": kind, **config})  # fmt: skip
        elif doc["kind"] == "Service":
            doc["metadata"]["name"] = name
            doc["spec"]["selector"] = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name}
        objects.append(doc)
    return objects


def execution_metadata(execution: str, env: dict[str, str], attempt: int = 0, node: str = "n0",
                       namespace: str = TASK_NS) -> TaskExecutionMetadata:  # fmt: skip
    """What propeller sends for one attempt of one node of an execution in project flytesnacks, domain development
    (with no annotations)."""
    from tests.connector.helpers import execution_metadata as metadata

    return metadata(execution, node=node, attempt=attempt, namespace=namespace, environment=env, annotations={})


@dataclass
class Answer:
    phase: int
    message: str
    logs: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return TaskExecution.Phase.Name(self.phase)


class Propeller:
    """flytepropeller's side of the connector protocol, over gRPC to the connector's pod."""

    def __init__(self, address: str, task_type_version: int = 1) -> None:
        import grpc
        from flyteidl.service.agent_pb2_grpc import AsyncAgentServiceStub

        self.channel = grpc.insecure_channel(address)
        self.stub = AsyncAgentServiceStub(self.channel)
        self.category = TaskCategory(name="pytorch", version=task_type_version)

    def close(self) -> None:
        self.channel.close()

    def create(self, template: TaskTemplate, output_prefix: str, inputs: LiteralMap,
               meta: TaskExecutionMetadata) -> bytes:  # fmt: skip
        request = CreateTaskRequest(
            inputs=inputs.to_flyte_idl(),
            template=template.to_flyte_idl(),
            output_prefix=output_prefix,
            task_execution_metadata=meta.to_flyte_idl(),
        )
        import grpc

        for attempt in range(3):  # propeller retries a CreateTask that did not reach the connector
            try:
                return bytes(self.stub.CreateTask(request, timeout=60).resource_meta)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == 2:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def get(self, meta: bytes) -> Answer:
        got = self.stub.GetTask(GetTaskRequest(task_category=self.category, resource_meta=meta), timeout=30)
        return Answer(got.resource.phase, got.resource.message, [log.uri for log in got.resource.log_links])

    def delete(self, meta: bytes) -> None:
        self.stub.DeleteTask(DeleteTaskRequest(task_category=self.category, resource_meta=meta), timeout=30)

    def poll(self, meta: bytes, timeout_s: float, interval_s: float = 1.0) -> list[Answer]:
        """GetTask until a terminal phase (propeller polls every few seconds; 1 s here)."""
        seen: list[Answer] = []
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self.get(meta)
            if not seen or (answer.phase, answer.message) != (seen[-1].phase, seen[-1].message):
                seen.append(answer)
            if answer.phase in TERMINAL:
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"no terminal phase after {timeout_s:.0f} s: {[(a.name, a.message) for a in seen]}")
            time.sleep(interval_s)


class RealCluster:
    """One devcluster, seen by a test."""

    def __init__(self, info: ClusterInfo) -> None:
        self.info = info
        self.kube = Kube(info.kubeconfig)

    # --- objects

    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        query = {"labelSelector": selector} if selector else {}
        return self.kube.get(f"/api/v1/namespaces/{namespace}/pods", **query)["items"]

    def job(self, kind_path: str, namespace: str, name: str) -> dict | None:
        return self.kube.get_or_none(f"{kind_path}/namespaces/{namespace}/{name}")

    def pod_log(self, pod: dict, container: str | None = None) -> str:
        """A container's output: the node agent keeps it under the state folder, as the kubelet under /var/log/pods."""
        return container_log(self.info.state, pod, container)

    def logs_of(self, namespace: str, selector: str) -> str:
        return "\n".join(f"----- {p['metadata']['name']} ({p['status'].get('phase')})\n{self.pod_log(p)[-3000:]}"
                         for p in self.pods(namespace, selector))  # fmt: skip

    def evict(self, namespace: str, pod: str) -> None:
        """The Eviction API, as `kubectl drain` and the cluster autoscaler call it."""
        self.kube.create(
            f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction",
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}},
        )

    def ensure_namespace(self, namespace: str) -> None:
        try:
            self.kube.create(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
        except ApiError as e:
            if e.status != 409:
                raise
        account = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        wait_for(f"namespace {namespace}'s default ServiceAccount", lambda: self.kube.get_or_none(account), 60)

    # --- the connector

    def deploy_connector(self, kind: str, config: dict[str, Any] | None = None, variant: str = "") -> Propeller:
        """Deploy (or update) the connector of `kind` (`variant`: a second one with other settings) and return a
        propeller client to its pod."""
        from devcluster.addons import apply_all
        from devcluster.flyte import code_digest, rolled_out

        objects = connector_objects(kind, config or {}, self.info, variant)
        self.ensure_namespace(CONNECTOR_NS)  # Flyte's namespace, where a Flyte install puts it
        apply_all(self.kube, objects)
        name = connector_name(kind, variant)
        deployments = [o for o in objects if o["kind"] == "Deployment"]
        # a new config is read at start, and the pod runs the checkout's code as it was when it started: restart the
        # pod when the ConfigMap or the code changed (a cluster kept up across test sessions kept the old code)
        annotations = {"devcluster/config": json.dumps(config or {}, sort_keys=True), "devcluster/code": code_digest()}
        self.kube.strategic_patch(
            f"/apis/apps/v1/namespaces/{CONNECTOR_NS}/deployments/{name}",
            {"spec": {"template": {"metadata": {"annotations": annotations}}}},
        )
        for d in deployments:  # the patched template rolled out, the old pod gone (not only "available")
            wait_for(f"Deployment {CONNECTOR_NS}/{d['metadata']['name']} rolled out",
                     functools.partial(rolled_out, self.kube, CONNECTOR_NS, d["metadata"]["name"]),
                     180, 1.0)  # fmt: skip

        def ready_pod() -> dict | None:
            pods = [
                p
                for p in self.pods(CONNECTOR_NS, f"app.kubernetes.io/instance={name}")
                if not p["metadata"].get("deletionTimestamp")
                and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            ]
            return pods[0] if len(pods) == 1 else None

        pod = wait_for(f"one ready pod of {name}", ready_pod, 180)
        return Propeller(f"{pod['status']['podIP']}:8000")


@dataclass
class Submitted:
    meta: bytes
    prefix: str
    job_name: str


def submit(propeller: Propeller, template: TaskTemplate, inputs: LiteralMap, execution: str, env: dict[str, str],
           attempt: int = 0) -> Submitted:  # fmt: skip
    prefix = f"s3://{BUCKET}/metadata/{execution}/n0/data/{attempt}"
    meta = execution_metadata(execution, env, attempt=attempt)
    resource_meta = propeller.create(template, prefix, inputs, meta)
    name = json.loads(resource_meta).get("job_name") or json.loads(resource_meta).get("name", "")
    return Submitted(resource_meta, prefix, name)


def read_outputs(
    info: ClusterInfo, prefix: str, types: dict[str, type], download_to: Path | None = None
) -> dict[str, Any]:
    """outputs.pb under `prefix` (s3://), read from the cluster's blob store as FlyteRemote reads it; with
    `download_to`, the files among the outputs are downloaded there (their `.path` then points at the local copy)."""
    import tempfile

    from flyteidl.core import literals_pb2
    from flytekit.configuration import DataConfig, S3Config
    from flytekit.core import utils
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.data_persistence import FileAccessProvider
    from flytekit.core.type_engine import TypeEngine
    from flytekit.types.file import FlyteFile

    env = blob_env(info)
    s3 = S3Config(endpoint=env["FLYTE_AWS_ENDPOINT"], access_key_id=env["FLYTE_AWS_ACCESS_KEY_ID"],
                  secret_access_key=env["FLYTE_AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = str(download_to) if download_to is not None else tmp
        access = FileAccessProvider(local_sandbox_dir=sandbox, raw_output_prefix=f"s3://{BUCKET}/raw",
                                    data_config=DataConfig(s3=s3))  # fmt: skip
        ctx = FlyteContextManager.current_context().with_file_access(access).build()
        local = os.path.join(tmp, "outputs.pb")
        access.get_data(f"{prefix}/outputs.pb", local)
        literal_map = LiteralMap.from_flyte_idl(utils.load_proto_from_file(literals_pb2.LiteralMap, local))
        with FlyteContextManager.with_context(ctx.new_builder()) as ctx:
            out = {name: TypeEngine.to_python_value(ctx, literal_map.literals[name], t) for name, t in types.items()}
            if download_to is not None:
                for value in out.values():
                    if isinstance(value, FlyteFile):
                        value.download()
            return out


def blob_keys(info: ClusterInfo, prefix: str) -> list[str]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=info.blob_endpoint, aws_access_key_id="devcluster",
                      aws_secret_access_key="devcluster", region_name="us-east-1")  # fmt: skip
    key = prefix.removeprefix(f"s3://{BUCKET}/").rstrip("/") + "/"
    out = s3.list_objects_v2(Bucket=BUCKET, Prefix=key)
    return sorted(o["Key"][len(key) :] for o in out.get("Contents") or [])


def blob_bytes(info: ClusterInfo, uri: str) -> bytes:
    """One object of the cluster's blob store (s3://bucket/key)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=info.blob_endpoint, aws_access_key_id="devcluster",
                      aws_secret_access_key="devcluster", region_name="us-east-1")  # fmt: skip
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def iter_env(info: ClusterInfo) -> Iterator[tuple[str, str]]:
    yield from blob_env(info).items()


# --- the kinds, their jobs and pods ----------------------------------------------------------------------------------

KINDS = ("pytorchjob", "trainjob", "jobset")
ALL_KINDS_ENV = "CLUSTER_KINDS"
"""`CLUSTER_KINDS=all` runs every scenario on every kind; by default a scenario that is not about a kind's own
behaviour runs on the kind named beside it only (CI's budget: see docs/testing.md)."""
GPU_NODES = ("gpu-1", "gpu-dedicated-1")
CPU_NODES = ("cpu-1", "cpu-2")
GPU_TAINT_KEYS = ("nvidia.com/gpu", "flyte/gpu")


THROUGH_PROPELLER = (
    "through real propeller instead ({} in tests/cluster/test_flyte.py, the same question asked end to end)"
)
"""Where CI covers a scenario of the connector alone: through propeller, which calls the same connector."""


def kind_params(ci: tuple[str, ...], elsewhere: str = "") -> list[Any]:
    """pytest params over every kind: those in `ci` always run, the others only with `CLUSTER_KINDS=all` (else they
    are skipped, saying how to run them and where CI covers the scenario: `elsewhere`, or the kinds in `ci`)."""
    import pytest

    every = os.environ.get(ALL_KINDS_ENV, "") == "all"
    where = elsewhere or f"on {', '.join(ci)}"
    return [
        pytest.param(k, marks=() if every or k in ci else pytest.mark.skip(
            reason=f"{k}: opt-in ({ALL_KINDS_ENV}=all); CI runs this scenario {where}"))
        for k in KINDS
    ]  # fmt: skip


def job_collection(kind: str, namespace: str = TASK_NS) -> str:
    """The API path of a kind's jobs in `namespace`."""
    from backend_plugin.targets.registry import BY_CONFIG

    d = BY_CONFIG[kind].declaration
    return f"/apis/{d.group}/{d.version}/namespaces/{namespace}/{d.plural}"


def pod_selector(kind: str, job_name: str) -> str:
    """The label selector of a job's pods: the operator's job-name label, or JobSet's (a TrainJob's JobSet has its
    name)."""
    from backend_plugin.targets.registry import BY_CONFIG

    return f"{BY_CONFIG[kind].declaration.pod_label}={job_name}"


# --- what a test leaves behind ---------------------------------------------------------------------------------------


def execution_processes(execution: str) -> list[int]:
    """Processes on this machine that belong to `execution`: a pod's container and every process it starts inherit
    the pod's environment, which holds `FLYTE_INTERNAL_EXECUTION_ID=<execution>` (the connector writes it); the node
    agent runs pods as local processes, so /proc sees them all (ranks, fork servers, their children)."""
    needle = f"\0FLYTE_INTERNAL_EXECUTION_ID={execution}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in b"\0" + (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def describe_processes(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "(gone)"
        out.append(f"{pid}: {cmd[:160]}")
    return out


class ProcessGuard:
    """The process-count guard of one execution: samples its processes every `interval_s` (`execution_processes`),
    keeps the peak, and past `max_procs` deletes the job (its pods and processes go with it) and records why, which
    `check` then raises. `gone` waits until none is left."""

    def __init__(self, execution: str, max_procs: int, on_exceed: Any, interval_s: float = 0.5) -> None:
        import threading

        self.execution = execution
        self.max_procs = max_procs
        self.on_exceed = on_exceed
        self.peak = 0
        self.exceeded = ""
        self._stop = threading.Event()
        self._interval_s = interval_s
        self._thread = threading.Thread(target=self._run, name=f"guard {execution}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = execution_processes(self.execution)
            self.peak = max(self.peak, len(pids))
            if len(pids) > self.max_procs and not self.exceeded:
                self.exceeded = f"{len(pids)} processes (limit {self.max_procs}):\n" + "\n".join(
                    describe_processes(pids)
                )
                try:
                    self.on_exceed()
                except Exception as e:  # noqa: BLE001 - the guard's own record says what happened
                    self.exceeded += f"\n(deleting the job failed: {e})"
            self._stop.wait(self._interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def check(self) -> None:
        if self.exceeded:
            raise AssertionError(f"execution {self.execution}: process-count guard: {self.exceeded}")

    def gone(self, timeout_s: float) -> list[str]:
        """Wait until no process of the execution is left; returns those still there at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            pids = execution_processes(self.execution)
            if not pids or time.monotonic() > deadline:
                return describe_processes(pids)
            time.sleep(0.2)


PHASE_ORDER = {
    TaskExecution.UNDEFINED: 0,
    TaskExecution.QUEUED: 1,
    TaskExecution.WAITING_FOR_RESOURCES: 2,
    TaskExecution.INITIALIZING: 3,
    TaskExecution.RUNNING: 4,
}
"""Where a phase stands in a task's life; terminal phases come after every other."""


def phases_going_back(answers: list[Answer]) -> list[str]:
    """Each step where GetTask's phase went back (RUNNING, then INITIALIZING or QUEUED): propeller shows a task's
    phases as they come, and a job that ran does not start again unless it was restarted."""
    back = []
    for before, after in zip(answers, answers[1:], strict=False):
        rank = (PHASE_ORDER.get(before.phase, 9), PHASE_ORDER.get(after.phase, 9))
        if rank[1] < rank[0]:
            back.append(f"{before.name} ({before.message[:120]}) -> {after.name} ({after.message[:160]})")
    return back


# --- one execution on the cluster -------------------------------------------------------------------------------------

TIMES: dict[tuple[str, str], float] = {}
"""Seconds each scenario took on each kind in this session (the tier's terminal summary prints them)."""


@dataclass
class Execution:
    """One task attempt submitted through the connector, as propeller submits it, under a process-count guard."""

    real: RealCluster
    propeller: Propeller
    kind: str
    name: str
    job: Submitted
    guard: ProcessGuard
    started: float
    seen_pods: dict[str, dict] = field(default_factory=dict)
    """Every pod of the job seen so far, by name, as last seen (a pod the controller deleted keeps its last state)."""
    answers: list[Answer] = field(default_factory=list)

    @property
    def job_path(self) -> str:
        return f"{job_collection(self.kind)}/{self.job.job_name}"

    def job_object(self) -> dict | None:
        return self.real.kube.get_or_none(self.job_path)

    def pods(self) -> list[dict]:
        return self.real.pods(TASK_NS, pod_selector(self.kind, self.job.job_name))

    def logs(self) -> str:
        return self.real.logs_of(TASK_NS, pod_selector(self.kind, self.job.job_name))

    def events(self, involved: str = "") -> list[dict]:
        """Events of the namespace whose involved object is `involved` (default: the job)."""
        name = involved or self.job.job_name
        return self.real.kube.get(f"/api/v1/namespaces/{TASK_NS}/events",
                                  fieldSelector=f"involvedObject.name={name}")["items"]  # fmt: skip

    def snapshot(self) -> list[dict]:
        """The job's pods now, remembered in `seen_pods`."""
        pods = self.pods()
        for pod in pods:
            self.seen_pods[pod["metadata"]["name"]] = pod
        return pods

    def get(self) -> Answer:
        answer = self.propeller.get(self.job.meta)
        if not self.answers or (answer.phase, answer.message) != (self.answers[-1].phase, self.answers[-1].message):
            self.answers.append(answer)
        return answer

    def poll(self, timeout_s: float, interval_s: float = 1.0) -> list[Answer]:
        """GetTask until a terminal phase (propeller polls every few seconds; 1 s here), the pods listed beside each
        answer; returns the distinct answers."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.guard.check()
            answer = self.get()
            self.snapshot()
            if answer.phase in TERMINAL:
                back = phases_going_back(self.answers)
                assert not back, f"{self.name}: GetTask's phase went back: {back}"
                return self.answers
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no terminal phase after {timeout_s:.0f} s: "
                                   f"{[(a.name, a.message) for a in self.answers]}\n{self.logs()}")  # fmt: skip
            time.sleep(interval_s)

    def phases(self) -> list[str]:
        names: list[str] = []
        for a in self.answers:
            if not names or names[-1] != a.name:
                names.append(a.name)
        return names

    def wait(self, what: str, check: Any, timeout_s: float, interval_s: float = 0.5) -> Any:
        """`wait_for`, with the guard checked on every try."""

        def guarded() -> Any:
            self.guard.check()
            return check()

        return wait_for(what, guarded, timeout_s, interval_s)

    def delete_job(self) -> None:
        """Delete the job as an admin would (background propagation: the garbage collector takes what it owns)."""
        self.real.kube.delete(self.job_path, {"propagationPolicy": "Background"})

    def clock(self, scenario: str) -> float:
        """Record (and print) the time since submission as `scenario`'s on this kind."""
        seconds = time.monotonic() - self.started
        TIMES[(scenario, self.kind)] = seconds
        print(f"\n[cluster] {scenario} on {self.kind}: {seconds:.1f} s ({self.name})")
        return seconds

    def finish(self, timeout_s: float = 120.0) -> None:
        """Delete the job, wait until its pods and every process of the execution are gone; fail if any stays."""
        self.guard.stop()
        self.delete_job()
        wait_for(f"the pods of {self.job.job_name} deleted", lambda: not self.pods(), timeout_s, 1.0)
        left = self.guard.gone(30.0)
        assert not left, f"processes of {self.name} left after its pods were deleted:\n" + "\n".join(left)
        self.guard.check()


def execute(real: RealCluster, propeller: Propeller, kind: str, template: TaskTemplate, inputs: dict[str, Any],
            types: dict[str, type], scenario: str, env: dict[str, str] | None = None, max_procs: int = 24,
            attempt: int = 0) -> Execution:  # fmt: skip
    """Submit `template` as a fresh execution (`<scenario>-<random>`, a cluster kept up between sessions holds
    earlier jobs) with the blob store's variables and `env` in the execution's environment, guarded."""
    import uuid

    from tests.e2e.harness import to_literal_map

    name = f"{scenario}-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    job = submit(propeller, template, to_literal_map(inputs, types), name, {**blob_env(real.info), **(env or {})},
                 attempt=attempt)  # fmt: skip
    path = f"{job_collection(kind)}/{job.job_name}"
    guard = ProcessGuard(name, max_procs, lambda: real.kube.delete(path, {"propagationPolicy": "Background"}))
    return Execution(real, propeller, kind, name, job, guard, started)


def gpu_tolerations(pod: dict) -> list[dict]:
    return [t for t in pod["spec"].get("tolerations") or [] if t.get("key") in GPU_TAINT_KEYS]


def gpu_request(pod: dict) -> str:
    return str(max(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", "0")
                   for c in pod["spec"]["containers"]))  # fmt: skip
