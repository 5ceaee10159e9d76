"""benchmarks/connector_scale.py on a few jobs: its figures are what the fake API and the connector really did."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "connector_scale.py"
MAX_PROCS = 4  # the driver, the fake API, the connector (and a moment's slack)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]


def run(tmp_path: Path, *args: str):
    cmd = [sys.executable, str(BENCHMARK), "--jobs", "20", "--pollers", "4", "--seconds", "1", "--big-workers", "5",
           *args]  # fmt: skip
    result = run_guarded(cmd, max_procs=MAX_PROCS, timeout_s=150, cwd=str(ROOT), env=dict(os.environ))
    assert result.killed_for == "", f"killed by the guard: {result.killed_for}\n{result.output[-3000:]}"
    assert result.leftover == [], result.leftover
    return result


def test_small_run_reports_one_get_per_poll_without_cache(tmp_path):
    out = tmp_path / "figures.json"
    result = run(tmp_path, "--json", str(out))
    assert result.returncode == 0, result.output[-3000:]
    figures = json.loads(out.read_text())
    assert figures["errors"] == 0 and figures["cache"] == "off"
    assert figures["gettask_per_s"] > 0 and 0 < figures["p50_ms"] <= figures["p99_ms"]
    # Running jobs: one GET per GetTask, no pod lists, no watches (watch_cache false: the behaviour before it).
    assert set(figures["api_requests_by_verb"]) == {"get pytorchjobs"}
    assert figures["api_requests_per_gettask"] == 1.0 and figures["api_watch_requests_in_window"] == 0
    assert figures["big_job_gettask_s"]["workers"] == 5 and figures["staleness_s"]["max"] > 0
    assert figures["executor_threads"] == min(32, (os.cpu_count() or 1) + 4)
    assert figures["watches_expired"] == 0 and figures["watches_dropped"] == 0


def test_small_run_with_the_cache_answers_from_the_watch(tmp_path):
    out = tmp_path / "figures.json"
    result = run(tmp_path, "--cache", "on", "--json", str(out))
    assert result.returncode == 0, result.output[-3000:]
    figures = json.loads(out.read_text())
    assert figures["cache"] == "on" and figures["errors"] == 0 and figures["errors_after_410_and_drop"] == 0
    # Every steady poll came from the cache: no GET and no LIST in the window.
    assert figures["api_requests_per_gettask"] == 0.0, figures["api_requests_by_verb"]
    # The namespace's watch was there to be expired and dropped, and the phase changes still got through.
    assert figures["watches_expired"] >= 1 and figures["watches_dropped"] >= 1
    for key in ("staleness_s", "staleness_after_410_s", "staleness_after_drop_s"):
        assert 0 < figures[key]["max"] < 30, (key, figures[key])


def test_cache_on_needs_the_setting(tmp_path):
    result = run(tmp_path, "--cache", "on", "--cache-setting", "no_such_setting")
    assert result.returncode != 0
    assert "BackendConfig has no setting 'no_such_setting'" in result.output


def test_small_run_with_a_record_beside_every_job_answers_with_its_line(tmp_path):
    out = tmp_path / "figures.json"
    result = run(tmp_path, "--cache", "on", "--progress", "on", "--watch-faults", "off", "--json", str(out))
    assert result.returncode == 0, result.output[-3000:]
    figures = json.loads(out.read_text())
    assert figures["progress"] == "on" and figures["errors"] == 0
    # Every answer of the window carried the record's line, and still no API request: the cache and the record held.
    assert figures["answers_with_progress"] == 1.0 and figures["goals"]["answers_with_progress"].startswith("met")
    assert figures["api_requests_per_gettask"] == 0.0, figures["api_requests_by_verb"]
    # --watch-faults off: the window and one staleness, no broken watch and no goal judged on one
    assert figures["staleness_s"]["max"] > 0 and "watches_expired" not in figures
    assert not any(key.startswith("staleness_after") for key in figures["goals"]), figures["goals"]
    reads = figures["progress_reads"]
    assert reads["found"] >= 20 + 64 and reads["missing"] == reads["malformed"] == reads["failed"] == 0, reads


def test_small_run_tracks_jobsets_with_one_get_per_poll_without_cache(tmp_path):
    """`--kind jobset`: every steady poll of a Running JobSet is one GET of the JobSet, nothing else."""
    out = tmp_path / "figures.json"
    result = run(tmp_path, "--kind", "jobset", "--json", str(out))
    assert result.returncode == 0, result.output[-3000:]
    figures = json.loads(out.read_text())
    assert figures["kind"] == "jobset" and figures["errors"] == 0 and figures["cache"] == "off"
    assert set(figures["api_requests_by_verb"]) == {"get jobsets"}
    assert figures["api_requests_per_gettask"] == 1.0 and figures["big_job_gettask_s"]["workers"] == 5


@pytest.mark.parametrize("kind", ["trainjob", "jobset"])
def test_small_run_with_a_log_link_costs_no_request_per_steady_poll(tmp_path, kind):
    """`--log-links on`: one log link configured and every job's pods on the API; a steady poll of a TrainJob or a
    JobSet is answered from memory (its pods listed once, for their names), as without the link."""
    out = tmp_path / "figures.json"
    result = run(tmp_path, "--kind", kind, "--cache", "on", "--log-links", "on", "--watch-faults", "off",
                 "--json", str(out))  # fmt: skip
    assert result.returncode == 0, result.output[-3000:]
    figures = json.loads(out.read_text())
    assert figures["kind"] == kind and figures["log_links"] == "on" and figures["errors"] == 0
    assert figures["api_requests_per_gettask"] <= 0.05, figures["api_requests_by_verb"]
    assert figures["pod_lists_per_gettask"] <= 0.05, figures["api_requests_by_verb"]
    assert figures["progress_reads"]["pod_lists_for_links"] >= 20  # each job's pods, listed once
