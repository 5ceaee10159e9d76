"""The storage side of the checkpoint API (``checkpoint.py``): where a task's checkpoints are, and writing and
reading them whole.

:func:`place` resolves the place once per process (``$FLYTE_PYTORCH_CHECKPOINT_DIR``, else the front-end's Flyte
checkpoint prefixes, else a folder on this machine, said once); :func:`write_checkpoint` writes the payload, then the
manifest, each whole or not at all (:class:`LocalFiles`: a temporary file, fsync, ``os.replace``;
:class:`FsspecFiles`: one object per write, then a rename); :func:`restore` reads the latest (this attempt's prefix
first, then the previous attempt's) into a state mapping. The process also remembers the mapping given last
(:func:`registered_state`), which ``preemption.py`` saves at the agreed step.

torch is imported inside the functions that need it; no Flyte SDK is imported here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from pytorch_core.frontend import current

__all__ = [
    "CheckpointError",
    "CHECKPOINT_DIR_ENV",
    "MANIFEST_NAME",
    "Place",
    "place",
    "register",
    "restore",
    "write_checkpoint",
    "local_checkpoint_dir",
]

CHECKPOINT_DIR_ENV = "FLYTE_PYTORCH_CHECKPOINT_DIR"
"""A folder the user names for the checkpoints (wins over every other place; see the module docstring)."""

MANIFEST_NAME = "pytorch-checkpoint.json"
"""The manifest: which payload is the latest checkpoint (``{"version", "step", "file", "bytes", "saved_at"}``)."""

PAYLOAD_NAME = "pytorch-checkpoint-{step}.pt"
"""One checkpoint's payload."""

FORMAT = 1
"""The payload's format (``{"format": 1, "step": int, "state": {name: value}}``)."""


class CheckpointError(RuntimeError):
    """A checkpoint could not be read or restored (the message names the place and what to do)."""


class Files(Protocol):
    """Whole-file access to one kind of storage (a local folder, a blob store)."""

    def read(self, path: str) -> Optional[bytes]:
        """The file's bytes, or ``None`` when it does not exist."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` as ``path``, whole or not at all."""
        ...

    def remove(self, path: str) -> None:
        """Remove ``path`` (best effort: a missing file is fine)."""
        ...


class LocalFiles:
    """A local folder: a temporary file, flushed to disk, then ``os.replace`` (atomic on POSIX)."""

    def read(self, path: str) -> Optional[bytes]:
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)

    def remove(self, path: str) -> None:
        try:
            Path(path).unlink()
        except OSError:
            pass


class FsspecFiles:
    """A blob store or folder reached through an fsspec file system (the front-end's file access).

    Args:
        filesystem: the file system for a path (``file_access.get_filesystem_for_path`` for flytekit).
    """

    def __init__(self, filesystem: Callable[[str], Any]) -> None:
        self.filesystem = filesystem

    def read(self, path: str) -> Optional[bytes]:
        fs = self.filesystem(path)
        try:
            data = fs.cat_file(path)
        except FileNotFoundError:
            return None
        return bytes(data)

    def write(self, path: str, data: bytes) -> None:
        fs = self.filesystem(path)
        parent = path.rstrip("/").rsplit("/", 1)[0]
        if "://" not in path or path.startswith("file://"):
            fs.makedirs(parent, exist_ok=True)  # a local folder must exist; a blob store has no folders
        tmp = f"{path}.tmp-{os.getpid()}"
        fs.pipe_file(tmp, data)  # one object per write: whole or absent in a blob store
        fs.mv(tmp, path)  # a rename on a local disk; a copy of a whole object in a blob store

    def remove(self, path: str) -> None:
        try:
            self.filesystem(path).rm(path)
        except (OSError, FileNotFoundError):
            pass


@dataclass(frozen=True)
class Place:
    """Where a task's checkpoints are.

    Attributes:
        dest: where this run writes (a folder or a blob prefix).
        src: the previous attempt's prefix, read when ``dest`` holds no checkpoint (``None``: none).
        files: the access to both.
        origin: what chose the place, for messages.
    """

    dest: str
    src: Optional[str]
    files: Files
    origin: str


def _join(prefix: str, name: str) -> str:
    return f"{prefix.rstrip('/')}/{name}"


def _absolute(name: str) -> bool:
    return "://" in name or name.startswith("/")


#: The place of this process's task (resolved at the first call), the state given last, and what was saved.
_place: Optional[Place] = None
_state: Optional[MutableMapping[str, Any]] = None
_saved_step: Optional[int] = None
_saved_payload: Optional[str] = None
_loaded_step: Optional[int] = None
_warned_no_place = False


def reset() -> None:
    """Forget this process's place, state and saves (a rank, or a new in-process launch, starts)."""
    global _place, _state, _saved_step, _saved_payload, _loaded_step
    _place, _state, _saved_step, _saved_payload, _loaded_step = None, None, None, None, None


def registered_state() -> Optional[MutableMapping[str, Any]]:
    """The mapping given last to :func:`save_checkpoint` or :func:`load_checkpoint` in this process, or ``None``."""
    return _state


def last_saved_step() -> Optional[int]:
    """The step of the checkpoint this process saved last, or ``None``."""
    return _saved_step


def last_checkpoint_step() -> Optional[int]:
    """The latest complete checkpoint this process knows of: saved here, else loaded here; ``None`` without one."""
    return _saved_step if _saved_step is not None else _loaded_step


def _global_rank() -> int:
    raw = os.environ.get("RANK", "0").strip()
    return int(raw) if raw.isdigit() else 0


def place() -> Place:
    """This task's checkpoint place (see the module docstring), resolved once per process.

    Returns:
        Place: the place.
    """
    global _place, _warned_no_place
    if _place is not None:
        return _place
    named = os.environ.get(CHECKPOINT_DIR_ENV, "").strip()
    if named:
        _place = Place(named, None, LocalFiles(), f"{CHECKPOINT_DIR_ENV}={named}")
        return _place
    found = current().checkpoint_place()
    if found is not None:
        _place = Place(
            found.dest, found.src, FsspecFiles(found.filesystem), f"the task's checkpoint prefix {found.dest}"
        )
        return _place
    folder = os.path.join(tempfile.gettempdir(), f"flyte-pytorch-{os.getuid()}", "checkpoints", "unnamed")
    if not _warned_no_place:
        _warned_no_place = True
        sys.stderr.write(
            f"checkpoints: this execution has no checkpoint prefix and {CHECKPOINT_DIR_ENV} is not set; saving to "
            f"{folder}, which does not outlive this machine\n"
        )
    _place = Place(folder, None, LocalFiles(), folder)
    return _place


def _check_state(state: Any, call: str) -> MutableMapping[str, Any]:
    if not isinstance(state, MutableMapping) or not all(isinstance(k, str) for k in state):
        raise TypeError(
            f"{call}(state=...): state must be a dict of names to what to save (a module, an optimizer, a value), "
            f"e.g. {{'model': model, 'optimizer': optimizer}}; got {type(state).__name__}"
        )
    return state


def _stateful(value: Any) -> bool:
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _serialize(state: MutableMapping[str, Any], step: int) -> bytes:
    import torch

    body = {name: (value.state_dict() if _stateful(value) else value) for name, value in state.items()}
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "step": step, "state": body}, buffer)
    return buffer.getvalue()


def write_checkpoint(state: MutableMapping[str, Any], step: int) -> str:
    """Write ``state`` at ``step`` to this task's place now (the caller is global rank 0).

    Args:
        state: the mapping to save.
        step: the steps done.

    Returns:
        str: the payload's path.
    """
    global _saved_step, _saved_payload
    where = place()
    data = _serialize(state, step)
    payload = _join(where.dest, PAYLOAD_NAME.format(step=step))
    where.files.write(payload, data)
    manifest = {
        "version": 1,
        "step": step,
        "file": PAYLOAD_NAME.format(step=step),
        "bytes": len(data),
        "saved_at": round(time.time(), 3),
    }
    where.files.write(_join(where.dest, MANIFEST_NAME), json.dumps(manifest).encode())
    previous, _saved_payload, _saved_step = _saved_payload, payload, step
    if previous is not None and previous != payload and previous.startswith(where.dest.rstrip("/") + "/"):
        where.files.remove(previous)
    return payload


def register(state: Any, call: str) -> MutableMapping[str, Any]:
    """Check ``state`` and remember it as what a preemption saves.

    Args:
        state: what the loop gave.
        call: the public function's name, for the message.

    Returns:
        MutableMapping[str, Any]: ``state``.

    Raises:
        TypeError: ``state`` is not a mapping of names.
    """
    global _state
    _state = _check_state(state, call)
    return _state


def check_step(step: Any, call: str = "save_checkpoint") -> int:
    """A step as an ``int`` (the steps done so far).

    Args:
        step: what the loop gave.
        call: the public function's name, for the message.

    Returns:
        int: the step.

    Raises:
        TypeError: not a whole number.
        ValueError: negative.
    """
    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise TypeError(f"{call}(step={step!r}): step must be a whole number (the steps done so far)")
    value = int(step.__index__())
    if value < 0:
        raise ValueError(f"{call}(step={value}): step must be >= 0")
    return value


def is_rank_zero() -> bool:
    """Whether this process is global rank 0 (it writes the checkpoints)."""
    return _global_rank() == 0


def _read_latest(where: Place) -> Optional[tuple[int, bytes, str, str]]:
    """(step, payload bytes, the prefix it was found in, the payload's path) of the latest checkpoint, or ``None``."""
    for prefix in (where.dest, where.src):
        if not prefix:
            continue
        manifest_path = _join(prefix, MANIFEST_NAME)
        raw = where.files.read(manifest_path)
        if raw is None:
            continue
        try:
            manifest = json.loads(raw)
            step, name, size = int(manifest["step"]), str(manifest["file"]), int(manifest["bytes"])
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{manifest_path} is not a checkpoint manifest ({e}); remove it to start over") from e
        payload = name if _absolute(name) else _join(prefix, name)
        data = where.files.read(payload)
        if data is None or len(data) != size:
            found = "missing" if data is None else f"{len(data)} bytes, not {size}"
            raise CheckpointError(
                f"{manifest_path} names the checkpoint of step {step} at {payload}, which is {found}; remove the "
                "manifest to start over"
            )
        return step, data, prefix, payload
    return None


def restore(state: MutableMapping[str, Any]) -> int:
    """Read the latest checkpoint into ``state`` (see ``load_checkpoint``).

    Args:
        state: the mapping to restore in place.

    Returns:
        int: the checkpoint's step, or 0 without one.

    Raises:
        CheckpointError: the checkpoint cannot be read or does not hold a name of ``state``.
    """
    global _loaded_step, _saved_payload
    import torch

    where = place()
    found = _read_latest(where)
    if found is None:
        return 0
    step, data, prefix, payload = found
    body = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)  # the task's own checkpoint
    saved = body.get("state", {}) if isinstance(body, dict) else {}
    missing = [name for name in state if name not in saved]
    if missing:
        raise CheckpointError(
            f"the checkpoint of step {step} at {payload} holds {sorted(saved)}, not {missing}: it was saved by "
            f"another loop; remove {prefix} (or set {CHECKPOINT_DIR_ENV} to another folder) to start over"
        )
    for name, value in list(state.items()):
        if _stateful(value):
            value.load_state_dict(saved[name])
        else:
            state[name] = saved[name]
    _loaded_step = step
    if is_rank_zero():
        # The one line that says this run goes on from a checkpoint (rank 0's: every rank loads the same one).
        sys.stderr.write(f"checkpoint: resuming from the checkpoint of step {step} in {prefix}\n")
        sys.stderr.flush()
    if prefix == where.dest:
        _saved_payload = payload  # removed once a newer checkpoint is written
    elif is_rank_zero():
        # Resumed from the previous attempt: point this attempt's prefix at it, so that a retry of this attempt
        # finds it even if this attempt saves nothing.
        manifest = {"version": 1, "step": step, "file": payload, "bytes": len(data), "saved_at": round(time.time(), 3)}
        where.files.write(_join(where.dest, MANIFEST_NAME), json.dumps(manifest).encode())
    return step


def folder_step(folder: str) -> Optional[int]:
    """The step of the latest checkpoint in a folder on this machine (what a run resumes from there), or ``None``.

    Args:
        folder: the folder.

    Returns:
        Optional[int]: the step its manifest names, ``None`` without a readable manifest.
    """
    try:
        raw = LocalFiles().read(_join(folder, MANIFEST_NAME)) if folder else None
    except OSError:
        return None
    if raw is None:
        return None
    try:
        return int(json.loads(raw)["step"])
    except (ValueError, KeyError, TypeError):
        return None


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def local_checkpoint_dir(task_name: str, inputs_digest: str) -> str:
    """The launcher's folder for a local execution: the same task with the same inputs (see the module docstring).

    Args:
        task_name: the task's name.
        inputs_digest: a digest of the task's inputs.

    Returns:
        str: ``<tmp>/flyte-pytorch-<uid>/checkpoints/<task>-<digest>``.
    """
    key = hashlib.sha256(f"{task_name}\0{inputs_digest}".encode()).hexdigest()[:16]
    name = _UNSAFE.sub("_", task_name)[-80:] or "task"
    return os.path.join(tempfile.gettempdir(), f"flyte-pytorch-{os.getuid()}", "checkpoints", f"{name}-{key}")


def remove_local_checkpoints(folder: str) -> None:
    """Remove an execution's automatic local folder (its run ended without a preemption).

    Args:
        folder: the folder.
    """
    shutil.rmtree(folder, ignore_errors=True)
