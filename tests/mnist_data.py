"""Where the tests get the real MNIST files: ``$MNIST_DATA_DIR``, the cache, or the mirrors of ``$MNIST_MIRRORS``.

Nothing outside the repository is assumed. CI names its copy with ``MNIST_DATA_DIR``; a developer who ran the example
once has the verified files in the cache (``~/.cache/flytekitplugins-pytorch/mnist`` or ``$MNIST_CACHE_DIR``); an
internal mirror is named with ``MNIST_MIRRORS``. The public mirrors are not tried: tests use the network only on
loopback. With none of these, a test that needs the data fails with one line saying how to provide it.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from examples.mnist.data import (
    CACHE_DIR_ENV,
    DATA_DIR_ENV,
    MIRRORS_ENV,
    SHA256,
    MnistDataError,
    default_cache_dir,
    prepare_mnist,
)

SLICE = {"train_limit": 6000, "test_limit": 1000, "epochs": 2, "log_interval": 10}
"""The slice of MNIST the example's workflow runs on in tests: 6,000 training images, 1,000 test images, 2 epochs."""
SLICE_ACCURACY = 94.0
"""The test accuracy (percent) the local run reaches on :data:`SLICE` with 3 ranks (tests/example asserts it); a
run on a cluster must reach it too."""

HOW = (
    f"MNIST data not found: set {DATA_DIR_ENV} to a directory with the four MNIST IDX files (raw or .gz), "
    f"put them in the cache ({default_cache_dir()}, or ${CACHE_DIR_ENV}), or set {MIRRORS_ENV} to a reachable mirror"
)


def _complete(directory: Path) -> bool:
    return all((directory / n).is_file() or (directory / f"{n}.gz").is_file() for n in SHA256)


def find_mnist(download: bool = True) -> Path | None:
    """The first directory holding all four IDX files, raw or ``.gz``.

    Args:
        download: whether to fill the cache from ``$MNIST_MIRRORS`` (when set) if neither directory has the files.

    Returns:
        ``$MNIST_DATA_DIR`` when it is complete, else the cache when it is complete, else the cache filled from the
        mirrors of ``$MNIST_MIRRORS`` when that is set and they answer; ``None`` when none of these has the data.
    """
    explicit = os.environ.get(DATA_DIR_ENV, "")
    if explicit and _complete(Path(explicit).expanduser()):
        return Path(explicit).expanduser()
    cache = default_cache_dir()
    if _complete(cache):
        return cache
    if download and os.environ.get(MIRRORS_ENV, "").strip():
        try:
            return prepare_mnist(download=True)
        except MnistDataError:
            return None
    return None


def require_mnist() -> Path:
    """:func:`find_mnist`, failing the calling test with :data:`HOW` (one line, no traceback) when it finds nothing.

    Returns:
        The directory with the four files.
    """
    found = find_mnist()
    if found is None:
        pytest.fail(HOW, pytrace=False)
    return found


def gzipped_copy(source: Path, target: Path) -> Path:
    """The four files as the mirrors serve them (``<name>.gz``): ``source`` itself when it has them, else ``target``.

    Args:
        source: a directory from :func:`find_mnist`.
        target: an empty directory to write the ``.gz`` files into when ``source`` has only raw ones.

    Returns:
        A directory holding ``<name>.gz`` for each of the four files.
    """
    if all((source / f"{n}.gz").is_file() for n in SHA256):
        return source
    target.mkdir(parents=True, exist_ok=True)
    for name in SHA256:
        if (source / f"{name}.gz").is_file():
            shutil.copyfile(source / f"{name}.gz", target / f"{name}.gz")
        else:
            (target / f"{name}.gz").write_bytes(gzip.compress((source / name).read_bytes(), compresslevel=1))
    return target
