"""The players: real serialization, builder, connector and replica processes, with the training operator, Trainer v2,
the JobSet controller and the kubelet played on loopback against the fake API server (`tests.fakeapi`).

Every end-to-end scenario of the players now runs on the real control plane instead (`tests/cluster`, `python -m
devcluster`): the seed task on every kind, MNIST, a failing rank, a hang, DeleteTask and the garbage collector, live
progress, placement, elastic, the official plugin's task and a map task; `docs/testing.md` lists where reality differed
from the players. What stays here, and why:

- fault injection the real server cannot produce on demand, at a step the drill chooses: a pod disrupted mid-step
  (`preempt`: the `DisruptionTarget` condition, SIGTERM to the container's main process, SIGKILL after the grace), a
  drain of every pod at once (`drain`), Kueue's suspension and admission (`suspend`, `resume`), and a kubelet that
  reports a container SIGKILLed whole as `OOMKilled` (`oom_on_sigkill`). The preemption, Kueue and resume drills
  (`tests/faults/test_preemption_kinds.py`, `test_resume_drills.py`), the preflight drill and drill 13 of the
  contract's report run on them; the preemption drills move to the real control plane on their own;
- speed: those drills run in the e2e and faults tiers on every CI job, without a cluster.

How the players work:

1. `package_tasks` runs `pyflyte package` (no fast registration: the "image" is this machine's venv and the code is
   importable from the repository root) and reads the TaskTemplates out of the package, as `pyflyte register` would
   (the cluster tier packages its tasks with it too).
2. The connector's `create` writes `inputs.pb` into a local blob store (`BlobStore`, plain paths) and posts the
   PyTorchJob to the fake API server (`tests.fakeapi`), which validates it against the CRD and webhook rules.
3. `FakeOperator` polls the server's state. For each new job it starts one process per replica (master-0, worker-i)
   running exactly the container's command and args, with the container's env plus what the Kubeflow training
   operator v1.9 injects (see `operator_env`), and keeps the job's conditions, `replicaStatuses` and the pods'
   container statuses up to date. A failed replica's restart policy decides: `OnFailure` restarts its container in
   place within `runPolicy.backoffLimit`, `ExitCode` recreates the pod for exit codes >= 128 only, outside that
   budget (see `FakeOperator._restart_of`); otherwise it fails the job. `preempt`, `drain`, `suspend` and `resume`
   play a node's loss, a drain and Kueue on every kind's player. `cleanPodPolicy` decides which pods are deleted
   (their processes killed) when the job ends; deleting the job kills every replica process.
4. The test polls the connector's `get` until a terminal phase, then reads `outputs.pb` with flytekit's TypeEngine.

The other kinds have their own players: `FakeTrainer` (Kubeflow Trainer v2 and its JobSet) and `FakeJobSet` (the
JobSet controller and Kubernetes' Job controller: child Jobs, Indexed pods, the pod failure policy, the JobSet's
success and failure policies, restarts).

What the real control plane showed that these do not play (`docs/testing.md`): scheduling, images, resource limits
(the GPU request is accepted and ignored), DNS (every replica address is 127.0.0.1 and each job gets free ports instead
of the operator's 23456 or the runtime's 29500), the operator's `init-pytorch` init container, the downward-API
references of `PET_NODE_RANK` and `JOB_COMPLETION_INDEX` (played as values), the TrainJob runtime's own restarts in
place (`restartPolicy: OnFailure`, the node Job's `backoffLimit` 6; `FakeTrainer` fails the job at a node's first
failure), the Trainer's `jobsStatus` counting child Jobs (`FakeTrainer` counts nodes), and the order in which a
controller writes its counts and its conditions (the players write both at once).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from flyteidl.admin import task_pb2 as admin_task_pb2
from flyteidl.core import literals_pb2
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.core import utils
from flytekit.core.context_manager import FlyteContextManager
from flytekit.core.type_engine import TypeEngine
from flytekit.extend.backend.base_connector import Resource
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskTemplate

from tests.fakeapi.server import FakeKubeApi, now_rfc3339

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
IMAGE = "localhost/flytekitplugins-pytorch-e2e:venv"
"""The image name given to `pyflyte package`; the fake kubelet "runs" it as this machine's venv."""

TERMINAL_PHASES = (
    TaskExecution.SUCCEEDED,
    TaskExecution.FAILED,
    TaskExecution.RETRYABLE_FAILED,
    TaskExecution.ABORTED,
)
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
"""The kubelet's FallbackToLogsOnError keeps the last 80 lines, at most 2048 bytes, of a failed container's log."""


# ----------------------------------------------------------------------------------------------------------------
# Serialization, the way `pyflyte package` does it.


def package_tasks(modules: Iterable[str], out_dir: Path, image: str = IMAGE) -> dict[str, TaskTemplate]:
    """Run `pyflyte package` on `modules` (no fast registration) and return the packaged task templates.

    Args:
        modules: importable module names (relative to the repository root, the package's source root).
        out_dir: where the .tgz and its contents go.
        image: the default image of the serialization settings.

    Returns:
        Task templates by short task name (the function name).

    Raises:
        subprocess.CalledProcessError: `pyflyte package` failed (its output is in the exception).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tgz = out_dir / "package.tgz"
    cmd = [str(VENV_BIN / "pyflyte")]
    for module in modules:
        cmd += ["--pkgs", module]
    cmd += ["package", "--image", image, "--copy", "none", "--output", str(tgz), "--force"]
    subprocess.run(cmd, cwd=REPO_ROOT, check=True, capture_output=True, text=True, timeout=120)
    extracted = out_dir / "package"
    with tarfile.open(tgz) as archive:
        archive.extractall(extracted, filter="data")
    templates: dict[str, TaskTemplate] = {}
    for pb in sorted(extracted.glob("*_1.pb")):  # <n>_<name>_<resource type>.pb; 1 is TASK
        spec = admin_task_pb2.TaskSpec()
        spec.ParseFromString(pb.read_bytes())
        if spec.HasField("template"):
            template = TaskTemplate.from_flyte_idl(spec.template)
            templates[template.id.name.rsplit(".", 1)[-1]] = template
    return templates


# ----------------------------------------------------------------------------------------------------------------
# The blob store and task I/O.


@dataclass
class BlobStore:
    """A local directory that plays the object store; its "URIs" are plain absolute paths.

    Not `file://` URLs: pyflyte-execute and the connector handle them, but flytekit's FlyteFile transformer then
    records `file:///...` blob URIs that it cannot read back (it checks `os.path.isfile(uri)` for non-remote URIs).

    Attributes:
        root: the directory.
    """

    root: Path

    def uri(self, *parts: str) -> str:
        """The location of a path inside the store."""
        return str(self.root.joinpath(*parts))

    def files(self, under: str = "") -> list[str]:
        """Paths of all files below `under` (a URI or a path relative to the root), relative to it, sorted."""
        base = Path(under.removeprefix("file://")) if under else self.root
        if not base.is_absolute():
            base = self.root / base
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


def to_literal_map(values: dict[str, Any], types: dict[str, type]) -> LiteralMap:
    """Python inputs -> the LiteralMap flytekit would send (the connector writes it as inputs.pb).

    Args:
        values: input values by name.
        types: their Python types (a task's `python_interface.inputs`).

    Returns:
        The literal map.
    """
    ctx = FlyteContextManager.current_context()
    return TypeEngine.dict_to_literal_map(ctx, values, types)


def read_outputs(output_prefix: str, types: dict[str, type]) -> dict[str, Any]:
    """Read `<output_prefix>/outputs.pb` and turn it into Python values with flytekit's TypeEngine.

    Args:
        output_prefix: the task's output prefix (`file://` URI or path).
        types: output types by name (a task's `python_interface.outputs`).

    Returns:
        Output values by name (files and directories are downloaded to local paths).
    """
    path = Path(output_prefix.removeprefix("file://")) / "outputs.pb"
    literal_map = LiteralMap.from_flyte_idl(utils.load_proto_from_file(literals_pb2.LiteralMap, str(path)))
    ctx = FlyteContextManager.current_context()
    return {name: TypeEngine.to_python_value(ctx, literal_map.literals[name], t) for name, t in types.items()}


#: Container restarts per job after which the harness fails the job whatever the backoffLimit (a test never loops).
MAX_RESTARTS = 10


# ----------------------------------------------------------------------------------------------------------------
# What the training operator injects.


def _container_port(job: dict, rtype: str) -> Optional[int]:
    spec = job["spec"]["pytorchReplicaSpecs"].get(rtype) or {}
    for container in spec.get("template", {}).get("spec", {}).get("containers", []):
        if container.get("name") == "pytorch":
            for port in container.get("ports") or []:
                if port.get("name") == "pytorchjob-port":
                    return int(port["containerPort"])
    return None


def operator_env(job: dict, rtype: str, index: int, master_port: int, rdzv_port: int) -> dict[str, str]:
    """The variables the Kubeflow training operator (v1.9, `pkg/controller.v1/pytorch`) adds to a replica's container.

    Facts from its source (`envvar.go`, `elastic.go`, `master.go` on the release-1.9 branch): `PYTHONUNBUFFERED=1`
    always. With a Master spec: `MASTER_PORT`, `MASTER_ADDR`, `PET_MASTER_PORT`, `PET_MASTER_ADDR` (the master-0
    service), `WORLD_SIZE` = total replicas * int(nprocPerNode) (1 when not an int), `RANK` = index (+1 for
    workers), `PET_NODE_RANK` = RANK. On every job `PET_NPROC_PER_NODE` = spec.nprocPerNode (defaulted to "auto").
    With an elasticPolicy: `PET_RDZV_ENDPOINT` (worker-0 service and the worker's port), `PET_RDZV_BACKEND` (default
    c10d), `PET_NNODES` = "min:max", `PET_MAX_RESTARTS` when set and `PET_NPROC_PER_NODE` again from
    `elasticPolicy.nProcPerNode` when set (appended later, so it wins); without one `PET_NNODES` = total replicas.
    Here every service address is 127.0.0.1 and the ports are free local ports.

    Args:
        job: the PyTorchJob.
        rtype: "Master" or "Worker".
        index: the replica index.
        master_port: the local port standing for the master service.
        rdzv_port: the local port standing for worker-0's rendezvous endpoint.

    Returns:
        The injected variables (they are appended after the container's own, so they win on duplicates).
    """
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    nproc_text = str(spec.get("nprocPerNode", "auto"))
    nproc = int(nproc_text) if nproc_text.isdigit() else 1
    env = {"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": nproc_text}
    if "Master" in replicas:
        rank = index + (1 if rtype == "Worker" else 0)
        env.update(
            {
                "MASTER_PORT": str(master_port),
                "MASTER_ADDR": "127.0.0.1",
                "PET_MASTER_PORT": str(master_port),
                "PET_MASTER_ADDR": "127.0.0.1",
                "WORLD_SIZE": str(total * nproc),
                "RANK": str(rank),
                "PET_NODE_RANK": str(rank),
            }
        )
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        workers = int(replicas.get("Worker", {}).get("replicas", 1))
        low, high = elastic.get("minReplicas", workers), elastic.get("maxReplicas", workers)
        env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{rdzv_port}"
        env["PET_RDZV_BACKEND"] = str(elastic.get("rdzvBackend") or "c10d")
        env["PET_NNODES"] = f"{low}:{high}"
        if "maxRestarts" in elastic:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if "nProcPerNode" in elastic:
            env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
    else:
        env["PET_NNODES"] = str(total)
    return env


def image_env(home: Path) -> dict[str, str]:
    """What the image provides before the container's env: this venv first on PATH, the code on PYTHONPATH.

    A pod does not inherit the host's environment, so neither do the replica processes. TMPDIR stays unset, as in
    a pod (/tmp): a deep per-test directory would also exceed the AF_UNIX path limit of multiprocessing sockets.

    Args:
        home: the replica's HOME (a private directory, like a pod's filesystem).

    Returns:
        The base environment.
    """
    return {
        "PATH": f"{VENV_BIN}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "PYTHONPATH": str(REPO_ROOT),
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }


def _resolve_env_entry(entry: dict, pod_name: str, namespace: str) -> str:
    if "value" in entry:
        return str(entry["value"])
    field_path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    downward = {"metadata.name": pod_name, "metadata.namespace": namespace, "status.podIP": "127.0.0.1"}
    if field_path in downward:
        return downward[field_path]
    raise ValueError(f"env {entry.get('name')!r}: valueFrom {entry.get('valueFrom')!r} is not emulated by the harness")


# ----------------------------------------------------------------------------------------------------------------
# The fake operator and kubelet.


@dataclass
class Replica:
    """One replica pod and its process.

    Attributes:
        rtype: "Master" or "Worker".
        index: replica index.
        pod_name: `<job>-<rtype>-<index>`.
        command: what was run (the container's command + args).
        env: the full environment it got.
        log_path: its combined stdout/stderr.
        process: the process (None before start).
        started_at: RFC 3339 start time.
        finished_at: RFC 3339 end time ("" while running).
        exit_code: the container's exit code (128 + signal when killed), None while running.
        deleted: the pod was deleted (cleanPodPolicy or job deletion).
        restarts: times its container was restarted in place (OnFailure), the pod's `restartCount`.
        recreated: times the operator deleted and recreated the pod (ExitCode): a new pod, `restartCount` 0.
        conditions: pod conditions the test gave it (a `DisruptionTarget` when it was preempted).
    """

    rtype: str
    index: int
    pod_name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: Optional[subprocess.Popen] = None
    started_at: str = ""
    finished_at: str = ""
    exit_code: Optional[int] = None
    deleted: bool = False
    restarts: int = 0
    recreated: int = 0
    conditions: list[dict] = field(default_factory=list)
    launched_at: float = 0.0
    """`time.monotonic()` when its current process was started (or when it failed, while it waits to be started)."""

    @property
    def label(self) -> str:
        """`master-0`, `worker-1`, ..."""
        return f"{self.rtype.lower()}-{self.index}"

    def log(self) -> str:
        """The replica's output so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class JobRun:
    """The fake operator's record of one PyTorchJob.

    Attributes:
        namespace: the job's namespace.
        name: the job's name.
        job: the job as first seen.
        replicas: its replicas.
        conditions: the status conditions written so far.
        done: a terminal condition was written.
        gone: the job was deleted (every process killed).
        suspended: the job is suspended (Kueue): its pods are deleted until it is resumed.
    """

    namespace: str
    name: str
    job: dict
    replicas: list[Replica] = field(default_factory=list)
    conditions: list[dict] = field(default_factory=list)
    done: bool = False
    gone: bool = False
    start_time: str = ""
    completion_time: str = ""
    suspended: bool = False

    def replica(self, label: str) -> Replica:
        """The replica called `label` (e.g. "worker-1")."""
        return next(r for r in self.replicas if r.label == label)

    def pids(self) -> list[int]:
        """Process ids (= process group ids) of every replica started."""
        return [r.process.pid for r in self.replicas if r.process is not None]


def process_group_alive(pgid: int) -> bool:
    """Whether any process is left in process group `pgid` (each replica runs in its own session)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_replica(replica: Replica) -> None:
    """Start one replica's process in its own session, its output in its log file (as a pod's container log; a
    restarted container's output is appended, as `kubectl logs --previous` keeps the earlier one)."""
    with replica.log_path.open(
        "ab" if replica.restarts or replica.recreated else "wb"
    ) as log:  # the replica writes through its own copy
        replica.process = subprocess.Popen(
            replica.command,
            env=replica.env,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    replica.launched_at = time.monotonic()


class FakeOperator:
    """Plays the Kubeflow training operator and the kubelet for jobs created on a `FakeKubeApi`.

    Args:
        server: the fake API server (its `on_delete` hooks get this operator's handler).
        workdir: where replica HOMEs and logs go.
        extra_env: variables added to every replica after the container's env (test knobs such as a marker dir;
            they stand for a mutating webhook, and are applied before the operator's own variables).
        grace_s: seconds between SIGTERM and SIGKILL when a pod is deleted (terminationGracePeriodSeconds).
        poll_s: seconds between reconcile passes.
        oom_on_sigkill: report a replica whose process group was SIGKILLed (not by a deletion) as `OOMKilled`, as
            the kubelet does when the kernel's OOM killer (which sends SIGKILL to the whole container) ends it.
    """

    def __init__(
        self,
        server: FakeKubeApi,
        workdir: Path,
        extra_env: Optional[dict[str, str]] = None,
        grace_s: float = 5.0,
        poll_s: float = 0.05,
        oom_on_sigkill: bool = False,
    ) -> None:
        self.server = server
        self.oom_on_sigkill = oom_on_sigkill
        self.workdir = workdir
        self.extra_env = dict(extra_env or {})
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.runs: dict[tuple[str, str], JobRun] = {}
        self.errors: list[str] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        server.on_delete.append(self._on_delete)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeOperator:
        self._thread = threading.Thread(target=self._loop, name="fake-operator", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            runs = list(self.runs.values())
        for run in runs:
            self._kill(run.replicas)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as e:  # noqa: BLE001 - recorded and re-raised by the test through `errors`
                import traceback

                self.errors.append(f"{e!r}\n{traceback.format_exc()}")
            self._stop.wait(self.poll_s)

    # ------------------------------------------------------------------ reconcile
    def reconcile(self) -> None:
        """One pass: start new jobs, follow replica processes, write job and pod status."""
        for job in self.server.jobs():
            meta = job["metadata"]
            key = (meta["namespace"], meta["name"])
            with self._lock:
                run = self.runs.get(key)
                if run is None or run.job["metadata"].get("uid") != meta.get("uid"):
                    run = self._start(job)
                    self.runs[key] = run
            self._follow(run)

    def _start(self, job: dict) -> JobRun:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        run = JobRun(ns, name, job, start_time=now_rfc3339())
        self._condition(run, "Created", f"PyTorchJob {name} is created.")
        master_port, rdzv_port = _free_port(), _free_port()
        replica_specs = job["spec"]["pytorchReplicaSpecs"]
        for rtype in ("Master", "Worker"):
            spec = replica_specs.get(rtype)
            if spec is None:
                continue
            for index in range(int(spec.get("replicas", 1))):
                run.replicas.append(self._make_replica(job, rtype, index, spec, master_port, rdzv_port))
        for replica in run.replicas:
            self._put_pod(run, replica, phase="Pending")
        for replica in run.replicas:
            start_replica(replica)
            replica.started_at = now_rfc3339()
            self._put_pod(run, replica, phase="Running")
        running_by = "Master" if "Master" in replica_specs else "Worker"
        if any(r.rtype == running_by for r in run.replicas):
            self._condition(run, "Running", f"PyTorchJob {ns}/{name} is running.")
        self._write_status(run)
        return run

    def _make_replica(self, job: dict, rtype: str, index: int, spec: dict, master_port: int, rdzv_port: int) -> Replica:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pod_name = f"{name}-{rtype.lower()}-{index}"
        pod_spec = spec["template"]["spec"]
        container = next(c for c in pod_spec["containers"] if c["name"] == "pytorch")
        home = self.workdir / pod_name
        home.mkdir(parents=True, exist_ok=True)
        env = image_env(home)
        for entry in container.get("env") or []:
            env[entry["name"]] = _resolve_env_entry(entry, pod_name, ns)
        env.update(self.extra_env)
        env.update(operator_env(job, rtype, index, master_port, rdzv_port))
        command = list(container.get("command") or []) + list(container.get("args") or [])
        if not command:
            raise ValueError(f"{pod_name}: container has neither command nor args and the venv image has no entrypoint")
        return Replica(rtype, index, pod_name, command, env, self.workdir / f"{pod_name}.log")

    def _restart_of(self, run: JobRun, replica: Replica, exit_code: int) -> str:
        """How a failed replica carries on rather than failing the job (the operator's rules): "in place", "recreate"
        or "" (the job fails).

        `OnFailure` (and `Always`): the kubelet restarts the container in the same pod, which counts against
        `runPolicy.backoffLimit` (no limit when unset). `ExitCode`: the operator gives the pod `restartPolicy: Never`,
        and when the pod failed with a retryable exit code (>= 128: a signal, an OOM kill, or 200, the agreed stop of
        a preemption) it deletes the pod and creates it again; 1-127 (the user's own error) fails the job. A recreated
        pod's `restartCount` starts at 0, and `backoffLimit` sums the restart counts of running pods only, so these
        restarts never spend it (kubeflow/trainer v1.9.4: `ReconcilePods` in `pkg/controller.v1/common/pod.go` calls
        `trainutil.IsRetryableExitCode`, which is `exitCode >= 128`, then `PodControl.DeletePod`; `PastBackoffLimit`
        in `pkg/core/job.go`). `Never`: the job fails. The harness stops at `MAX_RESTARTS` restarts of either kind.
        """
        spec = run.job["spec"]["pytorchReplicaSpecs"][replica.rtype]
        policy = spec.get("restartPolicy", "Never")
        if sum(r.restarts + r.recreated for r in run.replicas) >= MAX_RESTARTS:
            return ""
        if policy == "ExitCode":
            return "recreate" if exit_code >= 128 else ""
        if policy not in ("OnFailure", "Always"):
            return ""
        limit = (run.job["spec"].get("runPolicy") or {}).get("backoffLimit")
        used = sum(r.restarts for r in run.replicas)
        return "in place" if limit is None or used < int(limit) else ""

    def _start_recreated(self, run: JobRun) -> None:
        """Start the recreated pods (process None, not deleted) once the master they rendezvous with is a new one.

        On a cluster a recreated pod takes seconds to be scheduled and started, while the previous run's master
        leaves within its grace; on one machine a recreated worker would start at once and could reach the old
        master's store at 127.0.0.1 before that master exits. The player starts the waiting pods once every process
        that ran before the first of them failed has ended and been followed (its pod recreated too, or the job
        ended). Replicas that keep running (a worker failed alone) hold them back until they end, as a non-elastic
        job's ranks end once a peer is gone.
        """
        if run.done or run.gone or run.suspended:
            return
        waiting = [r for r in run.replicas if r.process is None and not r.deleted and r.recreated]
        if not waiting:
            return
        failed_at = min(w.launched_at for w in waiting)
        if any(r.process is not None and r.exit_code is None and r.launched_at < failed_at for r in run.replicas):
            return  # a process of the previous run is still there (or not yet followed)
        for replica in waiting:
            start_replica(replica)
            replica.started_at = now_rfc3339()
            self._put_pod(run, replica, phase="Running")
        self._condition(run, "Running", f"PyTorchJob {run.namespace}/{run.name} is running.")
        self._write_status(run)

    def _follow(self, run: JobRun) -> None:
        try:
            self._follow_replicas(run)
        finally:
            self._start_recreated(run)

    def _follow_replicas(self, run: JobRun) -> None:
        changed = False
        for replica in run.replicas:
            if replica.process is None or replica.exit_code is not None or replica.deleted:
                continue
            code = replica.process.poll()
            if code is None:
                continue
            exit_code = code if code >= 0 else 128 - code
            how = self._restart_of(run, replica, exit_code) if exit_code != 0 and not run.done else ""
            if how:
                if how == "recreate":  # the pod failed (its status says why), then a new one of the same name
                    replica.exit_code, replica.finished_at = exit_code, now_rfc3339()
                    self._put_pod(run, replica, phase="Failed")
                    replica.recreated += 1
                    replica.exit_code, replica.conditions = None, []
                    self._condition(run, "Restarting", f"PyTorchJob {run.name} is restarting because "
                                    f"{replica.label} exited with code {exit_code}.")  # fmt: skip
                    self._put_pod(run, replica, phase="Pending")
                    replica.process, replica.launched_at = None, time.monotonic()  # see `_start_recreated`
                    self._write_status(run)
                    continue
                replica.restarts += 1
                self._condition(run, "Restarting", f"PyTorchJob {run.name} is restarting because {replica.label} "
                                f"exited with code {exit_code}.")  # fmt: skip
                start_replica(replica)
                replica.started_at = now_rfc3339()
                self._put_pod(run, replica, phase="Running")
                self._condition(run, "Running", f"PyTorchJob {run.namespace}/{run.name} is running.")
                self._write_status(run)
                continue
            replica.exit_code = exit_code
            replica.finished_at = now_rfc3339()
            self._put_pod(run, replica, phase="Succeeded" if code == 0 else "Failed")
            changed = True
        if not changed or run.done:
            return
        ns, name = run.namespace, run.name
        failed = [r for r in run.replicas if r.exit_code not in (None, 0)]
        has_master = any(r.rtype == "Master" for r in run.replicas)
        elastic = "elasticPolicy" in run.job["spec"]
        if failed:
            by_type: dict[str, int] = {}
            for r in failed:
                by_type[r.rtype] = by_type.get(r.rtype, 0) + 1
            rtype, count = next(iter(by_type.items()))
            message = f"PyTorchJob {ns}/{name} has failed because {count} {rtype} replica(s) failed."
            self._condition(run, "Failed", message)
        elif has_master and run.replica("master-0").exit_code == 0:
            self._condition(run, "Succeeded", f"PyTorchJob {ns}/{name} successfully completed.")
        elif not has_master and (
            all(r.exit_code == 0 for r in run.replicas) or (elastic and any(r.exit_code == 0 for r in run.replicas))
        ):
            self._condition(run, "Succeeded", f"PyTorchJob {ns}/{name} successfully completed.")
        if run.done:
            run.completion_time = now_rfc3339()
            self._clean_pods(run)
        self._write_status(run)

    def _clean_pods(self, run: JobRun) -> None:
        policy = (run.job["spec"].get("runPolicy") or {}).get("cleanPodPolicy", "None")
        if policy == "None":
            return
        doomed = [r for r in run.replicas if policy == "All" or r.exit_code is None]
        for replica in doomed:
            replica.deleted = True
            self.server.remove_pod(run.namespace, replica.pod_name)
        self._kill(doomed)

    # ------------------------------------------------------------------ deletion
    def _on_delete(self, _server: FakeKubeApi, job: dict) -> None:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        with self._lock:
            run = self.runs.get(key)
        if run is None:
            return
        run.gone = True
        for replica in run.replicas:
            replica.deleted = True
        threading.Thread(target=self._kill, args=(run.replicas,), name="fake-operator-gc", daemon=True).start()

    def _kill(self, replicas: list[Replica]) -> None:
        """Stop each replica as the container runtime stops a deleted pod's container (see `_signal_main`): SIGTERM
        to its main process, SIGKILL to whatever is left of it after the grace period; reap them."""
        live = [r for r in replicas if r.process is not None and process_group_alive(r.process.pid)]
        for replica in live:
            _signal_main(replica.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and any(process_group_alive(r.process.pid) for r in live):
            for replica in live:
                replica.process.poll()
            time.sleep(0.05)
        for replica in live:
            _signal_group(replica.process.pid, signal.SIGKILL)
        for replica in live:
            try:
                replica.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.errors.append(f"{replica.pod_name}: still running after SIGKILL")

    # ------------------------------------------------------------------ status writers
    def _condition(self, run: JobRun, ctype: str, message: str) -> None:
        at = now_rfc3339()
        if ctype in ("Succeeded", "Failed"):
            run.done = True
        # As the operator keeps them: Running, Restarting and the terminal types exclude each other.
        exclusive = (
            {"Running", "Restarting"} - {ctype} if ctype in ("Running", "Restarting", "Succeeded", "Failed") else set()
        )
        for c in run.conditions:
            if c["type"] in exclusive and c["status"] == "True":
                c.update(status="False", lastTransitionTime=at, lastUpdateTime=at)
        run.conditions.append(
            {
                "type": ctype,
                "status": "True",
                "reason": f"PyTorchJob{ctype}",
                "message": message,
                "lastTransitionTime": at,
                "lastUpdateTime": at,
            }  # fmt: skip
        )

    def _write_status(self, run: JobRun) -> None:
        counts: dict[str, dict[str, int]] = {}
        for r in run.replicas:
            entry = counts.setdefault(r.rtype, {})
            if r.exit_code is None and not r.deleted and r.process is not None:
                entry["active"] = entry.get("active", 0) + 1
            elif r.exit_code == 0:
                entry["succeeded"] = entry.get("succeeded", 0) + 1
            elif r.exit_code is not None:
                entry["failed"] = entry.get("failed", 0) + 1
        status: dict[str, Any] = {
            "conditions": [dict(c) for c in run.conditions],
            "replicaStatuses": counts,
            "startTime": run.start_time,
            "lastReconcileTime": now_rfc3339(),
        }
        if run.completion_time:
            status["completionTime"] = run.completion_time
        try:
            self.server.set_job_status(run.namespace, run.name, status)
        except KeyError:
            run.gone = True  # deleted meanwhile

    def _put_pod(self, run: JobRun, replica: Replica, phase: str) -> None:
        if replica.deleted:
            return
        spec = run.job["spec"]["pytorchReplicaSpecs"][replica.rtype]["template"]["spec"]
        container = next(c for c in spec["containers"] if c["name"] == "pytorch")
        if phase == "Pending":
            state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        elif phase == "Running":
            state = {"running": {"startedAt": replica.started_at}}
        else:
            reason = "Completed" if replica.exit_code == 0 else "Error"
            if self.oom_on_sigkill and replica.exit_code == 128 + signal.SIGKILL:
                reason = "OOMKilled"
            term: dict[str, Any] = {
                "exitCode": replica.exit_code,
                "reason": reason,
                "startedAt": replica.started_at,
                "finishedAt": replica.finished_at,
            }
            message = self._termination_message(container, replica)
            if message:
                term["message"] = message
            state = {"terminated": term}
        labels = {
            JOB_NAME_LABEL: run.name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": replica.rtype.lower(),
            "training.kubeflow.org/replica-index": str(replica.index),
        }
        if replica.rtype == "Master":
            labels["training.kubeflow.org/job-role"] = "master"
        pod = {
            "metadata": {"name": replica.pod_name, "namespace": run.namespace, "labels": labels},
            "spec": {"containers": [{"name": "pytorch", "image": container.get("image", "")}]},
            "status": {
                "phase": phase,
                **({"startTime": replica.started_at} if replica.started_at else {}),
                **({"conditions": [dict(c) for c in replica.conditions]} if replica.conditions else {}),
                "containerStatuses": [
                    {
                        "name": "pytorch",
                        "ready": phase == "Running",
                        "restartCount": replica.restarts,
                        "image": container.get("image", ""),
                        "imageID": "",
                        "state": state,
                    }  # fmt: skip
                ],
            },
        }
        self.server.put_pod(pod)

    @staticmethod
    def _termination_message(container: dict, replica: Replica) -> str:
        """The kubelet's termination message: the log tail with FallbackToLogsOnError on failure, else nothing.

        With the default policy (`File`) the message is the content of /dev/termination-log, which pyflyte-execute
        never writes, so it is empty.
        """
        if container.get("terminationMessagePolicy") != "FallbackToLogsOnError" or replica.exit_code == 0:
            return ""
        lines = replica.log().splitlines()[-LOG_TAIL_LINES:]
        return "\n".join(lines).encode()[-LOG_TAIL_BYTES:].decode(errors="replace")

    # ------------------------------------------------------------------ disruptions (every kind's player)
    def live_pod(self, run: JobRun, label: str) -> Replica:
        """The running pod `label` (`worker-1`, `node-0`) of the job's current run."""
        (pod,) = [r for r in run.replicas if r.label == label and not r.deleted and r.exit_code is None]
        return pod

    def preempt(self, run: JobRun, label: str, reason: str = "PreemptionByScheduler") -> Replica:
        """Preempt pod `label` as the scheduler, a drain or a node's shutdown does: condition `DisruptionTarget` with
        `reason`, then SIGTERM to the container's main process, and SIGKILL to what is left of it `grace_s` later (the
        pod's `terminationGracePeriodSeconds`; see `_signal_main`). The pod is not deleted here: its controller acts on
        how it failed."""
        with self._lock:
            pod = self.live_pod(run, label)
            pod.conditions.append({"type": PREEMPTION_CONDITION, "status": "True", "reason": reason,
                                   "message": f"{reason} (played by the harness)",
                                   "lastTransitionTime": now_rfc3339()})  # fmt: skip
            self._put_pod(run, pod, phase="Running")
        assert pod.process is not None
        _signal_main(pod.process.pid, signal.SIGTERM)
        threading.Thread(target=self._kill_after_grace, args=(pod.process,), name="fake-kubelet-grace",
                         daemon=True).start()  # fmt: skip
        return pod

    def drain(self, run: JobRun, reason: str = "EvictionByEvictionAPI") -> list[Replica]:
        """Every running pod of the job's current run preempted at once (a drained node holding them all)."""
        with self._lock:
            labels = [r.label for r in run.replicas if not r.deleted and r.exit_code is None and r.process is not None]
        return [self.preempt(run, label, reason) for label in labels]

    def _kill_after_grace(self, process: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and process_group_alive(process.pid):
            time.sleep(0.05)
        _signal_group(process.pid, signal.SIGKILL)  # the KILL goes to any remaining process of the container

    SUSPEND_PATH: tuple[str, ...] = ("spec", "runPolicy", "suspend")
    """Where the kind's job says it is suspended (Kueue writes it)."""

    def suspend(self, run: JobRun) -> None:
        """Kueue preempts the job: it sets the job's suspend field, and the controller deletes the pods (SIGTERM,
        SIGKILL after `grace_s`) and says Suspended. Deleted pods are not failures: no restart, no retry."""
        self._set_suspend(run, True)
        with self._lock:
            run.suspended = True
            doomed = [r for r in run.replicas if not r.deleted and r.exit_code is None and r.process is not None]
            for replica in doomed:
                replica.deleted = True
                self.server.remove_pod(run.namespace, replica.pod_name)
            self._suspended_condition(run, True)
            self._write_status(run)
        self._kill(doomed)

    def resume(self, run: JobRun) -> None:
        """Kueue admits the job again: suspend false, and the controller creates the pods again."""
        self._set_suspend(run, False)
        with self._lock:
            run.suspended = False
            self._recreate_pods(run)
            self._suspended_condition(run, False)
            self._write_status(run)

    def _set_suspend(self, run: JobRun, value: bool) -> None:
        plural = self._plural()
        job = self.server.get_job(run.namespace, run.name, plural)
        assert job is not None, run.name
        node = job
        for key in self.SUSPEND_PATH[:-1]:
            node = node.setdefault(key, {})
        node[self.SUSPEND_PATH[-1]] = value
        self.server.put_job(job, plural)

    def _plural(self) -> str:
        from tests.fakeapi.server import PLURAL

        return PLURAL

    def _recreate_pods(self, run: JobRun) -> None:
        """The pods of a resumed job, created and started again (same names: the operator names them by index)."""
        for replica in run.replicas:
            replica.deleted, replica.exit_code, replica.conditions = False, None, []
            replica.recreated += 1
            self._put_pod(run, replica, phase="Pending")
        for replica in run.replicas:
            start_replica(replica)
            replica.started_at = now_rfc3339()
            self._put_pod(run, replica, phase="Running")

    def _suspended_condition(self, run: JobRun, suspended: bool) -> None:
        """The training operator v1.9: Suspended True (Running False) on suspend; Suspended False, then Running,
        on resume."""
        at = now_rfc3339()
        if suspended:
            for c in run.conditions:
                if c["type"] in ("Running", "Restarting") and c["status"] == "True":
                    c.update(status="False", lastTransitionTime=at, lastUpdateTime=at)
            run.conditions.append({"type": "Suspended", "status": "True", "reason": "PyTorchJobSuspended",
                                   "message": f"PyTorchJob {run.name} is suspended.", "lastTransitionTime": at,
                                   "lastUpdateTime": at})  # fmt: skip
            return
        for c in run.conditions:
            if c["type"] == "Suspended" and c["status"] == "True":
                c.update(status="False", reason="PyTorchJobResumed", message=f"PyTorchJob {run.name} is resumed.",
                         lastTransitionTime=at, lastUpdateTime=at)  # fmt: skip
        self._condition(run, "Running", f"PyTorchJob {run.namespace}/{run.name} is running.")

    # ------------------------------------------------------------------ test helpers
    def run_for(self, name: str, timeout_s: float = 30.0) -> JobRun:
        """The record of job `name`, waiting until the operator has started it.

        Raises:
            TimeoutError: the job was not seen within `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                for (_, job_name), run in self.runs.items():
                    if job_name == name:
                        return run
            time.sleep(0.05)
        raise TimeoutError(f"the fake operator never saw PyTorchJob {name}")

    def wait_processes_gone(self, run: JobRun, timeout_s: float = 15.0) -> list[str]:
        """Wait until no process of `run` is left; returns the pod names still alive at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = [r.pod_name for r in run.replicas if r.process is not None and process_group_alive(r.process.pid)]
            for r in run.replicas:
                if r.process is not None:
                    r.process.poll()
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.05)


def _signal_main(pid: int, sig: signal.Signals) -> None:
    """Signal a replica's main process alone, as the container runtime signals a container that the kubelet stops.

    Kubernetes' "Termination of Pods" (kubernetes.io/docs/concepts/workloads/pods/pod-termination/): the kubelet has
    the container runtime send TERM (or the image's STOPSIGNAL) to the main process of each container, and KILL to
    every process still there when the grace period is over. The TERM therefore reaches only the container's command
    (here the replica's process, the leader of its own session); what it started (torch's agent's ranks,
    multiprocessing's fork server) learns of the stop from it, and only the KILL after the grace (`_signal_group`)
    reaches them all.
    """
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------------------------------------
# Driving the connector.


def poll_until_terminal(connector: Any, meta: Any, timeout_s: float, interval_s: float = 0.25) -> list[Resource]:
    """Call the connector's `get` until it reports a terminal phase.

    Args:
        connector: the JobConnector.
        meta: what `create` returned.
        timeout_s: give up after this many seconds.
        interval_s: seconds between polls (Flyte polls every few seconds; tests go faster).

    Returns:
        Every `Resource` seen, the terminal one last.

    Raises:
        TimeoutError: no terminal phase in time (the message lists the phases seen).
    """
    seen: list[Resource] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        resource = connector.get(meta)
        seen.append(resource)
        if resource.phase in TERMINAL_PHASES:
            return seen
        time.sleep(interval_s)
    phases = [TaskExecution.Phase.Name(r.phase) for r in seen[-5:]]
    raise TimeoutError(f"no terminal phase after {timeout_s}s; last phases {phases}, last message {seen[-1].message!r}")


# ----------------------------------------------------------------------------------------------------------------
# Kubeflow Trainer v2: the TrainJob controller, the JobSet controller and the kubelet.

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def trainer_env(job: dict, index: int, master_port: int) -> dict[str, str]:
    """Exactly what the Trainer v2.3 torch plugin (`pkg/runtime/framework/plugins/torch`) adds to a node's container.

    `PET_NNODES` = numNodes; `PET_NPROC_PER_NODE` = numProcPerNode if set, else `auto` when a resource whose name
    contains `gpu` has a non-zero request (else limit), else the CPU request (else limit) rounded up, at least 1;
    `PET_NODE_RANK` = the completion index; `PET_MASTER_ADDR` = `<job>-node-0-0.<job>` (127.0.0.1 here);
    `PET_MASTER_PORT` = 29500 (a free local port here). Nothing else: no RANK, WORLD_SIZE or MASTER_ADDR.

    Args:
        job: the TrainJob.
        index: the node's completion index.
        master_port: the local port standing for 29500 on node 0.

    Returns:
        The five variables.
    """
    from pytorch_contract.quantity import parse_quantity

    trainer = job["spec"].get("trainer") or {}
    nproc: str
    if "numProcPerNode" in trainer:
        nproc = str(trainer["numProcPerNode"])
    else:
        resources = trainer.get("resourcesPerNode") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        gpu = any("gpu" in k and parse_quantity(v) > 0 for k, v in {**limits, **requests}.items())
        cpu = requests.get("cpu") or limits.get("cpu")
        nproc = "auto" if gpu else str(max(1, int(-(-parse_quantity(cpu) // 1)))) if cpu else "1"
    return {
        "PET_NNODES": str(int(trainer.get("numNodes", 1))),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(master_port),
    }


class FakeTrainer(FakeOperator):
    """Plays Kubeflow Trainer v2 (TrainJob -> JobSet -> one Indexed Job `node`) and the kubelet for TrainJobs.

    One process per node, named like the JobSet's pods (`<job>-node-0-<index>-<5 random>`), running the TrainJob's
    `trainer.command` + `trainer.args` with the image's environment, `trainer.env`, the test's extra variables and
    the five `PET_*` variables of `trainer_env`, nothing else from the operator. Status as the controller writes it:
    `jobsStatus[node]` counts, and a True `Complete` (every node exited 0) or `Failed` (reason `FailedJobs`, a node
    failed; the JobSet then stops the other nodes and deletes their pods) condition. `suspend` holds the job with a
    `Suspended` condition until resumed. Not emulated: the runtime's OnFailure restarts (a failed node fails the job
    at once), scheduling, images and DNS (the master address is 127.0.0.1).
    """

    def reconcile(self) -> None:
        """One pass: start new TrainJobs, follow node processes, write job and pod status."""
        from backend_plugin.targets.trainjob.declaration import PLURAL as TRAINJOBS

        for job in self.server.jobs(TRAINJOBS):
            meta = job["metadata"]
            key = (meta["namespace"], meta["name"])
            with self._lock:
                run = self.runs.get(key)
                if run is None or run.job["metadata"].get("uid") != meta.get("uid"):
                    run = self._start(job)
                    self.runs[key] = run
            self._follow(run)

    def _start(self, job: dict) -> JobRun:
        import secrets

        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        run = JobRun(ns, name, job, start_time=now_rfc3339())
        trainer = job["spec"]["trainer"]
        master_port = _free_port()
        for index in range(int(trainer.get("numNodes", 1))):
            pod_name = f"{name}-node-0-{index}-{secrets.token_hex(3)[:5]}"
            home = self.workdir / pod_name
            home.mkdir(parents=True, exist_ok=True)
            env = image_env(home)
            for entry in trainer.get("env") or []:
                env[entry["name"]] = _resolve_env_entry(entry, pod_name, ns)
            env.update(self.extra_env)
            env.update(trainer_env(job, index, master_port))
            command = list(trainer.get("command") or []) + list(trainer.get("args") or [])
            run.replicas.append(Replica("node", index, pod_name, command, env, self.workdir / f"{pod_name}.log"))
        for replica in run.replicas:
            self._put_pod(run, replica, phase="Pending")
        for replica in run.replicas:
            start_replica(replica)
            replica.started_at = now_rfc3339()
            self._put_pod(run, replica, phase="Running")
        self._write_status(run)
        return run

    def _follow(self, run: JobRun) -> None:
        changed = False
        for replica in run.replicas:
            if replica.process is None or replica.exit_code is not None or replica.deleted:
                continue
            code = replica.process.poll()
            if code is None:
                continue
            replica.exit_code = code if code >= 0 else 128 - code
            replica.finished_at = now_rfc3339()
            self._put_pod(run, replica, phase="Succeeded" if code == 0 else "Failed")
            changed = True
        if not changed or run.done:
            return
        failed = [r for r in run.replicas if r.exit_code not in (None, 0)]
        if failed:
            first = failed[0]
            message = f"jobset failed: job {run.name}-node-0 failed (node index {first.index} exited {first.exit_code})"
            self._trainjob_condition(run, "Failed", "FailedJobs", message)
            doomed = [r for r in run.replicas if r.exit_code is None]
            for replica in doomed:
                replica.deleted = True
                self.server.remove_pod(run.namespace, replica.pod_name)
            self._kill(doomed)
        elif all(r.exit_code == 0 for r in run.replicas):
            self._trainjob_condition(run, "Complete", "JobSetCompleted", "jobset completed successfully")
        if run.done:
            run.completion_time = now_rfc3339()
        self._write_status(run)

    def _trainjob_condition(self, run: JobRun, ctype: str, reason: str, message: str) -> None:
        run.done = True
        at = now_rfc3339()
        run.conditions.append(
            {"type": ctype, "status": "True", "reason": reason, "message": message, "lastTransitionTime": at}
        )

    def _write_status(self, run: JobRun) -> None:
        from backend_plugin.targets.trainjob.declaration import PLURAL as TRAINJOBS

        counts = {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
        for r in run.replicas:
            if r.exit_code is None and not r.deleted and r.process is not None:
                counts["active"] += 1
                counts["ready"] += 1
            elif r.exit_code == 0:
                counts["succeeded"] += 1
            elif r.exit_code is not None:
                counts["failed"] += 1
        status = {"conditions": [dict(c) for c in run.conditions], "jobsStatus": [counts]}
        try:
            self.server.set_job_status(run.namespace, run.name, status, TRAINJOBS)
        except KeyError:
            run.gone = True

    def _put_pod(self, run: JobRun, replica: Replica, phase: str) -> None:
        if replica.deleted:
            return
        trainer = run.job["spec"]["trainer"]
        if phase == "Pending":
            state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        elif phase == "Running":
            state = {"running": {"startedAt": replica.started_at}}
        else:
            # The runtime's node container keeps terminationMessagePolicy File: no log tail in the message.
            state = {
                "terminated": {
                    "exitCode": replica.exit_code,
                    "reason": "Completed" if replica.exit_code == 0 else "Error",
                    "startedAt": replica.started_at,
                    "finishedAt": replica.finished_at,
                }
            }
        labels = {
            JOBSET_NAME_LABEL: run.name,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/job-index": "0",
            COMPLETION_INDEX: str(replica.index),
            "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
        }
        pod = {
            "metadata": {
                "name": replica.pod_name,
                "namespace": run.namespace,
                "labels": labels,
                "annotations": {COMPLETION_INDEX: str(replica.index)},
            },
            "spec": {"containers": [{"name": "node", "image": trainer.get("image", "")}]},
            "status": {
                "phase": phase,
                **({"startTime": replica.started_at} if replica.started_at else {}),
                **({"conditions": [dict(c) for c in replica.conditions]} if replica.conditions else {}),
                "containerStatuses": [
                    {
                        "name": "node",
                        "ready": phase == "Running",
                        "restartCount": replica.restarts,
                        "image": trainer.get("image", ""),
                        "imageID": "",
                        "state": state,
                    }
                ],  # fmt: skip
            },
        }
        self.server.put_pod(pod)

    SUSPEND_PATH = ("spec", "suspend")

    def _plural(self) -> str:
        from backend_plugin.targets.trainjob.declaration import PLURAL as TRAINJOBS

        return TRAINJOBS

    def _suspended_condition(self, run: JobRun, suspended: bool) -> None:
        """Trainer v2.3: condition Suspended, True (reason `Suspended`) while suspended, False (`Resumed`) after."""
        at = now_rfc3339()
        reason, message = ("Suspended", "TrainJob is suspended") if suspended else ("Resumed", "TrainJob is resumed")
        for c in run.conditions:
            if c["type"] == "Suspended":
                c.update(status=str(suspended), reason=reason, message=message, lastTransitionTime=at)
                return
        run.conditions.append({"type": "Suspended", "status": str(suspended), "reason": reason, "message": message,
                               "lastTransitionTime": at})  # fmt: skip

    def run_for(self, name: str, timeout_s: float = 30.0) -> JobRun:
        """The record of TrainJob `name`, waiting until the fake Trainer has started it."""
        return super().run_for(name, timeout_s)


# ----------------------------------------------------------------------------------------------------------------
# JobSet: the JobSet controller, the Job controller and the kubelet.

JOBSET_LABELS = "jobset.sigs.k8s.io/"
JOB_NAME_LABEL_BATCH = "batch.kubernetes.io/job-name"
PREEMPTION_CONDITION = "DisruptionTarget"


@dataclass
class JobSetPod(Replica):
    """One pod of a JobSet's child Job: `rtype` is its replicated job (`master`, `worker`), `index` its completion
    index, `attempt` the JobSet restart it was created for (`jobset.sigs.k8s.io/restart-attempt`).

    Attributes:
        attempt: the restart attempt.
        job: its child Job's name (`<jobset>-<replicated job>-<job index>`).
    """

    attempt: int = 0
    job: str = ""


@dataclass
class ChildJob:
    """The player's record of one child Job of a JobSet.

    Attributes:
        name: `<jobset>-<replicated job>-<job index>`.
        rjob: its replicated job's spec.
        pods: its pods, by completion index.
        failed: (reason, message, when) once it failed.
        complete: every index succeeded.
        failures: pod failures counted against `backoffLimit`.
    """

    name: str
    rjob: dict
    pods: list[JobSetPod] = field(default_factory=list)
    failed: Optional[tuple[str, str, str]] = None
    complete: bool = False
    failures: int = 0

    @property
    def active(self) -> bool:
        return not self.failed and not self.complete


@dataclass
class JobSetRun(JobRun):
    """The player's record of one JobSet: `JobRun`'s, and its child Jobs, restarts and terminal state (every pod of
    every attempt stays in `replicas`, the current attempt's in `jobs`)."""

    jobs: list[ChildJob] = field(default_factory=list)
    restarts: int = 0
    counted: int = 0
    terminal: str = ""
    master_port: int = 0

    def current(self) -> list[JobSetPod]:
        """The pods of the current attempt, master first, by index."""
        return [p for j in self.jobs for p in j.pods]


def _k8s_message_for_condition(ns: str, pod: str, ctype: str, index: int) -> str:
    # Kubernetes' Job controller (pkg/controller/job/pod_failure_policy.go), on a FailJob rule matching a pod condition
    return f"Pod {ns}/{pod} has condition {ctype} matching FailJob rule at index {index}"


def _k8s_message_for_exit_code(ns: str, pod: str, container: str, code: int, index: int) -> str:
    # the same, on a FailJob rule matching a container's exit code
    return (
        f"Container {container} for pod {ns}/{pod} failed with exit code {code} matching FailJob rule at index {index}"
    )


class FakeJobSet(FakeOperator):
    """Plays the JobSet controller (v0.12.0, `pkg/controllers/jobset_controller.go`, `failure_policy.go`,
    `success_policy.go`), Kubernetes' Job controller and the kubelet for JobSets.

    One child Job `<jobset>-<replicated job>-<job index>` per replica of each replicated job, and one process per
    completion index, named as the Job controller names Indexed pods (`<job>-<index>-<5 random>`), with the labels and
    annotations JobSet and the Job controller put on them (`restart-attempt`, `job-completion-index`, ...). Each runs
    its container's command and args with the image's environment, the container's env (downward API: the pod's
    name, namespace, IP, labels and annotations), the test's extra variables, and `JOB_COMPLETION_INDEX`, which the
    Job controller adds to every container of an Indexed Job; nothing else. Two liberties, as for the other kinds: a
    pod's DNS name in the JobSet's subdomain resolves to 127.0.0.1 (an env value that is one becomes 127.0.0.1), and
    the master port (`MASTER_PORT`, `PET_MASTER_PORT`) is a free local port.

    A failed pod is classed by its Job's `podFailurePolicy` (rules in order: exit codes of a container, or a pod
    condition: `preempt` gives a pod `DisruptionTarget` and stops it): `FailJob` fails the Job with reason
    `PodFailurePolicy` and Kubernetes' message, `Ignore` replaces the pod, anything else counts against
    `backoffLimit`, past which the Job fails with `BackoffLimitExceeded`. A failed Job stops its other pods. The JobSet
    then applies its failure policy (the first rule, in order, that matches a failed Job; default `RestartJobSet`):
    `FailJobSet` (condition Failed, active Jobs and their pods deleted), `RestartJobSet` within `maxRestarts` (else
    Failed `ReachedMaxRestarts`) and `RestartJobSetAndIgnoreMaxRestarts`: the attempt's Jobs and pods are deleted and
    created again with `restart-attempt` + 1 (condition RestartingJobSet until every Job is ready again). The success
    policy (`All`/`Any` of the target replicated jobs' Jobs complete) sets Completed and deletes the active Jobs.
    `suspend` holds the JobSet with a Suspended condition. Not emulated: `dependsOn`, coordinators, in-place
    restarts, scheduling and images.
    """

    def reconcile(self) -> None:
        """One pass: start new JobSets, follow pods, apply the Job and JobSet controllers' rules, write status."""
        from backend_plugin.targets.jobset.declaration import PLURAL as JOBSETS

        for job in self.server.jobs(JOBSETS):
            meta = job["metadata"]
            key = (meta["namespace"], meta["name"])
            with self._lock:
                run = self.runs.get(key)
                if run is None or run.job["metadata"].get("uid") != meta.get("uid"):
                    run = self._start(job)
                    self.runs[key] = run
            assert isinstance(run, JobSetRun)
            self._follow(run)

    # ------------------------------------------------------------------ creation
    def _start(self, job: dict) -> JobSetRun:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        run = JobSetRun(ns, name, job, start_time=now_rfc3339(), master_port=_free_port())
        if job["spec"].get("suspend"):
            run.suspended = True
            self._jobset_condition(run, "Suspended", "SuspendedJobs", "jobset is suspended")
        else:
            self._create_jobs(run)
        self._write_status(run)
        return run

    def _create_jobs(self, run: JobSetRun) -> None:
        """The current attempt's child Jobs and their pods, started."""
        run.jobs = []
        for rjob in run.job["spec"]["replicatedJobs"]:
            for job_index in range(int(rjob.get("replicas", 1))):
                child = ChildJob(f"{run.name}-{rjob['name']}-{job_index}", rjob)
                spec = rjob["template"]["spec"]
                count = int(spec.get("completions") or spec.get("parallelism") or 1)
                child.pods = [self._make_pod(run, child, job_index, index) for index in range(count)]
                run.jobs.append(child)
        for pod in run.current():
            run.replicas.append(pod)
            self._put_pod(run, pod, phase="Pending")
        for pod in run.current():
            self._run_pod(run, pod)

    def _run_pod(self, run: JobSetRun, pod: JobSetPod) -> None:
        start_replica(pod)
        pod.started_at = now_rfc3339()
        self._put_pod(run, pod, phase="Running")

    def _pod_metadata(self, run: JobSetRun, child: ChildJob, job_index: int, index: int) -> tuple[dict, dict]:
        """The pod's labels and annotations: its template's, then JobSet's and the Job controller's."""
        rjob = child.rjob
        template = rjob["template"]["spec"]["template"]
        ours = {
            f"{JOBSET_LABELS}jobset-name": run.name,
            f"{JOBSET_LABELS}jobset-uid": str(run.job["metadata"].get("uid", "")),
            f"{JOBSET_LABELS}replicatedjob-name": rjob["name"],
            f"{JOBSET_LABELS}restart-attempt": str(run.restarts),
            f"{JOBSET_LABELS}replicatedjob-replicas": str(rjob.get("replicas", 1)),
            f"{JOBSET_LABELS}job-index": str(job_index),
            f"{JOBSET_LABELS}group-name": rjob.get("groupName", "default"),
            JOB_NAME_LABEL_BATCH: child.name,
            COMPLETION_INDEX: str(index),
        }
        labels = {**((template.get("metadata") or {}).get("labels") or {}), **ours}
        annotations = {**((template.get("metadata") or {}).get("annotations") or {}), **ours}
        return labels, annotations

    def _make_pod(self, run: JobSetRun, child: ChildJob, job_index: int, index: int) -> JobSetPod:
        import secrets

        pod_name = f"{child.name}-{index}-{secrets.token_hex(3)[:5]}"
        pod_spec = child.rjob["template"]["spec"]["template"]["spec"]
        container = next(c for c in pod_spec["containers"] if c["name"] == "pytorch")
        home = self.workdir / pod_name
        home.mkdir(parents=True, exist_ok=True)
        labels, annotations = self._pod_metadata(run, child, job_index, index)
        env = image_env(home)
        for entry in container.get("env") or []:
            env[entry["name"]] = self._downward(entry, pod_name, run.namespace, labels, annotations)
        env.update(self.extra_env)
        env.setdefault("JOB_COMPLETION_INDEX", str(index))  # the Job controller adds it unless the container has it
        self._resolve_names(run, env)
        command = list(container.get("command") or []) + list(container.get("args") or [])
        log = self.workdir / f"{pod_name}.log"
        return JobSetPod(child.rjob["name"], index, pod_name, command, env, log, attempt=run.restarts, job=child.name)

    @staticmethod
    def _downward(entry: dict, pod_name: str, namespace: str, labels: dict, annotations: dict) -> str:
        field_path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        for prefix, values in (("metadata.labels['", labels), ("metadata.annotations['", annotations)):
            if field_path.startswith(prefix) and field_path.endswith("']"):
                return str(values.get(field_path[len(prefix) : -2], ""))
        return _resolve_env_entry(entry, pod_name, namespace)

    def _resolve_names(self, run: JobSetRun, env: dict[str, str]) -> None:
        """DNS and ports of the pod network, on one machine: a pod's name in the JobSet's subdomain is 127.0.0.1, and
        the master port is the JobSet's free port."""
        subdomain = (run.job["spec"].get("network") or {}).get("subdomain") or run.name
        hosts = re.compile(rf"^{re.escape(run.name)}-[a-z0-9-]+-\d+-\d+\.{re.escape(subdomain)}(\..*)?$")
        for key, value in env.items():
            if hosts.match(value):
                env[key] = "127.0.0.1"
        for key in ("MASTER_PORT", "PET_MASTER_PORT"):
            if key in env:
                env[key] = str(run.master_port)

    # ------------------------------------------------------------------ following
    def _follow(self, run: JobSetRun) -> None:
        if run.done or run.gone or run.suspended:
            return
        changed = False
        for child in run.jobs:
            for pod in child.pods:
                if pod.process is None or pod.exit_code is not None or pod.deleted:
                    continue
                code = pod.process.poll()
                if code is None:
                    continue
                pod.exit_code = code if code >= 0 else 128 - code
                pod.finished_at = now_rfc3339()
                self._put_pod(run, pod, phase="Succeeded" if code == 0 else "Failed")
                changed = True
                if child.active and pod.exit_code != 0:
                    self._pod_failed(run, child, pod)
            if child.active and child.pods and all(p.exit_code == 0 for p in child.pods):
                child.complete = True
        if not changed:
            if self._restarting(run) and all(self._job_ready(j) for j in run.jobs):
                self._jobset_condition(run, "RestartingJobSet", "JobsReady", "all jobs are ready", status="False")
                self._write_status(run)
            return
        failed = [j for j in run.jobs if j.failed]
        if failed:
            self._failure_policy(run, failed)
        elif self._succeeded(run):
            self._finish(run, "Completed", "AllJobsCompleted", "jobset completed successfully")
        self._write_status(run)

    def _pod_failed(self, run: JobSetRun, child: ChildJob, pod: JobSetPod) -> None:
        """The Job controller: the pod failure policy, then the backoff limit."""
        spec = child.rjob["template"]["spec"]
        for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
            message = self._rule_matches(run, pod, rule, i)
            if message is None:
                continue
            if rule["action"] == "FailJob":
                self._fail_job(run, child, "PodFailurePolicy", message)
                return
            if rule["action"] == "Ignore":
                replacement = self._make_pod(run, child, int(child.name.rsplit("-", 1)[1]), pod.index)
                child.pods[child.pods.index(pod)] = replacement
                run.replicas.append(replacement)
                self._run_pod(run, replacement)
                return
            break  # Count (or an action the player does not know): the default
        child.failures += 1
        if child.failures > int(spec.get("backoffLimit", 6)):
            self._fail_job(run, child, "BackoffLimitExceeded", "Job has reached the specified backoff limit")

    def _rule_matches(self, run: JobSetRun, pod: JobSetPod, rule: dict, index: int) -> Optional[str]:
        codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
        if codes is not None:
            if codes.get("containerName") not in (None, "pytorch") or not pod.exit_code:
                return None
            inside = pod.exit_code in codes.get("values") or []
            if inside == (codes.get("operator") == "In"):
                return _k8s_message_for_exit_code(run.namespace, pod.pod_name, "pytorch", pod.exit_code, index)
            return None
        for pattern in conditions:
            for c in pod.conditions:
                if c["type"] == pattern.get("type") and c["status"] == pattern.get("status", "True"):
                    return _k8s_message_for_condition(run.namespace, pod.pod_name, c["type"], index)
        return None

    def _fail_job(self, run: JobSetRun, child: ChildJob, reason: str, message: str) -> None:
        """A failed Job keeps its failed pods and stops (deletes) its others."""
        child.failed = (reason, message, now_rfc3339())
        self._delete_pods([p for p in child.pods if p.exit_code is None], run)

    def _delete_pods(self, pods: list[JobSetPod], run: JobSetRun) -> None:
        for pod in pods:
            pod.deleted = True
            self.server.remove_pod(run.namespace, pod.pod_name)
        self._kill(list(pods))

    # ------------------------------------------------------------------ the JobSet controller's policies
    def _failure_policy(self, run: JobSetRun, failed: list[ChildJob]) -> None:
        policy = run.job["spec"].get("failurePolicy")
        first = min(failed, key=lambda j: j.failed[2] if j.failed else "")
        if policy is None:
            self._finish(run, "Failed", "FailedJobs",
                         f"jobset failed due to one or more job failures (first failed job: {first.name})")  # fmt: skip
            return
        rule, job = None, first
        for candidate in policy.get("rules") or []:
            matching = [j for j in failed if self._rule_applies(candidate, j)]
            if matching:
                rule, job = candidate, min(matching, key=lambda j: j.failed[2] if j.failed else "")
                break
        action = rule["action"] if rule is not None else "RestartJobSet"
        if action == "FailJobSet":
            self._finish(run, "Failed", "FailJobSetFailurePolicyAction",
                         f"applying FailJobSet failure policy action (first failed job: {job.name})")  # fmt: skip
        elif action == "RestartJobSet" and run.counted >= int(policy.get("maxRestarts", 0)):
            reached = "jobset failed due to reaching max number of restarts"
            self._finish(run, "Failed", "ReachedMaxRestarts", f"{reached} (first failed job: {job.name})")
        elif action in ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"):
            reason = f"FailurePolicy_{rule['name']}" if rule is not None else "DefaultFailurePolicy"
            self._restart(run, action == "RestartJobSet", reason,
                          f"applying {action} failure policy action (first failed job: {job.name})")  # fmt: skip
        else:
            self.errors.append(f"{run.name}: failure policy action {action!r} is not played")

    @staticmethod
    def _rule_applies(rule: dict, job: ChildJob) -> bool:
        assert job.failed is not None
        reason, message, _ = job.failed
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            return False
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if patterns and not any(re.search(p, message) for p in patterns):
            return False
        targets = rule.get("targetReplicatedJobs") or []
        return not targets or job.rjob["name"] in targets

    def _restart(self, run: JobSetRun, counted: bool, reason: str, message: str) -> None:
        """Delete the attempt's Jobs and pods, and create them again with the next restart attempt."""
        run.restarts += 1
        run.counted += 1 if counted else 0
        self._jobset_condition(run, "RestartingJobSet", reason, message)
        self._delete_pods([p for p in run.current() if not p.deleted], run)
        for pod in run.current():  # the Jobs' deletion takes their finished pods with them
            self.server.remove_pod(run.namespace, pod.pod_name)
        self._create_jobs(run)

    def _succeeded(self, run: JobSetRun) -> bool:
        policy = run.job["spec"].get("successPolicy") or {"operator": "All"}
        targets = policy.get("targetReplicatedJobs") or [r["name"] for r in run.job["spec"]["replicatedJobs"]]
        done = [j for j in run.jobs if j.complete and j.rjob["name"] in targets]
        if policy.get("operator") == "Any":
            return bool(done)
        expected = sum(int(r.get("replicas", 1)) for r in run.job["spec"]["replicatedJobs"] if r["name"] in targets)
        return len(done) >= expected

    def _finish(self, run: JobSetRun, ctype: str, reason: str, message: str) -> None:
        """A terminal condition; the active Jobs (and their pods) are deleted, finished pods kept."""
        self._jobset_condition(run, ctype, reason, message)
        if self._restarting(run):
            self._jobset_condition(run, "RestartingJobSet", f"JobSet{ctype}", f"jobset {ctype.lower()}",
                                   status="False")  # fmt: skip
        run.terminal = ctype
        run.done = True
        run.completion_time = now_rfc3339()
        self._delete_pods([p for j in run.jobs if j.active for p in j.pods if p.exit_code is None], run)

    @staticmethod
    def _restarting(run: JobSetRun) -> bool:
        return any(c["type"] == "RestartingJobSet" and c["status"] == "True" for c in run.conditions)

    @staticmethod
    def _job_ready(job: ChildJob) -> bool:
        return job.complete or all(p.process is not None and p.exit_code in (None, 0) for p in job.pods)

    # ------------------------------------------------------------------ test helpers
    SUSPEND_PATH = ("spec", "suspend")

    def _plural(self) -> str:
        from backend_plugin.targets.jobset.declaration import PLURAL as JOBSETS

        return JOBSETS

    def _recreate_pods(self, run: JobRun) -> None:
        """A resumed JobSet: its child Jobs are unsuspended and create their pods again (same restart attempt)."""
        assert isinstance(run, JobSetRun)
        self._create_jobs(run)

    def _suspended_condition(self, run: JobRun, suspended: bool) -> None:
        if suspended:
            self._jobset_condition(run, "Suspended", "SuspendedJobs", "jobset is suspended")
        else:
            self._jobset_condition(run, "Suspended", "ResumeJobs", "jobset is resumed", status="False")

    # ------------------------------------------------------------------ status writers
    def _jobset_condition(self, run: JobRun, ctype: str, reason: str, message: str, status: str = "True") -> None:
        at = now_rfc3339()
        for c in run.conditions:
            if c["type"] == ctype:
                c.update(status=status, reason=reason, message=message, lastTransitionTime=at)
                return
        run.conditions.append(
            {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}
        )

    def _write_status(self, run: JobRun) -> None:
        from backend_plugin.targets.jobset.declaration import PLURAL as JOBSETS

        assert isinstance(run, JobSetRun)
        entries = []
        for rjob in run.job["spec"]["replicatedJobs"]:
            jobs = [j for j in run.jobs if j.rjob["name"] == rjob["name"]]
            entries.append({
                "name": rjob["name"],
                "ready": sum(1 for j in jobs if j.active and self._job_ready(j)),
                "succeeded": sum(1 for j in jobs if j.complete),
                "failed": sum(1 for j in jobs if j.failed),
                "active": sum(1 for j in jobs if j.active and any(p.exit_code is None for p in j.pods)),
                "suspended": int(rjob.get("replicas", 1)) if run.suspended else 0,
            })  # fmt: skip
        status: dict[str, Any] = {"conditions": [dict(c) for c in run.conditions], "restarts": run.restarts,
                                  "replicatedJobsStatus": entries}  # fmt: skip
        if run.counted:
            status["restartsCountTowardsMax"] = run.counted
        if run.terminal:
            status["terminalState"] = run.terminal
        try:
            self.server.set_job_status(run.namespace, run.name, status, JOBSETS)
        except KeyError:
            run.gone = True

    def _put_pod(self, run: JobRun, replica: Replica, phase: str) -> None:
        if replica.deleted:
            return
        assert isinstance(run, JobSetRun) and isinstance(replica, JobSetPod)
        child = next(j for j in run.jobs if j.name == replica.job) if replica.job else None
        rjob = child.rjob if child is not None else run.job["spec"]["replicatedJobs"][0]
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        container = next(c for c in pod_spec["containers"] if c["name"] == "pytorch")
        if phase == "Pending":
            state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        elif phase == "Running":
            state = {"running": {"startedAt": replica.started_at}}
        else:
            term: dict[str, Any] = {"exitCode": replica.exit_code, "startedAt": replica.started_at,
                                    "reason": "Completed" if replica.exit_code == 0 else "Error",
                                    "finishedAt": replica.finished_at}  # fmt: skip
            message = self._termination_message(container, replica)
            if message:
                term["message"] = message
            state = {"terminated": term}
        job_index = int(replica.job.rsplit("-", 1)[1]) if replica.job else 0
        labels, annotations = self._pod_metadata(run, child, job_index, replica.index) if child else ({}, {})
        subdomain = (run.job["spec"].get("network") or {}).get("subdomain") or run.name
        pod = {
            "metadata": {
                "name": replica.pod_name,
                "namespace": run.namespace,
                "labels": labels,
                "annotations": annotations,
            },  # fmt: skip
            "spec": {
                "containers": [{"name": "pytorch", "image": container.get("image", "")}],
                "hostname": f"{replica.job}-{replica.index}",
                "subdomain": subdomain,
                "restartPolicy": pod_spec.get("restartPolicy", "Never"),
            },  # fmt: skip
            "status": {
                "phase": phase,
                **({"startTime": replica.started_at} if replica.started_at else {}),
                **({"conditions": [dict(c) for c in replica.conditions]} if replica.conditions else {}),
                "containerStatuses": [
                    {
                        "name": "pytorch",
                        "ready": phase == "Running",
                        "restartCount": 0,
                        "image": container.get("image", ""),
                        "imageID": "",
                        "state": state,
                    }
                ],  # fmt: skip
            },
        }
        self.server.put_pod(pod)

    def run_for(self, name: str, timeout_s: float = 30.0) -> JobRun:
        """The record of JobSet `name`, waiting until the player has started it."""
        return super().run_for(name, timeout_s)
