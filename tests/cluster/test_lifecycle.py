"""A job's life as propeller sees it through the connector, on the real controllers: DeleteTask takes the job and,
through the garbage collector, everything its controllers made (pods, Services, child Jobs, a TrainJob's JobSet);
GetTask carries the live progress of a running job.

Ported from the players (`tests/e2e/test_e2e.py`). The ranks talk to the test through a folder on this machine
(`E2E_MARKER_DIR`, given in the execution's environment as the players gave it): the node agent runs pods as local
processes, which see this machine's files, so a rank can say it joined (its pid) or wait for the test's `release`.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from devcluster.kube import wait_for
from devcluster.paths import pod_log_folder
from tests.cluster.harness import (
    TASK_NS,
    THROUGH_PROPELLER,
    Execution,
    Propeller,
    RealCluster,
    blob_bytes,
    blob_keys,
    execute,
    kind_params,
    read_outputs,
)

JOB_TIMEOUT_S = 300.0
DELETE_PROPAGATION = {"pytorchjob": "Foreground", "trainjob": "Background", "jobset": "Foreground"}
"""How the connector deletes each kind's job (tests/connector/test_connector.py says why a TrainJob differs)."""

# What the controllers of each kind make for a job, by API path (owned, directly or not, by the job)
OWNED = {
    "pytorchjob": ("/api/v1/namespaces/{ns}/pods", "/api/v1/namespaces/{ns}/services"),
    "trainjob": ("/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", "/apis/batch/v1/namespaces/{ns}/jobs",
                 "/api/v1/namespaces/{ns}/pods", "/api/v1/namespaces/{ns}/services"),
    "jobset": ("/apis/batch/v1/namespaces/{ns}/jobs", "/api/v1/namespaces/{ns}/pods",
               "/api/v1/namespaces/{ns}/services"),
}  # fmt: skip


@pytest.fixture
def marker_dir(tmp_path: Path) -> Path:
    """A folder the pods' processes can read and write (they run as this machine's user, on its files)."""
    folder = tmp_path / "marker"
    folder.mkdir()
    os.chmod(folder, 0o777)
    return folder


def owned_by(run: Execution, uid: str) -> list[str]:
    """Everything the job's controllers made that is still in the API: `<plural>/<name>` of every object whose owner
    chain leads to the object `uid`."""
    objects = []
    for path in OWNED[run.kind]:
        for o in run.real.kube.get(path.format(ns=TASK_NS))["items"]:
            objects.append((f"{path.rsplit('/', 1)[1]}/{o['metadata']['name']}", o))
    uids = {uid}
    found: list[str] = []
    changed = True
    while changed:
        changed = False
        for name, o in objects:
            owners = {r["uid"] for r in o["metadata"].get("ownerReferences") or []}
            if owners & uids and o["metadata"]["uid"] not in uids:
                uids.add(o["metadata"]["uid"])
                found.append(name)
                changed = True
    return sorted(found)


def still_there(run: Execution, path: str, names: set[str]) -> set[str]:
    """Which of `names` are still in the API under `path` (an object being deleted counts until it is gone)."""
    return {
        f"{path.rsplit('/', 1)[1]}/{n}" for n in names if run.real.kube.get_or_none(f"{path.format(ns=TASK_NS)}/{n}")
    }


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.parametrize("kind", kind_params(ci=("trainjob", "jobset"), elsewhere="on trainjob and jobset, and on "
                         "pytorchjob " + THROUGH_PROPELLER.format("an abort")), indirect=True)  # fmt: skip
def test_delete_while_running_deletes_the_job_and_the_garbage_collector_takes_its_pods(
    real: RealCluster, propeller: Propeller, kind: str, templates: dict, marker_dir: Path
) -> None:
    """DeleteTask deletes the job (foreground: the job goes last; a TrainJob in the background: it goes first); the
    garbage collector deletes what its controllers made, and nothing is made again meanwhile; the node agent stops
    the pods' containers (SIGTERM, SIGKILL after the grace) and no process of the execution is left on the machine."""
    from tests.cluster.workflows import sleeps

    iface = sleeps.python_interface
    run = execute(real, propeller, kind, templates["sleeps"], {"seconds": 600}, iface.inputs, "delete",
                  env={"E2E_MARKER_DIR": str(marker_dir)})  # fmt: skip
    try:
        run.wait("both ranks joined the group", lambda: len(list(marker_dir.glob("rank-*.pid"))) == 2, JOB_TIMEOUT_S)
        pids = [int(p.read_text()) for p in marker_dir.glob("rank-*.pid")]
        assert all(pid_alive(pid) for pid in pids)
        assert run.get().name == "RUNNING", run.answers
        job = run.job_object()
        assert job is not None
        made = owned_by(run, job["metadata"]["uid"])
        pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in run.snapshot()}
        assert len(pods) == 2 and all(f"pods/{name}" in made for name in pods), made

        run.propeller.delete(run.job.meta)
        # what the pods of the job were at any moment until everything it made is gone: none new (a controller that
        # makes its objects again during the delete would start new pods)
        names = {path: {n.split("/", 1)[1] for n in made if n.startswith(path.rsplit("/", 1)[1] + "/")}
                 for path in OWNED[kind]}  # fmt: skip
        seen_pods: set[str] = set()

        def gone() -> bool:
            seen_pods.update(p["metadata"]["name"] for p in run.pods())
            return run.job_object() is None

        wait_for(f"{run.job.job_name} deleted", gone, 120, 0.3)
        left_at_job_end = sorted(set().union(*[still_there(run, path, names[path]) for path in OWNED[kind]]))
        if DELETE_PROPAGATION[kind] == "Foreground":
            # foreground: the job went last, after the garbage collector had deleted every object blocking it
            assert left_at_job_end == [], left_at_job_end

        def all_gone() -> bool:
            seen_pods.update(p["metadata"]["name"] for p in run.pods())
            return not any(still_there(run, path, names[path]) for path in OWNED[kind])

        wait_for("everything the job's controllers made deleted", all_gone, 60, 0.3)
        assert seen_pods <= set(pods), f"pods made during the delete: {sorted(seen_pods - set(pods))}"
        assert run.pods() == []
        left = run.guard.gone(60)
        assert not left, left
        assert not [pid for pid in pids if pid_alive(pid)]
        for name, uid in pods.items():  # they really ran here: the node agent's logs of each pod's container
            folder = pod_log_folder(real.info.state, TASK_NS, name, uid)
            assert any(folder.rglob("*.log")), folder
        # gone: reported, not an exception (a retryable failure, or as the task's error document says if a rank wrote
        # one), and deleting again is success
        after = run.get()
        assert after.name in ("RETRYABLE_FAILED", "FAILED"), after
        run.propeller.delete(run.job.meta)
        print(f"\n[cluster] delete on {kind}: made {made}; GetTask after: {after.name}: {after.message[:200]}")
        run.clock("DeleteTask, GC takes the pods")
    finally:
        run.finish()


@pytest.mark.parametrize("kind", kind_params(ci=("pytorchjob",)), indirect=True)
def test_gettask_carries_the_live_progress_while_the_job_runs(real: RealCluster, propeller: Propeller, kind: str,
                                                              templates: dict, marker_dir: Path) -> None:  # fmt: skip
    """Rank 0 of a pod writes the progress record beside the outputs; the connector, asked by GetTask as propeller
    asks it, adds its line to the RUNNING message, and drops it when the job ends."""
    from tests.cluster.workflows import reports_progress

    iface = reports_progress.python_interface
    env = {"E2E_MARKER_DIR": str(marker_dir), "FLYTE_PYTORCH_PROGRESS_INTERVAL_S": "1"}  # every second (10 s default)
    run = execute(real, propeller, kind, templates["reports_progress"], {"steps": 10, "hold_at": 4}, iface.inputs,
                  "progress", env=env)  # fmt: skip
    try:
        record = f"{run.job.prefix}/pytorch-progress.json"

        def at_step_four() -> bool:
            return "pytorch-progress.json" in blob_keys(real.info, run.job.prefix) and b'"step":4,' in blob_bytes(
                real.info, record
            )

        # GetTask is first asked once the record holds step 4: the connector reads a running attempt's record on its
        # first RUNNING poll, then at most every progress_read_interval_s (30 s)
        run.wait("the progress record at step 4", at_step_four, JOB_TIMEOUT_S, 1.0)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while run.get().name != "RUNNING" and time.monotonic() < deadline:  # the pods may still be starting
            time.sleep(0.5)
        running = run.answers[-1]
        print(f"\n[cluster] progress on {kind}: GetTask {running.name}: {running.message}")
        assert running.name == "RUNNING", run.answers
        assert re.fullmatch(r"running.*; step 4/10 \(40%\)(, ETA [0-9dhms]+)?, loss 0\.25", running.message), running
        (marker_dir / "release").touch()
        run.poll(JOB_TIMEOUT_S)
        assert run.phases()[-1] == "SUCCEEDED", f"{run.answers[-1].message}\n{run.logs()}"
        done = run.get()
        assert done.name == "SUCCEEDED" and "step" not in done.message, done
        assert read_outputs(real.info, run.job.prefix, iface.outputs) == {"o0": 10}
        import json

        final = json.loads(blob_bytes(real.info, record))
        assert (final["step"], final["total"], final["done"]) == (10, 10, True)
        run.clock("live progress in GetTask")
    finally:
        (marker_dir / "release").touch()
        run.finish()


# --- a job whose pods the API server refuses: the start timeout, as training-operator v1.9 shows it ---------------

QUOTA = "refuse-deadline-pods"
START_TIMEOUT_S = 20


@pytest.mark.parametrize("kind", ["pytorchjob"], indirect=True)
def test_a_job_whose_pods_a_quota_refuses_fails_after_the_start_timeout_naming_the_quota(
    real: RealCluster, connectors: Any, kind: str, templates: dict
) -> None:
    """training-operator v1.9 writes no condition at all while the API server refuses its pod creates (seen here: the
    job stayed without one), so the connector used to say the operator may not be installed; past the pickup timeout
    the operator's `FailedCreate` events now say the pods are refused, naming the quota."""
    propeller = connectors(kind, {"job_start_timeout_s": START_TIMEOUT_S, "operator_pickup_timeout_s": START_TIMEOUT_S},
                           "starttimeout")  # fmt: skip
    quotas = f"/api/v1/namespaces/{TASK_NS}/resourcequotas"
    real.kube.create(quotas, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": QUOTA},
                              "spec": {"hard": {"pods": "0"}, "scopes": ["Terminating"]}})  # fmt: skip
    run = None
    try:
        wait_for("the quota's status", lambda: (real.kube.get(f"{quotas}/{QUOTA}").get("status") or {}).get("hard"),
                 30)  # fmt: skip
        run = execute(real, propeller, kind, templates["refused_by_a_quota"], {"x": 1}, {"x": int}, "quota")
        answers = run.poll(START_TIMEOUT_S + 120)
        end = answers[-1]
        job = run.job_object() or {}
        print(f"\n[cluster] quota-refused pods on {kind}: {[(a.name, a.message[:200]) for a in answers]}; "
              f"startTime {job.get('status', {}).get('startTime')}")  # fmt: skip
        assert end.name == "FAILED", end
        assert end.message.startswith(f"PyTorchJob {TASK_NS}/{run.job.job_name} has not started"), end.message
        assert f"operator_pickup_timeout_s={START_TIMEOUT_S}" in end.message, end.message
        assert "exceeded quota" in end.message and "may not be installed" not in end.message, end.message
        assert not run.pods()
        run.clock("pods refused by a quota: start timeout")
    finally:
        real.kube.delete(f"{quotas}/{QUOTA}")
        if run is not None:
            run.finish()
