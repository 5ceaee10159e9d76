"""A blob store that stops answering on demand: an fsspec filesystem (`flaky://`) over a local folder, which
flytekit's file access picks for `flaky://` prefixes as it picks s3fs for `s3://`. While `FlakyStore.broken` is set,
every read (`ls`, `exists`, `open` for reading) raises what an object store's client raises when it cannot be reached;
writes always go through (the create's inputs.pb)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec

from tests.connector.local_store import LocalUnderProtocol

PROTOCOL = "flaky"


class FlakyStore(LocalUnderProtocol):
    """`flaky://<path>` is the local `<path>`; reads fail while `broken`."""

    protocol = PROTOCOL
    broken = False

    def _fail(self) -> None:
        if FlakyStore.broken:
            raise ConnectionError("the blob store did not answer (connection reset)")

    def ls(self, path: Any, detail: bool = False, **kwargs: Any) -> Any:
        self._fail()
        return super().ls(path, detail=detail, **kwargs)

    def exists(self, path: Any, **kwargs: Any) -> bool:
        self._fail()
        return super().exists(path, **kwargs)

    def _open(self, path: Any, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            self._fail()
        return super()._open(path, mode=mode, **kwargs)


@contextlib.contextmanager
def flaky_prefix(root: Path) -> Iterator[str]:
    """Register the `flaky://` store and yield the prefix of `root` in it; the store answers again on exit."""
    fsspec.register_implementation(PROTOCOL, FlakyStore, clobber=True)
    try:
        yield f"{PROTOCOL}://{root}"
    finally:
        FlakyStore.broken = False
