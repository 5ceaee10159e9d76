"""flytekitplugins-pytorch: distributed PyTorch tasks for Flyte.

``@pytorch_task(...)`` (or ``@task(task_config=PyTorch(...))`` / ``Elastic(...)``) on a typed function runs locally
as real multi-process ``torch.distributed`` and on a cluster as a Kubeflow PyTorchJob. Importing this package (which
flytekit does through the ``flytekit.plugins`` entry point) registers the task types; it never imports torch.

Local-run environment variables (read by the launcher):

- ``FLYTE_PYTORCH_INPROCESS=1``: run the function in-process with world size 1 (for breakpoints).
- ``FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE=N``: cap the local world size (one log line when the declared one is larger).
- ``FLYTE_PYTORCH_COLLECTIVE_TIMEOUT=SECONDS``: the default ``timeout=`` of ``init_process_group`` in every rank.
- ``FLYTE_PYTORCH_LOCAL_THREADS=N``: intra-op threads per rank (default: an even share of the cores).
- ``FLYTE_PYTORCH_PROGRESS_LINE=0``, ``FLYTE_PYTORCH_PROGRESS_LOG_S``, ``FLYTE_PYTORCH_PROGRESS_INTERVAL_S``: the live
  progress of ``report_progress`` (docs/progress.md).
- ``FLYTE_PYTORCH_CHECKPOINT_DIR``, ``FLYTE_PYTORCH_TERMINATION_GRACE_S``: where ``save_checkpoint`` writes, and the
  seconds between a SIGTERM and the SIGKILL (docs/checkpoints.md, "Settings").
"""

from flytekitplugins_pytorch._frontend import FLYTEKIT
from flytekitplugins_pytorch.config import (
    CleanPodPolicy,
    ConfigError,
    Elastic,
    JobLimitWarning,
    KubernetesVersionWarning,
    Master,
    ProcessesGpusWarning,
    PyTorch,
    RestartPolicy,
    RunPolicy,
    UnknownOptionError,
    Worker,
)
from flytekitplugins_pytorch.task import ElasticPyTorchFunctionTask, PyTorchFunctionTask, pytorch_task
from pytorch_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from pytorch_core.frontend import PreemptedError, set_default
from pytorch_core.preemption import on_preemption, preemption_requested
from pytorch_core.progress import report_progress

# Outside a launch (a unit of the launcher called directly), errors are classified as flytekit's.
set_default(FLYTEKIT)

__all__ = [
    "pytorch_task",
    "PyTorch",
    "Master",
    "Worker",
    "RunPolicy",
    "Elastic",
    "RestartPolicy",
    "CleanPodPolicy",
    "ConfigError",
    "UnknownOptionError",
    "JobLimitWarning",
    "KubernetesVersionWarning",
    "ProcessesGpusWarning",
    "PyTorchFunctionTask",
    "ElasticPyTorchFunctionTask",
    "report_progress",
    "save_checkpoint",
    "load_checkpoint",
    "preemption_requested",
    "on_preemption",
    "CheckpointError",
    "PreemptedError",
]
