"""The Flyte 2 front-end of the launcher: `FLYTE2`, the `pytorch_core.frontend.FrontEnd` of Flyte 2 tasks.

A Flyte 2 local run (``flyte.run`` after ``flyte.init()``) hands the function to the core launcher with this
front-end. Flyte 2's task context holds nothing a rank has to rebuild (no checkpoint object, no Decks collected
per task), so a rank runs in its own working directory; outputs are rank 0's return value, which Flyte 2 writes.
A failure that Flyte should retry is a `pytorch_core.frontend.RecoverableError`.

Imports neither flytekit nor torch; flyte only inside the methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pytorch_core.frontend import RecoverableError

__all__ = ["FLYTE2", "Flyte2FrontEnd", "Flyte2Snapshot"]


@dataclass(frozen=True)
class Flyte2Snapshot:
    """What a rank of a Flyte 2 task takes from the task process: the working directory of the ranks."""

    working_dir: Optional[str] = None


class _RankScope:
    def result_extras(self, value: Any) -> tuple[list[tuple[str, str]], Any]:
        return [], None


class _IgnoreOutputs(Exception):
    """A replica that is not global rank 0 ends without outputs."""


class Flyte2FrontEnd:
    """Flyte 2 (``flyte.TaskEnvironment(plugin_config=PyTorch(...))``)."""

    name = "flyte"
    preload: tuple[str, ...] = ("flyte2_pytorch._frontend",)  # a rank unpickles FLYTE2
    user_frames: tuple[str, ...] = ("/flyte2_pytorch/", "/flyte/")
    launch_frames: tuple[str, ...] = ("/flyte/",)

    def __reduce__(self) -> str:
        return "FLYTE2"  # one instance per process: pickled by reference

    def is_local(self) -> bool:
        import flyte

        return bool(flyte.ctx().mode == "local")

    def snapshot(self) -> Flyte2Snapshot:
        return Flyte2Snapshot()

    def run_id(self) -> str:
        import flyte

        action = getattr(flyte.ctx(), "action", None)
        return str(getattr(action, "run_name", None) or "")

    @contextlib.contextmanager
    def rank_scope(self, snapshot: Any, workdir: Path) -> Iterator[_RankScope]:
        workdir.mkdir(parents=True, exist_ok=True)
        yield _RankScope()

    def resumable_checkpoint(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def is_recoverable(self, exc: BaseException) -> bool:
        return isinstance(exc, RecoverableError)

    def recoverable(self, base: type[BaseException]) -> type[BaseException]:
        from pytorch_core.frontend import PLAIN

        return PLAIN.recoverable(base)

    def ignore_outputs(self, message: str) -> BaseException:
        return _IgnoreOutputs(message)

    def remove_recovered_errors(self) -> None:
        return None

    def adopt(self, decks: list[tuple[str, str]], value: Any, metadata: Any) -> None:
        return None


FLYTE2 = Flyte2FrontEnd()
"""The Flyte 2 front-end (one per process)."""
