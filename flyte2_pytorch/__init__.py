"""flyte2_pytorch: distributed PyTorch tasks for Flyte 2.

``flyte.TaskEnvironment(name=..., plugin_config=PyTorch(...))`` (or ``Elastic(...)``) makes every ``@env.task`` of the
environment a ``pytorch`` task: serialized as the ``DistributedPyTorchTrainingTask`` message Flyte 2's native
PyTorchJob plugin reads, and run as real multi-process ``torch.distributed`` by the core launcher (locally, or in
the job's pods). Importing this package registers the task types with ``flyte.extend.TaskPluginRegistry``; it
imports neither flytekit nor torch.
"""

try:
    import flyte.extend  # noqa: F401  (the task types build on it)
except ModuleNotFoundError as missing:
    if not (missing.name or "flyte").startswith("flyte"):
        raise
    from pytorch_contract.install import install_hint

    raise ModuleNotFoundError(
        f"flyte2_pytorch needs the Flyte 2 SDK ('flyte'), which is not installed: {install_hint('flyte2')}",
        name="flyte",
    ) from None

from flyte2_pytorch.config import (
    CleanPodPolicy,
    ConfigError,
    Elastic,
    KubernetesVersionWarning,
    Master,
    PyTorch,
    RestartPolicy,
    RunPolicy,
    UnknownOptionError,
    Worker,
)
from flyte2_pytorch.task import Connector, ConnectorTask, ElasticTask, PyTorchTask
from pytorch_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from pytorch_core.frontend import PreemptedError
from pytorch_core.preemption import on_preemption, preemption_requested
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
    "UnknownOptionError",
    "KubernetesVersionWarning",
    "PyTorchTask",
    "ElasticTask",
    "Connector",
    "ConnectorTask",
    "report_progress",
    "save_checkpoint",
    "load_checkpoint",
    "preemption_requested",
    "on_preemption",
    "CheckpointError",
    "PreemptedError",
]
