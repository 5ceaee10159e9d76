"""Time to accuracy on MNIST: the classic Kubeflow example configuration vs. our example, side by side.

(a) reference: the classic network (conv 20 and 50 channels 5x5, max-pooling, FC 800->500->10), SGD lr 0.01
    momentum 0.5, batch 64, one epoch, one process, DataLoader over a TensorDataset, log_softmax + nll_loss;
(b) ours: ``pyflyte run examples/mnist/workflow.py mnist_workflow`` with default inputs (3 ranks).

Both run as child processes of this script, one after the other (``--runs N`` alternates them N times and prints
medians), on the same machine. For each run:

- wall time (process start to exit) and three phases, from the arrival time of marker lines on the run's output:
  start-up (to the line that says training starts), training (to the test accuracy line), and the tail (to exit);
- CPU time (user + system) of the whole process tree: this script makes itself a child subreaper, so processes
  orphaned by their parent (a forkserver) are reaped here and their CPU time counted too. Unlike wall time, CPU time
  barely moves when other work shares the cores, so it is the figure to compare on a busy machine;
- peak memory of the process tree, as the sum of PSS (proportional set size, from ``/proc/<pid>/smaps_rollup``: a
  page shared by k processes counts 1/k in each, so ranks that share pages are not counted several times) and as
  the sum of RSS (every shared page counted once per process);
- final test accuracy, and the ratios ours / reference.

Sampling cost: RSS is read from ``/proc/<pid>/statm`` every 50 ms (microseconds per process; the list of processes
is refreshed every 0.5 s). ``smaps_rollup`` walks the page tables (several ms per process), so PSS is read only when
the RSS of one of the processes passes its high at the previous reads by 2% (at most twice a second), and every 5 s
otherwise, and once more when the command exits if one grew since. ``--detail`` prints the sampler's own CPU time.

The single-process reference slows down far more than our ranks when other work shares the cores, so a busy machine
flatters us: the script warns when the 1-minute load average is above 0.5 or other processes are busy before it
starts, and when torch has no compiled bytecode (every process would compile it again). Report figures from a quiet
machine.

Usage: ``python benchmarks/mnist_time_to_accuracy.py [--runs 3] [--detail]
[--json PATH]``
(the data comes from ``MNIST_DATA_DIR`` where it is set, else from the cache or the mirrors, as in the example).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import importlib.util
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 2**20

#: The goals of the release (issue 14): our wall time and peak PSS as a multiple of the reference's.
WALL_GOAL = 0.6
PSS_GOAL = 1.5
MIN_ACCURACY = 99.0
#: Above this 1-minute load average (before starting) the machine is not quiet enough for figures to report.
QUIET_LOAD = 0.5
#: A process using more than this share of one core, other than this script, makes the machine busy.
BUSY_SHARE = 0.1

RSS_INTERVAL_S = 0.05
TREE_INTERVAL_S = 0.5
PSS_GROWTH = 1.02
PSS_MIN_INTERVAL_S = 0.5
PSS_HEARTBEAT_S = 5.0

# Marker lines, matched on the run's combined output: (label, regex). The first two are the phase boundaries of the
# table (training starts, the test accuracy is known); ``--detail`` prints when each was first seen.
REFERENCE_MARKERS = (("train start", r"reference: training started"), ("accuracy", r'"accuracy"'))
OURS_MARKERS = (
    ("train start", r"training: \d+ steps"),
    ("accuracy", r"epoch \d+/\d+: test accuracy"),
    ("rank 0 up", r"rank 0/\d+: "),
    ("first loss", r"epoch 1/\d+ step \d+/\d+ loss"),
    ("evaluation report", r"test accuracy [0-9.]+% on \d+ images"),
)


@dataclasses.dataclass
class Run:
    """One measured run.

    Attributes:
        name: row label.
        wall_s: process start to the exit of the last process of its tree (a forkserver may outlive its parent).
        exit_s: process start to the exit of the process itself (when a shell would show its prompt again).
        to_train_s: start to the line that says training starts (NaN if not seen).
        to_accuracy_s: start to the test accuracy line (NaN if not seen).
        cpu_s: user + system CPU time of the whole process tree.
        peak_pss: largest sum of PSS over the tree, bytes.
        peak_rss: largest sum of RSS over the tree, bytes.
        accuracy: final test accuracy in percent.
        train_s: the training time the run itself reports.
        per_process: label -> (peak PSS, peak RSS) bytes of each process, for ``--detail``.
        sampler_cpu_s: CPU time the memory sampler used.
        leftover: processes of the tree still running 10 s after the run's main process exited (then killed).
        markers_s: label -> seconds from the start to the first line matching that marker.
    """

    name: str
    wall_s: float
    exit_s: float
    to_train_s: float
    to_accuracy_s: float
    cpu_s: float
    peak_pss: int
    peak_rss: int
    accuracy: float
    train_s: float
    per_process: dict[str, tuple[int, int]]
    sampler_cpu_s: float
    leftover: list[str]
    markers_s: dict[str, float]


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _tree(root: int) -> list[int]:
    pids, stack = [], [root]
    while stack:
        pid = stack.pop()
        pids.append(pid)
        stack += _children(pid)
    return pids


def _label(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return f"pid {pid}"
    # The launcher names its fork server and its ranks (a forked server keeps the launcher's command line).
    if comm == "pt-forkserver":
        return "fork server, forked from pyflyte"
    if comm.startswith("pt-rank-"):
        return f"rank {comm[len('pt-rank-') :]}"
    words = [a.decode(errors="replace") for a in argv if a]
    if any("forkserver" in w for w in words):
        return "multiprocessing forkserver (and ranks forked from it)"
    if any("resource_tracker" in w for w in words):
        return "multiprocessing resource tracker"
    shown = [Path(words[0]).name] + words[1:3] if words else []
    return " ".join(shown)[:60] or f"pid {pid}"


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss_rss(pid: int) -> tuple[int, int]:
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
            elif line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return pss, rss


class TreeSampler(threading.Thread):
    """Samples the memory of a process tree until told to stop (see the module docstring for the schedule)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.peak_pss = 0
        self.peak_rss = 0
        self.per_process: dict[int, tuple[str, int, int]] = {}
        self.cpu_s = 0.0
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        pss_at, tree_at = 0.0, 0.0
        pids: list[int] = []
        rss_peaks: dict[int, int] = {}
        # Each process's RSS high at the PSS reads so far. Growth is judged per process, not on the tree's sum: a
        # rank that grows while another exits can leave the sum below its old high, and its peak would be missed.
        pss_rss_high: dict[int, int] = {}
        while True:
            # The last pass comes once the root has exited. The processes it left behind are this process's
            # children now (it is their subreaper), and what they grew since the last PSS read is read then, even
            # within the 0.5 s spacing: a tree that forks and grows in its last half second is counted too.
            stopping = self._stop_event.is_set()
            now = time.monotonic()
            if stopping:
                pids = sorted(set(pids) | {pid for orphan in _children(os.getpid()) for pid in _tree(orphan)})
            elif now - tree_at >= TREE_INTERVAL_S:
                pids, tree_at = _tree(self.root), now
            rss_by_pid = {pid: _rss(pid) for pid in pids}
            for pid, rss in rss_by_pid.items():
                rss_peaks[pid] = max(rss_peaks.get(pid, 0), rss)
            total_rss = sum(rss_by_pid.values())
            self.peak_rss = max(self.peak_rss, total_rss)
            since = now - pss_at
            grew = any(rss > pss_rss_high.get(pid, 0) * PSS_GROWTH for pid, rss in rss_by_pid.items())
            if (grew and (since >= PSS_MIN_INTERVAL_S or stopping)) or since >= PSS_HEARTBEAT_S:
                total_pss = 0
                for pid in pids:
                    pss, rss = _pss_rss(pid)
                    if not rss:  # gone since the list was made: keep what was read while it ran
                        continue
                    total_pss += pss
                    label, old_pss = self.per_process.get(pid, ("", 0, 0))[:2]
                    if not label or label.startswith("python"):  # a fresh fork names itself a moment later
                        label = _label(pid)
                    self.per_process[pid] = (label, max(old_pss, pss), 0)
                self.peak_pss = max(self.peak_pss, total_pss)
                pss_at = now
                for pid, rss in rss_by_pid.items():
                    pss_rss_high[pid] = max(pss_rss_high.get(pid, 0), rss)
            if stopping:
                break
            self._stop_event.wait(RSS_INTERVAL_S)
        for pid, (label, pss, _) in self.per_process.items():
            self.per_process[pid] = (label, pss, rss_peaks.get(pid, 0))
        self.cpu_s = time.thread_time()


def _become_subreaper() -> bool:
    """Make orphaned descendants children of this process (Linux), so their CPU time reaches RUSAGE_CHILDREN."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap_orphans(within_s: float) -> list[str]:
    """Wait for descendants re-parented to this process; kill and name those still running after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []
        if pid:
            continue
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    left = [f"{pid} {_label(pid)}" for pid in _children(os.getpid())]
    for pid in _children(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, 0)[0]:
            pass
    return left


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_measured(
    name: str, cmd: list[str], env: dict[str, str], markers: tuple[tuple[str, str], ...]
) -> tuple[Run, str]:
    """Run ``cmd`` and measure it (see the module docstring).

    Args:
        name: row label.
        cmd: the command.
        env: its environment.
        markers: ``(label, regex)`` of marker lines; the first two: training starts, the test accuracy line.

    Returns:
        The measurements (accuracy and reported training time still unset) and the combined output.

    Raises:
        RuntimeError: the command exited non-zero (its output tail is in the message).
    """
    cpu_before = _cpu_of_children()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    lines: list[str] = []
    seen: dict[str, float] = {}
    patterns = [(label, re.compile(regex)) for label, regex in markers]

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # EOF once every process holding the pipe (the forkserver too) has exited
            now = time.perf_counter() - started
            lines.append(line)
            for label, pattern in patterns:
                if label not in seen and pattern.search(line):
                    seen[label] = now

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.wait()
    exited = time.perf_counter() - started
    sampler.stop()
    reader.join(timeout=30.0)
    leftover = _reap_orphans(within_s=10.0)
    wall = time.perf_counter() - started
    cpu = _cpu_of_children() - cpu_before
    output = "".join(lines)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{output[-3000:]}")
    per_process: dict[str, tuple[int, int]] = {}
    for label, pss, rss in sampler.per_process.values():
        key, n = label, 2
        while key in per_process:
            key, n = f"{label} #{n}", n + 1
        per_process[key] = (pss, rss)
    nan = float("nan")
    run = Run(
        name=name,
        wall_s=wall,
        exit_s=exited,
        to_train_s=seen.get(markers[0][0], nan),
        to_accuracy_s=seen.get(markers[1][0], nan),
        markers_s=seen,
        cpu_s=cpu,
        peak_pss=sampler.peak_pss,
        peak_rss=sampler.peak_rss,
        accuracy=nan,
        train_s=nan,
        per_process=per_process,
        sampler_cpu_s=sampler.cpu_s,
        leftover=leftover,
    )
    return run, output


def reference_main(data_dir: str) -> None:
    """The classic configuration, in this process; prints one JSON line with accuracy and training seconds."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    sys.path.insert(0, str(REPO))
    from examples.mnist.data import load_mnist
    from examples.mnist.model import ReferenceNet

    torch.manual_seed(1)
    train, test = load_mnist(data_dir)
    loader = DataLoader(TensorDataset(train.images, train.labels), batch_size=64, shuffle=True)
    model = ReferenceNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    print("reference: training started", flush=True)
    started = time.perf_counter()
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        F.nll_loss(model(x), y).backward()
        optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(TensorDataset(test.images, test.labels), batch_size=1000):
            correct += int((model(x).argmax(1) == y).sum())
    seconds = time.perf_counter() - started
    print(json.dumps({"accuracy": 100.0 * correct / len(test), "train_seconds": seconds}), flush=True)


def busy_processes(window_s: float = 1.0) -> list[str]:
    """Processes (other than this one) that used more than :data:`BUSY_SHARE` of a core over ``window_s``.

    Args:
        window_s: how long to watch.

    Returns:
        ``"pid name NN%"`` for each busy process.
    """
    ticks = os.sysconf("SC_CLK_TCK")

    def snapshot() -> dict[int, tuple[str, int]]:
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            found[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))  # utime + stime
        return found

    before = snapshot()
    time.sleep(window_s)
    after = snapshot()
    busy = []
    for pid, (name, used) in after.items():
        share = (used - before.get(pid, (name, used))[1]) / ticks / window_s
        if share > BUSY_SHARE:
            busy.append(f"{pid} {name} {share:.0%}")
    return busy


def quiet_warnings() -> list[str]:
    """Reasons the machine is not quiet enough for figures to report (empty: quiet).

    Returns:
        One line per reason.
    """
    warnings = []
    load1 = os.getloadavg()[0]
    if load1 > QUIET_LOAD:
        warnings.append(f"machine not quiet: load average {load1:.2f} > {QUIET_LOAD} before starting")
    busy = busy_processes()
    if busy:
        warnings.append("machine not quiet: other busy processes: " + ", ".join(busy))
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin and not (Path(spec.origin).parent / "__pycache__").is_dir():
        warnings.append(
            "torch has no compiled bytecode in this environment (uv installs without it unless --compile-bytecode; "
            "PYTHONDONTWRITEBYTECODE=1 stops Python caching it): every process recompiles it at import; run "
            f"`{sys.executable} -m compileall -q {Path(spec.origin).parents[1]}` once"
        )
    return warnings


def _median_run(runs: list[Run]) -> Run:
    if len(runs) == 1:
        return runs[0]

    def med(attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)

    return dataclasses.replace(
        runs[0],
        name=f"{runs[0].name} median of {len(runs)}",
        **{a: med(a) for a in ("wall_s", "exit_s", "to_train_s", "to_accuracy_s", "cpu_s", "accuracy", "train_s")},
        peak_pss=int(med("peak_pss")),
        peak_rss=int(med("peak_rss")),
    )


def _print_table(rows: list[Run]) -> None:
    head = (
        f"{'run':40} {'wall s':>7} {'exit s':>7} {'start s':>8} {'train s':>8} {'tail s':>7} {'CPU s':>7} "
        f"{'PSS MiB':>8} {'RSS MiB':>8} {'acc %':>6}"
    )
    print(head)
    for r in rows:
        print(
            f"{r.name:40} {r.wall_s:7.2f} {r.exit_s:7.2f} {r.to_train_s:8.2f} {r.to_accuracy_s - r.to_train_s:8.2f} "
            f"{r.wall_s - r.to_accuracy_s:7.2f} {r.cpu_s:7.2f} {r.peak_pss / MIB:8.0f} {r.peak_rss / MIB:8.0f} "
            f"{r.accuracy:6.2f}"
        )


def main() -> None:
    """Run both and print the comparison table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=1, help="alternate the two runs this many times; print medians")
    parser.add_argument("--only", choices=("reference", "ours"), help="run only one side (no ratios)")
    parser.add_argument("--detail", action="store_true", help="print each process's peak PSS and RSS")
    parser.add_argument("--json", metavar="PATH", help="also write the runs, medians and ratios to PATH as JSON")
    args = parser.parse_args()
    # empty: the example's own lookup (the cache, then the mirrors), as for any user
    data_dir = os.environ.get("MNIST_DATA_DIR", "")
    if args.reference_only:
        reference_main(data_dir)
        return
    if args.runs < 1:
        parser.error(f"--runs={args.runs} is not valid; use 1 or more")
    load_before = os.getloadavg()[0]
    warnings = quiet_warnings()
    for warning in warnings:
        print(f"WARNING: {warning}; figures are distorted", file=sys.stderr)
    reaper = _become_subreaper()
    env = dict(os.environ, MNIST_DATA_DIR=data_dir, PYTHONUNBUFFERED="1")
    pyflyte = str(Path(sys.executable).with_name("pyflyte"))
    sides = {
        "reference": ("reference (classic, 1 process)", [sys.executable, __file__, "--reference-only"]),
        "ours": ("ours (pyflyte run, 3 ranks)", [pyflyte, "run", "examples/mnist/workflow.py", "mnist_workflow"]),
    }
    chosen = [args.only] if args.only else ["reference", "ours"]
    results: dict[str, list[Run]] = {side: [] for side in chosen}
    for _ in range(args.runs):
        for side in chosen:
            name, cmd = sides[side]
            markers = REFERENCE_MARKERS if side == "reference" else OURS_MARKERS
            run, out = run_measured(name, cmd, env, markers)
            if side == "reference":
                ref = json.loads(out.strip().splitlines()[-1])
                run.accuracy, run.train_s = ref["accuracy"], ref["train_seconds"]
            else:
                accuracy = re.findall(r"test accuracy ([0-9.]+)% on \d+ images", out)
                seconds = re.findall(r"training loop ([0-9.]+) s", out)
                run.accuracy = float(accuracy[-1]) if accuracy else float("nan")
                run.train_s = float(seconds[-1]) if seconds else float("nan")
            results[side].append(run)
    rows = [r for side in chosen for r in results[side]]
    medians = {side: _median_run(runs) for side, runs in results.items()}
    print(f"cpus: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f} (1 min) now, subreaper: {reaper}")
    print(
        "wall = until the last process of the run exited; exit = until its main process exited; start = to the line "
        "saying training starts; train = from there to the accuracy line; tail = from there to the end of wall"
    )
    _print_table(rows + ([medians[s] for s in chosen] if args.runs > 1 else []))
    if args.detail:
        for r in rows:
            marks = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r.markers_s.items(), key=lambda kv: kv[1]))
            print(f"\n{r.name}: first seen at (s): {marks}, exit {r.wall_s:.2f}")
            print(f"  peak per process (PSS / RSS MiB); the memory sampler used {r.sampler_cpu_s:.2f} s CPU")
            for label, (pss, rss) in sorted(r.per_process.items(), key=lambda kv: -kv[1][0]):
                print(f"    {pss / MIB:7.0f} / {rss / MIB:7.0f}  {label}")
    for r in rows:
        if r.leftover:
            print(f"LEFT RUNNING after {r.name} (killed): {r.leftover}")
    if len(chosen) == 2:
        ref, ours = medians["reference"], medians["ours"]
        wall, pss = ours.wall_s / ref.wall_s, ours.peak_pss / ref.peak_pss
        print(
            f"ratios ours/reference: wall {wall:.2f} (goal <= {WALL_GOAL}; to the main process's exit "
            f"{ours.exit_s / ref.exit_s:.2f}), PSS {pss:.2f} (goal <= {PSS_GOAL}), "
            f"RSS {ours.peak_rss / ref.peak_rss:.2f}, CPU {ours.cpu_s / ref.cpu_s:.2f}; "
            f"accuracy {ours.accuracy:.2f}% (goal >= {MIN_ACCURACY})"
        )
        met = wall <= WALL_GOAL and pss <= PSS_GOAL and ours.accuracy >= MIN_ACCURACY
        print("goals met" if met else "goals NOT met", "(with the warnings above)" if warnings else "")
    if args.json:
        Path(args.json).write_text(json.dumps(_as_json(results, medians, load_before, warnings), indent=1))


def _as_json(
    results: dict[str, list[Run]], medians: dict[str, Run], load_before: float, warnings: list[str]
) -> dict[str, object]:
    """What ``--json`` writes: every run and the median of each side (times in s, memory in MiB), and the ratios."""

    def fields(run: Run) -> dict[str, float]:
        return {
            "wall_s": run.wall_s,
            "exit_s": run.exit_s,
            "start_s": run.to_train_s,
            "train_s": run.to_accuracy_s - run.to_train_s,
            "cpu_s": run.cpu_s,
            "pss_mib": run.peak_pss / MIB,
            "rss_mib": run.peak_rss / MIB,
            "accuracy": run.accuracy,
        }

    out: dict[str, object] = {
        "load_before": load_before,
        "warnings": warnings,
        "runs": {side: [fields(r) for r in runs] for side, runs in results.items()},
        "medians": {side: fields(run) for side, run in medians.items()},
        "goals": {"wall": WALL_GOAL, "pss": PSS_GOAL, "accuracy": MIN_ACCURACY},
    }
    if len(medians) == 2:
        ref, ours = medians["reference"], medians["ours"]
        out["ratios"] = {"wall": ours.wall_s / ref.wall_s, "pss": ours.peak_pss / ref.peak_pss}
    return out


if __name__ == "__main__":
    main()
