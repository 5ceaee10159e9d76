"""flyte2_pytorch: distributed PyTorch tasks for Flyte 2.

``flyte.TaskEnvironment(name=..., plugin_config=PyTorch(...))`` (or ``Elastic(...)``) makes every ``@env.task`` of the
environment a ``pytorch`` task: serialized as the ``DistributedPyTorchTrainingTask`` message Flyte 2's native
PyTorchJob plugin reads, and run as real multi-process ``torch.distributed`` by the core launcher (locally, or in
the job's pods). Importing this package registers the task types with ``flyte.extend.TaskPluginRegistry``; it
imports neither flytekit nor torch.
"""

from flyte2_pytorch.config import (
    CleanPodPolicy,
    ConfigError,
    Elastic,
    Master,
    PyTorch,
    RestartPolicy,
    RunPolicy,
    Worker,
)
from flyte2_pytorch.task import Connector, ConnectorTask, ElasticTask, PyTorchTask
from pytorch_core.progress import report_progress

__all__ = [
    "PyTorch",
    "Elastic",
    "Master",
    "Worker",
    "RunPolicy",
    "RestartPolicy",
    "CleanPodPolicy",
    "ConfigError",
    "PyTorchTask",
    "ElasticTask",
    "Connector",
    "ConnectorTask",
    "report_progress",
]
