"""The same functions under the plugin and under torch's own launcher (`tests/faults/test_parity.py`).

Each case is a plain function of no arguments that a rank runs: it reads ``RANK`` and ``WORLD_SIZE`` as code written
for torchrun does, calls ``init_process_group`` (or not) and returns a JSON-able value on rank 0. Run as a module:

- ``python -m tests.faults.parity_cases plugin CASE``: the case as a local ``pytorch_task`` (the plugin's launcher);
- ``python -m torch.distributed.run --nproc-per-node N -m tests.faults.parity_cases torchrun CASE``: the same
  function under torchrun;
- ``python -m tests.faults.parity_cases pod CASE`` (with the operator's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``): one pod of a PyTorchJob with one rank per pod, the plugin's in-pod path;
- ``python -m tests.faults.parity_cases plain CASE`` (same variables): what that pod runs without the plugin.

Every process prints one line ``PARITY {json}``: ``{"ok": true, "value": ...}`` when it returned, else the type,
rank, recoverability and first line of what it raised.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Callable
from typing import Any

from flytekitplugins_pytorch import pytorch_task, report_progress

#: Seconds a slow rank is late (well within every timeout below).
SLOW_S = 4.0
#: The scaled timeout a case passes to init_process_group itself where torch's default would take 30 minutes.
USER_TIMEOUT = datetime.timedelta(seconds=20)
#: The opt-in progress_timeout of the progress cases.
PROGRESS_S = 2
#: How long the stalled rank of ``progress_stall`` sleeps in one C call (beyond the progress timeout and the
#: rank's 10 s grace before it exits itself).
STALL_S = 40.0


def mark(event: str) -> None:
    """Print when ``event`` happened (``MARK <event> <time.time()>``), for a test that measures from there."""
    print(f"MARK {event} {time.time()}", flush=True)


def _rank() -> int:
    return int(os.environ["RANK"])


def _effective_timeout_s() -> float:
    import torch
    import torch.distributed as dist

    backend = dist.group.WORLD._get_backend(torch.device("cpu"))  # type: ignore[union-attr]
    return float(backend.options._timeout.total_seconds())


def default_timeout() -> Any:
    """``init_process_group`` without a timeout: the effective timeout, read in the rank."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = _effective_timeout_s()
    dist.barrier()
    return value


def none_timeout() -> Any:
    """``timeout=None``, which torch documents as its default."""
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=None)
    value = _effective_timeout_s()
    dist.barrier()
    return value


def explicit_timeout() -> Any:
    """An explicit timeout wins (the plugin's task also sets a shorter ``collective_timeout``)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=USER_TIMEOUT)
    value = _effective_timeout_s()
    dist.barrier()
    return value


def slow_rank() -> Any:
    """Rank 0 evaluates for a while; the others wait in ``barrier()``."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if _rank() == 0:
        time.sleep(SLOW_S)
    dist.barrier()
    return "done"


def slow_loading() -> Any:
    """Rank 1 loads its data slowly before its first collective (before ``init_process_group`` even)."""
    import torch
    import torch.distributed as dist

    if _rank() == 1:
        time.sleep(SLOW_S)
    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    return tensor.item()


class _SlowDataset:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        time.sleep(3)
        return index


def dataloader_timeout() -> Any:
    """Rank 1 gets torch's own ``RuntimeError: DataLoader timed out``; rank 0 waits in ``all_reduce``."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo", timeout=USER_TIMEOUT)
    if _rank() == 1:
        next(iter(DataLoader(_SlowDataset(), num_workers=1, timeout=1)))
    dist.all_reduce(torch.ones(1))
    return "done"


def user_timeout_error() -> Any:
    """Rank 1 raises a ``TimeoutError`` of its own whose words sound like a lost peer."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=USER_TIMEOUT)
    if _rank() == 1:
        raise TimeoutError("metadata service timed out: socket store connection reset")
    dist.all_reduce(torch.ones(1))
    return "done"


def dataloader_lambda() -> Any:
    """``DataLoader(num_workers=2)`` over a dataset with a lambda transform; the rank's start method and whether a
    fork server interpreter serves it."""
    import multiprocessing
    import multiprocessing.forkserver

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    class Mapped(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self, transform: Callable[[int], float]) -> None:
            self.transform = transform

        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int) -> float:
            return self.transform(index)

    dist.init_process_group("gloo")
    total = sum(float(batch.sum()) for batch in DataLoader(Mapped(lambda i: i * 2.0), batch_size=2, num_workers=2))
    server = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    dist.barrier()
    return {"sum": total, "start_method": multiprocessing.get_start_method(), "forkserver": server is not None}


def _ddp_steps(steps: int, slow: Callable[[int], None]) -> float:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", timeout=USER_TIMEOUT)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.zeros(())
    for step in range(steps):
        slow(step)
        optimizer.zero_grad()
        loss = model(torch.ones(4, 8)).sum()
        loss.backward()  # the others wait here (DDP's all-reduce) while a rank is slow
        optimizer.step()
        report_progress()
    return float(loss.item())


def progress_ddp_reporting() -> Any:
    """DDP; rank 2 is slow in step 1 but reports progress while it works; the others wait in ``backward()`` for
    longer than ``progress_timeout``."""

    def slow(step: int) -> None:
        if _rank() == 2 and step == 1:
            for _ in range(int(SLOW_S / 0.25)):
                time.sleep(0.25)
                report_progress()

    return _ddp_steps(3, slow)


def progress_stall() -> Any:
    """DDP; rank 2 stops reporting progress in step 1 (one long C call); the others wait in ``backward()``."""

    def slow(step: int) -> None:
        if _rank() == 2 and step == 1:
            mark("stalled")
            time.sleep(STALL_S)

    return _ddp_steps(3, slow)


def exit_without_join() -> Any:
    """Rank 2 returns without joining while the others wait in ``init_process_group``."""
    import torch.distributed as dist

    if _rank() == 2:
        mark("left")
        return "left"
    dist.init_process_group("gloo", timeout=USER_TIMEOUT)
    dist.barrier()
    return "done"


def never_init() -> Any:
    """No process group at all."""
    return _rank()


def new_group() -> Any:
    """An extra group of ranks 0 and 1 beside the default one, and ``barrier(device_ids=[0])`` on gloo."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    pair = dist.new_group([0, 1])
    tensor = torch.ones(1)
    if _rank() in (0, 1):
        dist.all_reduce(tensor, group=pair)
    dist.barrier(device_ids=[0])
    return tensor.item()


def late_worker() -> Any:
    """One rank per pod; the worker pod starts late (the test delays it); the task gives its own timeout."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    return tensor.item()


def user_tcpstore() -> Any:
    """The task hosts a ``TCPStore`` of its own on ``MASTER_PORT`` on rank 0."""
    import torch.distributed as dist

    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        int(os.environ["WORLD_SIZE"]),
        is_master=_rank() == 0,
        timeout=USER_TIMEOUT,
    )
    store.set(f"rank-{_rank()}", "here")
    store.wait([f"rank-{r}" for r in range(int(os.environ["WORLD_SIZE"]))])
    return "done"


CASES: dict[str, Callable[[], Any]] = {
    fn.__name__: fn
    for fn in (
        default_timeout,
        none_timeout,
        explicit_timeout,
        slow_rank,
        slow_loading,
        dataloader_timeout,
        user_timeout_error,
        dataloader_lambda,
        progress_ddp_reporting,
        progress_stall,
        exit_without_join,
        never_init,
        new_group,
        late_worker,
        user_tcpstore,
    )
}

#: The plugin settings of each case beyond the defaults (``collective_timeout`` shorter than the case's own
#: timeout where the case shows that the user's wins).
SETTINGS: dict[str, dict[str, Any]] = {
    "explicit_timeout": {"collective_timeout": datetime.timedelta(seconds=5)},
    "progress_ddp_reporting": {"progress_timeout": datetime.timedelta(seconds=PROGRESS_S)},
    "progress_stall": {"progress_timeout": datetime.timedelta(seconds=PROGRESS_S)},
    "late_worker": {"collective_timeout": datetime.timedelta(seconds=3)},
}


#: Local ranks of each case under the plugin and under torchrun.
WORLD = 3

# The cases as tasks: three local ranks, or two pods of one rank each.


@pytorch_task(workers_count=2, **SETTINGS.get("default_timeout", {}))
def task_default_timeout() -> str:
    return json.dumps(default_timeout())


@pytorch_task(workers_count=2, **SETTINGS.get("none_timeout", {}))
def task_none_timeout() -> str:
    return json.dumps(none_timeout())


@pytorch_task(workers_count=2, **SETTINGS.get("explicit_timeout", {}))
def task_explicit_timeout() -> str:
    return json.dumps(explicit_timeout())


@pytorch_task(workers_count=2, **SETTINGS.get("slow_rank", {}))
def task_slow_rank() -> str:
    return json.dumps(slow_rank())


@pytorch_task(workers_count=2, **SETTINGS.get("slow_loading", {}))
def task_slow_loading() -> str:
    return json.dumps(slow_loading())


@pytorch_task(workers_count=2, **SETTINGS.get("dataloader_timeout", {}))
def task_dataloader_timeout() -> str:
    return json.dumps(dataloader_timeout())


@pytorch_task(workers_count=2, **SETTINGS.get("user_timeout_error", {}))
def task_user_timeout_error() -> str:
    return json.dumps(user_timeout_error())


@pytorch_task(workers_count=2, **SETTINGS.get("dataloader_lambda", {}))
def task_dataloader_lambda() -> str:
    return json.dumps(dataloader_lambda())


@pytorch_task(workers_count=2, **SETTINGS.get("progress_ddp_reporting", {}))
def task_progress_ddp_reporting() -> str:
    return json.dumps(progress_ddp_reporting())


@pytorch_task(workers_count=2, **SETTINGS.get("progress_stall", {}))
def task_progress_stall() -> str:
    return json.dumps(progress_stall())


@pytorch_task(workers_count=2, **SETTINGS.get("exit_without_join", {}))
def task_exit_without_join() -> str:
    return json.dumps(exit_without_join())


@pytorch_task(workers_count=2, **SETTINGS.get("never_init", {}))
def task_never_init() -> str:
    return json.dumps(never_init())


@pytorch_task(workers_count=2, **SETTINGS.get("new_group", {}))
def task_new_group() -> str:
    return json.dumps(new_group())


@pytorch_task(workers_count=2, **SETTINGS.get("late_worker", {}))
def task_late_worker() -> str:
    return json.dumps(late_worker())


@pytorch_task(workers_count=2, **SETTINGS.get("user_tcpstore", {}))
def task_user_tcpstore() -> str:
    return json.dumps(user_tcpstore())


@pytorch_task(workers_count=1, **SETTINGS.get("dataloader_timeout", {}))
def pod_dataloader_timeout() -> str:
    return json.dumps(dataloader_timeout())


@pytorch_task(workers_count=1, **SETTINGS.get("user_timeout_error", {}))
def pod_user_timeout_error() -> str:
    return json.dumps(user_timeout_error())


@pytorch_task(workers_count=1, **SETTINGS.get("late_worker", {}))
def pod_late_worker() -> str:
    return json.dumps(late_worker())


@pytorch_task(workers_count=1, **SETTINGS.get("user_tcpstore", {}))
def pod_user_tcpstore() -> str:
    return json.dumps(user_tcpstore())
