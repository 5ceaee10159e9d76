"""Launch planning: the task's config and the process environment in, a typed :class:`LaunchPlan` out. Pure.

No process is started, no torch is imported and nothing is read but the arguments, so every case is a table row in
``tests/core/test_plan.py``. :func:`plan_launch` decides *where* a task runs and with how many ranks:

- **local** (``pyflyte run``, a workflow called in Python, any process without the Kubeflow operator's variables):
  the declared world size runs as real processes on this machine, started by torch's elastic agent with a
  static rendezvous (``Elastic``: c10d) on 127.0.0.1 and a free port. ``PyTorch``:
  ``(1 + worker.replicas) * nproc_per_node`` ranks; ``Elastic``: ``min_nodes * nproc_per_node`` ranks (a local run
  never waits for nodes that cannot come). One agent runs every rank, and each rank is then given the view of its
  declared node that torch's agent in a pod of that node would give it (:func:`node_view`): ``LOCAL_RANK`` and
  ``LOCAL_WORLD_SIZE`` within the node, ``GROUP_RANK`` = the node (also ``PET_NODE_RANK`` for ``PyTorch``, which
  the operator sets on a fixed-size job only), and, when the machine has a GPU for every rank, only its node's GPUs
  in ``CUDA_VISIBLE_DEVICES``, as a pod sees only its own.
- **in-process** (``FLYTE_PYTORCH_INPROCESS=1``): the function runs in the task process with world size 1.
- **cluster replica, non-elastic** (a PyTorchJob pod: ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set by the operator):
  with ``nproc_per_node == 1`` the function runs in the pod process (``CLUSTER_DIRECT``); with more,
  ``nproc_per_node`` processes are started with a static rendezvous at ``PET_MASTER_ADDR:PET_MASTER_PORT``
  (``CLUSTER_FANOUT``, global rank = node rank * nproc + local rank; see :func:`_static_plan`).
- **cluster replica, elastic** (``PET_RDZV_ENDPOINT`` set): elastic agent with a c10d rendezvous at
  ``PET_RDZV_ENDPOINT``, ``min:max`` nodes from ``PET_NNODES``.
- **TrainJob node** (Kubeflow Trainer v2: exactly the five ``TRAINJOB_NODE_ENV`` variables, no ``RANK``): always an
  agent (``CLUSTER_FANOUT``, even for one process: nothing else sets ``RANK``/``WORLD_SIZE``) with
  ``PET_NPROC_PER_NODE`` ranks (``auto`` = visible GPUs, 1 without CUDA) and a static rendezvous at
  ``PET_MASTER_ADDR:PET_MASTER_PORT`` (see :func:`plan_trainjob_node`).
- **JobSet pod**: the backend writes the PyTorchJob replica's variables into the pod template of each role, all but
  the pod's own rank, which one template for every pod of a role cannot hold; :func:`indexed_pod_env` derives
  ``RANK`` and ``PET_NODE_RANK`` from the role's offset and the pod's completion index, and the launcher sets them
  before planning, so the pod is then a cluster replica as above.

Every default comes from the config dataclasses (``config.py``); the only values stated here are the launcher's
own (the local monitor interval, the operator's fallback ports), each with its reason.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Optional, Union

from pytorch_contract.k8s_names import COMPLETION_INDEX_ENV, NODE_RANK_OFFSET_ENV, TRAINJOB_NODE_ENV
from pytorch_contract.template_keys import DEFAULT_RDZV_BACKEND, NPROC_PER_NODE_ALLOWED, nproc_per_node_message
from pytorch_core.config import Elastic, PyTorch

#: A task's configuration: what ``plan_launch`` is typed on.
TaskConfig = Union[PyTorch, Elastic]

INPROCESS_ENV = "FLYTE_PYTORCH_INPROCESS"
MAX_LOCAL_WORLD_SIZE_ENV = "FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE"
LOCAL_THREADS_ENV = "FLYTE_PYTORCH_LOCAL_THREADS"

#: How often the agent checks its ranks in a local run or a non-elastic pod (an elastic task sets its own
#: ``monitor_interval``). Small: the agent sleeps this long before its first check, so every launch lasts at least
#: this long, and a dead rank is noticed within it. A check is a few system calls (about 0.2 ms, so 1% of a core at
#: this interval); 50 ms instead made a warm 3-rank launch 1.9x the floor of ``benchmarks/plugin_overhead.py``
#: rather than 1.5x.
LOCAL_MONITOR_INTERVAL_S = 0.02
#: Where a local run's ranks meet: loopback only, never a routable address.
LOCAL_ADDR = "127.0.0.1"
#: The rendezvous backend of local and elastic runs: torch's c10d store, which needs no etcd; the very value the
#: template's ``elasticConfig.rdzvBackend`` carries.
RDZV_BACKEND = DEFAULT_RDZV_BACKEND
#: ``MASTER_PORT`` when a pod has ``MASTER_ADDR`` but no port (the operator's default port).
OPERATOR_MASTER_PORT = "23456"
#: Rendezvous port when an elastic task runs in a pod without ``PET_RDZV_ENDPOINT`` (torchrun's default port).
ELASTIC_RDZV_PORT = 29400

#: The elastic settings of a non-elastic ``PyTorch`` task that finds itself in an elastic pod: ``Elastic``'s own
#: defaults (rendezvous timeouts, restarts, monitor interval), so they are stated once, in ``config.py``.
_ELASTIC_DEFAULTS = Elastic()


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
        start_method: how rank processes are started (``PyTorch.start_method`` / ``Elastic.start_method``).
        collective_timeout_s: default timeout of ``init_process_group`` in seconds (the config's
            ``collective_timeout``); ``None`` = the per-backend default of ``_rank.default_collective_timeout``.
        min_nodes: nodes the agent waits for (locally always 1: one agent runs every rank).
        max_nodes: nodes the rendezvous admits.
        nproc_per_node: processes this agent starts.
        procs_per_node: ranks per declared node as the ranks see it (``PET_NPROC_PER_NODE``). Equal to
            ``nproc_per_node`` except locally, where one agent runs every declared node.
        world_size: global ranks (at least) in the job.
        node_rank: this node's rank for a static rendezvous (``CLUSTER_FANOUT``), else 0.
        rdzv_backend: ``"c10d"`` or ``"static"``.
        rdzv_endpoint: ``host:port`` of the rendezvous (``127.0.0.1:0`` locally: a free port).
        max_restarts: times the agent restarts the rank group after a failure.
        monitor_interval: seconds between the agent's health checks of its ranks.
        threads: intra-op threads per rank, or ``None`` to leave torch's default.
        rank_env: ``PET_*`` variables every rank sees.
        declared_world_size: the world size the config asks for (locally it may have been capped).
        virtual_nodes: several declared nodes run in this one agent (local runs): each rank gets its node's view
            (:func:`node_view`).
        node_gpus: per declared node, the ``CUDA_VISIBLE_DEVICES`` its ranks see (local runs with a GPU for every
            rank); empty = leave the devices as they are.
        rdzv_configs: extra rendezvous settings (elastic timeouts, or the static rendezvous's node rank).
        preload_modules: modules the launcher imports before it starts the ranks (``preload_modules`` of the config).
        retry_hangs: a rank that did not arrive fails the task with a recoverable error (``retry_hangs``).
        preflight: every rank runs the preflight before the task's code (``preflight``).
        shm_size: the ``/dev/shm`` size the preflight checks (a pod's ``shm_size``; ``None`` locally).
        progress_timeout_s: ``progress_timeout`` in seconds, or ``None`` (off).
    """

    kind: ExecutionKind
    start_method: str
    collective_timeout_s: Optional[float]
    min_nodes: int = 1
    max_nodes: int = 1
    nproc_per_node: int = 1
    procs_per_node: int = 1
    world_size: int = 1
    node_rank: int = 0
    rdzv_backend: str = RDZV_BACKEND
    rdzv_endpoint: str = f"{LOCAL_ADDR}:0"
    max_restarts: int = 0
    monitor_interval: float = LOCAL_MONITOR_INTERVAL_S
    threads: Optional[int] = None
    rank_env: dict[str, str] = field(default_factory=dict)
    declared_world_size: int = 1
    virtual_nodes: bool = False
    node_gpus: tuple[str, ...] = ()
    rdzv_configs: dict[str, int] = field(default_factory=dict)
    preload_modules: tuple[str, ...] = ()
    retry_hangs: bool = True
    preflight: bool = True
    shm_size: Optional[str] = None
    progress_timeout_s: Optional[float] = None

    @property
    def local_ranks(self) -> range:
        """The global ranks this agent runs (a static node's block; every rank locally; from 0 in an elastic pod,
        whose node rank the rendezvous assigns only later)."""
        first = self.node_rank * self.nproc_per_node
        return range(first, first + self.nproc_per_node)


def _is_truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _env_int(environ: Mapping[str, str], name: str, *, minimum: int) -> Optional[int]:
    """An integer environment variable (``None`` when unset or empty); a malformed one is named in the error."""
    raw = environ.get(name)
    if not raw:
        return None
    text = raw.strip()
    if not text.isdigit() or int(text) < minimum:
        raise ValueError(f"{name}={raw!r} is not valid; use a whole number >= {minimum}")
    return int(text)


def _nproc_message(value: object) -> str:
    """The contract's one message for a bad ``nproc_per_node`` (the same words the SDK and the backend use)."""
    return nproc_per_node_message("nproc_per_node", value) or f"nproc_per_node={value!r}: {NPROC_PER_NODE_ALLOWED}"


def resolve_nproc(value: Union[int, str], *, local: bool, cuda_devices: int, cpu_count: int) -> int:
    """Turn ``nproc_per_node`` into a process count for this machine.

    ``"auto"`` and ``"gpu"`` mean the visible CUDA devices (1 without CUDA). ``"cpu"`` means 1 locally (torchrun's
    ``os.cpu_count()`` processes, each with its own threads, would oversubscribe the machine that also runs the
    other ranks) and ``cpu_count`` in a pod, where the pod's CPU request bounds it.

    Args:
        value: a positive int, ``"auto"``, ``"gpu"`` or ``"cpu"`` (a numeric string is accepted too).
        local: the count is for a local run.
        cuda_devices: visible CUDA devices.
        cpu_count: CPUs available to this process.

    Returns:
        int: processes per node, >= 1.

    Raises:
        ValueError: ``value`` is none of the above.
    """
    if isinstance(value, bool):
        raise ValueError(_nproc_message(value))
    if isinstance(value, int) and value >= 1:
        return value
    text = str(value).strip().lower()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    if text in ("auto", "gpu"):
        return cuda_devices if cuda_devices > 0 else 1
    if text == "cpu":
        return 1 if local else max(1, cpu_count)
    raise ValueError(_nproc_message(value))


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


def indexed_pod_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``RANK`` and ``PET_NODE_RANK`` of a pod whose rank is its role's offset plus its completion index (a JobSet
    pod: ``NODE_RANK_OFFSET_ENV`` written by the backend, ``COMPLETION_INDEX_ENV`` set by Kubernetes' Job controller).

    The training operator gives a PyTorchJob replica ``RANK`` = ``PET_NODE_RANK`` = its node rank (the master 0, the
    workers 1 + their index); this is the same number for a JobSet pod.

    Args:
        environ: the pod's environment.

    Returns:
        dict[str, str]: ``{"RANK": r, "PET_NODE_RANK": r}``; empty when ``NODE_RANK_OFFSET_ENV`` is not set.

    Raises:
        ValueError: the offset or the completion index is not a whole number, the index is missing, or the rank is
            not below ``PET_NNODES`` (the message names the variables).
    """
    offset = _env_int(environ, NODE_RANK_OFFSET_ENV, minimum=0)
    if offset is None:
        return {}
    index = _env_int(environ, COMPLETION_INDEX_ENV, minimum=0)
    if index is None:
        raise ValueError(
            f"{NODE_RANK_OFFSET_ENV}={offset} is set but {COMPLETION_INDEX_ENV} is not: the pod's rank is its offset "
            "plus its completion index, which Kubernetes sets only in the pods of an Indexed Job"
        )
    rank = offset + index
    nnodes = _env_int(environ, "PET_NNODES", minimum=1)
    if nnodes is not None and rank >= nnodes:
        raise ValueError(
            f"{NODE_RANK_OFFSET_ENV}={offset} + {COMPLETION_INDEX_ENV}={index} is not a node rank below "
            f"PET_NNODES={nnodes}"
        )
    return {"RANK": str(rank), "PET_NODE_RANK": str(rank)}


def is_trainjob_node(environ: Mapping[str, str]) -> bool:
    """Whether the environment is a Kubeflow Trainer v2 TrainJob node.

    Args:
        environ: the process environment.

    Returns:
        bool: every ``TRAINJOB_NODE_ENV`` variable is set and the PyTorchJob operator's are not (no ``RANK``,
        ``WORLD_SIZE`` or ``PET_RDZV_ENDPOINT``: a PyTorchJob pod also has ``PET_*`` names, but always with them).
    """
    if any(environ.get(name) for name in ("RANK", "WORLD_SIZE", "PET_RDZV_ENDPOINT")):
        return False
    return all(environ.get(name) for name in TRAINJOB_NODE_ENV)


def plan_trainjob_node(
    config: TaskConfig, environ: Mapping[str, str], *, cuda_devices: int, cpu_count: int
) -> LaunchPlan:
    """One node of a TrainJob: ``PET_NPROC_PER_NODE`` ranks meeting the other nodes' at the master (static).

    Global rank = ``PET_NODE_RANK * nproc + local rank``, world size = ``PET_NNODES * nproc``; only global rank 0 (on
    node 0) returns the function's value, as on a PyTorchJob.

    Args:
        config: the task's config (its start method and collective timeout apply; its node counts are the job's).
        environ: the node's environment (``TRAINJOB_NODE_ENV``).
        cuda_devices: visible CUDA devices (for ``auto``).
        cpu_count: CPUs available (for ``cpu``).

    Returns:
        LaunchPlan: a ``CLUSTER_FANOUT`` plan.

    Raises:
        ValueError: a ``PET_*`` variable is malformed (named in the message).
    """
    nnodes = _env_int(environ, "PET_NNODES", minimum=1)
    node_rank = _env_int(environ, "PET_NODE_RANK", minimum=0)
    assert nnodes is not None and node_rank is not None  # is_trainjob_node checked they are set
    if node_rank >= nnodes:
        raise ValueError(f"PET_NODE_RANK={node_rank} is not valid with PET_NNODES={nnodes}; use 0..{nnodes - 1}")
    raw = environ["PET_NPROC_PER_NODE"]
    try:
        nproc = resolve_nproc(raw, local=False, cuda_devices=cuda_devices, cpu_count=cpu_count)
    except ValueError:
        raise ValueError(f"PET_NPROC_PER_NODE={raw!r} is not valid; use a positive int or 'auto'") from None
    port = environ["PET_MASTER_PORT"].strip()
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"PET_MASTER_PORT={environ['PET_MASTER_PORT']!r} is not valid; use a port 1..65535")
    plan = _static_plan(
        config, nnodes=nnodes, node_rank=node_rank, nproc=nproc, addr=environ["PET_MASTER_ADDR"], port=port
    )
    return replace(plan, kind=ExecutionKind.CLUSTER_FANOUT)


def _seconds(value: Optional[datetime.timedelta]) -> Optional[float]:
    return value.total_seconds() if value is not None else None


def _collective_timeout_s(config: TaskConfig) -> Optional[float]:
    timeout = config.collective_timeout
    return timeout.total_seconds() if timeout is not None else None


def plan_launch(
    config: TaskConfig,
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
        ValueError: ``FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE``, ``FLYTE_PYTORCH_LOCAL_THREADS`` or an operator variable is
            malformed (the message names the variable), or ``nproc_per_node`` is invalid.
    """
    role = None if local else cluster_role(environ)
    if role is None and not local and is_trainjob_node(environ):
        return plan_trainjob_node(config, environ, cuda_devices=cuda_devices, cpu_count=cpu_count)
    if _is_truthy(environ.get(INPROCESS_ENV)) and role is None:
        return LaunchPlan(
            kind=ExecutionKind.IN_PROCESS,
            start_method=config.start_method,
            preload_modules=config.preload_modules,
            retry_hangs=config.retry_hangs,
            preflight=config.preflight,
            progress_timeout_s=_seconds(config.progress_timeout),
            collective_timeout_s=_collective_timeout_s(config),
            rank_env={"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": "1"},
            declared_world_size=1,
        )
    if role is None:
        return _plan_local(config, environ, cuda_devices=cuda_devices, cpu_count=cpu_count)
    nproc = resolve_nproc(config.nproc_per_node, local=False, cuda_devices=cuda_devices, cpu_count=cpu_count)
    if role is ExecutionKind.CLUSTER_ELASTIC or isinstance(config, Elastic):
        return _plan_cluster_elastic(config, environ, nproc)
    node_rank = _env_int(environ, "PET_NODE_RANK", minimum=0)
    if node_rank is None:
        node_rank = _env_int(environ, "RANK", minimum=0) or 0
    nnodes = _env_int(environ, "PET_NNODES", minimum=1)
    if nnodes is None:
        nnodes = max(1, (_env_int(environ, "WORLD_SIZE", minimum=1) or 1) // nproc)
    return _static_plan(
        config,
        nnodes=nnodes,
        node_rank=node_rank,
        nproc=nproc,
        addr=environ.get("PET_MASTER_ADDR") or environ["MASTER_ADDR"],
        port=environ.get("PET_MASTER_PORT") or environ.get("MASTER_PORT") or OPERATOR_MASTER_PORT,
    )


def _static_plan(config: TaskConfig, *, nnodes: int, node_rank: int, nproc: int, addr: str, port: str) -> LaunchPlan:
    """One node of a fixed-size job: ``nproc`` ranks that meet the other nodes' at ``addr:port`` (static rendezvous).

    Global rank = ``node_rank * nproc + local rank``. With one process per node the function runs in this process
    (``CLUSTER_DIRECT``: the operator already set its ``RANK`` and ``WORLD_SIZE``); with more, an agent starts them
    (``CLUSTER_FANOUT``). Any target that gives the node count, node rank and master address the way the ``PET_*``
    variables do builds its plan here; one that sets only ``PET_*`` (no ``RANK``) must not take the direct path.
    """
    return LaunchPlan(
        kind=ExecutionKind.CLUSTER_DIRECT if nproc == 1 else ExecutionKind.CLUSTER_FANOUT,
        shm_size=config.shm_size,
        start_method=config.start_method,
        preload_modules=config.preload_modules,
        retry_hangs=config.retry_hangs,
        preflight=config.preflight,
        progress_timeout_s=_seconds(config.progress_timeout),
        collective_timeout_s=_collective_timeout_s(config),
        min_nodes=nnodes,
        max_nodes=nnodes,
        nproc_per_node=nproc,
        procs_per_node=nproc,
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


def _node_range_text(low: int, high: int) -> str:
    """``PET_NNODES`` as the operator writes it: ``"2"``, or ``"1:4"`` for a range."""
    return f"{low}:{high}" if high != low else str(low)


def _plan_local(config: TaskConfig, environ: Mapping[str, str], *, cuda_devices: int, cpu_count: int) -> LaunchPlan:
    nproc = resolve_nproc(config.nproc_per_node, local=True, cuda_devices=cuda_devices, cpu_count=cpu_count)
    if isinstance(config, Elastic):
        nodes, max_nodes = config.min_nodes, config.max_nodes
    else:
        nodes = max_nodes = config.replicas
    declared = nodes * nproc
    raw_cap = environ.get(MAX_LOCAL_WORLD_SIZE_ENV)
    cap = None
    if raw_cap:
        if not raw_cap.strip().isdigit() or int(raw_cap) < 1:
            raise ValueError(f"{MAX_LOCAL_WORLD_SIZE_ENV}={raw_cap!r} is not valid; use a positive int")
        cap = int(raw_cap)
    nodes, nproc = _cap_world(nodes, nproc, cap)
    world = nodes * nproc
    env = {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(nproc), "PET_MASTER_ADDR": LOCAL_ADDR}
    node_gpus = _node_gpus(nodes, nproc, cuda_devices, environ)
    # One agent, one node, no restarts: a static rendezvous (a TCP store in the launcher, on a free port that
    # _processes picks) is all it takes; torch's dynamic c10d rendezvous costs about a second per launch.
    rdzv_backend = "static"
    rdzv_configs: dict[str, int] = {"rank": 0}
    max_restarts = 0
    monitor = LOCAL_MONITOR_INTERVAL_S
    if isinstance(config, Elastic):
        # The operator sets neither PET_MASTER_* nor PET_NODE_RANK on an elastic job (the rendezvous assigns nodes),
        # and writes PET_NNODES as "min:max" whenever the job has an elasticPolicy with both (ours always has).
        del env["PET_MASTER_ADDR"]
        rdzv_backend = RDZV_BACKEND
        env["PET_NNODES"] = f"{nodes}:{max(nodes, max_nodes)}"
        env["PET_RDZV_BACKEND"] = RDZV_BACKEND
        max_restarts = config.max_restarts
        env["PET_MAX_RESTARTS"] = str(max_restarts)
        monitor = config.monitor_interval
        rdzv_configs = _elastic_rdzv_configs(config)
    return LaunchPlan(
        kind=ExecutionKind.LOCAL,
        start_method=config.start_method,
        preload_modules=config.preload_modules,
        retry_hangs=config.retry_hangs,
        preflight=config.preflight,
        progress_timeout_s=_seconds(config.progress_timeout),
        collective_timeout_s=_collective_timeout_s(config),
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world,
        procs_per_node=nproc,
        world_size=world,
        declared_world_size=declared,
        rdzv_backend=rdzv_backend,
        rdzv_endpoint=f"{LOCAL_ADDR}:0",
        max_restarts=max_restarts,
        monitor_interval=monitor,
        threads=_threads_per_rank(world, cpu_count, environ),
        rank_env=env,
        virtual_nodes=True,
        node_gpus=node_gpus,
        rdzv_configs=rdzv_configs,
    )


def _node_gpus(nodes: int, nproc: int, cuda_devices: int, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Each declared node's share of the visible GPUs, when there is one for every rank (else nothing changes).

    A pod sees only its own GPUs, so ``torch.cuda.set_device(LOCAL_RANK)`` picks a different device in every pod;
    locally the nodes share one machine, and without this their ranks with the same ``LOCAL_RANK`` would share a GPU.
    """
    if nodes < 2 or cuda_devices < nodes * nproc:
        return ()
    visible = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if len(visible) < nodes * nproc:
        visible = [str(i) for i in range(cuda_devices)]
    return tuple(",".join(visible[n * nproc : (n + 1) * nproc]) for n in range(nodes))


def node_view(rank: int, world_size: int, procs_per_node: int, *, elastic: bool) -> dict[str, str]:
    """What torch's agent in the pod of ``rank``'s declared node gives that rank (locally one agent runs them all).

    torch's agent sets ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` and ``GROUP_WORLD_SIZE`` per node;
    ``RANK``, ``ROLE_RANK``, ``WORLD_SIZE`` and ``ROLE_WORLD_SIZE`` are global and already right. The operator sets
    ``PET_NODE_RANK`` on a fixed-size job (the node's replica rank), not on an elastic one.

    Args:
        rank: global rank.
        world_size: ranks in the job.
        procs_per_node: ranks per declared node.
        elastic: the task is ``Elastic`` (no ``PET_NODE_RANK``).

    Returns:
        dict[str, str]: the variables to set in the rank.
    """
    nproc = max(1, procs_per_node)
    node, local = divmod(rank, nproc)
    view = {
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": str(node),
        "GROUP_WORLD_SIZE": str(max(1, world_size // nproc)),
    }
    if not elastic:
        view["PET_NODE_RANK"] = str(node)
    return view


def direct_view(rank: int, world_size: int) -> dict[str, str]:
    """What torch's agent would give the one rank of a pod that runs the function itself (``CLUSTER_DIRECT``).

    The operator sets ``RANK``, ``WORLD_SIZE`` and ``MASTER_*``; an agent with one process per node would add the
    per-node variables below, which code written for torchrun reads (``LOCAL_RANK`` above all).

    Args:
        rank: the pod's rank (the operator's ``RANK``).
        world_size: the operator's ``WORLD_SIZE``.

    Returns:
        dict[str, str]: the variables to set.
    """
    return {
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank),
        "GROUP_WORLD_SIZE": str(world_size),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "ROLE_NAME": "default",
    }


def _elastic_rdzv_configs(config: Elastic) -> dict[str, int]:
    return {
        "join_timeout": config.rdzv_join_timeout,
        "last_call_timeout": config.rdzv_last_call_timeout,
        "close_timeout": config.rdzv_close_timeout,
    }


def _plan_cluster_elastic(config: TaskConfig, environ: Mapping[str, str], nproc: int) -> LaunchPlan:
    elastic = config if isinstance(config, Elastic) else _ELASTIC_DEFAULTS
    text = environ.get("PET_NNODES") or _node_range_text(elastic.min_nodes, elastic.max_nodes)
    low, _, high = text.partition(":")
    try:
        min_nodes, max_nodes = int(low), int(high or low)
    except ValueError:
        raise ValueError(f"PET_NNODES={text!r} is not valid; use a node count or 'min:max'") from None
    restarts = _env_int(environ, "PET_MAX_RESTARTS", minimum=0)
    max_restarts = elastic.max_restarts if restarts is None else restarts
    endpoint = environ.get("PET_RDZV_ENDPOINT") or f"{environ.get('MASTER_ADDR', LOCAL_ADDR)}:{ELASTIC_RDZV_PORT}"
    backend = environ.get("PET_RDZV_BACKEND", RDZV_BACKEND)
    return LaunchPlan(
        kind=ExecutionKind.CLUSTER_ELASTIC,
        shm_size=config.shm_size,
        start_method=config.start_method,
        preload_modules=config.preload_modules,
        retry_hangs=config.retry_hangs,
        preflight=config.preflight,
        progress_timeout_s=_seconds(config.progress_timeout),
        collective_timeout_s=_collective_timeout_s(config),
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=nproc,
        procs_per_node=nproc,
        world_size=min_nodes * nproc,
        declared_world_size=min_nodes * nproc,
        rdzv_backend=backend,
        rdzv_endpoint=endpoint,
        max_restarts=max_restarts,
        monitor_interval=elastic.monitor_interval,
        rdzv_configs=_elastic_rdzv_configs(elastic),
        rank_env={
            "PET_NNODES": text,
            "PET_NPROC_PER_NODE": str(nproc),
            "PET_RDZV_ENDPOINT": endpoint,
            "PET_RDZV_BACKEND": backend,
            "PET_MAX_RESTARTS": str(max_restarts),
        },
    )
