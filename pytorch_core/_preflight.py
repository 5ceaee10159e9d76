"""Preflight: before the task's code runs, check that this rank can work with its peers (``preflight=True``).

In every rank, before the task's module is even unpickled (so before data loading and model set-up):

1. the master's address resolves (a DNS race on a just-created Service is a common first failure of a pod);
2. ``/dev/shm`` is at least the size the task asked for (``shm_size``; on a cluster only: locally the machine's
   ``/dev/shm`` is not the pod's);
3. in pods (``local=False``, the default), every rank joins a gloo group of its own (on the group's store, under a
   key prefix of its own, so the task's ``init_process_group`` later meets none of its keys) and runs one all-reduce
   of one number, which must come back as the world size: that crosses the network between the pods, which the
   pods' own start does not. Locally (``local=True``: every rank on this host, on loopback) every rank only checks in
   on the group's store under the same prefix and waits until all have: a gloo mesh on loopback checks nothing the
   task's own ``init_process_group`` would not, and it cost about a third of a warm local launch;
4. a rank that has CUDA runs one operation on its device (locally and in pods).

The preflight never fails a job that torch would run. It waits for its peers at least as long as the task's own
``init_process_group`` would (torch's longest default timeout, or ``collective_timeout`` when longer); a peer that
joins later still, an address that does not resolve yet, or a ``/dev/shm`` smaller than ``shm_size`` is a warning
on stderr, and the task's code runs and meets the same conditions under its own timeout. What fails is what would
fail the task too: an all-reduce (in pods) that gives a wrong sum or breaks once every rank joined, a GPU that cannot
run one operation. That raises :class:`PreflightError`, naming the node, pod and rank and what failed: an infrastructure
failure, never the user's, which the task classes hand to Flyte outside the user's scope (a retryable ``SYSTEM``
error; a fresh attempt gets fresh pods).

Before the task's code runs, every store and socket the preflight opened is closed again (rank 0 hosts the store
when no agent does): the task may bind ``MASTER_PORT`` itself, e.g. ``TCPStore(..., is_master=rank == 0)``.

torch is imported inside functions only.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import time
from typing import Any, Optional

from pytorch_contract.quantity import parse_quantity

#: How long the one all-reduce may take once every rank joined (it moves 4 bytes).
OP_TIMEOUT_S = 30.0
#: Where the preflight's keys live in the group's store.
KEY_PREFIX = "flyte-pytorch/preflight/"

#: How often an address that does not resolve yet is tried again.
RESOLVE_RETRY_S = 1.0


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


def warn(rank: int, text: str) -> None:
    """One line on stderr: the preflight found something it does not fail the task for.

    Args:
        rank: this rank.
        text: what was found and what happens instead.
    """
    sys.stderr.write(f"preflight warning on {_where(rank)}: {text}\n")
    sys.stderr.flush()


def _resolves(addr: str, port: int, deadline: float) -> Optional[str]:
    """``None`` once ``addr`` resolves (tried until ``deadline``), else the last resolver error."""
    while True:
        try:
            socket.getaddrinfo(addr, port)
            return None
        except OSError as exc:
            if time.monotonic() + RESOLVE_RETRY_S > deadline:
                return str(exc)
            time.sleep(RESOLVE_RETRY_S)


def run_preflight(*, shm_size: Optional[str], join_timeout_s: float, local: bool = False) -> None:
    """Run the checks of the module docstring in this rank.

    Args:
        shm_size: the task's ``shm_size`` to check ``/dev/shm`` against (``None`` locally or when unset).
        join_timeout_s: how long to wait for every rank to join (see ``_rank.preflight_timeout_s``); a join that
            takes longer is a warning.
        local: every rank runs on this host (the local launcher): check in on the store instead of the all-reduce.

    Raises:
        PreflightError: the all-reduce failed once every rank joined, or this rank's GPU cannot run an operation.
    """
    import torch

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    addr = os.environ.get("MASTER_ADDR", "")
    port = int(os.environ.get("MASTER_PORT", "0") or 0)
    deadline = time.monotonic() + join_timeout_s
    problem = shm_problem(shm_size)
    if problem is not None:
        warn(rank, f"{problem}; DataLoader workers that pass large batches may fail with a bus error")
    if world > 1:
        unresolved = _resolves(addr, port, deadline)
        if unresolved is not None:
            warn(rank, f"the master address {addr!r} did not resolve within {join_timeout_s:g}s: {unresolved}")
        else:
            join = _check_in if local else _all_reduce
            join(rank, world, addr, port, max(1.0, deadline - time.monotonic()))
    if torch.cuda.is_available():
        try:
            device = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
            (torch.ones(1, device=f"cuda:{device}") * 2).cpu()
        except Exception as exc:  # noqa: BLE001
            raise PreflightError(f"preflight failed on {_where(rank)}: its GPU does not work: {exc}") from None


def _open_store(rank: int, world: int, addr: str, port: int, timeout: datetime.timedelta) -> tuple[Any, Any, bool]:
    """The group's store, the same under the preflight's prefix, and whether this rank hosts it (rank 0, when no
    agent does)."""
    import torch.distributed as dist

    attempt = f"{os.environ.get('FLYTE_ATTEMPT_NUMBER', '0')}.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True) and rank == 0
    base = dist.TCPStore(addr, port, world_size=world, is_master=hosts, timeout=timeout)
    return base, dist.PrefixStore(f"{KEY_PREFIX}{attempt}/", base), hosts


def _not_joined(rank: int, world: int, addr: str, port: int, join_timeout_s: float, exc: Exception) -> None:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    warn(
        rank,
        f"the other {world - 1} ranks did not all join at {addr}:{port} within {join_timeout_s:g}s "
        f"({type(exc).__name__}: {first}); the task runs, and its init_process_group waits for them under its own "
        "timeout",
    )


HANDOVER_WAIT_S = 2.0
"""How long a rank that does not host the preflight's store waits for its host to close it (it takes milliseconds)."""


def _release(store: Any, hosts: bool, world: int) -> None:
    """Every rank is done with the store before its host closes it (the host waits for the count), and no rank
    leaves before the host closed it: the task's own ``init_process_group`` connects to ``MASTER_PORT`` too, and a
    connection that reached the closing preflight store would fail there ("Failed to recv, got 0 bytes")."""
    store.add("released", 1)
    if hosts:
        _wait_count(store, "released", world, OP_TIMEOUT_S)
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True):  # rank 0 hosts it, and closes it now
        _wait_closed(store, HANDOVER_WAIT_S)


def _wait_closed(store: Any, timeout_s: float) -> None:
    """Wait until the host closed the store: the next operation on this rank's connection then fails at once. torch
    logs that expected failure on stderr from C++; it is kept off this rank's stderr."""
    deadline = time.monotonic() + timeout_s
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        while time.monotonic() < deadline:
            try:
                store.add("released", 0)
            except Exception:  # noqa: BLE001 - the connection closed: the host's store is gone
                return
            time.sleep(0.002)
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _check_in(rank: int, world: int, addr: str, port: int, join_timeout_s: float) -> None:
    """Check in on the group's store and wait until every rank has; close the store afterwards (the local check)."""
    timeout = datetime.timedelta(seconds=join_timeout_s)
    base: Any = None
    store: Any = None
    try:
        try:
            base, store, hosts = _open_store(rank, world, addr, port, timeout)
            if store.add("arrived", 1) == world:
                store.set("all-arrived", "1")  # the last rank to arrive wakes the others: no polling
            store.wait(["all-arrived"], timeout)
        except Exception as exc:  # noqa: BLE001 - not joined in time: the task's own init_process_group decides
            _not_joined(rank, world, addr, port, join_timeout_s, exc)
            return
        _release(store, hosts, world)
    finally:
        # Nothing of the preflight outlives it: the task's code may bind MASTER_PORT itself.
        del store, base


def _all_reduce(rank: int, world: int, addr: str, port: int, join_timeout_s: float) -> None:
    """Join the others on the group's store and all-reduce one number; close every store and socket afterwards.

    Raises:
        PreflightError: the all-reduce failed or gave a wrong sum once every rank joined.
    """
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=join_timeout_s)
    base: Any = None
    store: Any = None
    group: Any = None
    try:
        try:
            base, store, hosts = _open_store(rank, world, addr, port, timeout)
            group = dist.ProcessGroupGloo(store, rank, world, timeout)
        except Exception as exc:  # noqa: BLE001 - not joined in time: the task's own init_process_group decides
            _not_joined(rank, world, addr, port, join_timeout_s, exc)
            return
        tensor = torch.ones(1)
        try:
            group.allreduce([tensor]).wait(datetime.timedelta(seconds=OP_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001
            raise PreflightError(
                f"preflight failed on {_where(rank)}: the all-reduce with the other ranks failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if int(tensor.item()) != world:
            raise PreflightError(
                f"preflight failed on {_where(rank)}: the all-reduce of 1 per rank gave {tensor.item()}, not {world}"
            )
        _release(store, hosts, world)
    finally:
        # Nothing of the preflight outlives it: the task's code may bind MASTER_PORT itself.
        del group, store, base


def _wait_count(store: Any, key: str, target: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while store.add(key, 0) < target and time.monotonic() < deadline:
        time.sleep(0.002)
