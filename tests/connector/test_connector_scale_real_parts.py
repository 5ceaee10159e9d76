"""benchmarks/connector_scale.py's `--api real` parts that need no cluster: the API server's request counters read from
/metrics, the side-by-side table of the two runs, and the command lines it refuses before touching a cluster.

The run itself is `tests/cluster/test_connector_scale_real.py`, on a real control plane."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "connector_scale.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("connector_scale_under_test", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()

# The exposition format kube-apiserver writes (k8s.io/apiserver/pkg/endpoints/metrics: `apiserver_request_total` by
# verb, dry_run, group, version, resource, subresource, scope, component, code), with the HELP/TYPE lines and a metric
# whose name starts the same.
METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, \
version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",\
scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="404",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",\
scope="resource",subresource="",verb="GET",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",\
scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",\
scope="namespace",subresource="",verb="WATCH",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubeflow.org",resource="pytorchjobs",\
scope="resource",subresource="status",verb="UPDATE",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",\
scope="resource",subresource="",verb="GET",version="v1"} 1e+03
apiserver_request_total_other{verb="GET",resource="pytorchjobs"} 99
apiserver_request_duration_seconds_bucket{verb="GET",resource="pytorchjobs",le="0.005"} 99
"""


def test_request_totals_sum_codes_and_scopes_by_verb_and_resource():
    totals = bench.request_totals(METRICS)
    assert totals == {
        "get pytorchjobs": 9.0,  # the 200s and the 404s
        "list pytorchjobs": 3.0,
        "watch pytorchjobs": 1.0,
        "update pytorchjobs/status": 4.0,
        "get leases": 1000.0,
    }


def test_request_deltas_keep_the_resources_named_and_what_grew():
    before = bench.request_totals(METRICS)
    after = dict(before)
    after["get pytorchjobs"] += 5
    after["update pytorchjobs/status"] += 1
    after["get leases"] += 40  # another client's requests, of a resource the connector does not read
    after["list pods"] = 2.0  # a key the first read did not have
    deltas = bench.request_deltas(before, after, ("pytorchjobs", "pods"))
    assert deltas == {"get pytorchjobs": 5, "list pods": 2, "update pytorchjobs/status": 1}
    assert bench.request_deltas(before, before, ("pytorchjobs",)) == {}


def test_side_by_side_names_the_two_apis_and_their_missed_goals():
    real = {"load_before": [1.5, 1.0, 1.0], "gettask_per_s": 800.0, "errors": 0, "create_p99_ms": 90.5,
            "goals": {"gettask_per_s": "MISSED (800 >= 1000)"}}  # fmt: skip
    fake = {"load_before": [2.25, 1.0, 1.0], "gettask_per_s": 1500.0, "errors": 0,
            "goals": {"gettask_per_s": "met (1500 >= 1000)"}}  # fmt: skip
    table = bench.side_by_side(real, fake, rows=bench.REAL_SIDE_BY_SIDE, labels=("real API server", "fake API server"))
    lines = table.splitlines()
    assert "real API server" in lines[1] and "fake API server" in lines[1]
    assert lines[1].index("real API server") < lines[1].index("fake API server")
    row = next(line for line in lines if line.startswith("GetTask/s"))
    assert row.split()[-2:] == ["800.0", "1500.0"]
    assert next(line for line in lines if line.startswith("1-minute load")).split()[-2:] == ["1.50", "2.25"]
    assert next(line for line in lines if line.startswith("CreateTask/s")).split()[-2:] == ["-", "-"]  # in neither
    assert next(line for line in lines if line.startswith("CreateTask p99")).split()[-2:] == ["90.5", "-"]
    assert lines[-1] == "goals: real API server: gettask_per_s MISSED (800 >= 1000)"


def test_side_by_side_of_the_progress_runs_is_as_before():
    off = {"load_before": [1.0, 1.0, 1.0], "goals": {}}
    on = {"load_before": [1.0, 1.0, 1.0], "goals": {"p99_ms": "MISSED (60 <= 50)"}}
    lines = bench.side_by_side(off, on, "progress").splitlines()
    assert lines[1].split() == ["progress", "off", "progress", "on"]
    assert [line.split("  ")[0] for line in lines[2:-1]] == [label for _, label in bench.SIDE_BY_SIDE]
    assert lines[-1] == "goals: on: p99_ms MISSED (60 <= 50)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--api", "real"], "--api real needs a kubeconfig of the cluster: --kubeconfig PATH, or KUBECONFIG"),
        (["--api", "both", "--kubeconfig", "/no/such/kubeconfig"], "--kubeconfig=/no/such/kubeconfig: no such file"),
        (["--api", "real", "--kubeconfig", "{kubeconfig}", "--kind", "trainjob"],
         "--api real --kind trainjob: the connector creates only pytorchjob, jobset held by their suspend"),
        (["--api", "both", "--kubeconfig", "{kubeconfig}", "--progress", "on"],
         "--api both measures with --progress off only (got on)"),
        (["--api", "real", "--kubeconfig", "{kubeconfig}", "--log-links", "both"],
         "--api real measures with --log-links off only (got both)"),
    ],
)  # fmt: skip
def test_real_runs_that_cannot_be_measured_stop_before_the_cluster(tmp_path, args, message):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")  # never read: the command line is refused first
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no KUBECONFIG
    cmd = [sys.executable, str(BENCHMARK), *(a.format(kubeconfig=kubeconfig) for a in args)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
