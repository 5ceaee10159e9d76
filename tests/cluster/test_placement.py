"""Where the real scheduler puts a task's pods: a task no node can take stays pending, and GetTask says why.

The dev cluster's nodes (devcluster/cluster.py `NODES`): two CPU nodes; `gpu-1`, tainted `nvidia.com/gpu=present:
NoSchedule` as the NVIDIA GPU operator taints a GPU pool; `gpu-dedicated-1`, tainted `flyte/gpu=dedicated:NoSchedule`
as Flyte's docs taint one; each GPU node with `nvidia.com/gpu: 4` and GPU feature discovery's labels of an A100. A GPU
task's pods landing only on the GPU nodes, with the GPU tolerations, is checked by every kind's seed run
(`test_run.py`); a CPU-only task's pods carrying none and landing on the CPU nodes, by every kind's failing rank
(`test_failures.py`).
"""

from __future__ import annotations

import pytest

from tests.cluster.harness import Propeller, RealCluster, execute, kind_params
from tests.cluster.workflows import MISSING_PRODUCT, POOL_LABEL

PENDING_TIMEOUT_S = 120.0


CASES = {
    # task, what the scheduler says, what GetTask adds: what the pod asks of a node, named after the task's setting
    "accelerator-no-node-has": (
        "gpu_on_a_missing_product",
        "didn't match Pod's node affinity/selector",
        f"the pod asks for a node with nvidia.com/gpu.product In [{MISSING_PRODUCT}] (the task's accelerator); "
        # the GPU tolerations, then the accelerator's own (`<label>=<value>:NoSchedule`, the backend's default)
        f"it tolerates the taints nvidia.com/gpu, flyte/gpu=dedicated, nvidia.com/gpu.product={MISSING_PRODUCT})",
    ),
    "gpu-pool-taint-not-tolerated": (
        "cpu_task_on_the_gpu_pool",
        "had untolerated taint(s)",
        f"the pod asks for a node with {POOL_LABEL}=gpu (nodeSelector); it tolerates no NoSchedule taint)",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", kind_params(ci=("pytorchjob",)), indirect=True)
def test_a_task_no_node_can_take_stays_pending_and_gettask_says_why(
    real: RealCluster, propeller: Propeller, kind: str, case: str, templates: dict
) -> None:
    task, verdict, asks = CASES[case]
    run = execute(real, propeller, kind, templates[task], {"x": 1}, {"x": int}, f"pending-{case[:10]}")
    try:

        def said() -> bool:
            answer = run.get()
            run.snapshot()
            return verdict in answer.message

        try:
            run.wait("GetTask saying why the pods wait", said, PENDING_TIMEOUT_S, 1.0)
        finally:
            print(f"\n[cluster] pending {case} on {kind}: {[(a.name, a.message) for a in run.answers]}")
        answer = run.answers[-1]
        assert answer.name in ("QUEUED", "INITIALIZING", "RUNNING"), answer
        pods = run.pods()
        assert pods and all(p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName") for p in pods)
        assert f"({asks}" in answer.message, answer.message
        run.clock(f"pending: {case}")
    finally:
        run.finish()
