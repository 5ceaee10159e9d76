"""The base of the test blob stores: an fsspec filesystem of its own protocol (`<protocol>://<path>`) over the local
`<path>`, which flytekit's file access picks for that protocol's prefixes as it picks s3fs for `s3://`
(`flaky_store`, `listing_store`)."""

from __future__ import annotations

from typing import Any

from fsspec.implementations.local import LocalFileSystem


class LocalUnderProtocol(LocalFileSystem):
    """`<protocol>://<path>` is the local `<path>`; a subclass names its `protocol`."""

    protocol: str = ""
    root_marker = "/"

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        text = str(path)
        if text.startswith(f"{cls.protocol}://"):
            text = text[len(cls.protocol) + 3 :]
        return super()._strip_protocol(text)
