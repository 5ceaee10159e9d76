"""flytekit tasks, as written for the flytekit front-end and for kfpytorch, imported under ``flyte-migrate``.

``python -m tests.flyte2.migrated_tasks [run]`` imports ``flyte_migrate`` (which patches flytekit), registers
``flyte2_pytorch.migrate``, imports this file's tasks through it and prints one JSON line: each task's class and
``custom``; with ``run``, also the output of a local run of ``total`` (3 ranks).
"""

from __future__ import annotations

import json
import sys

import flyte_migrate  # noqa: F401 - patches flytekit: its decorators make Flyte 2 tasks

from flyte2_pytorch import migrate

migrate.register()

from flytekit import Resources, task  # noqa: E402
from flytekit.deck import DeckField  # noqa: E402
from flytekitplugins import kfpytorch  # noqa: E402

from flytekitplugins_pytorch import Elastic, Master, PyTorch, RunPolicy, Worker, pytorch_task  # noqa: E402

TOTAL = PyTorch(
    master=Master(requests=Resources(cpu="1", mem="2Gi")),
    worker=Worker(replicas=2, limits=Resources(gpu="1"), restart_policy="ExitCode"),
    run_policy=RunPolicy(queue="team-a", backoff_limit=0),
    nproc_per_node=1,
)
ELASTIC = Elastic(nnodes="1:2", nproc_per_node=2)


@task(task_config=TOTAL)
def total(x: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([x + dist.get_rank()])
    dist.all_reduce(value)
    return int(value.item())


# deck_fields: a flytekit @task option that flyte-migrate's own `task` shim does not take; @pytorch_task reads its
# pass-through options from flytekit's `task` itself, so the translated decorator still accepts it.
@pytorch_task(workers_count=3, per_replica_memory_request="4Gi", deck_fields=(DeckField.SOURCE_CODE,))
def flat(x: int) -> int:
    return x


@task(task_config=ELASTIC)
def elastic(x: int) -> int:
    return x


@task(
    task_config=kfpytorch.PyTorch(
        worker=kfpytorch.Worker(replicas=2, restart_policy=kfpytorch.RestartPolicy.FAILURE),
        run_policy=kfpytorch.RunPolicy(clean_pod_policy=kfpytorch.CleanPodPolicy.NONE, backoff_limit=1),
        increase_shared_mem=False,
    )
)
def kf(x: int) -> int:
    return x


@task(task_config=kfpytorch.Elastic(nnodes=2, nproc_per_node=4, rdzv_configs={"timeout": 900, "join_timeout": 1200}))
def kf_elastic(x: int) -> int:
    return x


def main(argv: list[str]) -> None:
    import dataclasses
    from pathlib import Path

    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext
    from google.protobuf.json_format import MessageToDict

    sctx = SerializationContext(version="v1", project="p", domain="d", root_dir=Path(__file__).resolve().parents[2])
    out: dict = {}
    for t in (total, flat, elastic, kf, kf_elastic):
        template = get_proto_task(t, sctx)
        config = t.plugin_config  # type: ignore[attr-defined]
        out[t.func.__name__] = {  # type: ignore[attr-defined]
            "class": type(t).__name__,
            "type": template.type,
            "custom": MessageToDict(template.custom),
            "config": {kv.key: kv.value for kv in template.container.config},
            "options": {f.name: str(getattr(config, f.name)) for f in dataclasses.fields(config)},
        }
    # What the flytekit front-end writes for the same configs (its task classes, not the patched flytekit.task).
    from flytekitplugins_pytorch.task import ElasticPyTorchFunctionTask, PyTorchFunctionTask
    from tests.helpers.serialization import SETTINGS

    for name, cls, config in (("total", PyTorchFunctionTask, TOTAL), ("elastic", ElasticPyTorchFunctionTask, ELASTIC)):
        sdk_task = cls(config, total.func)  # type: ignore[attr-defined]
        out[name]["sdk_custom"] = sdk_task.get_custom(SETTINGS)
        out[name]["sdk_config"] = {k: v for k, v in sdk_task.get_config(SETTINGS).items() if k.startswith("pytorch.")}
    if "run" in argv:
        import flyte

        flyte.init()
        out["run"] = flyte.run(total, x=10).outputs()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
