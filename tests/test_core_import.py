"""pytorch_core imports no Flyte SDK and neither front-end, and runs a local launch without them; its tests
(tests/core) import none either.

Each check runs in a fresh interpreter that installs a meta-path finder making the blocked imports fail and
recording who tried (as tests/flyte2/test_import.py does for the Flyte 2 front-end). The launch runs under a
process-count guard and a timeout; its ranks report what they hold themselves, since a rank may be a fresh
interpreter that the finder does not reach.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[1]
SDKS = ("flytekit", "flytekitplugins", "flytekitplugins_pytorch", "flyteidl", "flyteidl2", "flyte", "flyte2_pytorch")
BLOCKED_AT_IMPORT = (*SDKS, "backend_plugin", "torch")
CORE_MODULES = (
    "pytorch_core",
    "pytorch_core.config",
    "pytorch_core.frontend",
    "pytorch_core.serialize",
    "pytorch_core.launcher",
    "pytorch_core._plan",
    "pytorch_core._processes",
    "pytorch_core._control",
    "pytorch_core._forkserver",
    "pytorch_core._preflight",
    "pytorch_core._hang",
    "pytorch_core._failure",
    "pytorch_core._console",
    "pytorch_core._nested",
    "pytorch_core._rank",
)

BLOCKER = """
import importlib.abc, json, sys, traceback

BLOCKED = %r
before = set(sys.modules)  # a namespace package's .pth file may load an empty `flytekitplugins` at start-up
attempts = []

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            attempts.append((name, "".join(traceback.format_stack(limit=12))))
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Block())


def blocked_report(markers=("pytorch_core",)):
    # the blocked modules loaded since start-up, and the blocked imports tried from our code (named by markers)
    loaded = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in BLOCKED)
    ours = [name for name, stack in attempts if any(marker in stack for marker in markers)]
    return {"loaded": loaded, "our_attempts": ours}
"""

IMPORT_DRIVER = """
import importlib
for name in %r:
    importlib.import_module(name)
print(json.dumps(blocked_report()))
"""

RANK_MODULE = """
import os
import sys

SDKS = %r


def all_reduce(base: int) -> dict:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([base + dist.get_rank()])
    dist.all_reduce(value)
    # a namespace package's .pth file may load an empty `flytekitplugins` (no __file__) at start-up
    held = sorted(m for m, mod in sys.modules.items() if m.split(".")[0] in SDKS and getattr(mod, "__file__", None))
    views: list = [None] * dist.get_world_size()
    dist.all_gather_object(views, {"rank": os.environ["RANK"], "held": held})
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": int(value.item()), "views": views}
"""

LAUNCH_DRIVER = """
from dataclasses import dataclass
from typing import Any

from pytorch_core.config import PyTorch, Worker
from pytorch_core.frontend import PLAIN
from pytorch_core.launcher import run_distributed
import core_rank_tasks


@dataclass
class Task:
    task_config: Any
    name: str
    _task_function: Any


task = Task(PyTorch(worker=Worker(replicas=1)), "core_all_reduce", core_rank_tasks.all_reduce)
out = run_distributed(task, {"base": 10}, PLAIN)
print(json.dumps({"out": out, **blocked_report()}))
"""


def _env(extra: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(extra), str(ROOT)])
    return env


def test_importing_the_core_imports_no_sdk_front_end_nor_torch(tmp_path: Path) -> None:
    code = BLOCKER % (BLOCKED_AT_IMPORT,) + IMPORT_DRIVER % (CORE_MODULES,)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"loaded": [], "our_attempts": []}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_local_two_rank_launch_through_the_core_imports_no_sdk(tmp_path: Path) -> None:
    (tmp_path / "core_rank_tasks.py").write_text(textwrap.dedent(RANK_MODULE % (SDKS,)))
    code = BLOCKER % (SDKS,) + LAUNCH_DRIVER
    result = run_guarded(
        [sys.executable, "-c", code], max_procs=10, timeout_s=180, cwd=str(tmp_path), env=_env(tmp_path)
    )
    assert result.killed_for == "", result.output[-4000:]
    assert result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], result.leftover
    report = json.loads(result.output.strip().splitlines()[-1])
    out = report["out"]
    assert (out["rank"], out["world"], out["sum"]) == (0, 2, 10 + 11)
    assert out["views"] == [{"rank": "0", "held": []}, {"rank": "1", "held": []}]
    assert (report["loaded"], report["our_attempts"]) == ([], [])


def test_the_core_tests_import_no_sdk_front_end(tmp_path: Path) -> None:
    """tests/core tests the core as a launch that no SDK started: none of its modules may need one to load."""
    modules = sorted(f"tests.core.{path.stem}" for path in (ROOT / "tests" / "core").glob("*.py"))
    assert "tests.core.conftest" in modules and len(modules) > 2
    driver = IMPORT_DRIVER.replace("blocked_report()", "blocked_report(('pytorch_core', '/tests/core/'))")
    code = BLOCKER % ((*SDKS, "backend_plugin"),) + driver % (modules,)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"loaded": [], "our_attempts": []}


def test_the_blocker_blocks(tmp_path: Path) -> None:
    """The finder does stop an import (else the tests above would pass without it)."""
    code = BLOCKER % (BLOCKED_AT_IMPORT,) + "\ntry:\n    import flyte\nexcept ImportError:\n    print('blocked')\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.stdout.strip() == "blocked", proc.stderr[-2000:]
