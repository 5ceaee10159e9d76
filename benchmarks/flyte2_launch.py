"""Local 3-rank launch time under Flyte 2 against flytekit, side by side in one run.

The same task (1 master + 2 workers, one gloo all-reduce) is defined twice: as a Flyte 2 task
(``flyte.TaskEnvironment(plugin_config=flyte2_pytorch.PyTorch(...))``, run with ``flyte.run`` after ``flyte.init()``)
and as a flytekit task (``@pytorch_task(workers_count=2)``, called directly). Both launch through the same launcher.
Printed: the first launch of each in a fresh interpreter (interpreter start and imports not included), then the
median wall time of warm launches in one process. The load average is printed first: a loaded machine changes these
figures several-fold.

Usage::

    python benchmarks/flyte2_launch.py [--warm-runs 5] [--first-runs 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TASKS = """
import flyte
from flytekitplugins_pytorch import pytorch_task

import flyte2_pytorch


def _all_reduce_once(x: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([x])
    dist.all_reduce(value)
    return int(value.item())


config = flyte2_pytorch.PyTorch(worker=flyte2_pytorch.Worker(replicas=2))
env = flyte.TaskEnvironment(name="bench", plugin_config=config)
flyte2_task = env.task(_all_reduce_once)
flytekit_task = pytorch_task(workers_count=2)(_all_reduce_once)
"""

DRIVER = """
import json, sys, time
sys.path[:0] = [{tasks_dir!r}, {root!r}]
import flyte
import bench_tasks
flyte.init()
which, runs = sys.argv[1], int(sys.argv[2])
times = []
for _ in range(runs):
    start = time.perf_counter()
    if which == "flyte2":
        assert flyte.run(bench_tasks.flyte2_task, x=1).outputs()[0] == 3
    else:
        assert bench_tasks.flytekit_task(x=1) == 3
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def _launches(tasks_dir: Path, which: str, runs: int) -> list[float]:
    code = DRIVER.format(tasks_dir=str(tasks_dir), root=str(ROOT))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    proc = subprocess.run(
        [sys.executable, "-c", code, which, str(runs)], capture_output=True, text=True, timeout=600, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-runs", type=int, default=5)
    parser.add_argument("--first-runs", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)

    import tempfile

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tasks_dir = Path(tmp)
        (tasks_dir / "bench_tasks.py").write_text(TASKS)
        for which in ("flytekit", "flyte2"):
            first = [_launches(tasks_dir, which, 1)[0] for _ in range(args.first_runs)]
            warm = _launches(tasks_dir, which, args.warm_runs + 1)[1:]
            figures[f"{which}_first_launch_s"] = statistics.median(first)
            figures[f"{which}_warm_launch_s"] = statistics.median(warm)
            print(
                f"{which:9s} first launch {statistics.median(first):6.2f} s (median of {len(first)})   "
                f"warm launch {statistics.median(warm):6.2f} s (median of {len(warm)})"
            )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
