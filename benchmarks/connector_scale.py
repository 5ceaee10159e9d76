"""How many GetTask calls one connector process answers, and what they cost the API server, with N tracked jobs.

Three processes, as in a cluster: the fake API server (tests/fakeapi) with a fixed latency on every request and
N Running PyTorchJobs (our golden CPU job, labelled as ours) plus one Created job with 1,000 workers (1,001 pods);
the connector, served over gRPC exactly as ``pyflyte serve connector`` does (``grpc.aio`` server,
flytekit's ``AsyncConnectorService``); and this driver, whose pollers call GetTask over round-robin jobs as
flytepropeller would.

Reported (``--json`` writes the same figures by name):

- GetTask/s over the measured window, p50 and p99 latency (ms) as the pollers see them;
- API requests per steady GetTask, from the fake API's request log: single GETs and LISTs, and watch requests
  counted apart;
- the connector process's RSS growth per 1,000 tracked jobs (after every job was polled once) and its CPU per
  GetTask;
- staleness: seconds from a condition change on the API to GetTask reporting it, polling one job back to back
  after the window (so without the pollers' load), then again after a forced 410, after dropped watches, after a
  watch answered with a LIST body (not an event), and after a silent stall (the watch's connection open, nothing
  delivered), with the job reads per second the stall cost (GET, LIST and WATCH of the jobs; the pod lists the
  staleness job's status needs on every poll are apart);
- with ``--watch-faults off``, only the first staleness (no 410, drop, non-event or stall: the tests that judge
  something else skip the half minute the stall takes);
- each figure against its goal (``GOALS``): met or MISSED;
- the GetTask time of the Created job with 1,000 workers;
- live progress: every job's metadata names an output prefix (a folder of a temporary blob store), as propeller's
  does; with ``--progress on`` a progress record, as global rank 0 writes it, lies beside every job's outputs, and
  ``--progress both`` measures without records, then with them, and prints the two side by side with the load
  average before each. Reported: the share of the window's answers that carry a progress line, the records the
  connector read per second in the window, and what its reads found. The window (``--seconds``, 35 by default) is
  longer than the connector's read interval (30 s), so that every job's record is read once inside it: the first
  pass reads them all within a second or two, so the window holds a burst of every job's read.

Usage::

    python benchmarks/connector_scale.py [--jobs 2000] [--pollers 32] [--latency-ms 20] [--seconds 35]
                                         [--executor-threads N] [--get-threads N] [--cache off|on]
                                         [--progress off|on|both] [--log-links off|on|both]
                                         [--kind pytorchjob|trainjob|jobset] [--watch-faults on|off]
                                         [--api fake|real|both] [--kubeconfig PATH]
                                         [--connector-identity serviceaccount|admin] [--json PATH]

``--kind`` picks the job kind the connector tracks (PyTorchJobs by default): JobSets are our golden CPU JobSet, Running
as the JobSet controller reports it (every child Job ready, no condition), and the Created job a JobSet whose worker
Job has 1,000 pods starting; TrainJobs are our golden CPU TrainJob, Running as Trainer reports it (its node Job ready),
and the Created job a TrainJob of 1,000 nodes starting.

``--log-links on`` configures one log link (the connector's ``log_links``, from a ``PYTORCHJOB_CONFIG`` file) and puts
every tracked job's pods on the fake API, as their controllers name them: a TrainJob's and a JobSet's links name their
pods, whose names only a pod list tells. ``--log-links both`` measures without, then with, and prints the two side by
side (with ``--progress both``: the four runs, two tables). The script runs the connector of the checkout it stands
in, so it measures an earlier commit as well: copy it into a checkout of that commit and run it there.

``--cache on|off`` sets the connector's watch-cache setting (``PYTORCHJOB_<SETTING>=true|false``, the setting named by
``--cache-setting``) in the connector's environment; it stops with an error while the connector has no such setting.

``--api real`` measures on a real API server instead (the devcluster of ``python -m devcluster up``, whose kubeconfig
``--kubeconfig`` or ``KUBECONFIG`` names, with admin rights), and ``--api both`` runs it, then the fake API's run of the
same jobs, pollers, kind and cache, and prints the two side by side with the load average before each. On the real
server:

- the jobs are created through the connector: CreateTask over gRPC as propeller sends it (one execution per job, its
  metadata as propeller's), of our CPU task (``tests/data/templates/hand_cpu.json``: a master, two workers) held by
  ``pytorch.suspend`` (the SDK's ``RunPolicy(suspend=True)``): the training operator writes their conditions and
  starts no pod, and every answer is QUEUED (an answer in another phase is an error). N jobs in a namespace of the
  run's own, 64 more in a warm-up namespace; CreateTask/s and its p50/p99 are reported;
- the connector is a local process, served as above, that authenticates as its ServiceAccount of
  ``backend_plugin/deploy/rbac.yaml`` (its objects created where missing and removed after, Flyte's namespace made
  where missing and left; a token from the TokenRequest API), or with ``--connector-identity admin`` as the
  kubeconfig's user;
- the API requests are the API server's own counters (``apiserver_request_total`` of its /metrics, by verb and
  resource) of the jobs' kind, pods, events and CRDs over the window: every client's, so an upper bound of the
  connector's; the same counters over an equal window without polls, just before, are ``api_requests_without_polls``.
  The server counts a request when it ends, so a watch still open is not in the window's count;
- no latency is added (the fake adds ``--latency-ms``), and there is no staleness, watch fault or Created job with
  1,000 workers (the fake's on-demand faults; ``tests/cluster/test_watch_real.py`` runs the cache's watch on the real
  server);
- at the end, even after a failure or SIGTERM, every job is deleted through the connector (DeleteTask), what is left
  is deleted as the admin, the namespaces are deleted, and the run fails unless no job, pod or namespace is left. A
  run killed outright leaves its namespaces (labelled ``app.kubernetes.io/part-of: connector-scale-benchmark``): the
  next run removes them first.

``--kind jobset`` works there too; ``--kind trainjob`` does not (the connector writes no ``spec.suspend`` for a
TrainJob, whose pods would start), nor ``--progress`` or ``--log-links`` other than ``off``.

flytekit runs a sync connector method with ``loop.run_in_executor(None, ...)``: in the event loop's default
thread pool of min(32, CPUs + 4) threads (the ``--worker`` pool of ``pyflyte serve connector`` is grpc's, not
this one). The served connector's ``get`` is a coroutine: it answers from the watch cache in the event loop and runs
every other poll on its own pool of ``get_threads`` threads (``--get-threads N`` sets it; 0 keeps the config's
default). ``--executor-threads N`` sets the default executor, which ``create`` and ``delete`` still use.

The RSS baseline is taken after polling jobs of a second namespace (imports, pools and, with the cache, that
namespace's watch are then paid for), so the growth is the tracked jobs' own.

The machine's load average is printed first and stored: on a shared machine the figures vary several-fold. A record
says rank 0 reported a second before the run and may be silent for an hour (``stale_after_s``), so that it stays
current through the run: the polls measure the line of a running job, not a stale one.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAMESPACE = "bench"
WARMUP_NAMESPACE = "bench-warmup"
"""Jobs polled before the RSS baseline: imports, pools and (with the cache) one namespace's watch are then paid for,
and the growth measured after is the tracked jobs' alone."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "flytekitplugins-pytorch"}
GOLDEN_JOB = ROOT / "tests" / "data" / "jobs" / "cpu_only.yaml"
BIG_JOB = "big-created"
STALE_JOB = "job-00000"
PROGRESS_LINE = "; step 1,200/5,000 (24%)"
"""What the message of a job with a record carries (`write_records`)."""
KINDS = ("pytorchjob", "trainjob", "jobset")
"""The job kinds `--kind` can track (a kind's golden job, its Running status and its starting job are below)."""
KIND_NAMES = {"pytorchjob": ("PyTorchJob", "pytorchjobs"), "trainjob": ("TrainJob", "trainjobs"),
              "jobset": ("JobSet", "jobsets")}  # fmt: skip
"""`--kind` -> (the object's kind, its plural)."""
GOLDEN_JOBSET = ROOT / "tests" / "targets" / "jobset" / "golden" / "cpu_only.yaml"
GOLDEN_TRAINJOB = ROOT / "tests" / "data" / "trainjobs" / "cpu_only.yaml"
LOG_LINKS = [{"name": "Logs", "template": "https://logs.example.com/{{ .namespace }}/{{ .podName }}"}]
"""The one log link `--log-links on` configures (a site's log store, as most have one)."""
_META_KIND: dict[str, str] = {}
"""The `kind` every GetTask's resource meta names (set from `--kind`; none for the default kind, as Flyte stores it)."""


# --------------------------------------------------------------------------------------------- the fake API process
def _condition(ctype: str) -> dict:
    stamp = "2025-01-01T00:00:00Z"
    return {"type": ctype, "status": "True", "reason": f"PyTorchJob{ctype}", "message": f"job is {ctype.lower()}",
            "lastTransitionTime": stamp, "lastUpdateTime": stamp}  # fmt: skip


def _jobset_status(conditions: list[str]) -> dict:
    """A JobSet's status as its controller writes it: Running (every child Job ready, no condition), or Completed."""
    ready = [{"name": n, "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0} for n in ("master",
             "worker")]  # fmt: skip
    stamp = "2025-01-01T00:00:00Z"
    done = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "lastTransitionTime": stamp,
             "message": "jobset completed successfully"}] if "Succeeded" in conditions else []  # fmt: skip
    return {"conditions": done, "replicatedJobsStatus": ready, "restarts": 0}


def _serve_jobset_api(jobs: int, big_workers: int, latency_ms: float, pods: bool) -> Any:
    """The fake API of `_serve_api` with JobSets: `jobs` Running ones (with their pods when `pods`), and a starting one
    with `big_workers` pods."""
    import yaml

    from tests.fakeapi.server import FakeKubeApi
    from tests.targets.jobset.facts import pod

    base = yaml.safe_load(GOLDEN_JOBSET.read_text())
    base["metadata"]["labels"] = {**(base["metadata"].get("labels") or {}), **MANAGED_BY}
    api = FakeKubeApi(history_limit=10_000).start()
    for namespace, count in ((NAMESPACE, jobs), (WARMUP_NAMESPACE, 64)):
        for i in range(count):
            job = copy.deepcopy(base)
            job["metadata"].update(name=f"job-{i:05d}", namespace=namespace)
            job["status"] = _jobset_status([])
            stored = api.put_job(job)
            if pods:
                api.put_pod(pod(stored, 0, role="master"))
                for index in range(int(stored["spec"]["replicatedJobs"][1].get("replicas", 1)) * 2):
                    api.put_pod(pod(stored, index))
    if big_workers:
        big = copy.deepcopy(base)
        big["metadata"].update(name=BIG_JOB, namespace=NAMESPACE, creationTimestamp="2025-01-01T00:00:00Z")
        worker = big["spec"]["replicatedJobs"][1]["template"]["spec"]
        worker["completions"] = worker["parallelism"] = big_workers
        status = _jobset_status([])
        for entry in status["replicatedJobsStatus"]:
            entry["ready"] = 0
        big["status"] = status
        stored = api.put_job(big)
        starting = {"waiting": {"reason": "ContainerCreating"}}
        api.put_pod(pod(stored, 0, "Pending", role="master", **starting))
        for i in range(big_workers):
            api.put_pod(pod(stored, i, "Pending", **starting))
    if latency_ms:
        api.delay(latency_ms / 1000, times=None, before=True)
    return api


def _trainjob_status(conditions: list[str], nodes: int = 2) -> dict:
    """A TrainJob's status as Trainer writes it: Running (its node Job ready, no condition), or Complete."""
    stamp = "2025-01-01T00:00:00Z"
    done = [{"type": "Complete", "status": "True", "reason": "JobsCompleted", "message": "the trainjob completed",
             "lastTransitionTime": stamp}] if "Succeeded" in conditions else []  # fmt: skip
    return {"conditions": done, "jobsStatus": [{"name": "node", "ready": nodes, "active": nodes}]}


def _serve_trainjob_api(jobs: int, big_workers: int, latency_ms: float, pods: bool) -> Any:
    """The fake API of `_serve_api` with TrainJobs: `jobs` Running ones (with their nodes' pods when `pods`), and a
    starting one of `big_workers` nodes."""
    import yaml

    from tests.fakeapi.objects import node_pod
    from tests.fakeapi.server import FakeKubeApi

    base = yaml.safe_load(GOLDEN_TRAINJOB.read_text())
    base["metadata"]["labels"] = {**(base["metadata"].get("labels") or {}), **MANAGED_BY}
    nodes = int(base["spec"]["trainer"]["numNodes"])
    api = FakeKubeApi(history_limit=10_000).start()
    for namespace, count in ((NAMESPACE, jobs), (WARMUP_NAMESPACE, 64)):
        for i in range(count):
            job = copy.deepcopy(base)
            job["metadata"].update(name=f"job-{i:05d}", namespace=namespace)
            job["status"] = _trainjob_status([], nodes)
            stored = api.put_job(job)
            if pods:
                for index in range(nodes):
                    api.put_pod(node_pod(stored, index))
    if big_workers:
        big = copy.deepcopy(base)
        big["metadata"].update(name=BIG_JOB, namespace=NAMESPACE, creationTimestamp="2025-01-01T00:00:00Z")
        big["spec"]["trainer"]["numNodes"] = big_workers
        big["status"] = {"jobsStatus": [{"name": "node", "active": big_workers, "ready": 0}]}
        stored = api.put_job(big)
        for index in range(big_workers):
            api.put_pod(node_pod(stored, index, "Pending", waiting={"reason": "ContainerCreating"}))
    if latency_ms:
        api.delay(latency_ms / 1000, times=None, before=True)
    return api


def _serve_api(jobs: int, big_workers: int, latency_ms: float, kind: str = "pytorchjob", pods: bool = False) -> None:
    """Child process: run the fake API with `jobs` Running jobs, answer control commands on stdin (JSON lines)."""
    import yaml

    from tests.fakeapi.objects import replica_pod
    from tests.fakeapi.server import FakeKubeApi

    if kind == "jobset":
        _answer(_serve_jobset_api(jobs, big_workers, latency_ms, pods), kind)
        return
    if kind == "trainjob":
        _answer(_serve_trainjob_api(jobs, big_workers, latency_ms, pods), kind)
        return
    base = yaml.safe_load(GOLDEN_JOB.read_text())
    base["metadata"]["labels"] = {**(base["metadata"].get("labels") or {}), **MANAGED_BY}
    api = FakeKubeApi(history_limit=10_000).start()
    running = {"conditions": [_condition("Created"), _condition("Running")],
               "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},
               "startTime": "2025-01-01T00:00:00Z"}  # fmt: skip
    for namespace, count in ((NAMESPACE, jobs), (WARMUP_NAMESPACE, 64)):
        for i in range(count):
            job = copy.deepcopy(base)
            job["metadata"].update(name=f"job-{i:05d}", namespace=namespace)
            job["status"] = running
            stored = api.put_job(job)
            if pods:
                api.put_pod(replica_pod(stored, "Master", 0))
                for index in range(int(stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])):
                    api.put_pod(replica_pod(stored, "Worker", index))
    if big_workers:
        big = copy.deepcopy(base)
        big["metadata"].update(name=BIG_JOB, namespace=NAMESPACE, creationTimestamp="2025-01-01T00:00:00Z")
        big["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = big_workers
        big["status"] = {"conditions": [_condition("Created")]}
        stored = api.put_job(big)
        api.put_pod(replica_pod(stored, "Master", 0, phase="Pending", start_time=None))
        for i in range(big_workers):
            api.put_pod(replica_pod(stored, "Worker", i, phase="Pending", start_time=None))
    if latency_ms:
        api.delay(latency_ms / 1000, times=None, before=True)
    _answer(api, kind)


def _answer(api: Any, kind: str) -> None:
    """Print the API's address, then answer the driver's commands until it quits."""
    object_kind, plural = KIND_NAMES[kind]
    print(json.dumps({"host": api.host}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        out: dict[str, Any] = {}
        if cmd["cmd"] == "reset":
            api.reset_log()
        elif cmd["cmd"] == "counts":
            for rec in api.calls():
                key = f"{rec.verb} {rec.resource}"
                out[key] = out.get(key, 0) + 1
        elif cmd["cmd"] == "expire_watches":
            out["expired"] = api.expire_watches()
        elif cmd["cmd"] == "drop_watches":
            out["dropped"] = api.drop_watches()
        elif cmd["cmd"] == "stall_watches":
            out["stalled"] = api.stall_watches()
        elif cmd["cmd"] == "unstall_watches":
            api.unstall_watches()
        elif cmd["cmd"] == "watch_answers_a_list":  # a proxy answering the next watch with a LIST body
            body = json.dumps({"kind": f"{object_kind}List", "items": [],
                               "metadata": {"resourceVersion": api.resource_version}}).encode()  # fmt: skip
            api.answer_raw(200, body, times=1, verb="watch")
            out["dropped"] = api.drop_watches()
        elif cmd["cmd"] == "set_conditions" and kind == "jobset":
            api.set_job_status(NAMESPACE, cmd["name"], _jobset_status(cmd["conditions"]), plural)
        elif cmd["cmd"] == "set_conditions" and kind == "trainjob":
            api.set_job_status(NAMESPACE, cmd["name"], _trainjob_status(cmd["conditions"]), plural)
        elif cmd["cmd"] == "set_conditions":
            api.set_job_status(NAMESPACE, cmd["name"], {"conditions": [_condition(c) for c in cmd["conditions"]]})
        elif cmd["cmd"] == "quit":
            break
        print(json.dumps(out), flush=True)
    api.stop()


# ----------------------------------------------------------------------------------------- the connector process
def _serve_connector(api_host: str, cache: str, cache_setting: str, executor_threads: int, sync_get: bool,
                     kubeconfig: str | None = None) -> None:  # fmt: skip
    """Child process: serve the registered connector over gRPC like `pyflyte serve connector`, print the port.

    The connector's API client talks to `api_host` (the fake API), or, with `kubeconfig`, to the server that kubeconfig
    names, as its user, or as the bearer token in `CONNECTOR_SCALE_TOKEN` when that is set (a ServiceAccount's)."""
    from concurrent import futures

    import grpc
    from flyteidl.service.agent_pb2_grpc import add_AsyncAgentServiceServicer_to_server
    from flytekit.extend.backend.connector_service import AsyncConnectorService
    from kubernetes import client

    import backend_plugin.connector as connector_module
    from backend_plugin.config import KEYS

    if cache == "on" and cache_setting not in KEYS:
        raise SystemExit(
            f"--cache on: BackendConfig has no setting {cache_setting!r} yet; the connector does not use "
            "its watch cache. Run with --cache off, or name the setting with --cache-setting."
        )
    configuration = client.Configuration()
    if kubeconfig:
        from kubernetes import config

        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        token = os.environ.get(TOKEN_VARIABLE)
        if token:  # the connector's ServiceAccount: the kubeconfig's server and CA, the token instead of its user
            configuration.cert_file = configuration.key_file = None
            configuration.api_key = {"authorization": f"Bearer {token}"}
        configuration.retries = False  # as `default_api_client`: the connector's retry loop is the only one
    else:
        configuration.host = api_host
    api_client = client.ApiClient(configuration)
    connector_module.set_api_client_factory(lambda: api_client)
    if sync_get:  # the alternative design: the sync `get` on flytekit's default executor (sized by --executor-threads)
        from flytekit.extend.backend.base_connector import ConnectorRegistry

        for version in (0, 1):
            ConnectorRegistry.register(connector_module.JobConnector(task_type_version=version), override=True)

    def answer_commands() -> None:  # the driver asks what the connector's progress reads did
        from flytekit.extend.backend.base_connector import ConnectorRegistry

        for line in sys.stdin:
            if json.loads(line)["cmd"] == "progress":
                connector = ConnectorRegistry.get_connector("pytorch", 1)
                service = getattr(connector, "service", None)
                if service is None:  # a connector before one service per process (measuring an earlier commit)
                    print(json.dumps(connector.progress.stats()), flush=True)
                    continue
                session = service.session()
                print(json.dumps({**session.progress.stats(), "pod_lists_for_links": session.log_pods.lists}),
                      flush=True)  # fmt: skip

    threading.Thread(target=answer_commands, name="bench-commands", daemon=True).start()

    async def serve() -> None:
        threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor, where flytekit runs sync calls
        if executor_threads:
            asyncio.get_running_loop().set_default_executor(futures.ThreadPoolExecutor(executor_threads))
            threads = executor_threads
        server = grpc.aio.server(futures.ThreadPoolExecutor(max_workers=10))  # `pyflyte serve connector` default
        add_AsyncAgentServiceServicer_to_server(AsyncConnectorService(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(json.dumps({"port": port, "cpus": os.cpu_count(), "executor_threads": threads}), flush=True)
        await server.wait_for_termination()

    asyncio.run(serve())


# ------------------------------------------------------------------------------------------------------ the driver
class _Child:
    """A child process speaking JSON lines on stdin/stdout."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        self.hello = self.read()

    def read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child {self.proc.args} ended (exit code {self.proc.wait(10)})")
        return json.loads(line)

    def ask(self, cmd: str, **kw: Any) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


BLOBS = Path(tempfile.gettempdir())
"""The blob store's root: the driver sets a fresh temporary folder (`_prefix`)."""


def _prefix(name: str, namespace: str) -> str:
    """A job's output prefix in the blob store."""
    return str(BLOBS / namespace / name)


def _request(name: str, namespace: str = NAMESPACE) -> Any:
    from flyteidl.admin import agent_pb2

    meta = json.dumps(
        {"namespace": namespace, "name": name, "uid": "", "output_prefix": _prefix(name, namespace), **_META_KIND}
    )
    return agent_pb2.GetTaskRequest(
        task_category=agent_pb2.TaskCategory(name="pytorch", version=1), resource_meta=meta.encode()
    )


def write_records(names: list[str], namespace: str) -> None:
    """Put a progress record beside each job's outputs, as global rank 0's launcher writes it: step 1,200 of 5,000,
    three metrics, reported a second ago, current for an hour."""
    from pytorch_contract.progress import ProgressRecord, record_path

    now = time.time()
    record = ProgressRecord(step=1200, total=5000, metrics={"loss": 0.124, "accuracy": 0.91, "lr": 0.0003},
                            rate=6.3, eta_s=600.0, started_at=now - 190, reported_at=now - 1, interval_s=10.0,
                            stale_after_s=3600.0).to_json()  # fmt: skip
    for name in names:
        path = Path(record_path(_prefix(name, namespace)))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(record)


async def _poll(
    stub: Any, names: list[str], pollers: int, seconds: float | None, namespace: str = NAMESPACE,
    requests: dict[str, Any] | None = None, expect: str = "RUNNING",
) -> tuple[list[float], int]:  # fmt: skip
    """`pollers` concurrent loops of GetTask over `names` round-robin, for `seconds` (None: each name once); each
    call's request is `requests[name]` (what CreateTask returned, on a real API server) or `_request(name)`.

    Returns the latencies and the errors: failed calls, and answers whose phase is not `expect` (every polled job is
    Running on the fake API; QUEUED, held by its suspend, on a real one). The answers that carry a progress line are
    counted in `PROGRESS_SEEN`."""
    from flyteidl.core import execution_pb2

    expected = execution_pb2.TaskExecution.Phase.Value(expect)

    latencies: list[float] = []
    errors = 0
    nxt = 0
    PROGRESS_SEEN[0] = 0
    deadline = time.monotonic() + seconds if seconds else None

    async def loop() -> None:
        nonlocal nxt, errors
        while True:
            if deadline is None and nxt >= len(names):
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            name = names[nxt % len(names)]
            nxt += 1
            started = time.perf_counter()
            try:
                request = requests[name] if requests is not None else _request(name, namespace)
                response = await stub.GetTask(request, timeout=30)
            except Exception:  # noqa: BLE001 - counted; a benchmark goes on
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)
            if response.resource.phase != expected:
                errors += 1
            if PROGRESS_LINE in response.resource.message:
                PROGRESS_SEEN[0] += 1

    await asyncio.gather(*(loop() for _ in range(pollers)))
    return latencies, errors


PROGRESS_SEEN = [0]
"""Answers of the last `_poll` whose message carried the records' progress line."""


async def _staleness(stub: Any, api: _Child, flips: int = 4) -> dict[str, float]:
    """Seconds from a condition change on the API to GetTask reporting the new phase, polling back to back."""
    from flyteidl.core import execution_pb2

    delays = []
    for i in range(flips):
        ctype = ("Succeeded", "Running")[i % 2]
        api.ask("set_conditions", name=STALE_JOB, conditions=["Created", ctype])
        changed = time.monotonic()
        while True:
            response = await stub.GetTask(_request(STALE_JOB), timeout=30)
            seen = execution_pb2.TaskExecution.Phase.Name(response.resource.phase)
            if seen == ctype.upper():
                break
            if time.monotonic() - changed > 60:
                raise RuntimeError(f"GetTask reported {seen}, never {ctype.upper()}, for {STALE_JOB} in 60 s")
        delays.append(time.monotonic() - changed)
    return {"max": round(max(delays), 3), "median": round(statistics.median(delays), 3)}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _measure(args: argparse.Namespace, api: _Child, conn: _Child) -> dict[str, Any]:
    import grpc
    from flyteidl.service.agent_pb2_grpc import AsyncAgentServiceStub

    figures: dict[str, Any] = {}
    names = [f"job-{i:05d}" for i in range(args.jobs)]
    pid = conn.proc.pid
    async with grpc.aio.insecure_channel(f"127.0.0.1:{conn.hello['port']}") as channel:
        stub = AsyncAgentServiceStub(channel)
        warm = [f"job-{i:05d}" for i in range(64)]
        await stub.GetTask(_request(warm[0], WARMUP_NAMESPACE), timeout=60)  # imports, client, config: not counted
        # Warm the thread pool, connections, allocator (and a namespace's watch) on jobs of another namespace, so that
        # what follows is the tracked jobs' memory.
        await _poll(stub, warm, args.pollers, 3.0, WARMUP_NAMESPACE)
        rss_before = _rss_mib(pid)
        started = time.monotonic()
        _, errors = await _poll(stub, names, args.pollers, None)  # every job once: the cache (if any) holds them all
        figures["first_pass_s"] = round(time.monotonic() - started, 2)
        figures["rss_before_mib"] = round(rss_before, 1)
        figures["rss_after_all_polled_mib"] = round(_rss_mib(pid), 1)
        figures["rss_per_1000_jobs_mib"] = round((_rss_mib(pid) - rss_before) / args.jobs * 1000, 2)

        api.ask("reset")
        reads_before = conn.ask("progress")["reads"]
        cpu0, t0 = _cpu_s(pid), time.monotonic()
        latencies, window_errors = await _poll(stub, names, args.pollers, args.seconds)
        elapsed, cpu = time.monotonic() - t0, _cpu_s(pid) - cpu0
        counts = api.ask("counts")
        progress = conn.ask("progress")
        errors += window_errors
        calls = len(latencies)
        figures["answers_with_progress"] = round(PROGRESS_SEEN[0] / max(calls, 1), 4)
        figures["progress_reads_per_s"] = round((progress["reads"] - reads_before) / elapsed, 1)
        figures["progress_reads"] = progress
        figures.update(_window_figures(latencies, elapsed, cpu, counts, pid))

        figures["staleness_s"] = await _staleness(stub, api)
        if args.watch_faults == "on":
            errors += await _watch_faults(args, stub, api, names, figures)
        if args.big_workers:
            big = []
            for _ in range(5):
                started = time.perf_counter()
                await stub.GetTask(_request(BIG_JOB), timeout=60)
                big.append(time.perf_counter() - started)
            figures["big_job_gettask_s"] = {"workers": args.big_workers, "median": round(statistics.median(big), 3),
                                            "max": round(max(big), 3)}  # fmt: skip
        figures["errors"] = errors
    return figures


def _window_figures(latencies: list[float], elapsed: float, cpu: float, counts: dict[str, int],
                    pid: int) -> dict[str, Any]:  # fmt: skip
    """The measured window's figures, on the fake API or a real one: GetTask/s and latency, the connector's CPU and
    RSS, and the API requests by verb (`counts`: "<verb> <resource>" -> requests in the window)."""
    calls = len(latencies)
    reads = sum(n for key, n in counts.items() if key.split()[0] in ("get", "list"))
    watches = sum(n for key, n in counts.items() if key.split()[0] == "watch")
    return {
        "gettask_per_s": round(calls / elapsed, 1),
        "p50_ms": round(_pct(latencies, 0.50) * 1000, 1),
        "p99_ms": round(_pct(latencies, 0.99) * 1000, 1),
        "connector_cores": round(cpu / elapsed, 2),
        "connector_cpu_ms_per_gettask": round(cpu / max(calls, 1) * 1000, 3),
        "api_requests_per_gettask": round(reads / max(calls, 1), 3),
        "pod_lists_per_gettask": round(counts.get("list pods", 0) / max(calls, 1), 3),
        "api_watch_requests_in_window": watches,
        "api_requests_by_verb": counts,
        "rss_end_mib": round(_rss_mib(pid), 1),
    }


async def _watch_faults(args: argparse.Namespace, stub: Any, api: _Child, names: list[str],
                        figures: dict[str, Any]) -> int:  # fmt: skip
    """The watch's faults, one after the other, each followed by the staleness of one job (`--watch-faults on`).

    Returns:
        The errors of the poll of every job after them.
    """
    # With a watch cache: after a forced 410 (the cache relists) and after a dropped watch (it resumes). Without
    # one there is no watch to break and these equal the figure above.
    figures["watches_expired"] = api.ask("expire_watches")["expired"]
    figures["staleness_after_410_s"] = await _staleness(stub, api)
    figures["watches_dropped"] = api.ask("drop_watches")["dropped"]
    figures["staleness_after_drop_s"] = await _staleness(stub, api)
    # A watch answered with something that is not an event (a proxy's LIST body): the cache relists after a
    # backoff and answers with GETs meanwhile.
    api.ask("watch_answers_a_list")
    figures["staleness_after_non_event_s"] = await _staleness(stub, api)
    # A silent stall: the watch's connection stays open and delivers nothing (a half-open connection). Only the
    # first change after the stall is slow (until the watch is presumed dead and reopened); the goal is 30 s.
    await _staleness(stub, api, flips=2)  # the watch is back and delivering before the stall
    await asyncio.sleep(2.0)
    api.ask("reset")
    stall_started = time.monotonic()
    figures["watches_stalled"] = api.ask("stall_watches")["stalled"]
    figures["staleness_after_stall_s"] = await _staleness(stub, api, flips=1)
    stall_s = time.monotonic() - stall_started
    stall_counts = api.ask("counts")
    api.ask("unstall_watches")
    # The job reads the cache itself makes (GET, LIST, WATCH of the jobs); the staleness job's pod lists are what
    # its status needs on every poll, stall or not.
    plural = KIND_NAMES[args.kind][1]
    job_reads = sum(n for key, n in stall_counts.items() if key.endswith(f" {plural}"))
    figures["api_requests_per_s_during_stall"] = round(job_reads / max(stall_s, 1.0), 3)
    figures["api_requests_during_stall"] = stall_counts
    figures["staleness_after_stall_again_s"] = await _staleness(stub, api)
    # Every job once more after the 410 and the dropped watch: each must still answer, and answer RUNNING.
    _, after_errors = await _poll(stub, [n for n in names if n != STALE_JOB], args.pollers, None)
    figures["errors_after_410_and_drop"] = after_errors
    return after_errors


# ----------------------------------------------------------------------------------------- the real API server
TOKEN_VARIABLE = "CONNECTOR_SCALE_TOKEN"
"""The connector child's bearer token when it runs as the connector's ServiceAccount (from the TokenRequest API)."""
REAL_PART_OF = {"app.kubernetes.io/part-of": "connector-scale-benchmark"}
"""The label of the namespaces a real run makes: a run killed before its cleanup leaves them; the next run removes
them before it starts."""
REAL_TEMPLATE = ROOT / "tests" / "data" / "templates" / "hand_cpu.json"
"""The task every real run creates: the CPU task of the golden job (a master, two workers), held by `pytorch.suspend`
(the SDK's `RunPolicy(suspend=True)`), so that no pod is ever made."""
REAL_KINDS = ("pytorchjob", "jobset")
"""The kinds whose jobs the connector creates held (`runPolicy.suspend`, a JobSet's `spec.suspend`); it writes no
`spec.suspend` for a TrainJob, whose pods would start."""
REAL_WARMUP_JOBS = 64
"""Jobs created in the warm-up namespace, as many as the fake API holds there."""
DEPLOY_RBAC = ROOT / "backend_plugin" / "deploy" / "rbac.yaml"
CONNECTOR_ACCOUNT = ("flyte", "pytorch-connector")
"""The connector's ServiceAccount in `deploy/rbac.yaml` (namespace, name)."""
RBAC_COLLECTIONS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}
CLEANUP_TIMEOUT_S = 180.0
"""How long the cleanup waits for the jobs, then the namespaces, to be gone."""

_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def request_totals(metrics: str) -> dict[str, float]:
    """`apiserver_request_total` of an API server's /metrics, summed by verb and resource (codes, scopes and groups
    together), keyed as the fake API's request log is: `"get pytorchjobs"`, `"list pods"`, `"watch pytorchjobs"`; a
    subresource is named after a slash (`"update pytorchjobs/status"`).

    Args:
        metrics: the text of /metrics (Prometheus' text format).

    Returns:
        Counter value by key.
    """
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        match = _REQUEST_TOTAL.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        key = f"{labels.get('verb', '').lower()} {labels.get('resource', '')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        out[key] = out.get(key, 0.0) + float(match["value"])
    return out


def request_deltas(before: dict[str, float], after: dict[str, float], resources: tuple[str, ...]) -> dict[str, int]:
    """The requests counted between two `request_totals`, of the given resources (their subresources included).

    Args:
        before: the totals at the start.
        after: the totals at the end.
        resources: the resources kept (plural names).

    Returns:
        Requests by key, those that grew only.
    """
    out = {}
    for key, value in after.items():
        resource = key.split(" ", 1)[1].split("/", 1)[0]
        grown = int(round(value - before.get(key, 0.0)))
        if resource in resources and grown > 0:
            out[key] = grown
    return dict(sorted(out.items()))


class _RealCluster:
    """The admin's side of a real run: namespaces, the connector's identity, the API server's counters, cleanup."""

    def __init__(self, kubeconfig: str, kind: str) -> None:
        from backend_plugin.targets.registry import target_for_kind
        from devcluster.kube import Kube

        self.kube = Kube(Path(kubeconfig))
        target = target_for_kind(KIND_NAMES[kind][0])
        self.jobs_api = f"/apis/{target.group}/{target.version}"
        self.plural = target.plural
        self.made_rbac: list[str] = []

    def jobs_path(self, namespace: str) -> str:
        return f"{self.jobs_api}/namespaces/{namespace}/{self.plural}"

    def metrics(self) -> dict[str, float]:
        """The API server's request counters now (`request_totals` of its /metrics, read as the admin)."""
        _method, url, headers, _body, _post = self.kube.api.param_serialize(
            "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
        )
        response = self.kube.api.rest_client.request("GET", url, headers=headers, _request_timeout=60).response
        if response.status != 200:
            raise RuntimeError(f"GET /metrics answered {response.status}: the kubeconfig's user cannot read it")
        return request_totals(response.data.decode())

    def remove_leftovers(self) -> list[str]:
        """Delete the namespaces an earlier run left (killed before its cleanup); their names."""
        selector = ",".join(f"{k}={v}" for k, v in REAL_PART_OF.items())
        names = [n["metadata"]["name"] for n in self.kube.get("/api/v1/namespaces", labelSelector=selector)["items"]]
        for name in names:
            self.kube.delete(f"/api/v1/namespaces/{name}")
        return names

    def make_namespace(self, name: str) -> None:
        from devcluster.kube import wait_for

        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": REAL_PART_OF}}
        self.kube.create("/api/v1/namespaces", body)
        account = f"/api/v1/namespaces/{name}/serviceaccounts/default"  # the pods' account the jobs name
        wait_for(f"namespace {name}'s default ServiceAccount", lambda: self.kube.get_or_none(account), 60)

    def connector_token(self) -> str:
        """A token of the connector's ServiceAccount, as `deploy/rbac.yaml` ships it (what is missing of the file is
        created, and removed by `remove_rbac`; what is there is updated to the file and left). Flyte's namespace is
        made when missing and left: a connector deployed after this run goes there, and a namespace being deleted
        would refuse it."""
        import yaml

        from devcluster.kube import ApiError

        namespace, account = CONNECTOR_ACCOUNT
        if self.kube.get_or_none(f"/api/v1/namespaces/{namespace}") is None:
            self.kube.create("/api/v1/namespaces",
                             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})  # fmt: skip
        for doc in yaml.safe_load_all(DEPLOY_RBAC.read_text()):
            if not doc:
                continue
            collection = RBAC_COLLECTIONS[doc["kind"]].format(namespace=doc["metadata"].get("namespace", ""))
            path = f"{collection}/{doc['metadata']['name']}"
            try:
                self.kube.create(collection, doc)
                self.made_rbac.append(path)
            except ApiError as e:
                if e.status != 409:
                    raise
                self.kube.apply(path, doc, manager="connector-scale-benchmark")
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600}}  # fmt: skip
        answer = self.kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", request)
        return str(answer["status"]["token"])

    def remove_rbac(self) -> None:
        for path in self.made_rbac:
            self.kube.delete(path)
        self.made_rbac = []

    def held(self, namespaces: list[str]) -> tuple[int, int]:
        """The jobs, and the pods, in `namespaces` now."""
        jobs = sum(len(self.kube.get(self.jobs_path(ns))["items"]) for ns in namespaces)
        pods = sum(len(self.kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]) for ns in namespaces)
        return jobs, pods

    def clean(self, namespaces: list[str]) -> dict[str, Any]:
        """Delete every job the connector left in `namespaces` (as the admin), wait until none is left, then delete the
        namespaces and wait until they are gone.

        Returns:
            What was left after the connector's deletes, and after this cleanup (all zero and empty when clean).
        """
        from devcluster.kube import ApiError

        out: dict[str, Any] = {}
        # A job DeleteTask deleted may still be there, being deleted (foreground: until its dependents are gone); one
        # with no deletionTimestamp was not deleted
        kept = [(ns, job["metadata"]["name"]) for ns in namespaces for job in self.kube.get(self.jobs_path(ns))["items"]
                if not job["metadata"].get("deletionTimestamp")]  # fmt: skip
        out["jobs_not_deleted_by_deletetask"] = len(kept)
        for ns, name in kept:
            self.kube.delete(f"{self.jobs_path(ns)}/{name}")
        deadline = time.monotonic() + CLEANUP_TIMEOUT_S
        while time.monotonic() < deadline and self.held(namespaces) != (0, 0):
            time.sleep(0.5)
        out["jobs_left"], out["pods_left"] = self.held(namespaces)
        for ns in namespaces:
            self.kube.delete(f"/api/v1/namespaces/{ns}")
        left = list(namespaces)
        while time.monotonic() < deadline + CLEANUP_TIMEOUT_S:
            try:
                left = [ns for ns in namespaces if self.kube.get_or_none(f"/api/v1/namespaces/{ns}") is not None]
            except ApiError:
                left = namespaces
            if not left:
                break
            time.sleep(0.5)
        out["namespaces_left"] = left
        return out


def _task_template() -> Any:
    """The task the real run creates: `REAL_TEMPLATE`, held by `pytorch.suspend`."""
    from flyteidl.core import tasks_pb2
    from flytekit.models.task import TaskTemplate
    from google.protobuf import json_format

    from pytorch_contract.template_keys import SUSPEND

    data = json.loads(REAL_TEMPLATE.read_text())
    data["config"] = {**data.get("config", {}), SUSPEND: "true"}
    return TaskTemplate.from_flyte_idl(json_format.ParseDict(data, tasks_pb2.TaskTemplate()))


async def _create(stub: Any, template: Any, names: list[str], namespace: str, callers: int,
                  created: dict[str, bytes]) -> tuple[list[float], list[str]]:  # fmt: skip
    """CreateTask for every name (one execution each, as propeller sends it) by `callers` concurrent callers; each
    created job's resource meta goes into `created` as it comes.

    Returns:
        The latencies, and the errors (a failed call, or a create whose metadata says the job can never run).
    """
    from flyteidl.admin import agent_pb2
    from flytekit.models.literals import LiteralMap

    from tests.connector.helpers import execution_metadata

    latencies: list[float] = []
    errors: list[str] = []
    todo = list(names)
    inputs = LiteralMap({}).to_flyte_idl()

    async def caller() -> None:
        while todo:
            name = todo.pop(0)
            meta = execution_metadata(name, namespace=namespace, environment={}, annotations={})
            request = agent_pb2.CreateTaskRequest(inputs=inputs, template=template.to_flyte_idl(),
                                                  output_prefix=_prefix(name, namespace),
                                                  task_execution_metadata=meta.to_flyte_idl())  # fmt: skip
            started = time.perf_counter()
            try:
                answer = await stub.CreateTask(request, timeout=60)
            except Exception as e:  # noqa: BLE001 - counted and shown; the run goes on
                errors.append(f"{namespace}/{name}: {e}")
                continue
            latencies.append(time.perf_counter() - started)
            resource_meta = bytes(answer.resource_meta)
            if json.loads(resource_meta).get("error"):
                errors.append(f"{namespace}/{name}: {json.loads(resource_meta)['error']}")
                continue
            created[name] = resource_meta

    await asyncio.gather(*(caller() for _ in range(callers)))
    return latencies, errors


async def _delete(stub: Any, created: dict[str, bytes], callers: int) -> tuple[int, list[str]]:
    """DeleteTask for every created job, as propeller sends it at the end of an attempt (or an abort).

    Returns:
        The jobs deleted, and the errors.
    """
    from flyteidl.admin import agent_pb2

    todo = list(created.values())
    done = 0
    errors: list[str] = []

    async def caller() -> None:
        nonlocal done
        while todo:
            meta = todo.pop(0)
            request = agent_pb2.DeleteTaskRequest(task_category=agent_pb2.TaskCategory(name="pytorch", version=1),
                                                  resource_meta=meta)  # fmt: skip
            try:
                await stub.DeleteTask(request, timeout=60)
                done += 1
            except Exception as e:  # noqa: BLE001 - the admin's cleanup deletes what is left
                errors.append(str(e))

    await asyncio.gather(*(caller() for _ in range(callers)))
    return done, errors


def _get_requests(created: dict[str, bytes]) -> dict[str, Any]:
    from flyteidl.admin import agent_pb2

    category = agent_pb2.TaskCategory(name="pytorch", version=1)
    return {name: agent_pb2.GetTaskRequest(task_category=category, resource_meta=meta)
            for name, meta in created.items()}  # fmt: skip


async def _measure_real(args: argparse.Namespace, cluster: _RealCluster, conn: _Child, namespaces: list[str],
                        figures: dict[str, Any]) -> None:  # fmt: skip
    """Create the jobs through the connector, run `_measure`'s window on them, and delete them through it again.

    The figures go into `figures` as they come, so that a failure keeps what was measured before it."""
    import grpc
    from flyteidl.service.agent_pb2_grpc import AsyncAgentServiceStub

    namespace, warm_namespace = namespaces
    names = [f"job-{i:05d}" for i in range(args.jobs)]
    warm = [f"warm-{i:05d}" for i in range(REAL_WARMUP_JOBS)]
    pid = conn.proc.pid
    template = _task_template()
    created: dict[str, bytes] = {}
    warm_created: dict[str, bytes] = {}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{conn.hello['port']}") as channel:
        stub = AsyncAgentServiceStub(channel)
        try:
            _, warm_errors = await _create(stub, template, warm, warm_namespace, args.pollers, warm_created)
            started = time.monotonic()
            latencies, create_errors = await _create(stub, template, names, namespace, args.pollers, created)
            elapsed = time.monotonic() - started
            figures["created"] = len(created)
            figures["create_per_s"] = round(len(latencies) / elapsed, 1)
            figures["create_p50_ms"] = round(_pct(latencies, 0.50) * 1000, 1)
            figures["create_p99_ms"] = round(_pct(latencies, 0.99) * 1000, 1)
            figures["create_errors"] = len(create_errors) + len(warm_errors)
            if create_errors or warm_errors:
                figures["create_error_examples"] = (create_errors + warm_errors)[:3]
                raise RuntimeError(f"{figures['create_errors']} CreateTask failed: {figures['create_error_examples']}")

            requests = _get_requests(created)
            warm_requests = _get_requests(warm_created)
            await stub.GetTask(warm_requests[warm[0]], timeout=60)  # imports, client, config: not counted
            await _poll(stub, warm, args.pollers, 3.0, warm_namespace, warm_requests, "QUEUED")
            rss_before = _rss_mib(pid)
            started = time.monotonic()
            first, errors = await _poll(stub, names, args.pollers, None, namespace, requests, "QUEUED")
            figures["first_pass_s"] = round(time.monotonic() - started, 2)
            figures["first_pass_answers"] = len(first)  # calls answered (an answer not QUEUED is in `errors`)
            figures["rss_before_mib"] = round(rss_before, 1)
            figures["rss_after_all_polled_mib"] = round(_rss_mib(pid), 1)
            figures["rss_per_1000_jobs_mib"] = round((_rss_mib(pid) - rss_before) / args.jobs * 1000, 2)

            # What every other client of the API server reads of the same resources in a window without polls
            resources = (cluster.plural, "pods", "events", "customresourcedefinitions")
            idle = cluster.metrics()
            await asyncio.sleep(args.seconds)
            before = cluster.metrics()
            figures["api_requests_without_polls"] = request_deltas(idle, before, resources)

            cpu0, t0 = _cpu_s(pid), time.monotonic()
            latencies, window_errors = await _poll(stub, names, args.pollers, args.seconds, namespace, requests,
                                                   "QUEUED")  # fmt: skip
            elapsed, cpu = time.monotonic() - t0, _cpu_s(pid) - cpu0
            counts = request_deltas(before, cluster.metrics(), resources)
            errors += window_errors
            figures.update(_window_figures(latencies, elapsed, cpu, counts, pid))
            figures["jobs_held"], figures["pods_seen"] = cluster.held(namespaces)
            figures["errors"] = errors
        finally:
            deleted, delete_errors = await _delete(stub, {**created, **warm_created}, args.pollers)
            figures["deleted_through_connector"] = deleted
            figures["delete_errors"] = len(delete_errors)


def run_real(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement on a real API server (`--api real`): namespaces of their own, a connector of its own (local,
    as the connector's ServiceAccount or as the kubeconfig's user), the jobs created through it, then deleted through
    it; whatever it left is deleted as the admin and the namespaces removed, whatever happened before.

    Args:
        args: the parsed command line.

    Returns:
        The figures, with the load average before and after and each goal's verdict.
    """
    global BLOBS
    load = os.getloadavg()
    print(f"real API server: load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs "
          "(a loaded machine's figures are not final)", flush=True)  # fmt: skip
    if args.kind != "pytorchjob":
        _META_KIND["kind"] = KIND_NAMES[args.kind][0]
    cluster = _RealCluster(args.kubeconfig, args.kind)
    left_before = cluster.remove_leftovers()
    if left_before:
        print(f"removed namespaces an earlier run left: {', '.join(left_before)}", flush=True)
    run_id = uuid.uuid4().hex[:6]
    namespaces = [f"connector-scale-{run_id}", f"connector-scale-{run_id}-warmup"]
    figures: dict[str, Any] = {}
    conn = None
    server = cluster.kube.get("/version")
    try:
        for ns in namespaces:
            cluster.make_namespace(ns)
        env = {f"PYTORCHJOB_{args.cache_setting.upper()}": "true" if args.cache == "on" else "false",
               "PYTORCHJOB_TARGET": args.kind}  # fmt: skip
        if args.get_threads:
            env["PYTORCHJOB_GET_THREADS"] = str(args.get_threads)
        if args.connector_identity == "serviceaccount":
            env[TOKEN_VARIABLE] = cluster.connector_token()
        with tempfile.TemporaryDirectory(prefix="connector-scale-blobs-") as blobs:
            BLOBS = Path(blobs)
            conn = _Child(["--role", "connector", "--kubeconfig", args.kubeconfig, "--cache", args.cache,
                           "--cache-setting", args.cache_setting, "--executor-threads", str(args.executor_threads),
                           *(["--sync-get"] if args.sync_get else [])],
                          env=env)  # fmt: skip
            try:
                asyncio.run(_measure_real(args, cluster, conn, namespaces, figures))
            finally:
                conn.stop()
    except BaseException:
        print(f"the real run failed; its figures so far: {figures}", flush=True)
        raise
    finally:
        figures.update(cluster.clean(namespaces))
        cluster.remove_rbac()
    after = os.getloadavg()
    result = {
        "api": "real", "server": f"kube-apiserver {server.get('gitVersion', '?')}",
        "connector_identity": ("ServiceAccount " + "/".join(CONNECTOR_ACCOUNT) if args.connector_identity ==
                               "serviceaccount" else "the kubeconfig's user"),
        "namespace": namespaces[0],
        "jobs": args.jobs, "pollers": args.pollers, "seconds": args.seconds, "kind": args.kind, "cache": args.cache,
        "cpus": conn.hello["cpus"] if conn else None,
        "executor_threads": conn.hello["executor_threads"] if conn else None, "sync_get": args.sync_get,
        "get_threads": args.get_threads or None,
        "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in after], **figures,
    }  # fmt: skip
    result["goals"] = goals(result)
    for key, value in result.items():
        print(f"{key:32} {value}")
    if figures.get("jobs_left") or figures.get("pods_left") or figures.get("namespaces_left"):
        raise RuntimeError(f"the cleanup left jobs, pods or namespaces: {figures}")
    return result


REAL_SIDE_BY_SIDE = (
    ("load_before", "1-minute load average before"),
    ("gettask_per_s", "GetTask/s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("api_requests_per_gettask", "API requests per GetTask"),
    ("pod_lists_per_gettask", "pod lists per GetTask"),
    ("connector_cpu_ms_per_gettask", "connector CPU ms per GetTask"),
    ("rss_per_1000_jobs_mib", "RSS MiB per 1,000 jobs"),
    ("first_pass_s", "first pass over every job, s"),
    ("create_per_s", "CreateTask/s"),
    ("create_p99_ms", "CreateTask p99 ms"),
    ("errors", "errors"),
)
"""The figures printed side by side by `--api both`."""


GOALS = {
    "gettask_per_s": (">=", 1000.0),
    "p99_ms": ("<=", 50.0),
    "api_requests_per_gettask": ("<=", 0.05),
    "rss_per_1000_jobs_mib": ("<=", 10.0),
    "staleness_s": ("<=", 5.0),
    "staleness_after_410_s": ("<=", 5.0),
    "staleness_after_drop_s": ("<=", 5.0),
    "staleness_after_non_event_s": ("<=", 5.0),
    "staleness_after_stall_s": ("<=", 30.0),
    "staleness_after_stall_again_s": ("<=", 5.0),
    "api_requests_per_s_during_stall": ("<=", 1.0),
}
PROGRESS_GOALS = {"answers_with_progress": (">=", 1.0)}
"""With a record beside every job, every answer of the window carries its line."""
"""The connector's scale goals (a staleness figure is judged by its max): the watch cache's answers at 2,000 jobs on
a quiet machine, one request per second per namespace at most while a watch is silent."""


def goals(result: dict[str, Any]) -> dict[str, str]:
    """Each goal met or missed, with the figure: `{"p99_ms": "met (31.0 <= 50)", ...}`; figures not measured are left
    out.

    Args:
        result: the benchmark's figures.

    Returns:
        Goal name -> verdict.
    """
    out = {}
    for key, (op, bound) in {**GOALS, **(PROGRESS_GOALS if result.get("progress") == "on" else {})}.items():
        value = result.get(key)
        if isinstance(value, dict):
            value = value.get("max")
        if not isinstance(value, (int, float)):
            continue
        met = value >= bound if op == ">=" else value <= bound
        out[key] = f"{'met' if met else 'MISSED'} ({value:g} {op} {bound:g})"
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with `--role`, one of its child processes).

    Args:
        argv: command-line arguments; `sys.argv[1:]` when None.

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="tracked Running jobs (default 2000)")
    parser.add_argument("--pollers", type=int, default=32, help="concurrent GetTask callers (default 32)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added to every API request (default 20)")
    parser.add_argument(
        "--seconds", type=float, default=35.0,
        help="measured window (default 35: longer than the connector's 30 s between two reads of a job's record)",
    )  # fmt: skip
    parser.add_argument("--big-workers", type=int, default=1000, help="workers of the Created job (0: none)")
    parser.add_argument("--cache", choices=("off", "on"), default="off", help="the connector's watch cache")
    parser.add_argument("--cache-setting", default="watch_cache", help="the backend config key that turns it on")
    parser.add_argument(
        "--executor-threads", type=int, default=0,
        help="size the connector's default executor (where flytekit runs sync methods); 0: asyncio's default",
    )  # fmt: skip
    parser.add_argument(
        "--get-threads", type=int, default=0,
        help="the connector's get_threads (its pool for gets the cache cannot answer); 0: the config default",
    )  # fmt: skip
    parser.add_argument(
        "--sync-get", action="store_true",
        help="serve the sync JobConnector (get on the default executor) instead of the async ServedJobConnector",
    )  # fmt: skip
    parser.add_argument(
        "--progress", choices=("off", "on", "both"), default="off",
        help="a progress record beside every job's outputs (on), none (off), or one run of each (both)",
    )  # fmt: skip
    parser.add_argument(
        "--log-links", choices=("off", "on", "both"), default="off",
        help="one log link configured and every job's pods on the API (on), none (off), or one run of each (both)",
    )  # fmt: skip
    parser.add_argument("--kind", choices=KINDS, default="pytorchjob", help="the job kind tracked (default pytorchjob)")
    parser.add_argument(
        "--watch-faults", choices=("on", "off"), default="on",
        help="after the window, break the watch (a 410, a drop, a non-event, a stall) and time the staleness after "
             "each (on, the default); off: the window and the first staleness only",
    )  # fmt: skip
    parser.add_argument(
        "--json", metavar="PATH", help="also write the figures to PATH as JSON (--progress both: {off: ..., on: ...})"
    )
    parser.add_argument(
        "--api", choices=("fake", "real", "both"), default="fake",
        help="the fake API server (default), a real one (--kubeconfig: jobs created through the connector, held by "
             "their suspend, deleted at the end), or both, one after the other, printed side by side",
    )  # fmt: skip
    parser.add_argument(
        "--kubeconfig", default=os.environ.get("KUBECONFIG"),
        help="--api real|both: a kubeconfig of the cluster with admin rights (default $KUBECONFIG)",
    )  # fmt: skip
    parser.add_argument(
        "--connector-identity", choices=("serviceaccount", "admin"), default="serviceaccount",
        help="--api real|both: the connector authenticates as its ServiceAccount of deploy/rbac.yaml (default; a "
             "token from the TokenRequest API) or as the kubeconfig's user",
    )  # fmt: skip
    parser.add_argument("--role", choices=("api", "connector"), help=argparse.SUPPRESS)
    parser.add_argument("--pods", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--api-host", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("jobs", "pollers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be at least 1")
    if args.executor_threads < 0:
        parser.error(f"--executor-threads={args.executor_threads} must be 0 (asyncio's default) or more")
    if args.role == "api":
        _serve_api(args.jobs, args.big_workers, args.latency_ms, args.kind, args.pods)
        return 0
    if args.role == "connector":
        _serve_connector(args.api_host, args.cache, args.cache_setting, args.executor_threads, args.sync_get,
                         args.kubeconfig if args.api_host is None else None)  # fmt: skip
        return 0
    if args.api != "fake":
        return _main_real(parser, args)

    progress_modes = ("off", "on") if args.progress == "both" else (args.progress,)
    link_modes = ("off", "on") if args.log_links == "both" else (args.log_links,)
    results = {(p, links): run(args, p, links) for links in link_modes for p in progress_modes}
    for links in link_modes:
        if len(progress_modes) > 1:
            print(f"log links {links}:" + side_by_side(results[("off", links)], results[("on", links)], "progress"))
    for p in progress_modes:
        if len(link_modes) > 1:
            print(f"progress {p}:" + side_by_side(results[(p, "off")], results[(p, "on")], "log links"))
    if args.json:
        named = {f"progress {p}, log links {links}": r for (p, links), r in results.items()}
        Path(args.json).write_text(json.dumps(named if len(named) > 1 else next(iter(named.values())), indent=1))
    return 0


def _main_real(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`--api real` and `--api both`: the real API server's run (then the fake API's, printed beside it)."""
    if not args.kubeconfig:
        parser.error(f"--api {args.api} needs a kubeconfig of the cluster: --kubeconfig PATH, or KUBECONFIG")
    if not Path(args.kubeconfig).is_file():
        parser.error(f"--kubeconfig={args.kubeconfig}: no such file")
    if args.kind not in REAL_KINDS:
        parser.error(f"--api {args.api} --kind {args.kind}: the connector creates only {', '.join(REAL_KINDS)} held "
                     "by their suspend (a TrainJob's pods would start)")  # fmt: skip
    for name in ("progress", "log_links"):
        if getattr(args, name) != "off":
            parser.error(f"--api {args.api} measures with --{name.replace('_', '-')} off only "
                         f"(got {getattr(args, name)})")  # fmt: skip

    def stop(signum: int, _frame: Any) -> None:  # a terminated run still deletes its jobs (the `finally`s)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    results = {"real": run_real(args)}
    if args.api == "both":
        results["fake"] = run(args, "off", "off")
        print(side_by_side(results["real"], results["fake"], rows=REAL_SIDE_BY_SIDE,
                           labels=("real API server", "fake API server")))  # fmt: skip
        print(f"(the fake API adds {args.latency_ms:g} ms to every request and holds Running jobs; the real jobs are "
              "QUEUED, held by their suspend)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results if len(results) > 1 else results["real"], indent=1))
    return 0


def run(args: argparse.Namespace, progress: str, log_links: str = "off") -> dict[str, Any]:
    """One measurement: a fake API and a connector of their own, over a fresh blob store (`progress` "on": a record
    beside every job's outputs; `log_links` "on": one log link configured, and every job's pods on the API).

    Args:
        args: the parsed command line.
        progress: "off" or "on".
        log_links: "off" or "on".

    Returns:
        The figures, with the load average before and after and each goal's verdict.
    """
    global BLOBS
    load = os.getloadavg()
    print(f"progress {progress}, log links {log_links}: load average before: {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} on {os.cpu_count()} CPUs (a loaded machine's figures are not final)", flush=True)  # fmt: skip
    common = ["--jobs", str(args.jobs), "--big-workers", str(args.big_workers), "--latency-ms", str(args.latency_ms)]
    if args.kind != "pytorchjob":
        _META_KIND["kind"] = KIND_NAMES[args.kind][0]
    with tempfile.TemporaryDirectory(prefix="connector-scale-blobs-") as blobs:
        BLOBS = Path(blobs)
        if progress == "on":
            write_records([f"job-{i:05d}" for i in range(args.jobs)], NAMESPACE)
            write_records([f"job-{i:05d}" for i in range(64)], WARMUP_NAMESPACE)
        api = _Child(["--role", "api", *common, "--kind", args.kind, *(["--pods"] if log_links == "on" else [])])
        conn = None
        try:
            env = {f"PYTORCHJOB_{args.cache_setting.upper()}": "true" if args.cache == "on" else "false"}
            if args.get_threads:
                env["PYTORCHJOB_GET_THREADS"] = str(args.get_threads)
            if log_links == "on":  # a list: only a config file sets it
                config = Path(blobs) / "backend-config.yaml"
                config.write_text(json.dumps({"log_links": LOG_LINKS}))
                env["PYTORCHJOB_CONFIG"] = str(config)
            conn = _Child(["--role", "connector", "--api-host", api.hello["host"], "--cache", args.cache,
                           "--cache-setting", args.cache_setting, "--executor-threads", str(args.executor_threads),
                           *(["--sync-get"] if args.sync_get else [])],
                          env=env)  # fmt: skip
            figures = asyncio.run(_measure(args, api, conn))
        finally:
            if conn is not None:
                conn.stop()
            try:
                api.ask("quit")
            except (RuntimeError, BrokenPipeError, ValueError):
                pass
            api.stop()
    after = os.getloadavg()
    result = {
        "jobs": args.jobs, "pollers": args.pollers, "latency_ms": args.latency_ms, "seconds": args.seconds,
        "kind": args.kind, "cache": args.cache, "progress": progress, "log_links": log_links,
        "cpus": conn.hello["cpus"] if conn else None,
        "executor_threads": conn.hello["executor_threads"] if conn else None, "sync_get": args.sync_get,
        "get_threads": args.get_threads or None,
        "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in after], **figures,
    }  # fmt: skip
    result["goals"] = goals(result)
    for key, value in result.items():
        print(f"{key:32} {value}")
    return result


SIDE_BY_SIDE = (
    ("load_before", "1-minute load average before"),
    ("gettask_per_s", "GetTask/s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("api_requests_per_gettask", "API requests per GetTask"),
    ("pod_lists_per_gettask", "pod lists per GetTask"),
    ("connector_cpu_ms_per_gettask", "connector CPU ms per GetTask"),
    ("rss_per_1000_jobs_mib", "RSS MiB per 1,000 jobs"),
    ("answers_with_progress", "answers with a progress line"),
    ("progress_reads_per_s", "record reads/s in the window"),
    ("errors", "errors"),
)
"""The figures printed side by side by `--progress both` and `--log-links both`."""


def side_by_side(off: dict[str, Any], on: dict[str, Any], what: str = "progress",
                 rows: tuple[tuple[str, str], ...] = SIDE_BY_SIDE,
                 labels: tuple[str, str] | None = None) -> str:  # fmt: skip
    """Two runs as a table: without, then with (progress records beside every job, or a log link and the pods), or
    the two runs `labels` names (`--api both`: the real API server, then the fake one).

    Args:
        off: the figures of the run without (the first of `labels`).
        on: the figures of the run with (the second).
        what: what the two runs differ in, for the header.
        rows: the figures shown, (key, label) each.
        labels: the two runs' names; `"<what> off"` and `"<what> on"` when None.

    Returns:
        The table's text.
    """

    def shown(result: dict[str, Any], key: str) -> str:
        value = result.get(key)
        if value is None:  # a figure only one of the two runs has (the real API server's CreateTask)
            return "-"
        return f"{value[0]:.2f}" if key == "load_before" and isinstance(value, list) else str(value)

    first, second = labels or (f"{what} off", f"{what} on")
    modes = labels or ("off", "on")
    lines = [f"\n{'':34} {first:>16} {second:>16}"]
    for key, label in rows:
        lines.append(f"{label:34} {shown(off, key):>16} {shown(on, key):>16}")
    missed = [f"{mode}: {key} {verdict}" for mode, result in ((modes[0], off), (modes[1], on))
              for key, verdict in result["goals"].items() if verdict.startswith("MISSED")]  # fmt: skip
    lines.append("goals: " + ("; ".join(missed) if missed else "all met in both runs"))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
