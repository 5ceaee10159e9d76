"""A JobSet pod's launch: the rank its role's offset and its completion index give (``_plan.indexed_pod_env``) is the
task's ``RANK`` while it runs, as the training operator's ``RANK`` is on a PyTorchJob replica, and the pod process's
environment is what it was afterwards."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from pytorch_core import launcher
from pytorch_core.config import PyTorch
from pytorch_core.frontend import PlainFrontEnd

SEEN = ("RANK", "PET_NODE_RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK")


class PodFrontEnd(PlainFrontEnd):
    def is_local(self) -> bool:
        return False


def _pod(monkeypatch: pytest.MonkeyPatch, offset: str, index: str, nodes: int) -> None:
    env = {
        "FLYTE_PYTORCH_NODE_RANK_OFFSET": offset,
        "JOB_COMPLETION_INDEX": index,
        "WORLD_SIZE": str(nodes),
        "PET_NNODES": str(nodes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "FLYTE_PYTORCH_PROGRESS_LINE": "0",
    }
    for name in ("RANK", "PET_NODE_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _task(seen: list[dict[str, Any]]) -> Any:
    def record() -> int:
        seen.append({name: os.environ.get(name) for name in SEEN})
        return 7

    return SimpleNamespace(task_config=PyTorch(preflight=False), _task_function=record, name="t")


def test_the_master_pod_runs_the_task_as_rank_0(monkeypatch: pytest.MonkeyPatch) -> None:
    _pod(monkeypatch, "0", "0", 1)
    seen: list[dict[str, Any]] = []
    assert launcher.run_distributed(_task(seen), {}, PodFrontEnd()) == 7
    assert seen == [{"RANK": "0", "PET_NODE_RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "GROUP_RANK": "0"}]
    assert "RANK" not in os.environ and "PET_NODE_RANK" not in os.environ  # set for the launch only


def test_a_worker_pod_runs_the_task_as_its_rank_and_withholds_the_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    _pod(monkeypatch, "1", "1", 3)  # the second worker of a master and two workers
    seen: list[dict[str, Any]] = []
    with pytest.raises(BaseException, match="rank 2 of a PyTorchJob: only rank 0 writes the task outputs"):
        launcher.run_distributed(_task(seen), {}, PodFrontEnd())
    assert seen == [{"RANK": "2", "PET_NODE_RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "GROUP_RANK": "2"}]
    assert "RANK" not in os.environ


def test_locally_the_variables_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local run never reads a pod's variables, even when they happen to be set."""
    _pod(monkeypatch, "1", "1", 3)
    assert launcher._pod_rank_env(PlainFrontEnd()) == {}
    assert launcher._pod_rank_env(PodFrontEnd()) == {"RANK": "2", "PET_NODE_RANK": "2"}
