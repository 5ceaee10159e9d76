"""A blob store that keeps its listings as s3fs, gcsfs and adlfs do: an fsspec filesystem (`listed://`) over a local
folder, which flytekit's file access picks for `listed://` prefixes as it picks s3fs for `s3://`.

What it keeps, as those clients keep it by default (`use_listings_cache=True`, no `listings_expiry_time`): every
`ls` of a folder is kept in the filesystem's `dircache`, and `info`, `exists` and `open` of a file under a folder
that was listed answer from that listing (`AbstractFileSystem._ls_from_cache`, what `S3FileSystem._info` asks
first): a file written since the listing is "not found" until `invalidate_cache` drops it. fsspec keeps one instance
per protocol and options, so a listing outlives the call that made it, as it does in a connector's process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec

from tests.connector.local_store import LocalUnderProtocol

PROTOCOL = "listed"


class ListingStore(LocalUnderProtocol):
    """`listed://<path>` is the local `<path>`, its listings kept until `invalidate_cache`."""

    protocol = PROTOCOL

    def ls(self, path: Any, detail: bool = False, **kwargs: Any) -> Any:
        path = self._strip_protocol(path).rstrip("/")
        if path not in self.dircache:
            self.dircache[path] = super().ls(path, detail=True, **kwargs)
        entries = self.dircache[path]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(path, os.DirEntry):  # the local listing's own stat of each entry
            return dict(super().info(path, **kwargs))
        path = self._strip_protocol(path)
        cached = self._ls_from_cache(path)  # FileNotFoundError: the parent was listed without it
        if cached:
            return dict(cached[0])
        return super().info(path, **kwargs)

    def exists(self, path: Any, **kwargs: Any) -> bool:
        try:
            self.info(path)
            return True
        except FileNotFoundError:
            return False

    def _open(self, path: Any, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            self.info(path)  # as an object store's file: its size and etag come from `info`
        return super()._open(path, mode=mode, **kwargs)

    def invalidate_cache(self, path: Any = None) -> None:
        if path is None:
            self.dircache.clear()
            return
        path = self._strip_protocol(path).rstrip("/")
        while path and path != self.root_marker:
            self.dircache.pop(path, None)
            path = self._parent(path)


@contextlib.contextmanager
def listed_prefix(root: Path) -> Iterator[str]:
    """Register the `listed://` store and yield the prefix of `root` in it; its listings are dropped on entry and
    exit (the instance is shared by every test of the process)."""
    fsspec.register_implementation(PROTOCOL, ListingStore, clobber=True)
    store = fsspec.filesystem(PROTOCOL)
    store.invalidate_cache()
    try:
        yield f"{PROTOCOL}://{root}"
    finally:
        store.invalidate_cache()
