"""Defining, serializing and registering tasks never imports torch (the `pyflyte register` image needs no torch).

Each check runs in a fresh interpreter: a meta-path finder makes every ``import torch`` fail (and records who tried),
then a user module with a PyTorch task and an Elastic task is imported and serialized with flytekit's real
serializer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = """
import datetime
from flytekit import task
from flytekitplugins_pytorch import Elastic, pytorch_task


@pytorch_task(workers_count=2, per_replica_memory_request="4Gi", per_replica_gpu_limit="1", shm_size="1Gi",
              collective_timeout=datetime.timedelta(minutes=5))
def train(lr: float) -> float:
    import torch  # only at run time
    return float(torch.tensor(lr))


@task(task_config=Elastic(nnodes="1:2", nproc_per_node=2))
def train_elastic(lr: float) -> float:
    import torch
    return float(torch.tensor(lr))
"""

DRIVER = """
import importlib.abc, json, sys, traceback

attempts = []

class BlockTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            attempts.append("".join(traceback.format_stack(limit=8)))
            raise ImportError(f"torch is blocked in this test ({name})")
        return None

sys.meta_path.insert(0, BlockTorch())

from collections import OrderedDict
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable
import user_tasks

settings = SerializationSettings(image_config=ImageConfig(default_image=Image(name="d", fqn="img", tag="1")))
out = {}
for t in (user_tasks.train, user_tasks.train_elastic):
    entity = get_serializable(OrderedDict(), settings, t)
    out[t.name] = {"type": entity.template.type, "custom": entity.template.custom, "config": entity.template.config}
ours = [a for a in attempts if "flytekitplugins_pytorch" in a]
print(json.dumps({"tasks": out, "torch_loaded": "torch" in sys.modules, "our_torch_imports": ours}))
"""


def run_blocked(tmp_path: Path) -> dict:
    (tmp_path / "user_tasks.py").write_text(textwrap.dedent(USER_MODULE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_blocked(tmp_path_factory.mktemp("notorch"))


def test_define_and_serialize_without_torch(blocked: dict) -> None:
    tasks = blocked["tasks"]
    assert set(tasks) == {"user_tasks.train", "user_tasks.train_elastic"}
    assert {t["type"] for t in tasks.values()} == {"pytorch"}
    assert tasks["user_tasks.train"]["custom"]["workerReplicas"]["replicas"] == 2
    assert tasks["user_tasks.train_elastic"]["custom"]["elasticConfig"]["maxReplicas"] == 2
    assert tasks["user_tasks.train"]["config"]["pytorch.shm_size"] == "1Gi"


def test_torch_never_imported(blocked: dict) -> None:
    assert blocked["torch_loaded"] is False
    assert blocked["our_torch_imports"] == []


RUN_DRIVER = """
import importlib.abc, sys

class BlockTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, BlockTorch())
import user_tasks
user_tasks.train(lr=0.1)
"""


@pytest.mark.timeout(180)
def test_local_run_without_torch_names_the_install_command(tmp_path: Path) -> None:
    from pytorch_core.launcher import torch_requirement

    (tmp_path / "user_tasks.py").write_text(textwrap.dedent(USER_MODULE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_DRIVER], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    # flytekit shows the error under its own traceback, wrapped to the terminal's width
    last = " ".join(proc.stderr.rsplit("TorchMissingError:", 1)[-1].split())
    assert "torch is not installed" in last, proc.stderr[-3000:]
    assert f"pip install '{torch_requirement()}'" in last
    assert "pip install -c constraints.txt '.[torch]'" in last
    assert torch_requirement() == "torch==2.13.0"  # this venv installs the package with its metadata
    assert "No module named 'torch'" not in proc.stderr.replace("user_tasks", "")  # no bare import error first
