"""Shared fixtures for the MNIST example tests: the real data directory (tests skip without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

#: ../shared/data/mnist relative to the repository root (read-only, real MNIST IDX .gz files).
DATA_DIR = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "mnist").resolve()


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The real MNIST directory; the test is skipped when it is absent."""
    if not (DATA_DIR / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST data not found at {DATA_DIR}")
    return DATA_DIR


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache directory, and no MNIST_DATA_DIR / MNIST_MIRRORS from the caller's environment."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MNIST_CACHE_DIR", str(cache))
    monkeypatch.delenv("MNIST_DATA_DIR", raising=False)
    monkeypatch.delenv("MNIST_MIRRORS", raising=False)
    return cache
