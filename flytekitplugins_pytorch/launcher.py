"""What happens when a ``pytorch`` task executes: local multi-process launch and cluster-side rank handling.

``run_distributed(task, kwargs)`` is called by ``PyTorchFunctionTask.execute`` and
``ElasticPyTorchFunctionTask.execute``.
It first decides *where* it runs (:func:`plan_launch`, a pure function of the config and the environment):

- **local** (``pyflyte run``, calling a workflow in Python, any process without the Kubeflow operator's variables):
  the declared world size runs as real processes on this machine, started by torch's elastic agent with a
  standalone c10d rendezvous on 127.0.0.1 and a free port. ``PyTorch``: ``(1 + worker.replicas) * nproc_per_node``
  ranks; ``Elastic``: ``min_nodes * nproc_per_node`` ranks (a local run never waits for nodes that cannot come).
  Every rank sees ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (set by torch) and the
  ``PET_*`` variables the operator sets on a cluster. ``LOCAL_RANK`` is the index on this machine (so
  ``cuda:LOCAL_RANK`` picks distinct GPUs); ``PET_NODE_RANK`` is the declared node, ``RANK // nproc_per_node``.
- **in-process** (``FLYTE_PYTORCH_INPROCESS=1``): the function runs in the task process with world size 1, for
  debugging with breakpoints.
- **cluster replica, non-elastic** (a PyTorchJob pod: ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set by the operator):
  with ``nproc_per_node == 1`` the function runs in the pod process; with more, ``nproc_per_node`` processes are
  started with a static rendezvous at ``PET_MASTER_ADDR:PET_MASTER_PORT`` (global rank = node rank * nproc + local).
- **cluster replica, elastic** (``PET_RDZV_ENDPOINT`` / ``PET_NNODES`` set): elastic agent with a c10d rendezvous at
  ``PET_RDZV_ENDPOINT``, ``min:max`` nodes from ``PET_NNODES``.

Only global rank 0 returns the function's value (and its Decks); on a cluster, every other rank and every pod that
does not hold rank 0 ends with flytekit's ``IgnoreOutputs``, so exactly one ``outputs.pb`` is written.

A failed rank fails the task with the **earliest** failing rank's exception, rebuilt with its original type (plus
:class:`RankFailedError`) and a message ``rank 2 (of 3) failed: ValueError: boom`` followed by that rank's traceback.
Errors that are consequences of a lost peer (gloo/NCCL connection errors, collective timeouts) only win when no rank
failed for its own reason. ``FlyteRecoverableException`` stays recoverable so Flyte retries the task.

Environment variables read here:

- ``FLYTE_PYTORCH_INPROCESS=1``: in-process mode (above).
- ``FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE=N``: cap the local world size (nodes are reduced first, then processes per
  node); one log line says so when the declared size is larger.
- ``FLYTE_PYTORCH_COLLECTIVE_TIMEOUT=SECONDS``: default timeout of ``init_process_group`` (see
  :func:`flytekitplugins_pytorch._rank.default_collective_timeout`: 300 s gloo, 600 s NCCL otherwise).
- ``FLYTE_PYTORCH_LOCAL_THREADS=N``: intra-op threads per local rank instead of ``max(1, cpus // local ranks)``.

``nproc_per_node`` ``"auto"`` and ``"gpu"`` mean the number of visible CUDA devices (1 without CUDA). ``"cpu"`` means
1 locally (torchrun's ``os.cpu_count()`` processes, each with its own threads, would oversubscribe the machine that
also runs the other ranks) and ``os.cpu_count()`` in a pod, where the pod's CPU request bounds it.

torch is imported lazily; this module imports without torch.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import cloudpickle

from flytekitplugins_pytorch import _rank

logger = logging.getLogger(__name__)

INPROCESS_ENV = "FLYTE_PYTORCH_INPROCESS"
MAX_LOCAL_WORLD_SIZE_ENV = "FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE"
LOCAL_THREADS_ENV = "FLYTE_PYTORCH_LOCAL_THREADS"
COLLECTIVE_TIMEOUT_ENV = _rank.COLLECTIVE_TIMEOUT_ENV

#: How often the local agent checks its ranks. Small: a dead rank is noticed within half a second.
LOCAL_MONITOR_INTERVAL_S = 0.5
#: Seconds between SIGTERM and SIGKILL when the local agent stops its ranks (torch's default, 30 s, is for pods).
LOCAL_SHUTDOWN_TIMEOUT_S = 5
#: Signals during which a launch stops its ranks and then lets the previous handler act.
_HANDLED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


class ExecutionKind(Enum):
    """Where ``run_distributed`` runs the task (see the module docstring)."""

    LOCAL = "local"
    IN_PROCESS = "in-process"
    CLUSTER_DIRECT = "cluster-direct"
    CLUSTER_FANOUT = "cluster-fanout"
    CLUSTER_ELASTIC = "cluster-elastic"


@dataclass(frozen=True)
class LaunchPlan:
    """How one execution of a task is launched; built by :func:`plan_launch`.

    Attributes:
        kind: where it runs.
        min_nodes: nodes the agent waits for (locally always 1: one agent runs every rank).
        max_nodes: nodes the rendezvous admits.
        nproc_per_node: processes this agent starts.
        world_size: global ranks (at least) in the job.
        node_rank: this node's rank for a static rendezvous (``CLUSTER_FANOUT``), else 0.
        rdzv_backend: ``"c10d"`` or ``"static"``.
        rdzv_endpoint: ``host:port`` of the rendezvous (``127.0.0.1:0`` locally: a free port).
        max_restarts: times the agent restarts the rank group after a failure.
        monitor_interval: seconds between the agent's health checks of its ranks.
        threads: intra-op threads per rank, or ``None`` to leave torch's default.
        rank_env: ``PET_*`` variables every rank sees.
        declared_world_size: the world size the config asks for (locally it may have been capped).
        virtual_nodes: several declared nodes run in this one agent (local runs): ``PET_NODE_RANK`` = rank // nproc.
        rdzv_configs: extra rendezvous settings (elastic timeouts).
    """

    kind: ExecutionKind
    min_nodes: int = 1
    max_nodes: int = 1
    nproc_per_node: int = 1
    world_size: int = 1
    node_rank: int = 0
    rdzv_backend: str = "c10d"
    rdzv_endpoint: str = "127.0.0.1:0"
    max_restarts: int = 0
    monitor_interval: float = LOCAL_MONITOR_INTERVAL_S
    threads: Optional[int] = None
    rank_env: dict[str, str] = field(default_factory=dict)
    declared_world_size: int = 1
    virtual_nodes: bool = False
    rdzv_configs: dict[str, Any] = field(default_factory=dict)


class RankFailure:
    """Mixin carried by every exception ``run_distributed`` raises for a failed rank.

    Attributes:
        rank: global rank whose failure is the root cause.
        world_size: global ranks in the run.
    """

    rank: int = -1
    world_size: int = 0

    def __str__(self) -> str:
        args = getattr(self, "args", ())
        if len(args) == 1 and isinstance(args[0], str):
            return args[0]
        return super().__str__()


class RankFailedError(RankFailure, RuntimeError):
    """A rank of a distributed task failed; the message names the rank and carries its traceback.

    When the failing rank's exception can be rebuilt in the task process, the task raises an exception of the
    original type that also derives from :class:`RankFailure`; this class is the fallback (and is used for ranks
    killed by a signal).
    """


def _is_truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _is_elastic(config: Any) -> bool:
    return hasattr(config, "nnodes")


def _node_range(config: Any) -> tuple[int, int]:
    """(min, max) nodes of an ``Elastic`` config (from its properties, else parsed from ``nnodes``)."""
    if hasattr(config, "min_nodes") and hasattr(config, "max_nodes"):
        return int(config.min_nodes), int(config.max_nodes)
    nnodes = config.nnodes
    if isinstance(nnodes, str) and ":" in nnodes:
        low, high = nnodes.split(":", 1)
        return int(low), int(high)
    return int(nnodes), int(nnodes)


def resolve_nproc(value: Any, *, local: bool, cuda_devices: int, cpu_count: int) -> int:
    """Turn ``nproc_per_node`` into a process count for this machine.

    Args:
        value: a positive int, ``"auto"``, ``"gpu"`` or ``"cpu"`` (a numeric string is accepted too).
        local: the count is for a local run (``"cpu"`` then means 1, see the module docstring).
        cuda_devices: visible CUDA devices.
        cpu_count: CPUs available to this process.

    Returns:
        int: processes per node, >= 1.

    Raises:
        ValueError: ``value`` is none of the above.
    """
    if isinstance(value, bool):
        raise ValueError(f"nproc_per_node={value!r} is not valid; use a positive int, 'auto', 'cpu' or 'gpu'")
    if isinstance(value, int) and value >= 1:
        return value
    text = str(value).strip().lower()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    if text in ("auto", "gpu"):
        return cuda_devices if cuda_devices > 0 else 1
    if text == "cpu":
        return 1 if local else max(1, cpu_count)
    raise ValueError(f"nproc_per_node={value!r} is not valid; use a positive int, 'auto', 'cpu' or 'gpu'")


def cluster_role(environ: Mapping[str, str]) -> Optional[ExecutionKind]:
    """Which kind of PyTorchJob replica the environment describes, if any.

    Args:
        environ: the process environment.

    Returns:
        Optional[ExecutionKind]: ``CLUSTER_ELASTIC`` when ``PET_RDZV_ENDPOINT`` is set, ``CLUSTER_DIRECT`` when
        ``RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR`` are set (fan-out is decided from ``nproc_per_node`` later),
        else ``None``.
    """
    if environ.get("PET_RDZV_ENDPOINT"):
        return ExecutionKind.CLUSTER_ELASTIC
    if all(environ.get(name) for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        return ExecutionKind.CLUSTER_DIRECT
    return None


def _cap_world(nodes: int, nproc: int, cap: Optional[int]) -> tuple[int, int]:
    """Reduce (nodes, nproc) so nodes * nproc <= cap: nodes first, then processes per node."""
    if cap is None or nodes * nproc <= cap:
        return nodes, nproc
    if nproc <= cap:
        return max(1, cap // nproc), nproc
    return 1, cap


def _threads_per_rank(local_ranks: int, cpu_count: int, environ: Mapping[str, str]) -> int:
    raw = environ.get(LOCAL_THREADS_ENV)
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"{LOCAL_THREADS_ENV}={raw!r} is not valid; use a positive int")
        return int(raw)
    return max(1, cpu_count // max(1, local_ranks))


def plan_launch(
    config: Any,
    environ: Mapping[str, str],
    *,
    local: bool,
    cuda_devices: int = 0,
    cpu_count: int = 1,
) -> LaunchPlan:
    """Decide how to launch a task; pure (no processes, no torch).

    Args:
        config: the task's ``PyTorch`` or ``Elastic`` config.
        environ: the process environment (``FLYTE_PYTORCH_*``, the operator's ``RANK``/``PET_*`` variables).
        local: flytekit runs the task locally (``pyflyte run``, a workflow called in Python). A local run never
            reads the operator's variables, even if they happen to be set.
        cuda_devices: visible CUDA devices.
        cpu_count: CPUs available to this process.

    Returns:
        LaunchPlan: the plan.

    Raises:
        ValueError: ``FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE`` or an operator variable is malformed, or
            ``nproc_per_node`` is invalid.
    """
    elastic = _is_elastic(config)
    role = None if local else cluster_role(environ)
    if _is_truthy(environ.get(INPROCESS_ENV)) and role is None:
        env = {"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": "1"}
        return LaunchPlan(kind=ExecutionKind.IN_PROCESS, rank_env=env, declared_world_size=1)
    if role is None:
        return _plan_local(config, environ, elastic=elastic, cuda_devices=cuda_devices, cpu_count=cpu_count)
    nproc = resolve_nproc(config.nproc_per_node, local=False, cuda_devices=cuda_devices, cpu_count=cpu_count)
    if role is ExecutionKind.CLUSTER_ELASTIC or elastic:
        return _plan_cluster_elastic(config, environ, nproc)
    node_rank = int(environ.get("PET_NODE_RANK") or environ["RANK"])
    nnodes_text = environ.get("PET_NNODES")
    nnodes = int(nnodes_text) if nnodes_text else max(1, int(environ["WORLD_SIZE"]) // nproc)
    kind = ExecutionKind.CLUSTER_DIRECT if nproc == 1 else ExecutionKind.CLUSTER_FANOUT
    addr = environ.get("PET_MASTER_ADDR") or environ["MASTER_ADDR"]
    port = environ.get("PET_MASTER_PORT") or environ.get("MASTER_PORT", "23456")
    return LaunchPlan(
        kind=kind,
        min_nodes=nnodes,
        max_nodes=nnodes,
        nproc_per_node=nproc,
        world_size=nnodes * nproc,
        declared_world_size=nnodes * nproc,
        node_rank=node_rank,
        rdzv_backend="static",
        rdzv_endpoint=f"{addr}:{port}",
        rdzv_configs={"rank": node_rank},
        monitor_interval=LOCAL_MONITOR_INTERVAL_S,
        rank_env={
            "PET_NNODES": str(nnodes),
            "PET_NODE_RANK": str(node_rank),
            "PET_NPROC_PER_NODE": str(nproc),
            "PET_MASTER_ADDR": addr,
            "PET_MASTER_PORT": str(port),
        },
    )


def _plan_local(
    config: Any, environ: Mapping[str, str], *, elastic: bool, cuda_devices: int, cpu_count: int
) -> LaunchPlan:
    nproc = resolve_nproc(config.nproc_per_node, local=True, cuda_devices=cuda_devices, cpu_count=cpu_count)
    if elastic:
        nodes, max_nodes = _node_range(config)
    else:
        nodes = 1 + int(config.worker.replicas)
        max_nodes = nodes
    declared = nodes * nproc
    cap = None
    raw_cap = environ.get(MAX_LOCAL_WORLD_SIZE_ENV)
    if raw_cap:
        if not raw_cap.strip().isdigit() or int(raw_cap) < 1:
            raise ValueError(f"{MAX_LOCAL_WORLD_SIZE_ENV}={raw_cap!r} is not valid; use a positive int")
        cap = int(raw_cap)
    nodes, nproc = _cap_world(nodes, nproc, cap)
    world = nodes * nproc
    env = {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(nproc), "PET_MASTER_ADDR": "127.0.0.1"}
    rdzv_configs: dict[str, Any] = {}
    max_restarts = 0
    monitor = LOCAL_MONITOR_INTERVAL_S
    if elastic:
        env["PET_NNODES"] = f"{nodes}:{max(nodes, max_nodes)}" if max_nodes != nodes else str(nodes)
        env["PET_RDZV_BACKEND"] = "c10d"
        max_restarts = int(getattr(config, "max_restarts", 0))
        env["PET_MAX_RESTARTS"] = str(max_restarts)
        monitor = float(getattr(config, "monitor_interval", LOCAL_MONITOR_INTERVAL_S))
        rdzv_configs = _elastic_rdzv_configs(config)
    return LaunchPlan(
        kind=ExecutionKind.LOCAL,
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world,
        world_size=world,
        declared_world_size=declared,
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=max_restarts,
        monitor_interval=monitor,
        threads=_threads_per_rank(world, cpu_count, environ),
        rank_env=env,
        virtual_nodes=True,
        rdzv_configs=rdzv_configs,
    )


def _elastic_rdzv_configs(config: Any) -> dict[str, Any]:
    return {
        "join_timeout": int(getattr(config, "rdzv_join_timeout", 900)),
        "last_call_timeout": int(getattr(config, "rdzv_last_call_timeout", 30)),
        "close_timeout": int(getattr(config, "rdzv_close_timeout", 30)),
    }


def _plan_cluster_elastic(config: Any, environ: Mapping[str, str], nproc: int) -> LaunchPlan:
    text = environ.get("PET_NNODES") or str(getattr(config, "nnodes", 1))
    low, _, high = text.partition(":")
    min_nodes, max_nodes = int(low), int(high or low)
    max_restarts = int(environ.get("PET_MAX_RESTARTS") or getattr(config, "max_restarts", 0))
    endpoint = environ.get("PET_RDZV_ENDPOINT") or f"{environ.get('MASTER_ADDR', '127.0.0.1')}:29400"
    return LaunchPlan(
        kind=ExecutionKind.CLUSTER_ELASTIC,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        world_size=min_nodes * nproc,
        declared_world_size=min_nodes * nproc,
        rdzv_backend=environ.get("PET_RDZV_BACKEND", "c10d"),
        rdzv_endpoint=endpoint,
        max_restarts=max_restarts,
        monitor_interval=float(getattr(config, "monitor_interval", LOCAL_MONITOR_INTERVAL_S)),
        rdzv_configs=_elastic_rdzv_configs(config),
        rank_env={
            "PET_NNODES": text,
            "PET_NPROC_PER_NODE": str(nproc),
            "PET_RDZV_ENDPOINT": endpoint,
            "PET_RDZV_BACKEND": environ.get("PET_RDZV_BACKEND", "c10d"),
            "PET_MAX_RESTARTS": str(max_restarts),
        },
    )


def _collective_timeout_s(config: Any) -> Optional[float]:
    value = getattr(config, "collective_timeout", None)
    return value.total_seconds() if value is not None else None


def _is_local_execution() -> bool:
    from flytekit.core.context_manager import FlyteContextManager

    state = FlyteContextManager.current_context().execution_state
    return bool(state is not None and state.mode is not None and state.is_local_execution())


def run_distributed(task: Any, kwargs: dict[str, Any]) -> Any:
    """Execute a ``pytorch`` task: locally as real ranks, or as this replica's part of a PyTorchJob.

    Args:
        task: a ``PyTorchFunctionTask`` / ``ElasticPyTorchFunctionTask`` (``task.task_config`` and
            ``task._task_function`` are used).
        kwargs: the task's inputs as Python values.

    Returns:
        Any: what the function returned on global rank 0.

    Raises:
        RankFailedError: a rank failed (or an exception of the rank's original type that also is a
            :class:`RankFailure`; ``FlyteRecoverableException`` subclasses stay recoverable).
        flytekit.core.base_task.IgnoreOutputs: on a cluster, in every pod and rank that is not global rank 0.
        ValueError: the launch settings (``nproc_per_node``, ``FLYTE_PYTORCH_*``) are invalid.
    """
    config = task.task_config
    fn = task._task_function
    local = _is_local_execution()
    cuda_devices, cpu_count = _machine()
    plan = plan_launch(config, os.environ, local=local, cuda_devices=cuda_devices, cpu_count=cpu_count)
    if plan.kind is ExecutionKind.LOCAL and plan.world_size < plan.declared_world_size:
        logger.warning(
            "%s: running %d local ranks instead of the declared %d (%s=%s)",
            getattr(task, "name", fn.__name__),
            plan.world_size,
            plan.declared_world_size,
            MAX_LOCAL_WORLD_SIZE_ENV,
            os.environ.get(MAX_LOCAL_WORLD_SIZE_ENV),
        )
    timeout_s = _collective_timeout_s(config)
    if plan.kind is ExecutionKind.IN_PROCESS:
        return _run_in_process(fn, kwargs, plan, timeout_s)
    if plan.kind is ExecutionKind.CLUSTER_DIRECT:
        return _run_direct(fn, kwargs, timeout_s)
    start_method = getattr(config, "start_method", "forkserver")
    return _launch(fn, kwargs, plan, timeout_s, start_method, run_id=_run_id(plan))


def _machine() -> tuple[int, int]:
    """(visible CUDA devices, usable CPUs) without initialising CUDA in this process when torch lacks it."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        import torch

        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        cuda = 0
    return cuda, cpus


def _run_id(plan: LaunchPlan) -> str:
    if plan.kind is ExecutionKind.LOCAL:
        return f"flyte-local-{uuid.uuid4().hex[:12]}"
    try:
        import flytekit

        name = flytekit.current_context().execution_id.name
    except Exception:  # noqa: BLE001 - no execution id: any id shared by the pods works, they all lack it
        name = ""
    return name or "flyte-pytorch"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _EnvPatch:
    """Set environment variables for a block and restore the exact previous environment afterwards."""

    def __init__(self, values: Optional[Mapping[str, str]] = None) -> None:
        self._values = dict(values or {})
        self._saved: dict[str, str] = {}

    def __enter__(self) -> _EnvPatch:
        self._saved = dict(os.environ)
        os.environ.update(self._values)
        return self

    def __exit__(self, *exc: Any) -> None:
        for key in set(os.environ) - set(self._saved):
            del os.environ[key]
        for key, value in self._saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def _run_in_process(
    fn: Callable[..., Any], kwargs: dict[str, Any], plan: LaunchPlan, timeout_s: Optional[float]
) -> Any:
    env = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "GROUP_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "PET_MASTER_ADDR": "127.0.0.1",
        **plan.rank_env,
    }
    env["PET_MASTER_PORT"] = env["MASTER_PORT"]
    with _EnvPatch(env):
        restore = _rank.install_collective_timeout(timeout_s)
        try:
            return fn(**kwargs)
        finally:
            restore()


def _run_direct(fn: Callable[..., Any], kwargs: dict[str, Any], timeout_s: Optional[float]) -> Any:
    from flytekit.core.base_task import IgnoreOutputs

    restore = _rank.install_collective_timeout(timeout_s)
    try:
        value = fn(**kwargs)
    finally:
        restore()
    if int(os.environ.get("RANK", "0")) != 0:
        raise IgnoreOutputs(f"rank {os.environ.get('RANK')} of a PyTorchJob: only rank 0 writes the task outputs")
    return value


@dataclass
class _Handlers:
    saved: dict[int, Any] = field(default_factory=dict)


def _signal_exception_handler(signum: int, frame: Any) -> None:
    from torch.distributed.elastic.multiprocessing.api import SignalException

    sig = signal.Signals(signum)
    raise SignalException(f"process {os.getpid()} got {sig.name} while launching ranks", sigval=sig)


def _install_handlers() -> _Handlers:
    """Install torch's kind of handler (raise ``SignalException``) for the whole launch; remember the previous ones.

    torch's agent installs the same handlers when it starts the ranks, but not before the rendezvous and it never
    restores the previous ones; we cover the whole launch and restore them afterwards.
    """
    handlers = _Handlers()
    if threading.current_thread() is not threading.main_thread():
        return handlers
    for name in _HANDLED_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        handlers.saved[sig] = signal.getsignal(sig)
        signal.signal(sig, _signal_exception_handler)
    return handlers


def _restore_handlers(handlers: _Handlers) -> None:
    for sig, previous in handlers.saved.items():
        signal.signal(sig, previous if previous is not None else signal.SIG_DFL)


def _launch(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    plan: LaunchPlan,
    timeout_s: Optional[float],
    start_method: str,
    run_id: str,
) -> Any:
    """Start the ranks with torch's elastic agent, wait, and turn their outcome into a value or an exception."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    snapshot = _rank.snapshot_context()
    base_dir = snapshot.working_dir if snapshot.working_dir and os.path.isdir(snapshot.working_dir) else None
    run_dir = Path(tempfile.mkdtemp(prefix="pytorch-ranks-", dir=base_dir))
    control = run_dir / "control"
    control.mkdir()
    if snapshot.working_dir is None or base_dir is None:
        snapshot = _replace_workdir(snapshot, str(run_dir))
    spec = _rank.RankSpec(
        fn_bytes=cloudpickle.dumps(fn),
        kwargs_bytes=cloudpickle.dumps(kwargs),
        control_dir=str(control),
        context=snapshot,
        threads=plan.threads,
        collective_timeout_s=timeout_s,
        env=dict(plan.rank_env),
        nproc_per_node=int(plan.rank_env.get("PET_NPROC_PER_NODE", plan.nproc_per_node)),
        virtual_nodes=plan.virtual_nodes,
        parent_pid=os.getpid(),
        import_roots=_import_roots(fn),
    )
    local = plan.kind is ExecutionKind.LOCAL
    launch_config = LaunchConfig(
        min_nodes=plan.min_nodes,
        max_nodes=plan.max_nodes,
        nproc_per_node=plan.nproc_per_node,
        run_id=run_id,
        rdzv_backend=plan.rdzv_backend,
        rdzv_endpoint=plan.rdzv_endpoint,
        rdzv_configs=dict(plan.rdzv_configs),
        max_restarts=plan.max_restarts,
        monitor_interval=plan.monitor_interval,
        start_method=start_method,
        local_addr="127.0.0.1" if local else None,
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "torchelastic")),
        shutdown_timeout=LOCAL_SHUTDOWN_TIMEOUT_S if local else None,
    )
    if start_method == "forkserver":
        _preload_forkserver(fn)
    handlers = _install_handlers()
    interrupted: Optional[signal.Signals] = None
    failure: Optional[Any] = None
    started = time.monotonic()
    try:
        with _EnvPatch(), _quiet_torch_logs(local):
            try:
                elastic_launch(launch_config, _rank.rank_entrypoint)(spec)
            except ChildFailedError as exc:
                failure = exc
            except SignalException as exc:
                interrupted = exc.sigval
        if interrupted is None:
            return _outcome(control, plan, failure, time.monotonic() - started)
    finally:
        _restore_handlers(handlers)
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(run_dir / "torchelastic", ignore_errors=True)
        if base_dir is None and interrupted is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
    # The ranks are stopped; now let the previous handler act as if the signal had arrived now (default SIGTERM
    # ends the process, default SIGINT raises KeyboardInterrupt).
    signal.raise_signal(interrupted)
    raise RankFailedError(f"the launch was stopped by {interrupted.name}; the ranks were stopped")


def _import_roots(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The directory the task's module was imported from (the root of its package), when it is not on sys.path.

    ``pyflyte run examples/mnist/workflow.py`` imports ``mnist.workflow`` with ``examples/`` on ``sys.path`` and
    removes it afterwards, so a rank process could not import the module to unpickle the task function.
    """
    import sys

    name = getattr(fn, "__module__", None)
    module = sys.modules.get(name or "")
    path = getattr(module, "__file__", None)
    if not name or name == "__main__" or not path:
        return ()
    depth = len(name.split("."))
    file = Path(path).resolve()
    root = file.parents[depth] if file.name == "__init__.py" else file.parents[depth - 1]
    return () if str(root) in sys.path else (str(root),)


def _preload_forkserver(fn: Callable[..., Any]) -> None:
    """Have the forkserver import torch, flytekit, this plugin and the task's module once, before it forks ranks.

    Each spawned rank would otherwise spend seconds re-importing them (about 3 s of CPU per rank on a laptop core),
    which dominated the wall time of short local runs. The server starts at the first launch and serves later ones;
    a module that fails to import there is skipped by multiprocessing and imported by the rank as usual.
    """
    import multiprocessing

    modules = ["torch", "torch.distributed", "flytekit", "flytekitplugins_pytorch._rank"]
    module = getattr(fn, "__module__", None)
    if module and module != "__main__":
        modules.append(module)
    multiprocessing.set_forkserver_preload(modules)


def _replace_workdir(snapshot: _rank.ContextSnapshot, working_dir: str) -> _rank.ContextSnapshot:
    from dataclasses import replace

    return replace(snapshot, working_dir=working_dir)


class _quiet_torch_logs:
    """Locally, torch's agent logs its whole launch config at INFO; keep its logger at WARNING for the launch."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._saved: list[tuple[logging.Logger, int]] = []

    def __enter__(self) -> _quiet_torch_logs:
        if self._enabled:
            # The agent logs each failed rank's traceback at ERROR; the task's exception carries the root cause's.
            levels = {
                "torch.distributed.elastic": logging.WARNING,
                "torch.distributed.launcher": logging.WARNING,
                "torch.distributed.elastic.multiprocessing.api": logging.CRITICAL,
            }
            for name, level in levels.items():
                log = logging.getLogger(name)
                self._saved.append((log, log.level))
                if log.getEffectiveLevel() < level:
                    log.setLevel(level)
        return self

    def __exit__(self, *exc: Any) -> None:
        for log, level in self._saved:
            log.setLevel(level)


def _read_errors(control: Path) -> list[_rank.RankError]:
    errors = []
    for path in control.glob("rank-*.error"):
        try:
            errors.append(pickle.loads(path.read_bytes()))
        except Exception:  # noqa: BLE001 - a half-written file: the rank is reported from torch's record instead
            continue
    return sorted(errors, key=lambda err: err.timestamp)


def _ranks_with(control: Path, pattern: str) -> list[int]:
    return sorted(int(path.name.split(".")[0].split("-")[1]) for path in control.glob(pattern))


def _outcome(control: Path, plan: LaunchPlan, failure: Optional[Any], elapsed_s: float) -> Any:
    """Return rank 0's value (success), or raise for the root-cause rank (failure)."""
    from flytekit.core.base_task import IgnoreOutputs

    errors = _read_errors(control)
    if failure is None and not errors:
        result_path = control / _rank.RESULT_FILE.format(rank=0)
        if not result_path.exists():
            if plan.kind is ExecutionKind.LOCAL:
                raise RankFailedError("all ranks finished but rank 0 wrote no result; this is a launcher bug")
            raise IgnoreOutputs("global rank 0 runs in another pod: only it writes the task outputs")
        payload = cloudpickle.loads(result_path.read_bytes())
        _adopt_decks(payload["decks"])
        _adopt_metadata(payload["value"], payload["metadata"])
        return payload["value"]
    raise _root_cause(control, plan, errors, failure, elapsed_s)


def _adopt_decks(decks: list[tuple[str, str]]) -> None:
    """Add rank 0's Decks to the task's current Deck context."""
    from flytekit.deck.deck import Deck

    for name, html in decks:
        Deck(name, html)  # a new Deck adds itself to flytekit.current_context().decks


def _adopt_metadata(value: Any, metadata: Any) -> None:
    if metadata is None:
        return
    from flytekit.core.context_manager import FlyteContextManager

    tracker = FlyteContextManager.current_context().output_metadata_tracker
    if tracker is not None:
        tracker.add(value, metadata)


def _signal_text(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name} (exit code {exitcode})"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode} without raising an exception"


def _torch_failures(failure: Optional[Any]) -> dict[int, Any]:
    if failure is None:
        return {}
    return dict(getattr(failure, "failures", {}) or {})


def _root_cause(
    control: Path, plan: LaunchPlan, errors: list[_rank.RankError], failure: Optional[Any], elapsed_s: float
) -> BaseException:
    """Pick the root-cause rank and build the exception the task raises.

    Order: the earliest rank whose exception is its own (not a lost-peer / timeout error); else a rank that died
    without reporting an exception (a signal, ``os._exit``, a segfault: its peers then fail with connection errors);
    else the earliest lost-peer / timeout error.
    """
    world = plan.world_size
    own = [err for err in errors if not err.collateral]
    collateral = [err for err in errors if err.collateral]
    reported = {err.rank for err in errors}
    done = set(_ranks_with(control, "rank-*.done"))
    started = set(_ranks_with(control, "rank-*.started"))
    silent_deaths = {
        (plan.node_rank * plan.nproc_per_node + local_rank if plan.kind is not ExecutionKind.LOCAL else local_rank): rec
        for local_rank, rec in _torch_failures(failure).items()
    }
    silent_deaths = {rank: rec for rank, rec in silent_deaths.items() if rank not in reported}
    if own:
        return _from_error(own[0], world, errors, done, started, plan)
    if silent_deaths:
        rank, rec = sorted(silent_deaths.items())[0]
        exitcode = getattr(rec, "exitcode", None)
        message = f"rank {rank} (of {world}) {_signal_text(exitcode)}"
        if rank not in started:
            message += (
                " before it ran the task (see its stderr above; with start_method 'forkserver' (the default) or "
                "'spawn' the script's main module is imported again, so a script must run its workflow under "
                "`if __name__ == '__main__':`)"
            )
        message += _others_summary(rank, world, errors, done, started, plan)
        exc = RankFailedError(message)
        exc.rank, exc.world_size = rank, world  # type: ignore[attr-defined]
        return exc
    if collateral:
        return _from_error(collateral[0], world, errors, done, started, plan)
    exc = RankFailedError(f"the ranks failed after {elapsed_s:.1f}s without reporting an error: {failure}")
    return exc


def _others_summary(
    root: int, world: int, errors: list[_rank.RankError], done: set, started: set, plan: LaunchPlan
) -> str:
    """One paragraph about the other ranks: who failed as a consequence, who was still running."""
    if plan.kind is not ExecutionKind.LOCAL:
        first = plan.node_rank * plan.nproc_per_node
        ranks = range(first, first + plan.nproc_per_node)
    else:
        ranks = range(world)
    failed = [f"{err.rank} ({err.type_name.rsplit('.', 1)[-1]})" for err in errors if err.rank != root]
    running = [rank for rank in ranks if rank != root and rank not in done and rank not in {e.rank for e in errors}]
    lines = []
    if failed:
        lines.append(f"ranks that failed afterwards: {', '.join(failed)}")
    if running:
        never = [rank for rank in running if rank not in started]
        stuck = [rank for rank in running if rank in started]
        if stuck:
            lines.append(
                f"ranks still running when the job was stopped (they had not reached or finished the collective): "
                f"{stuck}"
            )
        if never:
            lines.append(f"ranks that never started: {never}")
    return ("\n" + "\n".join(lines)) if lines else ""


def _from_error(
    err: _rank.RankError, world: int, errors: list[_rank.RankError], done: set, started: set, plan: LaunchPlan
) -> BaseException:
    """Rebuild the rank's exception with its original type, a message naming the rank, and its traceback."""
    short = err.type_name.rsplit(".", 1)[-1]
    message = (
        f"rank {err.rank} (of {world}) failed: {short}: {err.message}"
        f"{_others_summary(err.rank, world, errors, done, started, plan)}\n"
        f"--- traceback of rank {err.rank} ---\n{err.traceback_text.rstrip()}"
    )
    original = None
    if err.exc_bytes is not None:
        try:
            original = pickle.loads(err.exc_bytes)
        except Exception:  # noqa: BLE001 - the type cannot be rebuilt here: fall back to a wrapper
            original = None
    exc = _rebrand(original, message, err) if original is not None else None
    if exc is None:
        exc = _wrapper(message, err)
    exc.rank, exc.world_size = err.rank, world  # type: ignore[attr-defined]
    return exc


_REBRANDED: dict[type, type] = {}


def _rebrand(original: BaseException, message: str, err: _rank.RankError) -> Optional[BaseException]:
    """An exception of ``type(original)`` that also is a :class:`RankFailure`, with ``message`` as its text."""
    cls = type(original)
    try:
        sub = _REBRANDED.get(cls)
        if sub is None:
            sub = type(
                cls.__name__, (RankFailure, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
            )
            _REBRANDED[cls] = sub
        exc = sub.__new__(sub, message)
        exc.__dict__.update(getattr(original, "__dict__", {}))
        exc.args = (message,)
        if hasattr(original, "_timestamp"):
            exc._timestamp = err.timestamp  # type: ignore[attr-defined]
        return exc
    except Exception:  # noqa: BLE001 - e.g. a final or layout-incompatible type: use the wrapper
        return None


def _wrapper(message: str, err: _rank.RankError) -> BaseException:
    if err.recoverable:
        from flytekit.exceptions.user import FlyteRecoverableException

        cls = _REBRANDED.get(FlyteRecoverableException)
        if cls is None:
            cls = type("RecoverableRankFailedError", (RankFailure, FlyteRecoverableException), {"__module__": __name__})
            _REBRANDED[FlyteRecoverableException] = cls
        exc = cls(message, timestamp=err.timestamp)
        return exc
    exc = RankFailedError(message)
    return exc
