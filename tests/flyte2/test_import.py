"""The Flyte 2 front-end defines and serializes tasks without flytekit (nor torch, nor Flyte 1's flyteidl).

A fresh interpreter installs a meta-path finder that makes those imports fail and records who tried, then defines
a Flyte 2 environment with each config and serializes its task with flyte's serializer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_core_import import BLOCKER

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("flytekit", "flytekitplugins", "flytekitplugins_pytorch", "flyteidl", "torch", "backend_plugin")

USER_MODULE = """
import flyte
from flyte2_pytorch import Elastic, Master, PyTorch, Worker

train_env = flyte.TaskEnvironment(
    name="train",
    image="ghcr.io/example/train:1.0",
    plugin_config=PyTorch(master=Master(requests=flyte.Resources(cpu=1)), worker=Worker(replicas=2), shm_size="1Gi"),
)
elastic_env = flyte.TaskEnvironment(name="elastic", image="ghcr.io/example/train:1.0",
                                    plugin_config=Elastic(nnodes="1:2", nproc_per_node=2))


@train_env.task
def train(lr: float) -> float:
    import torch  # only at run time
    return float(torch.tensor(lr))


@elastic_env.task
def train_elastic(lr: float) -> float:
    import torch
    return float(torch.tensor(lr))
"""

DRIVER_BODY = """
import pathlib

from google.protobuf.json_format import MessageToDict
from flyte._internal.runtime.task_serde import get_proto_task
from flyte.models import SerializationContext
import user_tasks

sctx = SerializationContext(version="v1", project="p", domain="d", root_dir=pathlib.Path.cwd())
out = {}
for t in (user_tasks.train, user_tasks.train_elastic):
    tt = get_proto_task(t, sctx)
    out[t.name] = {"type": tt.type, "version": tt.task_type_version, "custom": MessageToDict(tt.custom)}
print(json.dumps({"tasks": out, **blocked_report(("flyte2_pytorch",))}))
"""


def driver(blocked: tuple[str, ...], body: str) -> str:
    """A script that blocks ``blocked`` (the blocker of tests/test_core_import.py), then runs ``body``."""
    return BLOCKER % (blocked,) + body


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp_path = tmp_path_factory.mktemp("noflytekit")
    (tmp_path / "user_tasks.py").write_text(textwrap.dedent(USER_MODULE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", driver(BLOCKED, DRIVER_BODY)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_define_and_serialize_without_flytekit(blocked: dict) -> None:
    tasks = blocked["tasks"]
    assert {t["type"] for t in tasks.values()} == {"pytorch"}
    assert {t["version"] for t in tasks.values()} == {1}
    train = next(t for n, t in tasks.items() if n.endswith(".train"))
    assert train["custom"]["workerReplicas"]["replicas"] == 2
    assert train["custom"]["masterReplicas"]["resources"]["requests"] == [{"name": "CPU", "value": "1"}]
    elastic = next(t for n, t in tasks.items() if n.endswith(".train_elastic"))
    assert elastic["custom"]["elasticConfig"]["maxReplicas"] == 2


def test_nothing_blocked_was_imported(blocked: dict) -> None:
    assert blocked["loaded"] == []
    assert blocked["our_attempts"] == []


def test_the_blocker_blocks() -> None:
    """The finder does stop an import (else the tests above would pass without it)."""
    code = driver(BLOCKED, "\ntry:\n    import flytekit\nexcept ImportError:\n    print('blocked')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "blocked", proc.stderr[-2000:]


RUN_BLOCKED = tuple(name for name in BLOCKED if name != "torch")  # a local run runs torch, never flytekit

RUN_MODULE = """
import os
import sys

import flyte
from flyte2_pytorch import PyTorch, Worker

FLYTE1 = %r
two = flyte.TaskEnvironment(name="two-ranks", plugin_config=PyTorch(worker=Worker(replicas=1)))


@two.task
def all_reduce(base: int) -> dict:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([base + dist.get_rank()])
    dist.all_reduce(value)
    # a namespace package's .pth file may load an empty `flytekitplugins` (no __file__) at start-up
    held = sorted(m for m, mod in sys.modules.items() if m.split(".")[0] in FLYTE1 and getattr(mod, "__file__", None))
    views: list = [None] * dist.get_world_size()
    dist.all_gather_object(views, {"rank": os.environ["RANK"], "held": held})
    return {"sum": int(value.item()), "views": views}
"""

RUN_DRIVER = """
import flyte
import run_tasks

flyte.init()
out = flyte.run(run_tasks.all_reduce, base=10).outputs()[0]
print(json.dumps({"out": out, **blocked_report(("flyte2_pytorch", "pytorch_core"))}))
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_local_run_never_imports_flytekit(tmp_path: Path) -> None:
    """flyte.run in local mode runs real ranks through the core launcher, with flytekit and Flyte 1's flyteidl
    blocked in the launching process and absent from every rank."""
    from tests.sdk.guarded_run import run_guarded

    (tmp_path / "run_tasks.py").write_text(textwrap.dedent(RUN_MODULE % (RUN_BLOCKED,)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    code = driver(RUN_BLOCKED, RUN_DRIVER)
    result = run_guarded([sys.executable, "-c", code], max_procs=10, timeout_s=180, cwd=str(tmp_path), env=env)
    assert result.killed_for == "", result.output[-4000:]
    assert result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], result.leftover
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["out"] == {"sum": 21, "views": [{"rank": "0", "held": []}, {"rank": "1", "held": []}]}
    assert (report["loaded"], report["our_attempts"]) == ([], [])
