"""Tasks only the TrainJob end-to-end tests package: what a TrainJob cannot express."""

from __future__ import annotations

from flytekit import Resources, task

from flytekitplugins_pytorch import Master, PyTorch, Worker


@task(
    task_config=PyTorch(
        master=Master(requests=Resources(cpu="1", mem="2Gi")),
        worker=Worker(replicas=2, requests=Resources(cpu="2", mem="4Gi")),
    )
)
def per_role(x: int) -> int:
    """A master smaller than its workers: per-role resources (PyTorchJob only)."""
    return x
