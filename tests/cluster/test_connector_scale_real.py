"""benchmarks/connector_scale.py `--api both` on the real control plane, at a small scale: jobs created through the
connector (CreateTask over gRPC, as propeller sends it) and held by their suspend, GetTask measured with the watch
cache on and the API server's own request counters, every job deleted after; then the fake API server's run of the
same size, printed beside it.

The figures are judged for being real and consistent, not for speed (this tier runs on loaded machines): every job
created, answered and deleted, no pod ever made, the steady polls answered from the watch cache."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.cluster.harness import REPO_ROOT, ClusterInfo, RealCluster
from tests.sdk.guarded_run import run_guarded

BENCHMARK = REPO_ROOT / "benchmarks" / "connector_scale.py"
JOBS = 50
MAX_PROCS = 5  # the driver, the connector, then the fake API and its connector (and a moment's slack)
PART_OF = "app.kubernetes.io/part-of=connector-scale-benchmark"


def benchmark_namespaces(real: RealCluster) -> list[str]:
    return [n["metadata"]["name"] for n in real.kube.get("/api/v1/namespaces", labelSelector=PART_OF)["items"]]


def test_real_api_server_beside_the_fake_at_fifty_jobs(devcluster: ClusterInfo, real: RealCluster,
                                                        tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "figures.json"
    cmd = [sys.executable, str(BENCHMARK), "--api", "both", "--kubeconfig", str(devcluster.kubeconfig),
           "--jobs", str(JOBS), "--pollers", "8", "--seconds", "3", "--cache", "on", "--watch-faults", "off",
           "--big-workers", "0", "--json", str(out)]  # fmt: skip
    try:
        result = run_guarded(cmd, max_procs=MAX_PROCS, timeout_s=600, cwd=str(REPO_ROOT), env=dict(os.environ))
        assert result.killed_for == "", f"killed by the guard: {result.killed_for}\n{result.output[-3000:]}"
        assert result.leftover == [], result.leftover
        assert result.returncode == 0, result.output[-5000:]
    finally:
        left = benchmark_namespaces(real)
        for name in left:  # a run cut short: its cleanup did not happen, this test's does
            real.kube.delete(f"/api/v1/namespaces/{name}")
    assert left == [], f"the benchmark left namespaces: {left}"

    figures = json.loads(out.read_text())
    real_run, fake_run = figures["real"], figures["fake"]
    assert real_run["api"] == "real" and real_run["cache"] == "on" and real_run["kind"] == "pytorchjob"
    assert real_run["connector_identity"] == "ServiceAccount flyte/pytorch-connector"
    assert real_run["server"].startswith("kube-apiserver v1.")
    # every job created through the connector, each answered QUEUED (held by its suspend), none with an error
    assert real_run["created"] == JOBS and real_run["create_errors"] == 0
    assert real_run["create_per_s"] > 0 and 0 < real_run["create_p50_ms"] <= real_run["create_p99_ms"]
    assert real_run["first_pass_answers"] == JOBS and real_run["errors"] == 0
    assert real_run["jobs_held"] == JOBS + 64 and real_run["pods_seen"] == 0  # the suspend held: no pod was made
    # the window: real polls, answered from the watch cache (the API server's counters of the jobs, pods and events)
    calls = real_run["gettask_per_s"] * real_run["seconds"]
    assert calls > JOBS, real_run
    assert 0 < real_run["p50_ms"] <= real_run["p99_ms"]
    assert real_run["api_requests_per_gettask"] <= 0.05, real_run["api_requests_by_verb"]
    assert real_run["connector_cpu_ms_per_gettask"] > 0 and real_run["rss_before_mib"] > 0
    # every job deleted through the connector, nothing left for the admin's cleanup, the namespaces gone
    assert real_run["deleted_through_connector"] == JOBS + 64 and real_run["delete_errors"] == 0
    assert real_run["jobs_not_deleted_by_deletetask"] == 0
    assert real_run["jobs_left"] == 0 and real_run["pods_left"] == 0 and real_run["namespaces_left"] == []
    assert real.kube.get_or_none(f"/api/v1/namespaces/{real_run['namespace']}") is None

    # the fake API's run of the same size, one after the other in the same invocation, and the table of both
    assert (fake_run["jobs"], fake_run["pollers"], fake_run["kind"], fake_run["cache"]) == (JOBS, 8, "pytorchjob", "on")
    assert fake_run["errors"] == 0 and fake_run["api_requests_per_gettask"] <= 0.05
    assert "real API server: load average before:" in result.output
    assert "progress off, log links off: load average before:" in result.output
    table = result.output[result.output.index("real API server  fake API server") :]
    assert "API requests per GetTask" in table and "CreateTask/s" in table
