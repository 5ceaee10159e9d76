"""Flyte's propeller v1.16.8 runs our tasks on the real control plane, both ways a Flyte cluster can:

- `a-<kind>`: through our connector (propeller's `connector-service` plugin calling `pyflyte serve connector` as
  `backend_plugin/deploy/` deploys it), which creates a PyTorchJob, a TrainJob or a JobSet;
- `b-pytorchjob`: through Flyte's own Go PyTorch plugin (`kfoperators/pytorch`), which reads our template and creates
  the PyTorchJob itself.

Each execution is created by `flyte-create-execution` (the stand-in for flyteadmin's CreateExecution, which cannot
be built here) from what `pyflyte package` wrote; from there on everything is Flyte's: propeller compiles nothing
again, runs the nodes, calls the plugin, retries, aborts, sends events. What a user sees is read where admin would
read it: the FlyteWorkflow's status (phases, attempts, errors), the task events propeller sends (phase, reason, log
links), the outputs in the blob store.

Each execution costs the tier 30 to 60 s (the MNIST slice about three minutes), so CI runs one per question: the
README example on every kind through path a (on JobSet launched while propeller has no answer from the connector),
the MNIST example through a and b on PyTorchJob, a failing rank (retried or not) through a, a bad setting refused, an
abort. `DEVCLUSTER_FLYTE_ALL=1` adds the other paths and kinds of the same scenarios, an evicted replica and live
progress (`LOCAL_ONLY`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devcluster import flyte as dcflyte
from devcluster.addons import apply_all
from devcluster.kube import wait_for
from tests.cluster.flyte_harness import Execution, FlyteStack, readme_example_source
from tests.cluster.harness import RealCluster
from tests.mnist_data import SLICE, SLICE_ACCURACY, require_mnist

# The first scenario's setup may start the cluster (when none is up) and deploy propeller; the MNIST slice alone
# takes about three minutes on two busy cores: more than the tier's default 300 s per test.
pytestmark = pytest.mark.timeout(900)

SETUPS = {
    "a-pytorchjob": dcflyte.FlyteSetup("connector", "pytorchjob"),
    "a-trainjob": dcflyte.FlyteSetup("connector", "trainjob"),
    "a-jobset": dcflyte.FlyteSetup("connector", "jobset"),
    "b-pytorchjob": dcflyte.FlyteSetup("builtin", "pytorchjob"),
}
ALL = os.environ.get("DEVCLUSTER_FLYTE_ALL") == "1"
LOCAL_ONLY = pytest.mark.skipif(
    not ALL,
    reason="a local run's scenario (DEVCLUSTER_FLYTE_ALL=1): every execution costs the cluster tier 30-60 s, and what "
    "this one adds is covered by a cheaper scenario in CI",
)


def local(setup: str) -> Any:
    """A parameter that runs only with DEVCLUSTER_FLYTE_ALL=1 (`LOCAL_ONLY`)."""
    return pytest.param(setup, marks=LOCAL_ONLY)


RUN_TIMEOUT_S = 600.0
JOBS = {
    "pytorchjob": "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
    "trainjob": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs",
    "jobset": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
}
_now: dict[str, FlyteStack] = {}


@pytest.fixture(scope="session")
def flyte_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flyte")


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, real: RealCluster, flyte_work: Path) -> FlyteStack:
    """Propeller set up as the test's parameter says; switching redeploys propeller (and the connector) only."""
    setup = SETUPS[request.param]
    current = _now.get("stack")
    if current is None or current.setup != setup:
        current = FlyteStack(real, setup, flyte_work)
        current.deploy()
        _now["stack"] = current
    return current


@dataclass
class Run:
    execution: Execution
    phase: str
    pods: dict[str, dict] = field(default_factory=dict)
    """Every pod of the execution seen while it ran, by name."""


def run(stack: FlyteStack, package: Path, workflow: str, inputs: dict, types: dict, prefix: str,
        env: dict[str, str] | None = None, timeout_s: float = RUN_TIMEOUT_S) -> Run:  # fmt: skip
    execution = stack.launch(package, workflow, inputs, types, prefix, env)
    seen: dict[str, dict] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        for pod in stack.real.pods(dcflyte.EXECUTION_NAMESPACE, f"execution-id={execution.name}"):
            seen[pod["metadata"]["name"]] = pod
        phase = execution.phase()
        if phase in ("Succeeded", "Failed", "Aborted", "TimedOut"):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{execution.name}: no terminal phase in {timeout_s:.0f} s\n{execution.describe()}")
        time.sleep(2.0)
    print(f"\n[flyte] {execution.name} ({stack.setup.plugin}, {stack.setup.target}): {phase} in "
          f"{time.time() - execution.created_at:.1f} s")  # fmt: skip
    return Run(execution, phase, seen)


def ranks_of(pods: dict[str, dict], node: str = "n0") -> list[str]:
    """The names of the pods of a node's job (the replicas), without the plain pods of other nodes."""
    return sorted(n for n, p in pods.items() if (p["metadata"].get("labels") or {}).get("node-id") == node)


# --- what a user sees of a task that succeeds: phases and log links --------------------------------------------


EVENT_ORDER = ("UNDEFINED", "QUEUED", "WAITING_FOR_RESOURCES", "INITIALIZING", "RUNNING", "SUCCEEDED")
"""The task phases of a run that succeeds, in Flyte's order."""


def check_phases(done: Run, node: str = "n0") -> None:
    """The task's events never go back and end SUCCEEDED, and so does its node (what the console shows). A RUNNING
    event is not asked for: propeller sends one event per phase it saw, and a job of a few seconds (the README example,
    the MNIST slice on path b) can run between two of its looks: QUEUED, QUEUED, SUCCEEDED (seen on both paths)."""
    phases = [e.get("phase", "UNDEFINED") for e in done.execution.task_events(node)]
    assert phases, done.execution.describe()
    assert phases[-1] == "SUCCEEDED", phases
    ranks = [EVENT_ORDER.index(p) for p in phases]
    assert ranks == sorted(ranks), phases
    assert done.execution.node_phase(node) == "Succeeded"
    node_phases = [e.get("phase") for e in done.execution.events("node") if e["id"]["nodeId"] == node]
    assert node_phases[-1] == "SUCCEEDED", node_phases


def check_log_links(done: Run, node: str = "n0") -> None:
    """The links propeller sends with the task's events: one per replica pod, each naming its pod."""
    pods = ranks_of(done.pods, node)
    assert len(pods) == 3, sorted(done.pods)
    events = [e for e in done.execution.task_events(node) if e.get("logs")]
    assert events, json.dumps(done.execution.task_events(node))[:3000]
    links = sorted(log["uri"] for log in events[-1]["logs"])
    expected = sorted(
        dcflyte.LOG_TEMPLATE.replace("{{ .namespace }}", dcflyte.EXECUTION_NAMESPACE).replace("{{ .podName }}", p)
        for p in pods
    )
    assert links == expected


# --- the README example (an all-reduce over 3 ranks): every kind through the connector ---------------------------


def run_readme_example(stack: FlyteStack, flyte_work: Path) -> Run:
    """The README example (an all-reduce of x over 3 ranks), x = 2.0, run as one job of 3 pods; checks its outputs,
    phases and log links."""
    folder = flyte_work / "readme"
    folder.mkdir(exist_ok=True)
    (folder / "readme_example.py").write_text(readme_example_source())
    package = stack.package(["readme_example"], source_root=folder)
    # the pods run this machine's environment: the example's module reaches them on PYTHONPATH, as an image has it
    env = {"PYTHONPATH": f"{dcflyte.REPO}:{folder}"}
    done = run(stack, package, "readme_example.wf", {"x": 2.0}, {"x": float}, "readme", env)
    assert done.phase == "Succeeded", done.execution.describe()
    # one pod would be propeller's pod plugin running the task, its 3 ranks launched inside it (the outputs would agree)
    assert len(ranks_of(done.pods)) == 3, f"not one job of 3 pods: {sorted(done.pods)}"
    outputs = done.execution.outputs({"world_size": int, "total": float})
    assert outputs == {"world_size": 3, "total": 6.0}  # 2.0 summed over the master and 2 workers
    check_phases(done)
    check_log_links(done)
    return done


# JobSet's run in CI is the next test's: the same example, launched while propeller's table of connectors is empty
@pytest.mark.parametrize("stack", ["a-pytorchjob", "a-trainjob", local("a-jobset"), local("b-pytorchjob")],
                         indirect=True)  # fmt: skip
def test_readme_example_returns_world_size_and_total(stack: FlyteStack, flyte_work: Path) -> None:
    run_readme_example(stack, flyte_work)


# --- the MNIST example on a slice: both paths ---------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["a-pytorchjob", local("a-trainjob"), local("a-jobset"), "b-pytorchjob"],
                         indirect=True)  # fmt: skip
def test_mnist_workflow_reaches_the_local_accuracy(stack: FlyteStack) -> None:
    from examples.mnist.workflow import mnist_workflow

    data = require_mnist()
    package = stack.package(["examples.mnist.workflow"])
    iface = mnist_workflow.python_interface
    types = {k: iface.inputs[k] for k in SLICE}
    done = run(stack, package, "examples.mnist.workflow.mnist_workflow", dict(SLICE), types, "mnist",
               {"MNIST_DATA_DIR": str(data)})  # fmt: skip
    execution = done.execution
    assert done.phase == "Succeeded", execution.describe()
    out = execution.outputs({"accuracy": float, "accuracies": list[float]})
    accuracy, accuracies = out["accuracy"], out["accuracies"]
    assert len(accuracies) == SLICE["epochs"]
    assert accuracy >= SLICE_ACCURACY, accuracies
    check_phases(done)
    check_log_links(done)
    # the evaluation is a plain @task: propeller's pod plugin ran it as one pod, not a job
    assert len(ranks_of(done.pods, "n1")) == 1, sorted(done.pods)
    # time from creating the FlyteWorkflow to rank 0's first step (the progress record's start, rank 0's clock)
    record = progress_record(stack, execution)
    first_step_s = record["started_at"] - execution.created_at
    line = {"path": stack.setup.plugin, "kind": stack.setup.target, "first_step_s": round(first_step_s, 1),
            "total_s": round(time.time() - execution.created_at, 1), "accuracy": accuracy}  # fmt: skip
    print(f"[flyte] time to first step: {json.dumps(line)}")
    with (stack.info.state / "flyte-first-step.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")
    assert 0 < first_step_s < RUN_TIMEOUT_S


def progress_record(stack: FlyteStack, execution: Execution, node: str = "n0") -> dict:
    """Rank 0's progress record of the node's first attempt, from the blob store."""
    import boto3

    prefix = execution.node_output_prefix(node)
    key = prefix.removeprefix(f"s3://{dcflyte.BUCKET}/") + "/pytorch-progress.json"
    s3 = boto3.client("s3", endpoint_url=stack.info.blob_endpoint, aws_access_key_id=dcflyte.ACCESS_KEY,
                      aws_secret_access_key=dcflyte.ACCESS_KEY, region_name=dcflyte.REGION)  # fmt: skip
    return dict(json.loads(s3.get_object(Bucket=dcflyte.BUCKET, Key=key)["Body"].read()))


# --- what a Flyte user sees when things go wrong ---------------------------------------------------------------


@pytest.fixture(scope="module")
def scenarios(stack: FlyteStack) -> Path:
    return stack.package(["tests.cluster.flyte_workflows"])


@pytest.mark.parametrize("stack", ["a-pytorchjob", local("b-pytorchjob")], indirect=True)
@pytest.mark.parametrize("recoverable", [False, True], ids=["non-recoverable", "recoverable"])
def test_a_failing_rank_is_retried_only_when_recoverable(stack: FlyteStack, scenarios: Path, recoverable: bool) -> None:
    """Rank 1 raises on the first attempt of a task with one user retry: propeller retries only a recoverable error,
    and the node's error names the failing replica and carries its message, on both paths, by different means.
    Through the connector, the replica exits 1 (`FLYTE_FAIL_ON_ERROR`), and the connector reads the ranks' error
    documents and answers RETRYABLE_FAILED or FAILED (flyteplugins webapi/connector `Status`). Through Flyte's
    plugin, nothing sets `FLYTE_FAIL_ON_ERROR`: every rank exits 0 after writing its error document, the PyTorchJob
    succeeds, and propeller reads the documents as the task's outcome (k8s plugin manager, on success); with
    `enable-distributed-error-aggregation` each rank writes its own and propeller picks the earliest."""
    done = run(stack, scenarios, "tests.cluster.flyte_workflows.wf_fails_first_attempt", {"recoverable": recoverable},
               {"recoverable": bool}, "recoverable" if recoverable else "fails")  # fmt: skip
    execution = done.execution
    attempts = sorted({int(e.get("retryAttempt", 0)) for e in execution.task_events("n0")})
    first_error = next(
        (e for e in execution.task_events("n0") if e.get("phase") in ("FAILED", "RETRYABLE_FAILED")), {}
    ).get("error") or (execution.node("n0").get("error") or {})
    print(f"[flyte] rank 1 raised ({stack.setup.plugin}, recoverable={recoverable}): {done.phase}, attempts "
          f"{attempts}; error {json.dumps(first_error)[:1500]}")  # fmt: skip
    if recoverable:
        assert done.phase == "Succeeded", execution.describe()
        assert attempts == [0, 1], attempts
        assert execution.outputs({"o0": int}) == {"o0": 1}  # the second attempt's FLYTE_ATTEMPT_NUMBER
    else:
        assert done.phase == "Failed", execution.describe()
        assert attempts == [0], attempts  # one user retry allowed, none taken
    # the earliest failure's replica (rank 1 is the first worker), with the task's own message
    message = json.dumps(first_error)
    assert "worker-0" in message, message
    assert "cannot read shard 7: checksum mismatch" in message, message


@pytest.mark.parametrize("stack", [local("a-pytorchjob"), local("b-pytorchjob")], indirect=True)
def test_an_evicted_replica_spends_a_user_retry(stack: FlyteStack, scenarios: Path, flyte_work: Path) -> None:
    """A replica evicted through the Eviction API (a drain, the autoscaler) fails the attempt, and propeller retries
    it from the task's own `retries`, on both paths: the connector's RETRYABLE_FAILED and Flyte's plugin's failed
    PyTorchJob are both retryable failures of kind USER (flyteplugins `PhaseInfoRetryableFailure`), never a system
    retry (docs/faults.md, "Preemption")."""
    marker = flyte_work / f"preempt-{stack.setup.plugin}"
    marker.mkdir(exist_ok=True)
    execution = stack.launch(scenarios, "tests.cluster.flyte_workflows.wf_preemptible", {"seconds": 45},
                             {"seconds": int}, "preempt", {"E2E_MARKER_DIR": str(marker)})  # fmt: skip

    def worker() -> dict | None:
        if len(list(marker.glob("up-*"))) < 2:
            return None
        pods = stack.real.pods(dcflyte.EXECUTION_NAMESPACE, f"execution-id={execution.name}")
        workers = [p for p in pods if "worker" in p["metadata"]["name"] or p["metadata"]["name"].endswith("-1")]
        running = [p for p in workers if p["status"].get("phase") == "Running"]
        return running[0] if running else None

    pod = wait_for("a running worker of the attempt", worker, 300, 2.0)
    stack.real.evict(dcflyte.EXECUTION_NAMESPACE, pod["metadata"]["name"])
    phase = execution.wait(RUN_TIMEOUT_S)
    node = execution.node("n0")
    counters = {"attempts": node.get("attempts", 0), "systemFailures": node.get("systemFailures", 0)}
    print(f"[flyte] evicted {pod['metadata']['name']} ({stack.setup.plugin}): {phase}, {counters}; "
          f"events {[e.get('phase') for e in execution.task_events('n0')]}")  # fmt: skip
    assert phase == "Succeeded", execution.describe()
    # a user attempt spent is attempts - systemFailures (flytepropeller nodes/executor.go isEligibleForRetry)
    assert counters == {"attempts": 1, "systemFailures": 0}, execution.describe()


@pytest.mark.parametrize("stack", ["a-trainjob"], indirect=True)
def test_a_bad_setting_is_refused_before_anything_is_created(stack: FlyteStack, scenarios: Path) -> None:
    """130 variables of the task's own are more than a TrainJob admits: the connector refuses the task at create,
    naming the setting, before any job exists; Flyte does not retry it."""
    done = run(stack, scenarios, "tests.cluster.flyte_workflows.wf_env_heavy", {"x": 1}, {"x": int}, "badsetting")
    execution = done.execution
    assert done.phase == "Failed", execution.describe()
    message = str((execution.node("n0").get("error") or {}).get("message", ""))
    assert "environment entries" in message and "keep at most" in message, message
    assert execution.node("n0").get("attempts", 0) <= 1, execution.describe()  # permanent: no retry
    jobs = stack.real.kube.get(JOBS["trainjob"].format(ns=dcflyte.EXECUTION_NAMESPACE))["items"]
    assert not [j for j in jobs if execution.name in j["metadata"]["name"]]
    assert not done.pods


@pytest.mark.parametrize("stack", ["a-pytorchjob", local("b-pytorchjob")], indirect=True)
def test_aborting_the_execution_deletes_the_job(stack: FlyteStack, scenarios: Path) -> None:
    execution = stack.launch(scenarios, "tests.cluster.flyte_workflows.wf_sleeps", {"seconds": 600},
                             {"seconds": int}, "abort")  # fmt: skip
    jobs = JOBS[stack.setup.target].format(ns=dcflyte.EXECUTION_NAMESPACE)

    def job() -> dict | None:
        items = stack.real.kube.get(jobs)["items"]
        ours = [j for j in items if j["metadata"]["name"].startswith(execution.name)]
        return ours[0] if ours else None

    created = wait_for("the execution's job", job, 300, 2.0)
    wait_for("the job's pods running", lambda: len([p for p in stack.real.pods(
        dcflyte.EXECUTION_NAMESPACE, f"execution-id={execution.name}") if p["status"].get("phase") == "Running"]) == 2,
        300, 2.0)  # fmt: skip
    execution.abort()
    wait_for("the FlyteWorkflow gone (propeller's finalizer ran)", lambda: execution.workflow() is None, 180, 2.0)
    wait_for("the job gone", lambda: job() is None, 180, 2.0)
    wait_for(
        "the job's pods gone",
        lambda: not stack.real.pods(dcflyte.EXECUTION_NAMESPACE, f"execution-id={execution.name}"),
        180,
        2.0,
    )
    print(f"[flyte] aborted {execution.name}: {created['kind']} {created['metadata']['name']} deleted")


@pytest.mark.parametrize("stack", [local("a-pytorchjob"), local("b-pytorchjob")], indirect=True)
def test_live_progress_while_the_task_runs(stack: FlyteStack, scenarios: Path, flyte_work: Path) -> None:
    marker = flyte_work / f"progress-{stack.setup.plugin}"
    marker.mkdir(exist_ok=True)
    execution = stack.launch(scenarios, "tests.cluster.flyte_workflows.wf_reports_progress",
                             {"steps": 5, "hold_at": 3}, {"steps": int, "hold_at": int}, "progress",
                             {"E2E_MARKER_DIR": str(marker)})  # fmt: skip

    def shown() -> str | None:
        messages = [e.get("reason", "") for e in execution.task_events("n0") if e.get("phase") == "RUNNING"]
        messages += [execution.node("n0").get("message", "")]
        found = [m for m in messages if m and "3/5" in m]
        return found[-1] if found else None

    try:
        message = wait_for("the task's progress in its RUNNING message", shown, 240, 2.0)
    finally:
        (marker / "release").write_text("")
        execution.wait(RUN_TIMEOUT_S)
    assert "3/5" in message


# --- propeller with no answer from the connector -------------------------------------------------------------


LIST_FAILED = "failed to list connector: [{}]"
POLLED = "ConnectorDeployments support the following task types"
"""Its line at the end of each poll of every connector, answered or not."""


# last of the module's JobSet tests: it leaves propeller changed, and the next stack deploys afresh
@pytest.mark.parametrize("stack", ["a-jobset"], indirect=True)
def test_a_task_created_while_propeller_has_no_answer_from_the_connector_still_reaches_it(
    stack: FlyteStack, flyte_work: Path
) -> None:
    """Propeller rebuilds its table of connectors at every poll (10 s) from that poll's ListAgents answers alone, and
    takes the task types of its connector plugin from the first. A connector restarting or rolling out (one failed
    ListAgents) left the table empty: a task created then went to propeller's `defaultConnector`, none, and failed in
    2 s, "received empty target", charged to the user's retries (seen in this tier, right after a connector rollout).
    Here the table stays empty on purpose: propeller starts while the connector is down, with a poll interval of an
    hour, and the connector comes back. With the shipped `backend_plugin/deploy/propeller-config.yaml` (its
    `supportedTaskTypes` and `defaultConnector`), the README example still runs as a JobSet to its outputs. With the
    config before, propeller's pod plugin ran it: one pod, its 3 ranks inside, the same outputs."""
    kube = stack.real.kube
    connector = f"/apis/apps/v1/namespaces/{dcflyte.NAMESPACE}/deployments/{dcflyte.CONNECTOR}"
    selector = f"app.kubernetes.io/name={dcflyte.CONNECTOR}"
    endpoint = dcflyte.connector_endpoint()
    # whatever happens below, the next test gets the stack deployed afresh (replicas, propeller's configuration)
    _now.pop("stack", None)
    kube.merge_patch(connector, {"spec": {"replicas": 0}})
    wait_for("the connector's pods gone", lambda: not stack.real.pods(dcflyte.NAMESPACE, selector), 120, 1.0)
    overrides = {"plugins": {"connector-service": {"pollInterval": "1h"}}}
    applied = time.monotonic()
    apply_all(kube, dcflyte.propeller_objects(stack.setup, stack.info.blob_endpoint, overrides))
    wait_for("propeller restarted", lambda: dcflyte.rolled_out(kube, dcflyte.NAMESPACE, dcflyte.PROPELLER), 180, 1.0)
    # both polls of its start are over (the plugin's first, then its watch's immediate one), and they failed; the
    # next is in an hour
    wait_for("propeller's two polls at start over", lambda: stack.propeller_log().count(POLLED) >= 2, 180, 1.0)
    log = stack.propeller_log()
    assert LIST_FAILED.format(endpoint) in log and dcflyte.LISTED.format(endpoint) not in log, log[-3000:]
    kube.merge_patch(connector, {"spec": {"replicas": 1}})
    wait_for("the connector back", lambda: dcflyte.rolled_out(kube, dcflyte.NAMESPACE, dcflyte.CONNECTOR), 240, 1.0)
    # Propeller's calls go over one channel it made at its start, which has failed to connect since then; gRPC tries
    # again after a back-off that grows 1.6 times per attempt (20 % jitter, from 1 s), so its next try comes at most
    # about as long after the connector is back as it was down (plus the Service's rules' lag, ~3 s). A task created
    # before that try fails at once ("Unavailable", not what this test asks about): wait it out.
    down_s = time.monotonic() - applied + 3.0
    time.sleep(min(down_s + 5.0, 90.0))
    assert dcflyte.LISTED.format(endpoint) not in stack.propeller_log()  # the table is still empty

    run_readme_example(stack, flyte_work)
    # the table was still the one propeller started with, no answer in it: the task went to the default connector
    log = stack.propeller_log()
    assert dcflyte.LISTED.format(endpoint) not in log, log[-3000:]


@pytest.fixture(autouse=True)
def _no_leftover_executions(real: RealCluster) -> Iterator[None]:
    yield
    path = f"/apis/flyte.lyft.com/v1alpha1/namespaces/{dcflyte.EXECUTION_NAMESPACE}/flyteworkflows"
    if real.kube.get_or_none(path) is None:
        return
    for wf in real.kube.get(path)["items"]:
        phase = int((wf.get("status") or {}).get("phase", 0))
        if phase not in (3, 5, 6):  # not Succeeded, Failed or Aborted: stop it so the next test has the cluster
            real.kube.delete(f"{path}/{wf['metadata']['name']}", {"propagationPolicy": "Background"})
