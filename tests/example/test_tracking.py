"""The MNIST example's experiment tracking, run for real: W&B (offline) and TensorBoard record what the run logged.

The slow test trains on a slice of real MNIST with ``MNIST_TRACKING=wandb,tensorboard``, the W&B API key given only
as a Flyte secret (flytekit's local secrets are ``_FSEC_<GROUP>_<KEY>`` variables) and ``WANDB_MODE=offline``, then
reads back what each tracker wrote: the records of W&B's ``.wandb`` run file (framed as LevelDB log records, each a
``wandb.proto.wandb_internal_pb2.Record``) and TensorBoard's event files (TensorBoard's own ``EventAccumulator``).
Both must hold the loss of every logged step and the accuracy of every epoch, at the step numbers and with the values
the run printed. The fake key must appear nowhere: not in the output, not in the Deck, not in any file the run wrote.
The Deck must open on the Training tab, with the step count on its x axis.

wandb and tensorboard are the ``tracking`` extra (pinned in constraints.txt); where they are not installed, the test
installs them into a temporary folder with those pins, and is skipped, saying why, when that fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

from examples.mnist import tracking
from tests.mnist_data import require_mnist
from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"
FAKE_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"  # 40 hex characters, the shape of a W&B API key
SECRET_ENV = f"_FSEC_{tracking.WANDB_SECRET_GROUP.upper()}_{tracking.WANDB_SECRET_KEY.upper()}"
TRAIN_LIMIT, BATCH, EPOCHS, LOG_INTERVAL = 1200, 192, 2, 2
STEPS_PER_EPOCH = -(-TRAIN_LIMIT // BATCH)  # 7: the last batch is partial
MAX_PROCS = 16  # pyflyte, the launcher, its fork server and resource tracker, three ranks, W&B's service process
BOUND_S = 420


def test_the_secret_is_where_the_key_comes_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Flyte secret wins; WANDB_API_KEY is the fallback; neither means no key (W&B is then skipped)."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv(SECRET_ENV, raising=False)
    assert tracking._wandb_key() is None
    monkeypatch.setenv("WANDB_API_KEY", "from-the-variable")
    assert tracking._wandb_key() == "from-the-variable"
    monkeypatch.setenv(SECRET_ENV, FAKE_KEY)
    assert tracking._wandb_key() == FAKE_KEY


# --- reading back what the trackers wrote ---------------------------------------------------------------------


def wandb_records(run_file: Path) -> list:
    """The records of a W&B run file (``run-<id>.wandb``), each checked against its CRC.

    The file is a 7-byte header (``:W&B``, magic, version) and then LevelDB log records in 32 KiB blocks: a record
    header (CRC-32 of type and data, 2-byte length, 1-byte type: full, first, middle, last) and its data; a block's
    last 6 bytes or fewer are padding. A whole record's data is one ``Record`` message of wandb's own protocol.
    """
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # zero padding to the end of the block
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"{run_file}: bad CRC at byte {pos}"
        pos += 7 + length
        pending += chunk
        if kind in (1, 4):  # full, or last of several
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(records: list) -> dict[str, dict[int, float]]:
    """metric -> {step: value} from the history records."""
    out: dict[str, dict[int, float]] = {}
    for record in records:
        if record.WhichOneof("record_type") != "history":
            continue
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            if not key.startswith("_"):
                out.setdefault(key, {})[int(record.history.step.num)] = float(json.loads(item.value_json))
    return out


def tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value}, read with TensorBoard's own event reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


# --- the run -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trackers_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PYTHONPATH entry under which wandb and tensorboard import: empty when this environment has them."""
    if all(importlib.util.find_spec(m) is not None for m in ("wandb", "tensorboard")):
        return ""
    target = tmp_path_factory.mktemp("trackers")
    pins = ["-c", str(ROOT / "constraints.txt"), "wandb", "tensorboard"]
    uv = shutil.which("uv")
    cmd = (
        [uv, "pip", "install", "-q", "--python", sys.executable, "--target", str(target), *pins]
        if uv
        else [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *pins]
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        pytest.skip(f"wandb and tensorboard are not installed and `{' '.join(cmd[:3])}` failed: {out.stderr[-800:]}")
    return str(target)


def _tracking_env(trackers_path: str, home: Path, wandb_dir: Path | None, **extra: str) -> dict[str, str]:
    """The caller's environment without any W&B, Flyte secret, MNIST or launcher setting, plus the trackers on
    PYTHONPATH, a fresh HOME (nothing may land in the real one: a netrc with a key, settings), W&B's folders under
    `wandb_dir` (when given), and `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FLYTE_PYTORCH_", "WANDB_", "_FSEC_", "MNIST_")) and k != "PYTHONPATH"
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (trackers_path, str(ROOT)) if p)
    env["HOME"] = str(home)
    if wandb_dir is not None:
        env.update(
            {
                "WANDB_DIR": str(wandb_dir),
                "WANDB_CONFIG_DIR": str(wandb_dir / "wandb-config"),
                "WANDB_CACHE_DIR": str(wandb_dir / "wandb-cache"),
                "WANDB_DATA_DIR": str(wandb_dir / "wandb-data"),
            }
        )
    return {**env, **extra}


@pytest.fixture(scope="module")
def tracked_run(trackers_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One training run with both trackers, the key as a Flyte secret; what it printed and where it wrote."""
    data_dir = str(require_mnist())
    if trackers_path:
        sys.path.insert(0, trackers_path)  # the readers below import wandb's protocol and TensorBoard
    work = tmp_path_factory.mktemp("tracked")
    env = _tracking_env(
        trackers_path,
        work / "home",
        work,
        MNIST_DATA_DIR=data_dir,
        WANDB_MODE="offline",
        **{
            tracking.TRACKING_ENV: "wandb,tensorboard",
            tracking.TENSORBOARD_DIR_ENV: str(work / "tensorboard"),
            SECRET_ENV: FAKE_KEY,  # the only source of the key: WANDB_API_KEY is not set
        },
    )
    (work / "home").mkdir()
    pyflyte = str(Path(sys.executable).with_name("pyflyte"))
    cmd = [pyflyte, "run", str(ROOT / "examples" / "mnist" / "workflow.py"), "train_mnist"]
    cmd += ["--train_limit", str(TRAIN_LIMIT), "--test_limit", "500", "--batch_size", str(BATCH)]
    cmd += ["--epochs", str(EPOCHS), "--log_interval", str(LOG_INTERVAL)]
    result = run_guarded(cmd, max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(work), env=env)
    assert result.killed_for == "", f"killed: {result.killed_for}\n{result.output[-4000:]}"
    assert result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], f"processes left running: {result.leftover}"
    return {"output": result.output, "work": work}


def _printed_losses(output: str) -> dict[int, float]:
    """Global step -> the loss rank 0 printed for it (4 decimals)."""
    pattern = r"rank 0 epoch (\d+)/\d+ step (\d+)/(\d+) loss ([0-9.]+)"
    return {(int(e) - 1) * int(n) + int(s): float(v) for e, s, n, v in re.findall(pattern, output)}


def _printed_epochs(output: str) -> list[tuple[float, float]]:
    """(test accuracy, train loss) of each epoch line."""
    pattern = r"epoch \d+/\d+: test accuracy ([0-9.]+)%, train loss ([0-9.]+) \(mean over the epoch\)"
    return [(float(a), float(loss)) for a, loss in re.findall(pattern, output)]


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 660)
def test_wandb_offline_run_holds_the_logged_metrics(tracked_run: dict) -> None:
    losses, epochs = _printed_losses(tracked_run["output"]), _printed_epochs(tracked_run["output"])
    assert len(epochs) == EPOCHS, tracked_run["output"][-3000:]
    assert sorted(losses) == [2, 4, 6, 7, 9, 11, 13, 14]  # every LOG_INTERVAL steps and at each epoch's end
    (run_dir,) = (tracked_run["work"] / "wandb").glob("offline-run-*")
    (run_file,) = run_dir.glob("run-*.wandb")
    records = wandb_records(run_file)
    history = wandb_history(records)
    assert history["loss"].keys() == losses.keys()
    for step, printed in losses.items():
        assert history["loss"][step] == pytest.approx(printed, abs=5e-5), step
    epoch_ends = [STEPS_PER_EPOCH * e for e in range(1, EPOCHS + 1)]
    assert sorted(history["accuracy"]) == epoch_ends
    assert [history["accuracy"][s] for s in epoch_ends] == pytest.approx([a for a, _ in epochs], abs=0.005)
    assert [history["epoch_loss"][s] for s in epoch_ends] == pytest.approx([loss for _, loss in epochs], abs=5e-5)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["epochs"] == EPOCHS and config["batch_size"] == BATCH


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 660)
def test_tensorboard_event_files_hold_the_logged_metrics(tracked_run: dict) -> None:
    losses, epochs = _printed_losses(tracked_run["output"]), _printed_epochs(tracked_run["output"])
    scalars = tensorboard_scalars(tracked_run["work"] / "tensorboard")
    assert scalars["loss"].keys() == losses.keys()
    for step, printed in losses.items():
        assert scalars["loss"][step] == pytest.approx(printed, abs=5e-5), step
    epoch_ends = [STEPS_PER_EPOCH * e for e in range(1, EPOCHS + 1)]
    assert sorted(scalars["accuracy"]) == epoch_ends
    assert [scalars["accuracy"][s] for s in epoch_ends] == pytest.approx([a for a, _ in epochs], abs=0.005)
    assert sorted(scalars["lr"]) == sorted(losses)


def _deck(output: str) -> str:
    (path,) = re.findall(r"Deck of \S+: file://(\S+)", output)
    return Path(path).read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 660)
def test_the_key_appears_nowhere(tracked_run: dict) -> None:
    assert FAKE_KEY not in tracked_run["output"]
    assert FAKE_KEY not in _deck(tracked_run["output"])
    written = [p for p in tracked_run["work"].rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in written) and any("tfevents" in p.name for p in written)
    assert [p for p in written if FAKE_KEY.encode() in p.read_bytes()] == []


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 660)
def test_the_deck_opens_on_training_with_steps_on_the_axis(tracked_run: dict) -> None:
    html = _deck(tracked_run["output"])
    tabs = re.findall(r'<li onclick="handleLinkClick\(this\)">([^<]*)</li>', html)
    assert tabs[0] == "Training" and "Timeline" in tabs, tabs
    svg = ET.fromstring(re.search(r"<svg .*?</svg>", html, re.S).group(0))
    loss_line, accuracy_line = svg.findall(f".//{SVG}polyline")
    losses = _printed_losses(tracked_run["output"])
    assert len(loss_line.get("points", "").split()) == len(losses)  # one point per logged step
    assert len(accuracy_line.get("points", "").split()) == EPOCHS  # one per epoch
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert "step" in texts and "step (end of each epoch)" in texts
    assert texts.count("0") == 2 and texts.count(str(STEPS_PER_EPOCH * EPOCHS)) == 2  # both x axes: 0 .. 14 steps


#: Rank 0's tracking, without the training: W&B gets one loss and closes; prints where the offline run went.
_TRACK_ONLY = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
from examples.mnist import tracking
on_log, close = tracking.make_logger("mnist", {"batch_size": 192}, sys.argv[1])
on_log(1, {"loss": 2.5})
on_log(2, {"loss": 1.25})
close()
"""


def _track_only(work: Path, trackers_path: str, mode: str) -> tuple[str, list[Path]]:
    """Run :data:`_TRACK_ONLY` with W&B on and no key anywhere; return its output and the offline runs it wrote."""
    env = _tracking_env(trackers_path, work / "home", work, **{tracking.TRACKING_ENV: "wandb"})
    if mode:
        env["WANDB_MODE"] = mode
    (work / "home").mkdir(parents=True)
    result = run_guarded(
        [sys.executable, "-c", _TRACK_ONLY, str(work / "tb")], max_procs=8, timeout_s=180, cwd=str(work), env=env
    )
    assert result.killed_for == "" and result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], f"processes left running: {result.leftover}"
    return result.output, sorted((work / "wandb").glob("offline-run-*"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wandb_offline_needs_no_key(trackers_path: str, tmp_path: Path) -> None:
    """WANDB_MODE=offline without any key: W&B runs offline and its run file holds what was logged. Without
    WANDB_MODE and without a key, W&B is skipped with a line that names the offline way."""
    if trackers_path:
        sys.path.insert(0, trackers_path)
    output, runs = _track_only(tmp_path / "offline", trackers_path, "offline")
    assert "no secret" not in output, output[-3000:]
    (run_dir,) = runs
    (run_file,) = run_dir.glob("run-*.wandb")
    assert wandb_history(wandb_records(run_file))["loss"] == {1: 2.5, 2: 1.25}

    output, runs = _track_only(tmp_path / "online", trackers_path, "")
    assert runs == [] and not (tmp_path / "online" / "wandb").exists()
    assert "no secret wandb/api_key and no WANDB_API_KEY; skipping (WANDB_MODE=offline needs no key)" in output


def _quickstart_commands() -> list[str]:
    """The lines of docs/quickstart.md's W&B offline block."""
    page = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- command:wandb-offline -->\s*```bash\n(.*?)```", page, re.S)
    assert m, "docs/quickstart.md has no W&B offline block"
    return [line for line in m.group(1).splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 660)
def test_the_quickstart_wandb_offline_commands(trackers_path: str, tmp_path: Path) -> None:
    """The quickstart's commands as written, from a directory laid out as the repository root, with no key anywhere:
    the install line is the tracking extra (here the fixture's folder stands in for it), the run line trains with W&B
    offline, and the folder the sync line names is the run it wrote, holding the logged loss."""
    install, run, sync = _quickstart_commands()
    assert install == "pip install -c constraints.txt -e '.[tracking]'"
    assert sync.startswith("wandb sync ")
    if trackers_path:
        sys.path.insert(0, trackers_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    (tmp_path / "home").mkdir()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = _tracking_env(trackers_path, tmp_path / "home", None, PATH=path, MNIST_DATA_DIR=str(require_mnist()))
    result = run_guarded(["bash", "-c", run], max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=env)
    assert result.killed_for == "" and result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], f"processes left running: {result.leftover}"
    assert "no secret" not in result.output
    (run_dir,) = sorted(tmp_path.glob(sync.split()[-1]))
    (run_file,) = run_dir.glob("run-*.wandb")
    losses = wandb_history(wandb_records(run_file))["loss"]
    assert losses and set(losses) <= set(_printed_losses(result.output))
