"""Flyte task types for distributed PyTorch, and their serialization into a task template.

The template format is specified in ``docs/template-format.md``: ``custom`` is Flyte's own
``DistributedPyTorchTrainingTask`` proto as a JSON dict (so Flyte's built-in PyTorch backend can run it too), and
``config`` carries what the proto cannot, under ``pytorch.*`` keys. Execution is delegated to
``pytorch_core.launcher`` (with `FLYTEKIT`, the launcher's view of flytekit), imported only when a task runs, so
nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional, Union, cast

import flytekit
from flyteidl.plugins.kubeflow import pytorch_pb2
from flytekit import PythonFunctionTask, Resources
from flytekit.configuration import SerializationSettings
from flytekit.core.resources import convert_resources_to_resource_model
from flytekit.extend import TaskPlugins
from flytekit.extras.accelerators import BaseAccelerator
from google.protobuf import json_format

from flytekitplugins_pytorch._frontend import FLYTEKIT
from flytekitplugins_pytorch.config import (
    CleanPodPolicy,
    ConfigError,
    Elastic,
    Master,
    PyTorch,
    RestartPolicy,
    RunPolicy,
    UnknownOptionError,
    Worker,
    check_resources,
    check_shm_within_memory,
)
from pytorch_contract.suggest import closest
from pytorch_contract.template_keys import TASK_TYPE, TASK_TYPE_VERSION
from pytorch_core.config import (
    check_environment,
    check_gpu,
    check_image,
    check_job_limits,
    check_pod_template_rules,
    check_processes_against_gpus,
    check_quantity,
    check_replicas,
    check_shm_size,
    kfpytorch_replacement,
    reject_unknown_options,
    warn_replaced_command,
)
from pytorch_core.serialize import elastic_config, pytorch_config, training_task_custom
from pytorch_core.serialize import role_pod_template as role_pod_template  # re-exported: tests and tools use it

__all__ = ["PyTorchFunctionTask", "ElasticPyTorchFunctionTask", "pytorch_task", "TASK_TYPE", "TASK_TYPE_VERSION"]


# ---------------------------------------------------------------------------------------------------------------
# Serialization: pure functions of the config (`pytorch_core.serialize`, shared with the Flyte 2 front-end), so the
# backend's tests can reuse them.


def _resources_json(requests: Optional[Resources], limits: Optional[Resources]) -> Optional[dict[str, Any]]:
    """A role's flytekit requests and limits as flyteidl ``core.Resources`` JSON (None when neither is set)."""
    resources = convert_resources_to_resource_model(requests=requests, limits=limits)
    if not (resources.requests or resources.limits):
        return None
    converted: dict[str, Any] = json_format.MessageToDict(resources.to_flyte_idl())
    return converted


def pytorch_custom(config: PyTorch) -> dict[str, Any]:
    """The template's ``custom`` for a non-elastic job.

    Args:
        config: the task's configuration.

    Returns:
        ``DistributedPyTorchTrainingTask`` as a protobuf JSON dict. A master-only job (``worker.replicas == 0``)
        has no ``workerReplicas``.
    """
    return training_task_custom(config, pytorch_pb2.DistributedPyTorchTrainingTask, _resources_json)


def elastic_custom(config: Elastic) -> dict[str, Any]:
    """The template's ``custom`` for an elastic job: ``elasticConfig`` and ``workerReplicas`` (max nodes), no master.

    Args:
        config: the task's configuration.

    Returns:
        ``DistributedPyTorchTrainingTask`` as a protobuf JSON dict.
    """
    return training_task_custom(config, pytorch_pb2.DistributedPyTorchTrainingTask, _resources_json)


# ---------------------------------------------------------------------------------------------------------------
# Task types.


def _timeline_last(decks: list[Any]) -> None:
    """Move flytekit's Timeline Deck behind the others, in place, keeping their order.

    flytekit opens a Deck on its first tab, and the Timeline, made when the task process starts, would be that
    tab; the task's own Decks only arrive from rank 0 when the ranks are done.

    Args:
        decks: the task context's Decks (`ExecutionParameters.decks`).
    """
    from flytekit.deck.deck import TimeLineDeck

    timeline = [d for d in decks if isinstance(d, TimeLineDeck)]
    decks[:] = [d for d in decks if not isinstance(d, TimeLineDeck)] + timeline


def _gpus(resources: Any) -> Optional[int]:
    value = getattr(resources, "gpu", None)
    return check_gpu("gpu", value) if value is not None and not isinstance(value, (list, tuple)) else None


def _replica_gpus(config: Any, options: dict[str, Any]) -> dict[str, Optional[int]]:
    """Where each replica's GPU count comes from -> that count: a role's own limits or requests, else the task's
    (``@task(limits=...)``), which replicas without their own run with."""
    spec = options.get("resources")
    task_limits = options.get("limits") or getattr(spec, "limits", None)
    task_requests = options.get("requests") or getattr(spec, "requests", None)
    task_gpus = ("limits.gpu", _gpus(task_limits)) if _gpus(task_limits) else ("requests.gpu", _gpus(task_requests))
    out: dict[str, Optional[int]] = {}
    master, worker = getattr(config, "master", None), getattr(config, "worker", None)
    roles = [r for r in (master, worker) if r is not None and (r is master or r.replicas)]
    for role in roles or [None]:
        owner = type(role).__name__
        if role is not None and _gpus(role.limits):
            out[f"{owner}.limits.gpu"] = _gpus(role.limits)
        elif role is not None and _gpus(role.requests):
            out[f"{owner}.requests.gpu"] = _gpus(role.requests)
        else:
            out[task_gpus[0]] = task_gpus[1]
    return out


def _check_shm_against_task_limits(config: Any, options: dict[str, Any]) -> None:
    """``shm_size`` against the task's own memory limit, for replicas without a limit of their own (they run with
    the task container's)."""
    limits = options.get("limits") or getattr(options.get("resources"), "limits", None)
    groups = [group for group in (getattr(config, "master", None), getattr(config, "worker", None)) if group]
    if not groups or any(getattr(group.limits, "mem", None) is None for group in groups):
        check_shm_within_memory(f"{type(config).__name__}.shm_size", config.shm_size, "limits.mem", limits)


class _DistributedFunctionTask(PythonFunctionTask):
    """What both task types share: the config-type check, the template's ``custom``/``config``, distributed execute.

    Subclasses name their config class and the two pure functions that serialize it.
    """

    _TASK_TYPE = TASK_TYPE
    #: the launcher's view of flytekit (``pytorch_core.launcher.run_distributed`` reads it)
    pytorch_frontend = FLYTEKIT
    _CONFIG_TYPE: type = object
    _serialize_custom: Callable[[Any], dict[str, Any]]
    _serialize_config: Callable[[Any], dict[str, str]]

    def __init__(self, task_config: Any, task_function: Callable, **kwargs: Any) -> None:
        if not isinstance(task_config, self._CONFIG_TYPE):
            name = self._CONFIG_TYPE.__name__
            raise ConfigError(
                f"task_config={task_config!r} is not a {name}; use flytekitplugins_pytorch.{name}(...)",
                field="task_config",
                value=task_config,
            )
        if kwargs.get("pod_template") is not None:
            warn_replaced_command("pod_template", kwargs["pod_template"])
            check_pod_template_rules("pod_template", kwargs["pod_template"])
        accelerator = getattr(task_config, "accelerator", None)
        if isinstance(accelerator, BaseAccelerator):
            # PyTorch(accelerator=A100) means what pytorch_task(accelerator=A100) means: flytekit's own accelerator.
            given = kwargs.get("accelerator")
            if given is not None and given is not accelerator and given.to_flyte_idl() != accelerator.to_flyte_idl():
                raise ConfigError(
                    f"accelerator={given!r} differs from {type(task_config).__name__}.accelerator={accelerator!r}; "
                    "give the accelerator once",
                    field="accelerator",
                    value=given,
                )
            kwargs["accelerator"] = accelerator
        # flytekit's own options that end up in every replica pod, checked against Kubernetes' rules here.
        check_environment("environment", kwargs.get("environment"))
        image = kwargs.get("container_image")
        if isinstance(image, str) and "{{" not in image:  # "{{.image.<name>.fqn}}" is filled in by flytekit
            check_image("container_image", image)
        _check_shm_against_task_limits(task_config, kwargs)
        roles = [r for r in (getattr(task_config, "master", None), getattr(task_config, "worker", None)) if r]
        role_templates = {f"{type(r).__name__}.pod_template": r.pod_template for r in roles}
        worker = getattr(task_config, "worker", None)
        check_job_limits(
            kwargs.get("environment"),
            {"pod_template": kwargs.get("pod_template"), **role_templates},
            pytorchjob_roles=2 if worker is not None and worker.replicas else 1,
        )
        check_processes_against_gpus(
            type(task_config).__name__, getattr(task_config, "nproc_per_node", None), _replica_gpus(task_config, kwargs)
        )
        super().__init__(task_config, task_function, task_type=TASK_TYPE, task_type_version=TASK_TYPE_VERSION, **kwargs)

    def get_custom(self, settings: SerializationSettings) -> dict[str, Any]:
        """The template's ``custom``: ``DistributedPyTorchTrainingTask`` as a JSON dict.

        Args:
            settings: flytekit's serialization settings (unused: the replicas carry their own images).

        Returns:
            Protobuf-JSON of ``flyteidl.plugins.kubeflow.DistributedPyTorchTrainingTask`` (camelCase keys); see
            `pytorch_custom` and `elastic_custom`.
        """
        return self._serialize_custom(self.task_config)

    def get_config(self, settings: SerializationSettings) -> dict[str, str]:
        """The template's ``config``: flytekit's own entries plus the ``pytorch.*`` keys.

        Args:
            settings: flytekit's serialization settings, passed on to flytekit's own ``get_config``.

        Returns:
            String map: flytekit's entries (``primary_container_name`` with a pod template) and the ``pytorch.*``
            keys of docs/template-format.md (see `pytorch_config` and `elastic_config`).
        """
        return {**(super().get_config(settings) or {}), **self._serialize_config(self.task_config)}

    def execute(self, **kwargs: Any) -> Any:
        """Run the function distributed (locally: a process group; on a cluster: this replica's ranks).

        Args:
            **kwargs: the task's inputs.

        Returns:
            What the function returned on global rank 0.
        """
        from pytorch_core.launcher import run_distributed

        return run_distributed(self, kwargs, FLYTEKIT)

    def dispatch_execute(self, ctx: Any, input_literal_map: Any) -> Any:
        """flytekit's ``dispatch_execute``, with a failed preflight and a preemption handed to Flyte as the
        infrastructure's errors.

        flytekit wraps whatever ``execute`` raises as the user's error; a :class:`PreflightError` and a
        ``PreemptedError`` (the ranks stopped for a SIGTERM, ``pytorch_core.preemption``) are the infrastructure's,
        so they are raised outside that wrapper and ``pyflyte-execute`` writes a retryable ``SYSTEM`` error document
        for them: Flyte retries from its system budget, not the user's ``retries``.

        Args:
            ctx: the Flyte context.
            input_literal_map: the task's inputs.

        Returns:
            Any: what flytekit's ``dispatch_execute`` returns.

        Raises:
            PreflightError: a rank's preflight failed.
            PreemptedError: the ranks stopped for a preemption.
        """
        from flytekit.exceptions.user import FlyteUserRuntimeException

        from pytorch_core._preflight import PreflightError
        from pytorch_core.frontend import PreemptedError

        try:
            return super().dispatch_execute(ctx, input_literal_map)
        except FlyteUserRuntimeException as exc:
            if isinstance(exc.value, (PreflightError, PreemptedError)):
                raise exc.value from None
            raise

    def _write_decks(self, native_inputs: Any, native_outputs_as_map: Any, ctx: Any, new_user_params: Any) -> None:
        """flytekit's Deck writing; on a local run, the Deck's path is printed (flytekit logs it only at INFO).

        flytekit writes a local run's Deck to a new random directory of the context's file access; that directory is
        recorded on the way, so the printed path is the file just written. The task's own Decks (rank 0's, in the
        order it left them) come before flytekit's Timeline: the Deck opens on its first tab.
        """
        from flytekit.core.context_manager import FlyteContextManager
        from flytekit.deck.deck import DECK_FILE_NAME

        if new_user_params is not None:
            _timeline_last(new_user_params.decks)

        local = bool(ctx.execution_state and ctx.execution_state.is_local_execution())
        if self._disable_deck is not False or not local:
            super()._write_decks(native_inputs, native_outputs_as_map, ctx, new_user_params)
            return
        file_access = FlyteContextManager.current_context().file_access
        made: list[str] = []
        original = file_access.get_random_local_directory

        def recording() -> str:
            made.append(original())
            return made[-1]

        file_access.get_random_local_directory = recording
        try:
            super()._write_decks(native_inputs, native_outputs_as_map, ctx, new_user_params)
        finally:
            del file_access.get_random_local_directory  # the instance attribute; the method shows again
        decks = [os.path.join(d, DECK_FILE_NAME) for d in made if os.path.isfile(os.path.join(d, DECK_FILE_NAME))]
        if decks:
            print(f"Deck of {self.name}: file://{decks[-1]}", file=sys.stderr, flush=True)


class PyTorchFunctionTask(_DistributedFunctionTask, PythonFunctionTask[PyTorch]):
    """A Python function run as a PyTorchJob with a master and workers (task type ``pytorch``, version 1).

    Built by ``@task(task_config=PyTorch(...))`` or `pytorch_task`. Locally it runs as real multi-process
    ``torch.distributed``; on a cluster each replica runs it and rank 0's outputs are the task's.

    Args:
        task_config: the job configuration.
        task_function: the user's function.
        **kwargs: flytekit ``PythonFunctionTask`` options.

    Raises:
        ConfigError: `task_config` is not a `PyTorch`.
    """

    _CONFIG_TYPE = PyTorch
    _serialize_custom = staticmethod(pytorch_custom)
    _serialize_config = staticmethod(pytorch_config)


class ElasticPyTorchFunctionTask(_DistributedFunctionTask, PythonFunctionTask[Elastic]):
    """A Python function run torchrun-style: ``nnodes`` pods rendezvous, no master (task type ``pytorch``, v1).

    Built by ``@task(task_config=Elastic(...))``. ``custom`` has ``workerReplicas`` (``replicas`` = max nodes)
    and ``elasticConfig``; ``pytorch.nproc_per_node`` is in ``config`` only when it is a word.

    Args:
        task_config: the elastic job configuration.
        task_function: the user's function.
        **kwargs: flytekit ``PythonFunctionTask`` options.

    Raises:
        ConfigError: `task_config` is not an `Elastic`.
    """

    _CONFIG_TYPE = Elastic
    _serialize_custom = staticmethod(elastic_custom)
    _serialize_config = staticmethod(elastic_config)


TaskPlugins.register_pythontask_plugin(PyTorch, PyTorchFunctionTask)
TaskPlugins.register_pythontask_plugin(Elastic, ElasticPyTorchFunctionTask)


# ---------------------------------------------------------------------------------------------------------------
# The flat decorator of the original Flyte PyTorch docs.

_RESOURCE_WORDS = {"cpu": "cpu", "mem": "memory", "gpu": "gpu", "ephemeral_storage": "storage"}
"""flytekit ``Resources`` field -> the word in ``per_replica_<word>_{request,limit}``."""


@functools.lru_cache(maxsize=1)
def _flytekit_task_options() -> frozenset[str]:
    """Keywords of ``flytekit.task`` that `pytorch_task` passes through (read from its signature).

    Read from ``flytekit.core.task.task``, where flytekit defines it: ``flytekit.task`` is the same function, except
    under ``flyte-migrate``, which replaces it with a shim of its own signature."""
    params = inspect.signature(flytekit.core.task.task).parameters
    names = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY or p.default is not p.empty}
    # flytekit pops these from **kwargs for backwards compatibility.
    names |= {"cache_serialize", "cache_version", "cache_ignore_input_vars"}
    return frozenset(names - {"_task_function", "task_config"})


_FLAT_OWNERS = ("PyTorch.", "Master.", "Worker.", "RunPolicy.", "run_policy.")
_FLAT_RENAMES = {"replicas": "workers_count"}
"""Dataclass fields whose flat keyword has another name (``Worker.replicas`` is ``workers_count``)."""


@contextlib.contextmanager
def _flat_names() -> Iterator[None]:
    """Re-raise a `ConfigError` from the dataclasses under the `pytorch_task` keyword that fed the field.

    ``pytorch_task(restart_policy="sometimes")`` fails in ``Master.__post_init__``; the user typed
    ``restart_policy``, so the message says ``pytorch_task.restart_policy='sometimes' is ...``.
    """
    try:
        yield
    except ConfigError as e:
        name = e.field or ""
        short = name
        while short.startswith(_FLAT_OWNERS):
            short = short.split(".", 1)[1]
        keyword = _FLAT_RENAMES.get(short, short)
        message = str(e)
        if name == short or keyword not in inspect.signature(pytorch_task).parameters or not message.startswith(name):
            raise
        flat_name = f"pytorch_task.{keyword}"
        raise ConfigError(flat_name + message[len(name) :], field=flat_name, value=e.value) from None


def _reject_unknown_task_options(task_options: dict[str, Any]) -> None:
    """An unknown keyword of `pytorch_task`: kfpytorch's names get their replacement; others the nearest of ours
    and flytekit's (each once); with none near, only ours are listed, not flytekit's ~40 `@task` options too."""
    valid_flytekit = _flytekit_task_options()
    unknown = [name for name in task_options if name not in valid_flytekit]
    if not unknown:
        return
    skip = ("_task_function", "task_options")
    ours = [p for p in inspect.signature(pytorch_task).parameters if p not in skip]
    name = unknown[0]
    valid = list(dict.fromkeys([*ours, *valid_flytekit]))
    if kfpytorch_replacement("pytorch_task", name, None) is not None or closest(name, valid):
        reject_unknown_options("pytorch_task", [name], valid, task_options)
    raise UnknownOptionError(
        f"pytorch_task.{name} is not an option; valid options: {', '.join(sorted(ours))}, and "
        "flytekit's @task options (retries, cache, requests, environment, ...)",
        field=f"pytorch_task.{name}",
        value=name,
    )


def pytorch_task(
    _task_function: Optional[Callable] = None,
    *,
    workers_count: int = Worker.replicas,
    per_replica_cpu_request: Optional[Union[str, int, float]] = None,
    per_replica_cpu_limit: Optional[Union[str, int, float]] = None,
    per_replica_memory_request: Optional[Union[str, int]] = None,
    per_replica_memory_limit: Optional[Union[str, int]] = None,
    per_replica_gpu_request: Optional[Union[str, int]] = None,
    per_replica_gpu_limit: Optional[Union[str, int]] = None,
    per_replica_storage_request: Optional[Union[str, int]] = None,
    per_replica_storage_limit: Optional[Union[str, int]] = None,
    nproc_per_node: Union[int, str] = PyTorch.nproc_per_node,
    queue: Optional[str] = None,
    priority_class: Optional[str] = None,
    gang_scheduling: bool = RunPolicy.gang_scheduling,
    min_available: Optional[int] = None,
    suspend: bool = RunPolicy.suspend,
    shm_size: Optional[str] = None,
    accelerator: Optional[Union[str, BaseAccelerator]] = None,
    gpu_resource: Optional[str] = None,
    restart_policy: Union[RestartPolicy, str] = Worker.restart_policy,
    clean_pod_policy: Union[CleanPodPolicy, str] = RunPolicy.clean_pod_policy,
    backoff_limit: Optional[int] = None,
    active_deadline_seconds: Optional[int] = None,
    ttl_seconds_after_finished: Optional[int] = None,
    start_method: str = PyTorch.start_method,
    collective_timeout: Optional[Any] = None,
    preload_modules: Sequence[str] = (),
    retry_hangs: bool = PyTorch.retry_hangs,
    preflight: bool = PyTorch.preflight,
    progress_timeout: Optional[Any] = None,
    **task_options: Any,
) -> Union[PyTorchFunctionTask, Callable[[Callable], PyTorchFunctionTask]]:
    """Decorate a typed function as a distributed PyTorch task (one master + ``workers_count`` workers).

    Usable bare (``@pytorch_task``) or with arguments::

        @pytorch_task(workers_count=2, per_replica_cpu_request="500m", per_replica_memory_request="4Gi",
                      per_replica_memory_limit="8Gi", per_replica_gpu_limit="1")
        def train(batch_size: int, epochs: int, learning_rate: float) -> List[float]: ...

    Every setting is checked here, at decoration time.

    Args:
        _task_function: the function, when used bare.
        workers_count: worker pods besides the master, >= 0 (0 = master only).
        per_replica_cpu_request: CPU request of every replica (master and workers), a quantity.
        per_replica_cpu_limit: CPU limit of every replica.
        per_replica_memory_request: memory request of every replica, e.g. ``"4Gi"``.
        per_replica_memory_limit: memory limit of every replica.
        per_replica_gpu_request: GPUs per replica, a whole number (Kubernetes needs it equal to the limit).
        per_replica_gpu_limit: GPUs per replica, a whole number.
        per_replica_storage_request: ephemeral-storage request of every replica.
        per_replica_storage_limit: ephemeral-storage limit of every replica.
        nproc_per_node: ranks per pod (`PyTorch.nproc_per_node`).
        queue: `RunPolicy.queue`.
        priority_class: `RunPolicy.priority_class`.
        gang_scheduling: `RunPolicy.gang_scheduling`.
        min_available: `RunPolicy.min_available`.
        suspend: `RunPolicy.suspend`.
        shm_size: `PyTorch.shm_size`.
        accelerator: a string is `PyTorch.accelerator` (``pytorch.accelerator``); a flytekit ``BaseAccelerator`` is
            passed to flytekit's ``@task(accelerator=...)``.
        gpu_resource: `PyTorch.gpu_resource`.
        restart_policy: restart policy of master and workers (`RestartPolicy` or its value, e.g. ``"ExitCode"``).
        clean_pod_policy: `RunPolicy.clean_pod_policy`.
        backoff_limit: `RunPolicy.backoff_limit`.
        active_deadline_seconds: `RunPolicy.active_deadline_seconds`.
        ttl_seconds_after_finished: `RunPolicy.ttl_seconds_after_finished`.
        start_method: `PyTorch.start_method`.
        collective_timeout: `PyTorch.collective_timeout`.
        preload_modules: `PyTorch.preload_modules`.
        retry_hangs: `PyTorch.retry_hangs`.
        preflight: `PyTorch.preflight`.
        progress_timeout: `PyTorch.progress_timeout`.
        **task_options: any option of flytekit's ``@task`` (``retries``, ``timeout``, ``cache``, ``cache_version``,
            ``interruptible``, ``environment``, ``container_image``, ``secret_requests``, ``pod_template``,
            ``pod_template_name``, ``requests``, ``limits``, deck options, ...).

    Returns:
        The task, or (with arguments) a decorator producing it.

    Raises:
        ConfigError: a bad setting (the message names the keyword, the value and what is allowed); for an unknown
            keyword an `UnknownOptionError` (also a ``TypeError``) suggesting the closest valid name.
    """
    _reject_unknown_task_options(task_options)

    check_replicas("pytorch_task.workers_count", workers_count, minimum=0)
    flat = {
        ("requests", "cpu"): per_replica_cpu_request,
        ("limits", "cpu"): per_replica_cpu_limit,
        ("requests", "mem"): per_replica_memory_request,
        ("limits", "mem"): per_replica_memory_limit,
        ("requests", "gpu"): per_replica_gpu_request,
        ("limits", "gpu"): per_replica_gpu_limit,
        ("requests", "ephemeral_storage"): per_replica_storage_request,
        ("limits", "ephemeral_storage"): per_replica_storage_limit,
    }

    def flat_name(kind: str, attr: Optional[str]) -> str:
        return f"pytorch_task.per_replica_{_RESOURCE_WORDS.get(attr or '', '')}_{kind[:-1]}"

    # Check each value before flytekit's Resources sees it (it raises a bare AssertionError on a float memory).
    for (kind, attr), value in flat.items():
        if attr == "gpu":
            check_gpu(flat_name(kind, attr), value)
        else:
            check_quantity(flat_name(kind, attr), value)
    requests = Resources(**{a: str(v) for (k, a), v in flat.items() if k == "requests" and v is not None})
    limits = Resources(**{a: str(v) for (k, a), v in flat.items() if k == "limits" and v is not None})
    check_resources(requests, limits, flat_name)
    requests_or_none = requests if requests != Resources() else None
    limits_or_none = limits if limits != Resources() else None
    # Named by the keywords typed (the replicas would name Master.limits.mem).
    check_shm_within_memory(
        "pytorch_task.shm_size",
        check_shm_size("pytorch_task.shm_size", shm_size),
        "pytorch_task.per_replica_memory_limit",
        limits_or_none,
    )

    # flytekit's own container requests/limits pass through, but get the same checks (flytekit accepts "4Gx").
    check_resources(
        task_options.get("requests"),
        task_options.get("limits"),
        lambda kind, attr: f"pytorch_task.{kind}.{attr}" if attr else f"pytorch_task.{kind}",
    )

    if isinstance(accelerator, BaseAccelerator):
        task_options["accelerator"] = accelerator
        accelerator = None

    # Master, Worker and RunPolicy accept a policy's string value and coerce it; their fields are typed as the enum
    # they hold after __post_init__. An error names the keyword the user typed, not the dataclass field it fed.
    with _flat_names():
        config = PyTorch(
            master=Master(
                requests=requests_or_none, limits=limits_or_none, restart_policy=cast(RestartPolicy, restart_policy)
            ),
            worker=Worker(
                replicas=workers_count,
                requests=requests_or_none,
                limits=limits_or_none,
                restart_policy=cast(RestartPolicy, restart_policy),
            ),
            run_policy=RunPolicy(
                clean_pod_policy=cast(CleanPodPolicy, clean_pod_policy),
                backoff_limit=backoff_limit,
                active_deadline_seconds=active_deadline_seconds,
                ttl_seconds_after_finished=ttl_seconds_after_finished,
                queue=queue,
                priority_class=priority_class,
                gang_scheduling=gang_scheduling,
                min_available=min_available,
                suspend=suspend,
            ),
            nproc_per_node=nproc_per_node,
            shm_size=shm_size,
            accelerator=accelerator,
            gpu_resource=gpu_resource,
            start_method=start_method,
            collective_timeout=collective_timeout,
            preload_modules=cast(tuple[str, ...], preload_modules),
            retry_hangs=retry_hangs,
            preflight=preflight,
            progress_timeout=progress_timeout,
        )

    def wrapper(fn: Callable) -> PyTorchFunctionTask:
        return flytekit.task(fn, task_config=config, **task_options)

    if _task_function is not None:
        return wrapper(_task_function)
    return wrapper
