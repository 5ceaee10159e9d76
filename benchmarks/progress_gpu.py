"""``report_progress`` in a CUDA training loop: no device synchronization per step, and what it costs per step.

A small MLP trains on one GPU for ``--steps`` steps (default 3,000), three ways, each timed from a synchronized
start to a synchronized end:

- ``plain``: the loop alone;
- ``report_progress``: the same loop calling ``report_progress(step, total, loss=loss.detach())`` as global rank 0
  (hand-offs every 2 s to a control directory in a temporary folder, as a rank does);
- ``loss.item() per step``: the loop reading the loss every step, as a naive progress bar does (one sync a step),
  for contrast.

With ``torch.cuda.set_sync_debug_mode("warn")`` the loop counts the synchronizing calls: the ``report_progress``
loop must sync once per hand-off (the tensor's ``float()``), never once per step.

Usage::

    python benchmarks/progress_gpu.py [--steps 3000] [--width 4096] [--batch 512] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytorch_core import progress  # noqa: E402
from pytorch_core._control import ControlDir  # noqa: E402
from pytorch_core.progress import report_progress  # noqa: E402


def _loop(mode: str, steps: int, width: int, batch: int, control: ControlDir) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU()
    ).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device="cuda")
    for _ in range(20):  # warm-up
        loss = model(x).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    if mode == "report_progress":
        progress.start_reporting(control.write_progress)
    syncs = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        start = time.perf_counter()
        for step in range(1, steps + 1):
            loss = model(x).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if mode == "report_progress":
                report_progress(step, steps, loss=loss.detach())
            elif mode == "item":
                loss.item()
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        syncs = sum("synchronizing" in str(w.message) for w in caught)
    handoffs = 0
    if mode == "report_progress":
        assert progress._reporter is not None
        handoffs = progress._reporter.reports
        progress.stop_reporting()
    return {"ms_per_step": 1000 * elapsed / steps, "seconds": elapsed, "syncs": syncs, "hand_offs": handoffs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this benchmark needs one")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, python {sys.version.split()[0]}")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        control = ControlDir(folder)
        for mode in ("plain", "report_progress", "item", "plain", "report_progress"):
            result = _loop(mode, args.steps, args.width, args.batch, control)
            figures.setdefault(mode, []).append(result)
            print(
                f"{mode:<16} {result['ms_per_step']:.4f} ms/step over {result['seconds']:.1f} s, "
                f"{result['syncs']} synchronizing calls, {result['hand_offs']} hand-offs"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
