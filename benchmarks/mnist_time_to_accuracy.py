"""Time to accuracy on MNIST: the classic Kubeflow example configuration vs. our example, side by side.

(a) reference: the classic network (conv 20 and 50 channels 5x5, max-pooling, FC 800->500->10), SGD lr 0.01
    momentum 0.5, batch 64, one epoch, one process, DataLoader over a TensorDataset, log_softmax + nll_loss;
(b) ours: ``pyflyte run examples/mnist/workflow.py mnist_workflow`` with default inputs (3 ranks).

Both run as child processes of this script, one after the other, on the same machine. For each: wall time (process
start to exit), time in the training loop (as reported by the run), peak memory of the process tree (the largest
SUM of RSS over the child and all its descendants, sampled every 50 ms from /proc; shared pages count once per
process, so this overstates memory shared between ranks), final test accuracy, and the ratio of wall times.

Usage: ``MNIST_DATA_DIR=../shared/data/mnist python benchmarks/mnist_time_to_accuracy.py``
(the data dir defaults to ``../shared/data/mnist`` relative to the repository root).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _tree_rss_bytes(root: int) -> int:
    total, stack = 0, [root]
    page = os.sysconf("SC_PAGE_SIZE")
    while stack:
        pid = stack.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        stack += _children(pid)
    return total


def run_measured(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Run ``cmd``; return (wall seconds, peak tree RSS bytes, combined output).

    Raises:
        RuntimeError: the command exited non-zero (its output tail is in the message).
    """
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_bytes(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    wall = time.perf_counter() - started
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{output[-3000:]}")
    return wall, peak[0], output


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
    print(json.dumps({"accuracy": 100.0 * correct / len(test), "train_seconds": seconds}))


def main() -> None:
    """Run both and print the comparison table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    data_dir = os.environ.get("MNIST_DATA_DIR") or str((REPO / ".." / "shared" / "data" / "mnist").resolve())
    if args.reference_only:
        reference_main(data_dir)
        return
    env = dict(os.environ, MNIST_DATA_DIR=data_dir)
    rows = []
    wall, peak, out = run_measured([sys.executable, __file__, "--reference-only"], env)
    ref = json.loads(out.strip().splitlines()[-1])
    rows.append(("reference (classic, 1 process)", wall, ref["train_seconds"], peak, ref["accuracy"]))
    pyflyte = str(Path(sys.executable).with_name("pyflyte"))
    wall, peak, out = run_measured([pyflyte, "run", "examples/mnist/workflow.py", "mnist_workflow"], env)
    accuracy = re.search(r"test accuracy ([0-9.]+)%", out)
    seconds = re.search(r"training loop ([0-9.]+) s", out)
    rows.append(("ours (pyflyte run, 3 ranks)", wall, float(seconds.group(1)) if seconds else float("nan"), peak,
                 float(accuracy.group(1)) if accuracy else float("nan")))  # fmt: skip
    print(f"{'run':34} {'wall s':>7} {'train s':>8} {'peak tree RSS MiB':>18} {'test acc %':>10}")
    for name, w, t, p, a in rows:
        print(f"{name:34} {w:7.2f} {t:8.2f} {p / 2**20:18.0f} {a:10.2f}")
    print(f"wall-time ratio ours/reference: {rows[1][1] / rows[0][1]:.2f}  (cpus: {os.cpu_count()})")


if __name__ == "__main__":
    main()
