"""A pod process of a TrainJob node with two ranks, for tests/core/test_trainer_status.py (run in a child process
with this folder on ``PYTHONPATH``: ``python -c "import progress_pod; progress_pod.main()"``).

Its front-end is a pod's (not local) whose file access writes beside the outputs into ``$PROGRESS_POD_OUTPUTS``,
each write also logged to ``writes.log`` there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from pytorch_core.config import PyTorch
from pytorch_core.frontend import PlainFrontEnd
from pytorch_core.progress import report_progress


class PodFrontEnd(PlainFrontEnd):
    """No Flyte SDK, in a pod: outputs go to ``$PROGRESS_POD_OUTPUTS``."""

    def __reduce__(self) -> str:
        return "POD"

    def is_local(self) -> bool:
        return False

    def write_output_file(self, name: str, data: bytes) -> Optional[str]:
        out = Path(os.environ["PROGRESS_POD_OUTPUTS"])
        (out / name).write_bytes(data)
        with open(out / "writes.log", "a", encoding="utf-8") as log:
            log.write(f"{time.time():.3f} {name}\n")
        return str(out / name)


POD = PodFrontEnd()


def train(steps: int) -> int:
    """Two ranks report every step; only global rank 0's reports are shown."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.ones(1)
    for step in range(1, steps + 1):
        dist.all_reduce(value)
        value.fill_(1.0)
        time.sleep(0.05)
        report_progress(step, steps, loss=dist.get_rank() * 100 + 1.0 / step)  # whose report shows, it tells
    dist.destroy_process_group()
    return steps


def main() -> None:
    from pytorch_core.launcher import run_distributed

    task: Any = SimpleNamespace(task_config=PyTorch(preflight=False), _task_function=train, name="progress-pod")
    print("RESULT", run_distributed(task, {"steps": int(os.environ.get("PROGRESS_POD_STEPS", "120"))}, POD))
