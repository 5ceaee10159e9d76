"""Backend throughput: PyTorchJob builds per second and the connector's `get` latency.

    python benchmarks/backend_build.py [--builds 2000] [--gets 500]

It needs the ``backend`` extra (the kubernetes client, flytekit's connector): the README's environment plus
``pip install -c constraints.txt -e '.[examples,backend]'``.

Builds cycle over the representative templates in tests/data/templates/. One pass over them runs first and is
reported on its own (`first_pass_ms`: it imports the kubernetes client's models for the pod-template checks);
`jobs_per_s` is the steady state, where `read_template` finds each template's `TaskSpec` in its cache, and
`uncached_jobs_per_s` reads and checks every template anew (the cost of a template seen for the first time).

`get` runs against the fake Kubernetes API server on 127.0.0.1 (so it measures the connector plus the kubernetes
client, not a real apiserver), over jobs in a realistic mix: steady running (one API call), created with pods
pending and failed (two calls).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend_plugin import template as template_reader  # noqa: E402
from backend_plugin.config import BackendConfig  # noqa: E402
from backend_plugin.connector import JobMetadata  # noqa: E402
from backend_plugin.execution import ExecutionMetadata  # noqa: E402
from backend_plugin.targets.pytorchjob.writer import to_pytorchjob  # noqa: E402
from backend_plugin.template import read_template, template_to_dict  # noqa: E402
from tests.connector.helpers import make_connector  # noqa: E402
from tests.fakeapi.fixtures import running_fake_api  # noqa: E402
from tests.fakeapi.objects import condition, replica_pod  # noqa: E402

TEMPLATES = ROOT / "tests" / "data" / "templates"
NS = "bench"


def bench_builds(n: int) -> dict:
    """Build `n` jobs cycling over every template, after one untimed-in-the-rate pass; jobs/s with and without the
    template cache, and per-build microseconds."""
    templates = [template_to_dict(json.loads(p.read_text())) for p in sorted(TEMPLATES.glob("*.json"))]
    config = BackendConfig()

    def build(i: int) -> None:
        meta = ExecutionMetadata(namespace=NS, job_name=f"j-{i}")
        to_pytorchjob(read_template(templates[i % len(templates)]), meta, config)

    start = time.perf_counter()
    for i in range(len(templates)):
        build(i)
    first_pass = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(n):
        build(i)
    elapsed = time.perf_counter() - start
    uncached_n = max(1, n // 10)
    start = time.perf_counter()
    for i in range(uncached_n):
        template_reader.clear_cache()
        build(i)
    uncached = time.perf_counter() - start
    return {"builds": n, "templates": len(templates), "first_pass_ms": round(first_pass * 1e3, 1),
            "jobs_per_s": round(n / elapsed, 1), "us_per_build": round(elapsed / n * 1e6, 1),
            "uncached_jobs_per_s": round(uncached_n / uncached, 1)}  # fmt: skip


def bench_gets(n: int) -> dict:
    """`get` latency over `n` jobs on the fake API server: p50/p99 and API calls per get."""
    template = template_to_dict(json.loads((TEMPLATES / "official_container.json").read_text()))
    config = BackendConfig()
    with running_fake_api(validate=False) as (server, client):
        connector = make_connector(client)
        metas = []
        for i in range(n):
            meta = ExecutionMetadata(namespace=NS, job_name=f"j-{i}")
            job = server.put_job(to_pytorchjob(read_template(template), meta, config))
            name = job["metadata"]["name"]
            if i % 10 < 8:  # steady running
                status = {"conditions": [condition("Created"), condition("Running")],
                          "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}}}  # fmt: skip
            elif i % 10 == 8:  # created, a pod pending
                status = {"conditions": [condition("Created")]}
                server.put_pod(replica_pod(job, "Worker", 0, phase="Pending", start_time=None))
            else:  # failed, a failed pod explains it
                status = {"conditions": [condition("Failed", message="failed.")]}
                term = {"terminated": {"exitCode": 1, "finishedAt": "2025-01-01T00:00:00Z"}}
                server.put_pod(replica_pod(job, "Worker", 1, phase="Failed", container_state=term))
            server.set_job_status(NS, name, status)
            metas.append(JobMetadata(NS, name, job["metadata"]["uid"]))
        connector.get(metas[0])  # warm the connection pool
        server.reset_log()
        latencies = []
        for meta in metas:
            t = time.perf_counter()
            connector.get(meta)
            latencies.append(time.perf_counter() - t)
        calls = len(server.requests)
    latencies.sort()
    return {"gets": n, "p50_ms": round(statistics.median(latencies) * 1e3, 2),
            "p99_ms": round(latencies[int(0.99 * (n - 1))] * 1e3, 2), "calls_per_get": round(calls / n, 3)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run both benchmarks and print one JSON object per line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=2000)
    parser.add_argument("--gets", type=int, default=500)
    args = parser.parse_args(argv)
    print(json.dumps({"benchmark": "builder", **bench_builds(args.builds)}))
    print(json.dumps({"benchmark": "connector_get", **bench_gets(args.gets)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
