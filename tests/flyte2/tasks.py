"""Flyte 2 tasks of the tests: one environment per configuration, each with the same typed function.

Each entry of `CASES` pairs a Flyte 2 config with the flytekit front-end's config of the same options, so the tests can
check that both front-ends write the same message.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import flyte

import flyte2_pytorch as f2

IMAGE = "ghcr.io/example/train:1.0"


def _sdk_cases() -> dict[str, Callable[[], Any]]:
    """The flytekit front-end's configs, built on demand (they import flytekit)."""
    import flytekit

    import flytekitplugins_pytorch as sdk

    return {
        "default": lambda: sdk.PyTorch(),
        "roles": lambda: sdk.PyTorch(
            master=sdk.Master(
                image="ghcr.io/example/master:2",
                requests=flytekit.Resources(cpu="1", mem="2Gi"),
                restart_policy="ExitCode",
            ),
            worker=sdk.Worker(
                replicas=3,
                requests=flytekit.Resources(cpu="2", mem="4Gi", gpu="2"),
                limits=flytekit.Resources(mem="8Gi", gpu="2"),
                restart_policy="OnFailure",
            ),
            run_policy=sdk.RunPolicy(
                clean_pod_policy="All", backoff_limit=0, active_deadline_seconds=3600, queue="team-a", suspend=True
            ),
            nproc_per_node=2,
            shm_size="1Gi",
            accelerator="nvidia-tesla-a100",
        ),
        "master_only": lambda: sdk.PyTorch(worker=sdk.Worker(replicas=0)),
        "elastic": lambda: sdk.Elastic(nnodes="1:4", nproc_per_node=2, max_restarts=2),
        "elastic_word": lambda: sdk.Elastic(
            nnodes=2, nproc_per_node="gpu", run_policy=sdk.RunPolicy(ttl_seconds_after_finished=0)
        ),
    }


CASES: dict[str, Any] = {
    "default": f2.PyTorch(),
    "roles": f2.PyTorch(
        master=f2.Master(
            image="ghcr.io/example/master:2", requests=flyte.Resources(cpu="1", memory="2Gi"), restart_policy="ExitCode"
        ),
        worker=f2.Worker(
            replicas=3,
            requests=flyte.Resources(cpu="2", memory="4Gi", gpu=2),
            limits=flyte.Resources(memory="8Gi", gpu=2),
            restart_policy="OnFailure",
        ),
        run_policy=f2.RunPolicy(
            clean_pod_policy="All", backoff_limit=0, active_deadline_seconds=3600, queue="team-a", suspend=True
        ),
        nproc_per_node=2,
        shm_size="1Gi",
        accelerator="nvidia-tesla-a100",
    ),
    "master_only": f2.PyTorch(worker=f2.Worker(replicas=0)),
    "elastic": f2.Elastic(nnodes="1:4", nproc_per_node=2, max_restarts=2),
    "elastic_word": f2.Elastic(nnodes=2, nproc_per_node="gpu", run_policy=f2.RunPolicy(ttl_seconds_after_finished=0)),
}


def sdk_config(case: str) -> Any:
    """The flytekit front-end's config of `CASES[case]`."""
    return _sdk_cases()[case]()


def _rank_report(step: int) -> str:
    return f"rank={os.environ.get('RANK')} world={os.environ.get('WORLD_SIZE')} step={step}"


TASKS = {}
for _name, _config in CASES.items():
    _env = flyte.TaskEnvironment(name=f"pytorch-{_name.replace('_', '-')}", image=IMAGE, plugin_config=_config)
    TASKS[_name] = _env.task(_rank_report)


def _pod_template() -> Any:
    from kubernetes.client import V1Container, V1PodSpec

    spec = V1PodSpec(containers=[V1Container(name="primary")], node_selector={"pool": "gpu"})
    return flyte.PodTemplate(pod_spec=spec, primary_container_name="primary", labels={"team": "ml"})


_pod_env = flyte.TaskEnvironment(
    name="pytorch-pod-template", image=IMAGE, plugin_config=CASES["roles"], pod_template=_pod_template()
)
POD_TEMPLATE_TASK = _pod_env.task(_rank_report)

_trainjob_env = flyte.TaskEnvironment(
    name="pytorch-trainjob",
    image=IMAGE,
    plugin_config=f2.PyTorch(worker=f2.Worker(replicas=2), nproc_per_node=2, run_policy=f2.RunPolicy(queue="team-a")),
    pod_template=_pod_template(),
)
TRAINJOB_TASK = _trainjob_env.task(_rank_report)
"""A task both targets run (a TrainJob has one pod spec for every node, no per-role policies)."""
