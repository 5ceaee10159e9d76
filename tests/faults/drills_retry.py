"""Fault drill 4: a recoverable error on rank 1, the task's retry, and the resume from the checkpoint.

Flyte retries a task whose error document says ``RECOVERABLE``: it runs the same container again with the same
inputs, a new checkpoint prefix, and the failed attempt's checkpoint prefix as ``--prev-checkpoint``. flytekit's
local execution never retries, so this drill plays propeller's part with the real ``pyflyte-execute`` CLI:

1. The task :func:`tests.faults.retry_tasks.train_with_fault` (the MNIST example's training loop on 3 ranks) is
   serialized in-process with flytekit's translator, the way ``pyflyte package`` does, and its container args are
   filled in like propeller fills them (``{{.input}}``, ``{{.outputPrefix}}``, ...).
2. **Baseline**: one uninterrupted run.
3. **Attempt 0**: ``DRILL_RECOVERABLE_AT_EPOCH=K`` makes rank 1 raise ``FlyteRecoverableException`` after epoch K;
   ``--prev-checkpoint ""`` as on a first attempt. ``FLYTE_FAIL_ON_ERROR=true`` as our builder sets on every replica.
   Expected: a non-zero exit, ``error.pb`` with kind ``RECOVERABLE`` naming rank 1, no ``outputs.pb``, the epoch-K
   checkpoint under the attempt's checkpoint prefix, no process left.
4. **Attempt 1**: the same command with ``--checkpoint-path <A1> --prev-checkpoint <A0>`` and no fault. Expected:
   it resumes after epoch K (a returned field and rank 0's log line say so) and its outputs (accuracies, losses,
   weights bytes and tensors) are identical to the baseline's.

Time to detect is from the raise on rank 1 (the timestamp the launcher carries into ``error.pb``) to attempt 0's
``pyflyte-execute`` exiting. Leftover processes are found by a marker in the initial environment of every process
the drill started (ranks included).

Not emulated: propeller itself (retry budget, backoff) and the PyTorchJob (one ``pyflyte-execute`` runs every rank
as local processes here; on a cluster each replica pod runs it with the operator's ``RANK``/``MASTER_*``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from flyteidl.core import errors_pb2
from flytekit.core import utils

from examples.mnist.data import default_cache_dir
from tests.faults.drills_local import MARKER_ENV, _wait_gone
from tests.faults.retry_tasks import FAIL_AT_EPOCH_ENV, FAIL_RANK_ENV, FAULT_MESSAGE
from tests.mnist_data import HOW, find_mnist

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
#: The real MNIST files (tests/mnist_data.py: $MNIST_DATA_DIR or the cache); checked when a drill starts.
MNIST_DIR = find_mnist(download=False) or default_cache_dir()
IMAGE = "localhost/flytekitplugins-pytorch-drill:venv"
TASK_MODULE = "tests.faults.retry_tasks"
TASK_NAME = "train_with_fault"
RESUME_LOG = "resuming after epoch {epoch} of {epochs} from the task checkpoint"
#: One attempt must finish within this many seconds (a few on an idle laptop; the CI machine is shared).
ATTEMPT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DrillInputs:
    """What the drill trains and where it injects the fault.

    Attributes:
        epochs: epochs of every run.
        fail_after_epoch: rank ``fail_rank`` raises after this epoch in attempt 0 (1 <= it < epochs).
        fail_rank: the rank that raises.
        train_limit: training images (a slice of real MNIST).
        test_limit: test images.
        batch_size: global batch size.
        seed: the run's seed (the same for every run).
    """

    epochs: int = 3
    fail_after_epoch: int = 1
    fail_rank: int = 1
    train_limit: int = 2000
    test_limit: int = 1000
    batch_size: int = 128
    seed: int = 7

    def __post_init__(self) -> None:
        if not 1 <= self.fail_after_epoch < self.epochs:
            raise ValueError(
                f"DrillInputs.fail_after_epoch={self.fail_after_epoch!r} is out of range; use 1..{self.epochs - 1} "
                "so that the retry has an epoch left to run"
            )

    def task_inputs(self) -> dict[str, Any]:
        """The task's inputs (the same for every attempt, as in a Flyte retry)."""
        return {
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "train_limit": self.train_limit,
            "test_limit": self.test_limit,
            "data_dir": str(MNIST_DIR),
        }


@dataclass
class Attempt:
    """One ``pyflyte-execute`` run.

    Attributes:
        name: ``baseline``, ``attempt-0`` or ``attempt-1``.
        returncode: its exit code.
        output_prefix: its ``--output-prefix``.
        checkpoint_path: its ``--checkpoint-path``.
        log: its stdout and stderr (the ranks' logs included).
        ended_at: ``time.time()`` when it exited.
        wall_s: its wall time.
    """

    name: str
    returncode: int
    output_prefix: Path
    checkpoint_path: Path
    log: str
    ended_at: float
    wall_s: float


def container_args() -> list[str]:
    """The task's container args as ``pyflyte package`` would serialize them (templates not yet filled in).

    Returns:
        The args, starting with ``pyflyte-execute``.
    """
    from collections import OrderedDict

    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.tools.translator import get_serializable

    from tests.faults.retry_tasks import train_with_fault

    image = Image.look_up_image_info("default", IMAGE)
    settings = SerializationSettings(image_config=ImageConfig(default_image=image, images=[image]))
    spec = get_serializable(OrderedDict(), settings, train_with_fault)
    return list(spec.template.container.args)


def fill_args(
    args: list[str], *, inputs: Path, output_prefix: Path, raw: Path, checkpoint: Path, prev: str
) -> list[str]:
    """Fill in the templates the way propeller does for one attempt.

    Args:
        args: serialized container args.
        inputs: the ``inputs.pb`` path.
        output_prefix: this attempt's output prefix.
        raw: the raw output data prefix.
        checkpoint: this attempt's checkpoint prefix.
        prev: the previous attempt's checkpoint prefix, or ``""`` on a first attempt.

    Returns:
        The command line.

    Raises:
        ValueError: a template is not among those propeller fills in.
    """
    values = {
        "{{.input}}": str(inputs),
        "{{.outputPrefix}}": str(output_prefix),
        "{{.rawOutputDataPrefix}}": str(raw),
        "{{.checkpointOutputPrefix}}": str(checkpoint),
        "{{.prevCheckpointPrefix}}": prev,
    }
    filled = [values.get(arg, arg) for arg in args]
    left = [arg for arg in filled if arg.startswith("{{")]
    if left:
        raise ValueError(f"container args {left} are templates this drill does not fill in; it fills {list(values)}")
    return filled


@dataclass
class _Running:
    name: str
    proc: subprocess.Popen
    output_prefix: Path
    checkpoint_path: Path
    log_path: Path
    started: float


def _start_attempt(
    name: str, cmd: list[str], work: Path, output_prefix: Path, checkpoint: Path, marker: str, fault_env: dict
) -> _Running:
    """Start one ``pyflyte-execute`` with a pod-like environment (not the caller's), logging to a file."""
    env = {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(REPO_ROOT),
        "HOME": str(work / "home"),
        "LANG": "C.UTF-8",
        "FLYTE_FAIL_ON_ERROR": "true",  # what the builder sets on every replica
        "MNIST_DATA_DIR": str(MNIST_DIR),
        MARKER_ENV: marker,
        **fault_env,
    }
    (work / "home").mkdir(exist_ok=True)
    log_path = work / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    return _Running(name, proc, output_prefix, checkpoint, log_path, time.monotonic())


def _finish_attempt(run: _Running) -> Attempt:
    """Wait for an attempt (killing it past :data:`ATTEMPT_TIMEOUT_S`) and collect what it left."""
    try:
        returncode = run.proc.wait(timeout=max(1.0, ATTEMPT_TIMEOUT_S - (time.monotonic() - run.started)))
    except subprocess.TimeoutExpired:
        run.proc.kill()
        returncode = run.proc.wait()
    ended_at, wall_s = time.time(), time.monotonic() - run.started
    return Attempt(
        name=run.name,
        returncode=returncode,
        output_prefix=run.output_prefix,
        checkpoint_path=run.checkpoint_path,
        log=run.log_path.read_text(errors="replace"),
        ended_at=ended_at,
        wall_s=wall_s,
    )


def read_error(output_prefix: Path) -> Optional[errors_pb2.ErrorDocument]:
    """The ``error.pb`` (or ``error-<uuid>.pb``) an attempt wrote, if any.

    Args:
        output_prefix: the attempt's output prefix.

    Returns:
        The error document, or ``None``.
    """
    found = sorted(output_prefix.glob("error*.pb"))
    if not found:
        return None
    return utils.load_proto_from_file(errors_pb2.ErrorDocument, str(found[0]))


def _weights_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


def _tensors_equal(a_path: str, b_path: str) -> bool:
    import torch

    a = torch.load(a_path, map_location="cpu", weights_only=True)
    b = torch.load(b_path, map_location="cpu", weights_only=True)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def run_retry_drill(inputs: Optional[DrillInputs] = None, keep: Optional[Path] = None) -> dict[str, Any]:
    """Run baseline, failing attempt 0 and resuming attempt 1; return everything the test and the report check.

    Args:
        inputs: what to train and where to fail (default :class:`DrillInputs`).
        keep: a directory to work in and keep (default: a temporary one, removed afterwards).

    Returns:
        A dict with the attempts (``baseline``, ``attempt0``, ``attempt1``: :class:`Attempt`), ``error`` (attempt 0's
        error document or ``None``), ``checkpoint0`` (files under attempt 0's checkpoint prefix), ``outputs``
        (``baseline`` and ``attempt1`` output values), ``detect_s``, ``leftover_procs`` and ``inputs``.

    Raises:
        FileNotFoundError: the MNIST files are neither in ``$MNIST_DATA_DIR`` nor in the cache.
    """
    from tests.e2e.harness import read_outputs, to_literal_map
    from tests.faults.retry_tasks import train_with_fault

    inputs = inputs or DrillInputs()
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").exists() and not (MNIST_DIR / "train-images-idx3-ubyte").exists():
        raise FileNotFoundError(HOW)
    # Short: multiprocessing's AF_UNIX socket paths under it must stay below 108 bytes.
    work = keep if keep is not None else Path(tempfile.mkdtemp(prefix="retry-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    marker = f"retry-{uuid.uuid4().hex[:12]}"
    try:
        args = container_args()
        inputs_pb = work / "inputs.pb"
        literal_map = to_literal_map(inputs.task_inputs(), train_with_fault.python_interface.inputs)
        utils.write_proto_to_file(literal_map.to_flyte_idl(), str(inputs_pb))
        raw = work / "raw"

        def start(name: str, prev: str, fault_env: dict) -> _Running:
            out, ckpt = work / name / "out", work / name / "checkpoint"
            cmd = fill_args(args, inputs=inputs_pb, output_prefix=out, raw=raw, checkpoint=ckpt, prev=prev)
            return _start_attempt(name, cmd, work, out, ckpt, f"{marker}-{name}", fault_env)

        fault = {FAIL_AT_EPOCH_ENV: str(inputs.fail_after_epoch), FAIL_RANK_ENV: str(inputs.fail_rank)}
        # The uninterrupted run is independent of the attempts: it runs alongside attempt 0 to save wall time.
        running_baseline = start("baseline", "", {})
        attempt0 = _finish_attempt(start("attempt-0", "", fault))
        leftover = _wait_gone(f"{marker}-attempt-0", within_s=10.0)
        error = read_error(attempt0.output_prefix)
        checkpoint0 = sorted(str(p.relative_to(attempt0.checkpoint_path)) for p in attempt0.checkpoint_path.rglob("*"))
        attempt1 = _finish_attempt(start("attempt-1", str(attempt0.checkpoint_path), {}))
        baseline = _finish_attempt(running_baseline)
        for name in ("attempt-1", "baseline"):
            leftover += _wait_gone(f"{marker}-{name}", within_s=10.0)

        types = train_with_fault.python_interface.outputs
        outputs = {}
        for run in (baseline, attempt1):
            if (run.output_prefix / "outputs.pb").exists():
                outputs[run.name] = read_outputs(str(run.output_prefix), types)
        detect_s = None
        if error is not None and error.error.HasField("timestamp") and error.error.timestamp.seconds:
            raised_at = error.error.timestamp.seconds + error.error.timestamp.nanos / 1e9
            detect_s = attempt0.ended_at - raised_at
        identical = None
        if {"baseline", "attempt-1"} <= outputs.keys():
            b, r = outputs["baseline"], outputs["attempt-1"]
            identical = {
                "accuracies": b["accuracies"] == r["accuracies"],
                "epoch_losses": b["epoch_losses"] == r["epoch_losses"],
                "weights_sha256": b["weights_sha256"] == r["weights_sha256"],
                "weights_file_bytes": _weights_bytes(b["weights"].path) == _weights_bytes(r["weights"].path),
                "weights_tensors": _tensors_equal(b["weights"].path, r["weights"].path),
            }
        return {
            "inputs": inputs,
            "baseline": baseline,
            "attempt0": attempt0,
            "attempt1": attempt1,
            "error": error,
            "checkpoint0": checkpoint0,
            "outputs": outputs,
            "identical": identical,
            "detect_s": detect_s,
            "leftover_procs": sorted(leftover),
            "work": work,
        }
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def expected_fault_message(inputs: DrillInputs) -> str:
    """The text of the injected exception.

    Args:
        inputs: the drill's inputs.

    Returns:
        The message rank ``fail_rank`` raises.
    """
    return FAULT_MESSAGE.format(rank=inputs.fail_rank, epoch=inputs.fail_after_epoch)


def drill_retry_resume() -> dict[str, Any]:
    """Drill 4 as one row of ``benchmarks/fault_report.py``.

    Returns:
        ``{drill, injected, expected, observed, detect_s, leftover, data_lost}``; ``data_lost`` is True when the
        resumed attempt's outputs differ from the uninterrupted run's (or it did not resume or finish).
    """
    inputs = DrillInputs()
    report = run_retry_drill(inputs)
    error, attempt0, attempt1 = report["error"], report["attempt0"], report["attempt1"]
    kind = errors_pb2.ContainerError.Kind.Name(error.error.kind) if error is not None else "no error.pb"
    resumed = report["outputs"].get("attempt-1", {}).get("resumed_from_epoch")
    identical = report["identical"] or {}
    same = bool(identical) and all(identical.values())
    observed = (
        f"attempt 0 exit {attempt0.returncode}, error.pb {kind}; attempt 1 exit {attempt1.returncode}, "
        f"resumed after epoch {resumed}; outputs vs uninterrupted: "
        + (", ".join(f"{k} {'equal' if v else 'DIFFER'}" for k, v in identical.items()) if identical else "missing")
        + f"; wall s: baseline {report['baseline'].wall_s:.1f}, attempt 0 {attempt0.wall_s:.1f}, "
        f"attempt 1 {attempt1.wall_s:.1f}"
    )
    return {
        "drill": "4 retry-resume",
        "injected": f"FlyteRecoverableException on rank {inputs.fail_rank} of 3 after epoch "
        f"{inputs.fail_after_epoch} of {inputs.epochs} (pyflyte-execute, {inputs.train_limit} MNIST images)",
        "expected": f"error.pb RECOVERABLE; retry with prev checkpoint resumes after epoch {inputs.fail_after_epoch}; "
        "outputs identical to an uninterrupted run",
        "observed": observed,
        "detect_s": report["detect_s"],
        "leftover": len(report["leftover_procs"]),
        "data_lost": not (same and resumed == inputs.fail_after_epoch and attempt1.returncode == 0),
    }


def _print_summary(report: dict[str, Any]) -> None:
    for name in ("baseline", "attempt0", "attempt1"):
        run = report[name]
        print(f"{run.name}: exit {run.returncode} in {run.wall_s:.1f} s")
    print("identical:", report["identical"], "detect_s:", report["detect_s"], "leftover:", report["leftover_procs"])


if __name__ == "__main__":
    keep_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    result = run_retry_drill(keep=keep_dir)
    _print_summary(result)
