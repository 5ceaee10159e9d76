"""Shared fixtures for the MNIST example tests: the real data directory (see tests/mnist_data.py for where from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mnist_data import gzipped_copy, require_mnist


@pytest.fixture(scope="session")
def mnist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A read-only directory with the four real MNIST files as ``<name>.gz`` (as the mirrors serve them).

    The test fails with one line saying how to provide the data when it is found nowhere.
    """
    return gzipped_copy(require_mnist(), tmp_path_factory.mktemp("mnist-gz"))


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache directory, and no MNIST_DATA_DIR / MNIST_MIRRORS from the caller's environment."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MNIST_CACHE_DIR", str(cache))
    monkeypatch.delenv("MNIST_DATA_DIR", raising=False)
    monkeypatch.delenv("MNIST_MIRRORS", raising=False)
    return cache
