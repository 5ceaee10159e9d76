"""The ``flytekit.plugins`` entry point: ``import flytekit`` alone registers our task types (after ``pip install``)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution, entry_points

import pytest


def _installed() -> bool:
    try:
        distribution("flytekitplugins-pytorch")
    except PackageNotFoundError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _installed(), reason="flytekitplugins-pytorch is not pip-installed")

PROBE = """
import json, sys
import flytekit
from flytekit.core.task import TaskPlugins
loaded = "flytekitplugins_pytorch" in sys.modules  # before we import anything of ours
from flytekitplugins_pytorch import Elastic, ElasticPyTorchFunctionTask, PyTorch, PyTorchFunctionTask
print(json.dumps({
    "loaded_by_flytekit": loaded,
    "pytorch": TaskPlugins.find_pythontask_plugin(PyTorch) is PyTorchFunctionTask,
    "elastic": TaskPlugins.find_pythontask_plugin(Elastic) is ElasticPyTorchFunctionTask,
    "torch_loaded": "torch" in sys.modules,
}))
"""


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="flytekit.plugins") if ep.name == "pytorch"]
    assert ep.value == "flytekitplugins_pytorch"
    module = ep.load()
    assert module.pytorch_task is not None


def test_import_flytekit_registers_the_task_types() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"loaded_by_flytekit": True, "pytorch": True, "elastic": True, "torch_loaded": False}
