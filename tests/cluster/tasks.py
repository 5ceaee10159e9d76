"""Tasks only the cluster tier packages: placement cases the real scheduler judges.

Every task here is small and needs no CUDA: a GPU task's pods request `nvidia.com/gpu` (the backend writes the request
and the scheduler places the pod by it), but the node agent runs them on this machine's CPU torch.
"""

from __future__ import annotations

from flytekit import PodTemplate
from kubernetes.client import V1Container, V1PodSpec

from flytekitplugins_pytorch import pytorch_task

#: The product no node of the dev cluster has (its GPU nodes are labelled NVIDIA-A100-SXM4-40GB): written as GPU
#: feature discovery writes product names, so the backend's "no node can match" warning for short names stays quiet
#: and only the scheduler can tell.
MISSING_PRODUCT = "NVIDIA-H100-80GB-HBM3"

#: The dev cluster's label of its node pools (devcluster/cluster.py NODES).
POOL_LABEL = "devcluster.flyte.org/pool"


@pytorch_task(workers_count=1, per_replica_gpu_limit="1", accelerator=MISSING_PRODUCT)
def gpu_on_a_missing_product(x: int) -> int:
    """A GPU task pinned to an accelerator no node has: it never starts."""
    return x


@pytorch_task(
    workers_count=1,
    pod_template=PodTemplate(
        primary_container_name="pytorch",
        pod_spec=V1PodSpec(containers=[V1Container(name="pytorch")], node_selector={POOL_LABEL: "gpu"}),
    ),
)
def cpu_task_on_the_gpu_pool(x: int) -> int:
    """A CPU-only task whose pod template selects the GPU pool: it carries no GPU toleration (a CPU-only task never
    does), so the pool's taint keeps it off."""
    return x
