"""A task for tests/sdk/test_forkserver.py; a module (not a test file) so a fresh fork server can import it."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from flytekit import workflow

from flytekitplugins_pytorch import pytorch_task

#: A standard-library module nothing else here imports: present in a rank only when it was preloaded.
PRELOADED = "xml.dom.minidom"


@pytorch_task(workers_count=1, preload_modules=[PRELOADED])
def report() -> list[dict]:
    """Every rank's parent pid, process name and whether :data:`PRELOADED` was there before the task ran."""
    import torch.distributed as dist

    mine = {
        "parent": os.getppid(),
        "name": Path(f"/proc/{os.getpid()}/comm").read_text().strip(),
        "preloaded": PRELOADED in sys.modules,
    }
    dist.init_process_group("gloo")
    everyone: list[dict] = [{}] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    dist.destroy_process_group()
    return everyone


@workflow
def report_wf() -> list[dict]:
    """Run :func:`report` once."""
    return report()


def signals_at_start(conn) -> None:  # noqa: ANN001 - a multiprocessing Connection
    """A process target: send what SIGTERM and SIGINT do in this process as it starts (before anything of ours ran),
    and whether its parent ignores SIGTERM."""
    parent = Path(f"/proc/{os.getppid()}/status").read_text()
    ignored = int(next(line for line in parent.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    conn.send(
        {
            "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
            "parent_ignores_sigterm": bool(ignored & (1 << (signal.SIGTERM - 1))),
        }
    )
    conn.close()
