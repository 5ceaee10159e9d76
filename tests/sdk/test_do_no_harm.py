"""Safety defaults that equal torch's, checked without starting a rank (the side-by-side runs under torchrun are in
`tests/faults/test_parity.py`)."""

from __future__ import annotations

import datetime
import multiprocessing

import pytest
from flytekit import Resources, task

from flytekitplugins_pytorch import PyTorch, Worker, pytorch_task
from flytekitplugins_pytorch.config import ConfigError
from pytorch_core._failure import activity
from pytorch_core._rank import (
    COLLECTIVE_TIMEOUT_ENV,
    _reset_start_method,
    default_collective_timeout,
    preflight_timeout_s,
    torch_default_timeout,
)


def test_torchs_default_timeout_is_read_from_torch() -> None:
    constants = pytest.importorskip("torch.distributed.constants")
    assert torch_default_timeout("gloo") == constants.default_pg_timeout
    nccl = getattr(constants, "default_pg_nccl_timeout", None) or constants.default_pg_timeout
    assert torch_default_timeout("nccl") == nccl
    assert torch_default_timeout(None) == max(constants.default_pg_timeout, nccl)


def test_no_collective_timeout_leaves_torchs_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COLLECTIVE_TIMEOUT_ENV, raising=False)
    assert default_collective_timeout(None) is None  # nothing is filled in: torch picks per backend
    assert default_collective_timeout(7.0) == datetime.timedelta(seconds=7)
    monkeypatch.setenv(COLLECTIVE_TIMEOUT_ENV, "3")
    assert default_collective_timeout(7.0) == datetime.timedelta(seconds=3)


def test_the_preflight_waits_as_long_as_init_process_group_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COLLECTIVE_TIMEOUT_ENV, raising=False)
    assert preflight_timeout_s(None) == torch_default_timeout(None).total_seconds()
    assert preflight_timeout_s(3.0) == 3.0  # and a join that takes longer is only a warning


def test_a_rank_gets_the_start_method_of_a_fresh_interpreter() -> None:
    import os
    import sys

    from tests.sdk.guarded_run import run_guarded

    fresh = run_guarded(
        [sys.executable, "-c", "import multiprocessing; print(multiprocessing.get_start_method())"],
        max_procs=2,
        timeout_s=60,
        cwd=os.getcwd(),
        env=dict(os.environ),
    ).output.strip()
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        multiprocessing.set_start_method("forkserver", force=True)  # what a rank inherits from the fork server
        _reset_start_method()
        assert multiprocessing.get_start_method() == fresh
    finally:
        multiprocessing.set_start_method(before, force=True)


DDP_BACKWARD = """Thread 0x00007f0000000001 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/autograd/graph.py", line 829 in _engine_run_backward
  File "/venv/lib/python3.11/site-packages/torch/autograd/__init__.py", line 364 in backward
  File "/venv/lib/python3.11/site-packages/torch/_tensor.py", line 647 in backward
  File "/home/me/train.py", line 30 in step
  File "/venv/lib/python3.11/site-packages/pytorch_core/_rank.py", line 300 in rank_entrypoint
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 600 in _wrap
"""

WORK_WAIT = """Thread 0x00007f0000000001 (most recent call first):
  File "/venv/lib/python3.11/site-packages/pytorch_core/_hang.py", line 480 in _wait_for_work
  File "/home/me/train.py", line 31 in step
  File "/venv/lib/python3.11/site-packages/pytorch_core/_rank.py", line 300 in rank_entrypoint
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 600 in _wrap
"""

USER_CODE = """Thread 0x00007f0000000001 (most recent call first):
  File "/home/me/train.py", line 12 in load
  File "/home/me/train.py", line 30 in step
  File "/venv/lib/python3.11/site-packages/pytorch_core/_rank.py", line 300 in rank_entrypoint
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 600 in _wrap
"""


@pytest.mark.parametrize(
    ("dump", "inside", "words"),
    [
        (DDP_BACKWARD, True, "backward (DDP's gradient all-reduce) called at /home/me/train.py:30 in step"),
        (WORK_WAIT, True, "Work.wait called at /home/me/train.py:31 in step"),
        (USER_CODE, False, "at /home/me/train.py:12 in load, outside torch.distributed"),
    ],
    ids=["ddp-backward", "work-wait", "user-code-under-the-elastic-agent"],
)
def test_any_torch_distributed_wait_counts_as_inside(dump: str, inside: bool, words: str) -> None:
    in_dist, doing = activity(dump)
    assert in_dist is inside and words in doing, doing


def test_shm_size_above_the_memory_limit_is_refused_at_decoration() -> None:
    with pytest.raises(ConfigError) as info:
        PyTorch(worker=Worker(replicas=1, limits=Resources(mem="16Gi")), shm_size="32Gi")
    text = str(info.value)
    assert "shm_size='32Gi'" in text and "Worker.limits.mem='16Gi'" in text and "memory-backed" in text, text
    with pytest.raises(ConfigError, match=r"shm_size='32Gi' is above the memory limit .*_memory_limit='16Gi'"):
        pytorch_task(workers_count=1, shm_size="32Gi", per_replica_memory_limit="16Gi")(lambda: None)
    with pytest.raises(ConfigError, match=r"limits.mem='16Gi'"):

        @task(task_config=PyTorch(shm_size="32Gi"), limits=Resources(mem="16Gi"))
        def train() -> None: ...

    PyTorch(worker=Worker(replicas=1, limits=Resources(mem="16Gi")), shm_size="16Gi")  # at the limit: fine
