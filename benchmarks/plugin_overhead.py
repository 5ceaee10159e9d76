"""What the plugin costs, side by side in one run.

(a) import: ``import flytekit`` alone (entry points hidden) and then ``import flytekitplugins_pytorch`` on top, timed
    in fresh interpreters, median of N runs;
(b) serialization: ``get_serializable`` of the seed task vs. the same function as a plain ``@task``, per task;
(c) local launch: a trivial 3-rank task (1 master + 2 workers) vs. the same task in-process
    (``FLYTE_PYTORCH_INPROCESS=1``, world size 1) vs. a plain ``@task``, wall time per call.

Usage::

    python benchmarks/plugin_overhead.py [--import-runs 7] [--serialize-runs 200] [--launch-runs 3]

Figures on a shared or busy machine are noisy: compare columns of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
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


def _seed(batch_size: int, epochs: int, learning_rate: float) -> list[float]:
    return [learning_rate] * epochs


def _trivial(x: int) -> int:
    return x + 1


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


def bench_launch(runs: int) -> None:
    print(f"(c) local launch, wall time per call, median of {runs}")
    try:
        import flytekitplugins_pytorch.launcher  # noqa: F401
    except ImportError as e:
        print(f"    launcher unavailable ({e})")
        return
    saved = os.environ.get("FLYTE_PYTORCH_INPROCESS")
    try:
        os.environ.pop("FLYTE_PYTORCH_INPROCESS", None)
        distributed = _per_call(lambda: trivial_3_ranks(x=1), runs)
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
    print(f"    {'trivial task, 3 ranks (1 master + 2 workers)':<52} {distributed * 1e3:8.1f} ms")
    print(f"    {'same task, FLYTE_PYTORCH_INPROCESS=1 (world 1)':<52} {inprocess * 1e3:8.1f} ms")
    print(f"    {'same function as plain @task':<52} {plain * 1e3:8.1f} ms")
    print(f"    {'launch overhead of 3 ranks over in-process':<52} {(distributed - inprocess) * 1e3:8.1f} ms")


def main(argv: list[str] | None = None) -> None:
    """Run the three measurements and print them.

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import-runs", type=int, default=7)
    parser.add_argument("--serialize-runs", type=int, default=200)
    parser.add_argument("--launch-runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, flytekit {flytekit.__version__}, {os.cpu_count()} CPUs")
    bench_import(args.import_runs)
    bench_serialize(args.serialize_runs)
    bench_launch(args.launch_runs)


if __name__ == "__main__":
    main()
