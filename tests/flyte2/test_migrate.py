"""flyte-migrate with flyte2_pytorch.migrate registered: flytekit tasks using our configs (Master/Worker included,
``@pytorch_task`` too) or kfpytorch's become Flyte 2 tasks of this package that write the same message.

flyte-migrate patches flytekit when imported, so every check runs in a fresh interpreter
(``tests/flyte2/migrated_tasks.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sdk.guarded_run import run_guarded

# Never imported here: importing flyte_migrate patches flytekit for the whole test session.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("flyte_migrate") is None, reason="flyte-migrate not installed")

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture(scope="module")
def migrated() -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.flyte2.migrated_tasks"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_task_becomes_a_flyte2_pytorch_task(migrated: dict) -> None:
    classes = {name: migrated[name]["class"] for name in ("total", "flat", "elastic", "kf", "kf_elastic")}
    assert classes == {
        "total": "PyTorchTask",
        "flat": "PyTorchTask",
        "elastic": "ElasticTask",
        "kf": "PyTorchTask",
        "kf_elastic": "ElasticTask",
    }
    assert {migrated[name]["type"] for name in classes} == {"pytorch"}


@pytest.mark.parametrize("name", ["total", "elastic"])
def test_our_configs_write_what_the_flytekit_front_end_writes(migrated: dict, name: str) -> None:
    task = migrated[name]
    assert task["custom"] == task["sdk_custom"]
    assert task["config"] == task["sdk_config"]
    if name == "total":
        assert task["config"]["pytorch.queue"] == "team-a"  # the Kueue queue is kept
        assert task["config"]["pytorch.worker.restart_policy"] == "ExitCode"


def test_the_flat_decorator_is_translated(migrated: dict) -> None:
    custom = migrated["flat"]["custom"]
    assert custom["workerReplicas"]["replicas"] == 3
    assert custom["masterReplicas"]["resources"]["requests"] == [{"name": "MEMORY", "value": "4Gi"}]


def test_kfpytorch_configs_follow_the_migration_table(migrated: dict) -> None:
    kf = migrated["kf"]
    assert kf["custom"]["workerReplicas"] == {"replicas": 2, "restartPolicy": "RESTART_POLICY_ON_FAILURE"}
    assert kf["custom"]["runPolicy"] == {"backoffLimit": 1}  # CLEANPOD_POLICY_NONE is proto's zero
    assert kf["config"]["pytorch.clean_pod_policy"] == "None"
    assert kf["config"]["pytorch.shm_size"] == "0"  # increase_shared_mem=False
    elastic = migrated["kf_elastic"]
    assert elastic["custom"]["elasticConfig"] == {
        "rdzvBackend": "c10d",
        "minReplicas": 2,
        "maxReplicas": 2,
        "nprocPerNode": 4,
    }
    assert elastic["options"]["rdzv_join_timeout"] == "1200"
    assert elastic["options"]["start_method"] == "spawn"  # kfpytorch's value is kept


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_migrated_task_runs_three_local_ranks(tmp_path: Path) -> None:
    result = run_guarded(
        [sys.executable, "-m", "tests.flyte2.migrated_tasks", "run"],
        max_procs=12,
        timeout_s=180,
        cwd=str(ROOT),
        env=_env(),
    )
    assert result.killed_for == "" and result.returncode == 0, result.output[-4000:]
    assert json.loads(result.output.strip().splitlines()[-1])["run"] == 10 + 11 + 12
