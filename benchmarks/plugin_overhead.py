"""What the plugin costs, side by side in one run.

(a) import: ``import flytekit`` alone (entry points hidden) and then ``import flytekitplugins_pytorch`` on top, timed
    in fresh interpreters, median of N runs;
(b) serialization: ``get_serializable`` of the seed task vs. the same function as a plain ``@task``, per task;
(c) local launch, wall time per call: the floor (3 processes forked by ``torch.multiprocessing`` that join a gloo
    group and all-reduce once), then a trivial 3-rank task (1 master + 2 workers, one all-reduce) called through a
    workflow, warm (the ratio to the floor is printed), and its first launch in a fresh interpreter (fork server start
    and preload included, interpreter start and imports not; the task's module imports torch inside the task, so
    the launcher imports it during the launch, and ``import torch`` is timed apart), and the first launch when the
    module imports torch at the top, as most training modules do; then the same task in-process
    (``FLYTE_PYTORCH_INPROCESS=1``, world size 1) and a plain ``@task``.

Usage::

    python benchmarks/plugin_overhead.py [--import-runs 7] [--serialize-runs 200] [--launch-runs 5] [--first-runs 3]
                                         [--json PATH]

The goals (issue 14): warm launch <= 2x the floor, first launch <= 1.5 s, on a quiet machine; the load average is
printed first because a loaded machine changes these figures several-fold.

Figures on a shared or busy machine are noisy: compare columns of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import flytekit  # noqa: E402
from flytekit.configuration import Image, ImageConfig, SerializationSettings  # noqa: E402
from flytekit.tools.translator import get_serializable  # noqa: E402

from flytekitplugins_pytorch import pytorch_task  # noqa: E402

SETTINGS = SerializationSettings(image_config=ImageConfig(default_image=Image(name="d", fqn="img", tag="1")))


#: What ``--json`` writes: every figure printed, by name (milliseconds unless the name says otherwise).
FIGURES: dict[str, float] = {}


def _seed(batch_size: int, epochs: int, learning_rate: float) -> list[float]:
    return [learning_rate] * epochs


def _trivial(x: int) -> int:
    return x + 1


def _all_reduce_once(x: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([x])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return int(t.item())


seed_task = pytorch_task(
    workers_count=2,
    per_replica_cpu_request="500m",
    per_replica_memory_request="4Gi",
    per_replica_memory_limit="8Gi",
    per_replica_gpu_limit="1",
)(_seed)
plain_seed_task = flytekit.task(_seed)
trivial_3_ranks = pytorch_task(workers_count=2)(_trivial)
plain_trivial = flytekit.task(_trivial)
all_reduce_3_ranks = pytorch_task(workers_count=2)(_all_reduce_once)


@flytekit.workflow
def all_reduce_wf(x: int = 1) -> int:
    return all_reduce_3_ranks(x=x)


def _floor_rank(rank: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3)
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()


def floor_launch() -> None:
    """The floor: 3 processes forked by torch.multiprocessing join a gloo group and all-reduce once."""
    import torch.multiprocessing as tmp

    from pytorch_core._processes import free_port

    tmp.start_processes(_floor_rank, args=(free_port(),), nprocs=3, join=True, start_method="fork")


# Fresh interpreter: import and define as a user's file would, then time the first launch through a workflow.
# With "torch" as the second argument the file imports torch at the top, as most training modules do (this one
# imports it inside the task, so the launch itself imports torch); the time of that import is printed too.
_FIRST_PROBE = """
import time
import sys
sys.path.insert(0, sys.argv[1])
from benchmarks.plugin_overhead import all_reduce_wf
t_torch = 0.0
if sys.argv[2] == "torch":
    t0 = time.perf_counter()
    import torch
    t_torch = time.perf_counter() - t0
if __name__ == "__main__":
    t0 = time.perf_counter()
    assert all_reduce_wf(x=1) == 3
    print(time.perf_counter() - t0, t_torch)
"""


# Fresh interpreter: hide the `flytekit.plugins` entry points (so `import flytekit` is flytekit alone), time it, then
# time importing this plugin on top. Printed as "<flytekit seconds> <plugin seconds>".
_IMPORT_PROBE = """
import importlib.metadata as md, time
_orig = md.entry_points
md.entry_points = lambda **kw: [] if kw.get("group") == "flytekit.plugins" else _orig(**kw)
t0 = time.perf_counter()
import flytekit
t1 = time.perf_counter()
import flytekitplugins_pytorch
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def bench_import(runs: int) -> None:
    flytekit_s, plugin_s = [], []
    for _ in range(runs):
        probe = [sys.executable, "-c", _IMPORT_PROBE]
        proc = subprocess.run(probe, capture_output=True, text=True, check=True, cwd=ROOT)
        fk, plugin = map(float, proc.stdout.split())
        flytekit_s.append(fk)
        plugin_s.append(plugin)
    fk, plugin = statistics.median(flytekit_s), statistics.median(plugin_s)
    print(f"(a) import, median of {runs} fresh interpreters")
    print(f"    {'import flytekit (plugins hidden)':<52} {fk * 1e3:8.1f} ms")
    print(f"    {'import flytekitplugins_pytorch on top':<52} {plugin * 1e3:8.1f} ms  (+{plugin / fk:.1%})")
    FIGURES.update(import_flytekit_ms=fk * 1e3, import_plugin_ms=plugin * 1e3)


def _per_call(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm caches (interface and type-engine lookups)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_serialize(runs: int) -> None:
    ours = _per_call(lambda: get_serializable(OrderedDict(), SETTINGS, seed_task), runs)
    plain = _per_call(lambda: get_serializable(OrderedDict(), SETTINGS, plain_seed_task), runs)
    print(f"(b) serialization (get_serializable), median of {runs}")
    print(f"    {'seed @pytorch_task':<52} {ours * 1e3:8.3f} ms")
    print(f"    {'same function as plain @task':<52} {plain * 1e3:8.3f} ms")
    FIGURES.update(serialize_ms=ours * 1e3, serialize_plain_ms=plain * 1e3)


def bench_launch(runs: int, first_runs: int) -> None:
    print(f"(c) local launch, wall time per call, median of {runs} (first launch: median of {first_runs})")
    try:
        import pytorch_core.launcher  # noqa: F401
    except ImportError as e:
        print(f"    launcher unavailable ({e})")
        return
    floor = _per_call(floor_launch, runs)
    saved = os.environ.get("FLYTE_PYTORCH_INPROCESS")
    try:
        os.environ.pop("FLYTE_PYTORCH_INPROCESS", None)
        warm = _per_call(lambda: all_reduce_wf(x=1), runs)
        firsts, firsts_with_torch, torch_imports = [], [], []
        for _ in range(first_runs):
            for mode, out in (("plain", firsts), ("torch", firsts_with_torch)):
                probe = [sys.executable, "-c", _FIRST_PROBE, str(ROOT), mode]
                proc = subprocess.run(probe, capture_output=True, text=True, check=True, cwd=ROOT)
                launch_s, torch_s = map(float, proc.stdout.split()[-2:])
                out.append(launch_s)
                if mode == "torch":
                    torch_imports.append(torch_s)
        os.environ["FLYTE_PYTORCH_INPROCESS"] = "1"
        inprocess = _per_call(lambda: trivial_3_ranks(x=1), runs)
    except Exception as e:  # a broken launcher must not hide (a) and (b)
        print(f"    launcher failed: {type(e).__name__}: {e}")
        return
    finally:
        if saved is None:
            os.environ.pop("FLYTE_PYTORCH_INPROCESS", None)
        else:
            os.environ["FLYTE_PYTORCH_INPROCESS"] = saved
    plain = _per_call(lambda: plain_trivial(x=1), runs)
    first = statistics.median(firsts)
    print(f"    {'floor: 3 forked processes, gloo group, 1 all-reduce':<52} {floor * 1e3:8.1f} ms")
    ratio = f"({warm / floor:.1f}x the floor; goal 2x)"
    print(f"    {'3-rank task through a workflow, warm':<52} {warm * 1e3:8.1f} ms  {ratio}")
    print(f"    {'same, first launch in a fresh interpreter':<52} {first * 1e3:8.1f} ms  (goal 1500 ms)")
    torch_s = statistics.median(torch_imports)
    label = "of which the launcher importing torch, about"
    print(f"      {label:<50} {torch_s * 1e3:8.1f} ms  (import torch, timed apart)")
    with_torch = statistics.median(firsts_with_torch)
    print(f"    {'same, the task module imports torch at the top':<52} {with_torch * 1e3:8.1f} ms")
    print(f"    {'trivial task, FLYTE_PYTORCH_INPROCESS=1 (world 1)':<52} {inprocess * 1e3:8.1f} ms")
    print(f"    {'same function as plain @task':<52} {plain * 1e3:8.1f} ms")
    FIGURES.update(
        floor_ms=floor * 1e3,
        warm_ms=warm * 1e3,
        warm_ratio=warm / floor,
        first_ms=first * 1e3,
        first_torch_import_ms=torch_s * 1e3,
        first_module_imports_torch_ms=with_torch * 1e3,
        inprocess_ms=inprocess * 1e3,
        plain_task_ms=plain * 1e3,
    )


def main(argv: list[str] | None = None) -> None:
    """Run the three measurements and print them.

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import-runs", type=int, default=7)
    parser.add_argument("--serialize-runs", type=int, default=200)
    parser.add_argument("--launch-runs", type=int, default=5)
    parser.add_argument("--first-runs", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)
    FIGURES["load_before"] = os.getloadavg()[0]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"python {sys.version.split()[0]}, flytekit {flytekit.__version__}, {os.cpu_count()} CPUs, load {load}")
    bench_import(args.import_runs)
    bench_serialize(args.serialize_runs)
    bench_launch(args.launch_runs, args.first_runs)
    if args.json:
        Path(args.json).write_text(json.dumps(FIGURES, indent=1))


if __name__ == "__main__":
    main()
