"""Moving flytekit tasks to Flyte 2: translate their PyTorch configs to this package's, for ``flyte-migrate``.

`to_flyte2` translates the configs of the flytekit front-end (``flytekitplugins_pytorch.PyTorch`` / ``Elastic``, all
options, Master/Worker included) and of flytekit's ``kfpytorch`` plugin (``flytekitplugins.kfpytorch.PyTorch`` /
``Elastic``, with the differences docs/migration.md lists). `register` hands it to ``flyte-migrate``, whose shim
turns ``flytekit.task(task_config=...)`` into a Flyte 2 task; ``@pytorch_task`` goes the same way, since it calls
``flytekit.task``. Call `register` after ``import flyte_migrate`` and before the tasks' modules are imported.

``flyte-migrate`` looks translations up by the config class's ``__name__``, and both plugins name theirs ``PyTorch``
and ``Elastic``: `to_flyte2` takes either. This module imports flytekit (the configs it reads are flytekit's), so it
is not imported by ``flyte2_pytorch`` itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import flyte2_pytorch as f2

__all__ = ["to_flyte2", "register"]

#: kfpytorch's Elastic ``rdzv_configs`` keys -> Elastic fields. torch's c10d rendezvous reads these three.
_RDZV_KEYS = {
    "join_timeout": "rdzv_join_timeout",
    "last_call_timeout": "rdzv_last_call_timeout",
    "close_timeout": "rdzv_close_timeout",
}


def _resources(value: Any) -> Any:
    """flytekit.Resources -> flyte.Resources (single values)."""
    if value is None:
        return None
    import flyte

    gpu = value.gpu
    return flyte.Resources(
        cpu=value.cpu,
        memory=value.mem,
        gpu=None if gpu is None else int(gpu),
        disk=value.ephemeral_storage,
    )


def _pod_template(value: Any) -> Any:
    """flytekit.PodTemplate -> flyte.PodTemplate (the same four attributes)."""
    if value is None:
        return None
    import flyte

    return flyte.PodTemplate(
        pod_spec=value.pod_spec,
        primary_container_name=value.primary_container_name,
        labels=value.labels,
        annotations=value.annotations,
    )


def _fields(config: Any) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def _ours(config: Any) -> Union[f2.PyTorch, f2.Elastic]:
    """The flytekit front-end's config -> this package's: the same options, field for field."""
    import flytekitplugins_pytorch as sdk

    values = _fields(config)
    values["run_policy"] = f2.RunPolicy(**_fields(config.run_policy))
    if isinstance(config, sdk.Elastic):
        return f2.Elastic(**values)

    def role(r: Any, cls: type) -> Any:
        fields = _fields(r)
        fields.update(
            requests=_resources(r.requests), limits=_resources(r.limits), pod_template=_pod_template(r.pod_template)
        )
        return cls(**fields)

    values["master"] = role(config.master, f2.Master)
    values["worker"] = role(config.worker, f2.Worker)
    return f2.PyTorch(**values)


def _kf_run_policy(policy: Any) -> f2.RunPolicy:
    if policy is None:
        return f2.RunPolicy()
    kwargs: dict[str, Any] = {
        "ttl_seconds_after_finished": policy.ttl_seconds_after_finished,
        "active_deadline_seconds": policy.active_deadline_seconds,
        "backoff_limit": policy.backoff_limit,
    }
    if policy.clean_pod_policy is not None:
        kwargs["clean_pod_policy"] = policy.clean_pod_policy.name  # NONE / ALL / RUNNING
    return f2.RunPolicy(**kwargs)


def _kf_restart(policy: Any) -> Any:
    if policy is None:
        return f2.Worker.restart_policy
    return {"FAILURE": f2.RestartPolicy.ON_FAILURE}.get(policy.name, policy.name)


def _kf_role(role: Any, cls: type, **extra: Any) -> Any:
    return cls(
        image=role.image,
        requests=_resources(role.requests),
        limits=_resources(role.limits),
        restart_policy=_kf_restart(role.restart_policy),
        **extra,
    )


def _kfpytorch(config: Any) -> Union[f2.PyTorch, f2.Elastic]:
    """kfpytorch's config -> this package's (docs/migration.md, "From flytekit's kfpytorch")."""
    from flytekitplugins import kfpytorch

    shm: dict[str, Any] = {} if config.increase_shared_mem else {"shm_size": "0"}
    if isinstance(config, kfpytorch.Elastic):
        rdzv = dict(config.rdzv_configs or {})
        rdzv.pop("timeout", None)  # the store's timeout; the join timeout below bounds the rendezvous
        unknown = sorted(set(rdzv) - set(_RDZV_KEYS))
        if unknown:
            raise f2.ConfigError(
                f"Elastic.rdzv_configs has keys {unknown} with no Elastic option; use {sorted(_RDZV_KEYS)}",
                field="Elastic.rdzv_configs",
                value=config.rdzv_configs,
            )
        return f2.Elastic(
            nnodes=config.nnodes,
            nproc_per_node=config.nproc_per_node,
            start_method=config.start_method,
            monitor_interval=config.monitor_interval,
            max_restarts=config.max_restarts,
            run_policy=_kf_run_policy(config.run_policy),
            **{_RDZV_KEYS[k]: v for k, v in rdzv.items()},
            **shm,
        )
    replicas = config.worker.replicas if config.worker.replicas is not None else config.num_workers
    return f2.PyTorch(
        master=_kf_role(config.master, f2.Master),
        worker=_kf_role(config.worker, f2.Worker, replicas=f2.Worker.replicas if replicas is None else replicas),
        run_policy=_kf_run_policy(config.run_policy),
        **shm,
    )


def to_flyte2(config: Any) -> Optional[Union[f2.PyTorch, f2.Elastic]]:
    """Translate a flytekit task's PyTorch config to this package's.

    Args:
        config: a ``task_config`` of the flytekit front-end or of kfpytorch.

    Returns:
        The Flyte 2 config, or None for any other object (``flyte-migrate``'s contract).

    Raises:
        ConfigError: a value this package rejects (the message names the field).
    """
    import flytekitplugins_pytorch as sdk

    if isinstance(config, (sdk.PyTorch, sdk.Elastic)):
        return _ours(config)
    try:
        from flytekitplugins import kfpytorch
    except ImportError:
        return None
    if isinstance(config, (kfpytorch.PyTorch, kfpytorch.Elastic)):
        return _kfpytorch(config)
    return None


def register() -> None:
    """Register `to_flyte2` with ``flyte-migrate`` for the config classes named ``PyTorch`` and ``Elastic``."""
    from flyte_migrate._plugins import register_plugin

    for name in ("PyTorch", "Elastic"):
        register_plugin(name, to_flyte2)
