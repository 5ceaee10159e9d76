"""The MNIST benchmark's measuring tools, on small process trees: what they report must be what happened.

``run_measured`` makes its process a child subreaper and reaps (and, after 10 s, kills) every child it is left
with, so it runs in a fresh interpreter here, never in the test process (which may own a forkserver).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "benchmarks" / "mnist_time_to_accuracy.py"
_spec = importlib.util.spec_from_file_location("mnist_time_to_accuracy", BENCHMARK)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")

MIB = 2**20


def _forked_block(child_then: str, parent_then: str) -> str:
    """A parent that forks a child holding 64 MiB of private memory, waits (through a pipe) until the block is
    written, however slowly a busy machine runs the child, prints "training: go", then runs ``parent_then``; the
    child runs ``child_then`` after writing the block, then exits."""
    return textwrap.dedent(
        """
            import os, sys, time
            r, w = os.pipe()
            if os.fork() == 0:
                block = bytearray(64 * 2**20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                os.write(w, b"1")
            {child}
                os._exit(0)
            os.read(r, 1)
            print("training: go", flush=True)
            """
    ).format(child=textwrap.indent(textwrap.dedent(child_then).strip(), "    ")) + textwrap.dedent(parent_then)


# The parent exits while the child still runs (as pyflyte leaves its forkserver behind); the child burns about 0.3 s
# of CPU after its parent is gone.
TREE = _forked_block(
    """
    time.sleep(1.2)  # outlives its parent (which exits 0.8 s after the block is written) by 0.4 s or more
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    """,
    """
    time.sleep(0.3)
    print("epoch 1/1: test accuracy 12.50%", flush=True)
    time.sleep(0.5)
    """,
)

# The parent exits as soon as the block is written, well within the sampler's half second between PSS reads; the
# child lives on for a second.
LATE_ORPHAN = _forked_block("time.sleep(1.0)", 'print("epoch 1/1: test accuracy 12.50%", flush=True)')

# Two children: A holds 96 MiB; B holds 32 MiB, and grows by 64 MiB only once A has exited, so the tree's sum never
# passes its high again while B reaches its own. Each step waits for the one before (pipes), not for a clock.
GROW_AFTER_EXIT = textwrap.dedent(
    """
    import mmap, os, time
    def child(size, told, done):
        for fd in range(3, 64):  # no other pipe's end stays open here, so closing it elsewhere is seen
            if fd not in (told, done):
                try:
                    os.close(fd)
                except OSError:
                    pass
        block = mmap.mmap(-1, size)  # anonymous: a page takes memory when first written, not before
        for i in range(0, 32 * 2**20, 4096):
            block[i] = 1
        os.write(done, b"1")
        if os.read(told, 1):  # b"g": grow to the whole block; EOF: exit
            for i in range(0, size, 4096):
                block[i] = 1
            os.write(done, b"1")
            os.read(told, 1)
        os._exit(0)
    def start(size):
        told_r, told_w = os.pipe()
        done_r, done_w = os.pipe()
        if os.fork() == 0:
            child(size, told_r, done_w)
        os.close(told_r)
        os.close(done_w)
        return told_w, done_r
    a_told, a_done = start(96 * 2**20)
    os.read(a_done, 1)
    os.write(a_told, b"g")
    os.read(a_done, 1)  # A: 96 MiB written
    b_told, b_done = start(96 * 2**20)
    os.read(b_done, 1)  # B: 32 MiB written
    print("training: go", flush=True)
    time.sleep(1.0)  # the sampler reads both: the tree's sum is at its high
    os.close(a_told)
    os.wait()  # A is gone
    os.write(b_told, b"g")
    os.read(b_done, 1)  # B: 96 MiB written
    time.sleep(1.0)
    print("epoch 1/1: test accuracy 12.50%", flush=True)
    os.close(b_told)
    os.wait()
    """
)


MEASURE = textwrap.dedent(
    """
    import dataclasses, importlib.util, json, os, sys
    spec = importlib.util.spec_from_file_location("mnist_time_to_accuracy", sys.argv[1])
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    reaper = bench._become_subreaper()
    markers = (("train start", r"training: go"), ("accuracy", r"test accuracy"))
    try:
        run, output = bench.run_measured("tree", [sys.executable, "-c", sys.argv[2]], dict(os.environ), markers)
    except RuntimeError as e:
        print(json.dumps({"error": str(e)}))
    else:
        print(json.dumps({"reaper": reaper, "output": output, **dataclasses.asdict(run)}))
    """
)


def _measure(tree: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(BENCHMARK), tree], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_run_measured_counts_the_whole_tree_and_its_orphans() -> None:
    run = _measure(TREE)
    if not run["reaper"]:
        pytest.skip("cannot become a child subreaper here")
    assert "12.50%" in run["output"]
    assert 0 < run["to_train_s"] < run["to_accuracy_s"] < run["exit_s"]
    assert run["wall_s"] >= run["exit_s"] + 0.2  # the orphan outlived its parent; wall waits for it
    assert run["peak_rss"] >= 64 * MIB and run["peak_pss"] >= 64 * MIB  # the child's private block, in both sums
    assert run["peak_pss"] <= run["peak_rss"]
    assert run["cpu_s"] >= 0.3  # the orphan's busy loop, reaped by the subreaper, is counted
    assert run["leftover"] == []
    assert any(pss >= 64 * MIB for pss, _ in run["per_process"].values())


def test_an_orphan_that_grew_in_its_parents_last_moment_is_read_when_the_parent_exits() -> None:
    run = _measure(LATE_ORPHAN)
    if not run["reaper"]:
        pytest.skip("cannot become a child subreaper here")
    assert "12.50%" in run["output"]
    assert run["peak_pss"] >= 64 * MIB, run["per_process"]
    assert run["leftover"] == []


def test_a_process_that_grows_after_another_exits_has_its_own_peak_read() -> None:
    run = _measure(GROW_AFTER_EXIT)
    assert "12.50%" in run["output"]
    peaks = sorted(pss for pss, _ in run["per_process"].values())
    assert len(peaks) == 3, run["per_process"]  # the parent, A and B
    assert peaks[-2] >= 96 * MIB, run["per_process"]  # B's peak as well as A's, though the sum stayed below its high
    assert run["peak_pss"] >= (96 + 32) * MIB  # A and B at once, before A exited


def test_run_measured_raises_with_the_output_of_a_failed_run() -> None:
    run = _measure("print('half way'); raise SystemExit(3)")
    assert "exited 3:" in run["error"] and "half way" in run["error"]


def test_median_row_takes_each_figure_s_median() -> None:
    runs = [
        bench.Run("ours", wall_s=w, exit_s=w, to_train_s=1.0, to_accuracy_s=2.0, cpu_s=c, peak_pss=p, peak_rss=p,
                  accuracy=a, train_s=1.0, per_process={}, sampler_cpu_s=0.0, leftover=[], markers_s={})
        for w, c, p, a in ((5.0, 9.0, 300, 99.1), (4.0, 8.0, 100, 99.3), (6.0, 7.0, 200, 99.2))
    ]  # fmt: skip
    median = bench._median_run(runs)
    assert (median.wall_s, median.cpu_s, median.peak_pss, median.accuracy) == (5.0, 8.0, 200, 99.2)
    assert median.name == "ours median of 3"
