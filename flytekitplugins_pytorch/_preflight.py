"""Preflight: before the task's code runs, check that this rank can work with its peers (``preflight=True``).

In every rank, before the task's module is even unpickled (so before data loading and model set-up):

1. the master's address resolves (a DNS race on a just-created Service is a common first failure of a pod);
2. ``/dev/shm`` is at least the size the task asked for (``shm_size``; on a cluster only: locally the machine's
   ``/dev/shm`` is not the pod's);
3. every rank joins a gloo group of its own (on the group's store, under a key prefix of its own, so the task's
   ``init_process_group`` later meets none of its keys) and runs one all-reduce of one number, which must come back
   as the world size; a rank that has CUDA also runs one operation on its device.

A failure raises :class:`PreflightError`, naming the node, pod and rank and what failed. It is an infrastructure
failure, never the user's: the task classes hand it to Flyte outside the user's scope, so its error document is a
retryable ``SYSTEM`` error and Flyte's retries apply (a fresh attempt gets fresh pods). A peer that never joins
(a blocked port, a pod that cannot reach the master) fails every waiting rank at the collective timeout with the
ranks that did not join.

torch is imported inside functions only.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Optional

from pytorch_contract.quantity import parse_quantity

#: How long the one all-reduce may take once every rank joined (it moves 4 bytes).
OP_TIMEOUT_S = 30.0
#: Where the preflight's keys live in the group's store.
KEY_PREFIX = "flyte-pytorch/preflight/"

#: The store a rank 0 without an agent hosts for the preflight (multi-tenant: the task's ``init_process_group``
#: on the same port then reuses it rather than failing to bind the port).
_kept: list[Any] = []


class PreflightError(Exception):
    """A rank's preflight failed: an infrastructure failure (retryable), never the task's own error.

    Args:
        message: what failed, on which node, pod and rank.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)


def _where(rank: int) -> str:
    node = os.environ.get("GROUP_RANK", "?")
    pod = os.environ.get("_F_WN") or os.environ.get("HOSTNAME") or socket.gethostname()
    return f"node {node} (pod {pod}), rank {rank}"


def shm_problem(requested: Optional[str], path: str = "/dev/shm") -> Optional[str]:
    """Why ``path`` is too small for ``requested``, or ``None`` when it is big enough (or nothing was asked).

    Args:
        requested: the task's ``shm_size`` (a quantity such as ``"2Gi"``), or ``None``.
        path: the shared-memory mount.

    Returns:
        Optional[str]: the problem, in words.
    """
    if not requested:
        return None
    want = parse_quantity(requested)
    if want <= 0:
        return None
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        return f"{path} is not there ({exc}); shm_size={requested!r} asked for it"
    have = stat.f_blocks * stat.f_frsize
    if have < want:
        return f"{path} holds {have / 2**20:.0f} MiB, less than shm_size={requested!r}"
    return None


def run_preflight(*, shm_size: Optional[str], join_timeout_s: float) -> None:
    """Run the checks of the module docstring in this rank.

    Args:
        shm_size: the task's ``shm_size`` to check ``/dev/shm`` against (``None`` locally or when unset).
        join_timeout_s: how long to wait for every rank to join (the collective timeout).

    Raises:
        PreflightError: a check failed.
    """
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    addr = os.environ.get("MASTER_ADDR", "")
    port = int(os.environ.get("MASTER_PORT", "0") or 0)
    try:
        socket.getaddrinfo(addr, port)
    except OSError as exc:
        where = _where(rank)
        raise PreflightError(
            f"preflight failed on {where}: cannot resolve the master address {addr!r}: {exc}"
        ) from None
    problem = shm_problem(shm_size)
    if problem is not None:
        raise PreflightError(f"preflight failed on {_where(rank)}: {problem}")
    if world > 1:
        timeout = datetime.timedelta(seconds=join_timeout_s)
        attempt = f"{os.environ.get('FLYTE_ATTEMPT_NUMBER', '0')}.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        try:
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
                base = dist.TCPStore(addr, port, world_size=world, is_master=False, timeout=timeout)
            else:
                base = dist.TCPStore(
                    addr, port, world_size=world, is_master=rank == 0, timeout=timeout, multi_tenant=True
                )
                _kept.append(base)
            store = dist.PrefixStore(f"{KEY_PREFIX}{attempt}/", base)
            group = dist.ProcessGroupGloo(store, rank, world, timeout)
        except Exception as exc:  # noqa: BLE001 - any failure to join is the infrastructure's
            raise PreflightError(
                f"preflight failed on {_where(rank)}: could not join the other {world - 1} ranks at "
                f"{addr}:{port} within {join_timeout_s:.0f}s: {type(exc).__name__}: {exc}"
            ) from None
        tensor = torch.ones(1)
        try:
            group.allreduce([tensor]).wait(  # type: ignore[attr-defined]
                datetime.timedelta(seconds=OP_TIMEOUT_S)
            )
        except Exception as exc:  # noqa: BLE001
            raise PreflightError(
                f"preflight failed on {_where(rank)}: the all-reduce with the other ranks failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if int(tensor.item()) != world:
            raise PreflightError(
                f"preflight failed on {_where(rank)}: the all-reduce of 1 per rank gave {tensor.item()}, not {world}"
            )
    if torch.cuda.is_available():
        try:
            device = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
            (torch.ones(1, device=f"cuda:{device}") * 2).cpu()
        except Exception as exc:  # noqa: BLE001
            raise PreflightError(f"preflight failed on {_where(rank)}: its GPU does not work: {exc}") from None
