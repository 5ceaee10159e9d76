"""Configuration of a distributed PyTorch task for Flyte 2: ``flyte.TaskEnvironment(plugin_config=PyTorch(...))``.

The options are those of the flytekit front-end (``flytekitplugins_pytorch.PyTorch``, ``Elastic``, ``Master``,
``Worker``, ``RunPolicy``): the same names, the same defaults and the same policy enums (from `pytorch_contract`), so a
task moves between the Flyte generations by changing its imports. Two things follow Flyte 2's own types instead of
flytekit's: a role's ``requests``/``limits`` are ``flyte.Resources`` and its ``pod_template`` is a
``flyte.PodTemplate`` (the same four attributes as flytekit's).

Checked here, when the config is built, with the flytekit front-end's messages: what serialization relies on (nested
configs of the right class, the policies, ``nnodes``, ``Worker.replicas``, ``nproc_per_node``) and the Flyte 2 types
of the resources and pod templates. The other value checks of the flytekit front-end (quantities, names, images,
timeouts, module names) live in ``flytekitplugins_pytorch.config``, which imports flytekit at module level: a local
run applies them when it hands the task to the launcher (``_local.sdk_config``); at definition they apply once they
sit in the flytekit-free core both front-ends share.

This module imports neither flytekit nor torch nor flyte.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional, TypeVar, Union

from pytorch_contract.k8s_names import JOB_NAME_MAX_LENGTH, MAX_REPLICAS_PER_ROLE
from pytorch_contract.template_keys import NPROC_PER_NODE_WORDS, CleanPodPolicy, RestartPolicy, nproc_per_node_message

__all__ = [
    "ConfigError",
    "RestartPolicy",
    "CleanPodPolicy",
    "RunPolicy",
    "Master",
    "Worker",
    "PyTorch",
    "Elastic",
    "DEFAULT_START_METHOD",
]

INT32_MAX = 2**31 - 1
DEFAULT_START_METHOD = "forkserver"
_NNODES = re.compile(r" *([0-9]+) *(?:: *([0-9]+) *)?")
_E = TypeVar("_E", bound=Enum)
_MAX_REPLICAS_ALLOWED = (
    f"use at most {MAX_REPLICAS_PER_ROLE}: pod and Service names <job>-worker-<index> must fit 63 characters "
    f"and the job name takes up to {JOB_NAME_MAX_LENGTH}, leaving 5 digits for the index"
)


class ConfigError(ValueError):
    """A setting that cannot work: ``<Class>.<field>=<value!r> is <problem>; <what is allowed>``.

    Args:
        message: the full message.
        field: the dotted name of the setting (``"Worker.replicas"``).
        value: the rejected value.
    """

    def __init__(self, message: str, *, field: Optional[str] = None, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


def _fail(name: str, value: Any, problem: str, allowed: str) -> ConfigError:
    return ConfigError(f"{name}={value!r} is {problem}; {allowed}", field=name, value=value)


def _whole(name: str, value: Any, *, minimum: int, optional: bool = False, maximum: int = INT32_MAX) -> None:
    if value is None and optional:
        return
    allowed = f"use a whole number >= {minimum}" + (" or None" if optional else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, value, f"not a whole number ({type(value).__name__})", allowed)
    if value < minimum:
        raise _fail(name, value, "negative" if value < 0 else f"below {minimum}", allowed)
    if value > maximum:
        raise _fail(name, value, f"above {maximum}", f"use a whole number <= {maximum}")


def _enum(name: str, value: Any, enum: type[_E]) -> _E:
    """An enum member, or a string naming one case-insensitively (``"OnFailure"``, ``"on_failure"``)."""
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        key = value.replace("_", "").replace("-", "").lower()
        for member in enum:
            if key in (str(member.value).lower(), member.name.replace("_", "").lower()):
                return member
    allowed = ", ".join(repr(m.value) for m in enum)
    raise _fail(name, value, f"not a {enum.__name__}", f"use one of {allowed} (or {enum.__name__}.<NAME>)")


def _instance(name: str, value: Any, kind: type, hint: str) -> None:
    if not isinstance(value, kind):
        raise _fail(name, value, f"not a {kind.__name__} ({type(value).__name__})", f"use {hint}")


def _resources(name: str, value: Any) -> None:
    """A role's requests or limits: a ``flyte.Resources`` of single values (no ``(request, limit)`` pairs)."""
    if value is None:
        return
    import flyte  # the user built a flyte.Resources, so flyte is installed

    if not isinstance(value, flyte.Resources):
        raise _fail(name, value, f"not flyte.Resources ({type(value).__name__})", "use flyte.Resources(...) or None")
    for attr in ("cpu", "memory"):
        if isinstance(getattr(value, attr), tuple):
            raise _fail(
                f"{name}.{attr}", getattr(value, attr), "a (request, limit) pair", "give requests and limits separately"
            )
    gpu = value.gpu
    if gpu is not None and not (isinstance(gpu, int) and not isinstance(gpu, bool)):
        raise _fail(
            f"{name}.gpu",
            gpu,
            "not a GPU count",
            "give a whole number of GPUs here and the device type as PyTorch(accelerator=...)",
        )
    if value.shm is not None:
        raise _fail(f"{name}.shm", value.shm, "set on a role", "set PyTorch(shm_size=...) for every replica")


def _pod_template(name: str, value: Any) -> None:
    if value is None:
        return
    import flyte

    _instance(name, value, flyte.PodTemplate, "flyte.PodTemplate(pod_spec=kubernetes.client.V1PodSpec(...), ...)")


def _nproc(name: str, value: Any) -> Union[int, str]:
    if isinstance(value, str) and value.lower() in NPROC_PER_NODE_WORDS:
        return value.lower()
    message = nproc_per_node_message(name, value, digits_as_text=False)
    if message is not None:
        raise ConfigError(message, field=name, value=value)
    return value


def _common(owner: str, obj: Any) -> None:
    _instance(f"{owner}.run_policy", obj.run_policy, RunPolicy, "flyte2_pytorch.RunPolicy(...)")
    obj.nproc_per_node = _nproc(f"{owner}.nproc_per_node", obj.nproc_per_node)


def _check_min_available(owner: str, run_policy: RunPolicy, total: int, total_text: str) -> None:
    if run_policy.min_available is not None and run_policy.min_available > total:
        raise _fail(
            f"{owner}.run_policy.min_available",
            run_policy.min_available,
            f"more than the job's {total_text}",
            f"use 1..{total}",
        )


@dataclass
class RunPolicy:
    """Job-level policy (``spec.runPolicy``); the options and defaults of ``flytekitplugins_pytorch.RunPolicy``."""

    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.RUNNING
    backoff_limit: Optional[int] = None
    active_deadline_seconds: Optional[int] = None
    ttl_seconds_after_finished: Optional[int] = None
    queue: Optional[str] = None
    priority_class: Optional[str] = None
    gang_scheduling: bool = False
    min_available: Optional[int] = None
    suspend: bool = False

    def __post_init__(self) -> None:
        self.clean_pod_policy = _enum("RunPolicy.clean_pod_policy", self.clean_pod_policy, CleanPodPolicy)
        _whole("RunPolicy.backoff_limit", self.backoff_limit, minimum=0, optional=True)
        _whole("RunPolicy.active_deadline_seconds", self.active_deadline_seconds, minimum=1, optional=True)
        _whole("RunPolicy.ttl_seconds_after_finished", self.ttl_seconds_after_finished, minimum=0, optional=True)
        _whole("RunPolicy.min_available", self.min_available, minimum=1, optional=True)


@dataclass
class Master:
    """The master replica group (one pod, global rank 0); ``requests``/``limits`` are ``flyte.Resources``."""

    image: Optional[str] = None
    requests: Optional[Any] = None
    limits: Optional[Any] = None
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    pod_template: Optional[Any] = None

    def __post_init__(self) -> None:
        _role("Master", self)


@dataclass
class Worker:
    """The worker replica group: ``replicas`` pods (0 = a master-only job)."""

    replicas: int = 1
    image: Optional[str] = None
    requests: Optional[Any] = None
    limits: Optional[Any] = None
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    pod_template: Optional[Any] = None

    def __post_init__(self) -> None:
        _whole("Worker.replicas", self.replicas, minimum=0)
        if self.replicas > MAX_REPLICAS_PER_ROLE:
            raise _fail("Worker.replicas", self.replicas, f"above {MAX_REPLICAS_PER_ROLE}", _MAX_REPLICAS_ALLOWED)
        _role("Worker", self)


def _role(owner: str, role: Union[Master, Worker]) -> None:
    role.restart_policy = _enum(f"{owner}.restart_policy", role.restart_policy, RestartPolicy)
    _resources(f"{owner}.requests", role.requests)
    _resources(f"{owner}.limits", role.limits)
    _pod_template(f"{owner}.pod_template", role.pod_template)


@dataclass
class PyTorch:
    """A PyTorchJob with one master and ``worker.replicas`` workers, each running ``nproc_per_node`` ranks.

    The options and defaults of ``flytekitplugins_pytorch.PyTorch`` (see its documentation for each).
    """

    master: Master = field(default_factory=Master)
    worker: Worker = field(default_factory=Worker)
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    nproc_per_node: Union[int, str] = 1
    shm_size: Optional[str] = None
    accelerator: Optional[str] = None
    gpu_resource: Optional[str] = None
    start_method: str = DEFAULT_START_METHOD
    collective_timeout: Optional[datetime.timedelta] = None
    preload_modules: tuple[str, ...] = ()
    retry_hangs: bool = True
    preflight: bool = True
    progress_timeout: Optional[datetime.timedelta] = None

    def __post_init__(self) -> None:
        _instance("PyTorch.master", self.master, Master, "flyte2_pytorch.Master(...)")
        _instance("PyTorch.worker", self.worker, Worker, "flyte2_pytorch.Worker(replicas=...)")
        _common("PyTorch", self)
        if self.worker.replicas == 0 and self.worker.pod_template is not None:
            raise ConfigError(
                "PyTorch.worker.pod_template=PodTemplate(...) is given for a master-only job (worker.replicas=0); "
                "set Worker(replicas=...) >= 1, or put the settings on Master(pod_template=...)",
                field="PyTorch.worker.pod_template",
                value=self.worker.pod_template,
            )
        total = 1 + self.worker.replicas
        _check_min_available(
            "PyTorch", self.run_policy, total, f"{total} replicas (1 master + {self.worker.replicas} workers)"
        )

    @property
    def replicas(self) -> int:
        """Pods in the job: the master plus the workers."""
        return 1 + self.worker.replicas


@dataclass
class Elastic:
    """A torchrun-style elastic job: between ``min_nodes`` and ``max_nodes`` worker pods rendezvous, no master.

    The options and defaults of ``flytekitplugins_pytorch.Elastic``.
    """

    nnodes: Union[int, str] = 1
    nproc_per_node: Union[int, str] = 1
    start_method: str = DEFAULT_START_METHOD
    monitor_interval: float = 1.0
    max_restarts: int = 0
    rdzv_join_timeout: int = 900
    rdzv_last_call_timeout: int = 30
    rdzv_close_timeout: int = 30
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    shm_size: Optional[str] = None
    accelerator: Optional[str] = None
    gpu_resource: Optional[str] = None
    collective_timeout: Optional[datetime.timedelta] = None
    preload_modules: tuple[str, ...] = ()
    retry_hangs: bool = True
    preflight: bool = True
    progress_timeout: Optional[datetime.timedelta] = None

    def __post_init__(self) -> None:
        self._min_nodes, self._max_nodes = _parse_nnodes(self.nnodes)
        _common("Elastic", self)
        interval = self.monitor_interval
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise _fail("Elastic.monitor_interval", interval, "not a positive number of seconds", "use e.g. 1.0")
        _whole("Elastic.max_restarts", self.max_restarts, minimum=0)
        for name in ("rdzv_join_timeout", "rdzv_last_call_timeout", "rdzv_close_timeout"):
            _whole(f"Elastic.{name}", getattr(self, name), minimum=1)
        _check_min_available("Elastic", self.run_policy, self._max_nodes, f"{self._max_nodes} nodes at most")

    @property
    def min_nodes(self) -> int:
        """The fewest pods the job runs with."""
        return self._min_nodes

    @property
    def max_nodes(self) -> int:
        """The most pods the job runs with (the PyTorchJob's worker replicas)."""
        return self._max_nodes


def _parse_nnodes(value: Any) -> tuple[int, int]:
    allowed = "use a positive int or 'min:max' with 1 <= min <= max, e.g. 2 or '1:4'"
    if isinstance(value, bool):
        raise _fail("Elastic.nnodes", value, "not a node count", allowed)
    if isinstance(value, int):
        low = high = value
    elif isinstance(value, str) and (match := _NNODES.fullmatch(value)):
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
    else:
        raise _fail("Elastic.nnodes", value, "not a node count", allowed)
    if low < 1:
        raise _fail("Elastic.nnodes", value, "below 1 node", allowed)
    if low > high:
        raise _fail("Elastic.nnodes", value, "a range with min > max", allowed)
    if high > MAX_REPLICAS_PER_ROLE:
        raise _fail(
            "Elastic.nnodes",
            value,
            f"above {MAX_REPLICAS_PER_ROLE} nodes",
            f"use at most {MAX_REPLICAS_PER_ROLE}: pod and Service names <job>-worker-<index> must fit 63 characters",
        )
    return low, high
