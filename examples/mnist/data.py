"""Fast MNIST loading: the whole dataset as in-memory tensors, no torchvision, no per-sample Dataset.

The four IDX files are found (in this order) in the directory passed in, the ``MNIST_DATA_DIR`` directory, the cache
directory (``~/.cache/flytekitplugins-pytorch/mnist``), or downloaded from public mirrors. Either raw or gzipped
files are accepted. Whatever the source, the *decompressed* bytes are checked against the well-known SHA-256s (the
``.gz`` bytes differ between mirrors and recompressions, the content does not), and written once into the cache as
raw IDX files (temp file + rename, so a reader never sees half a file). Later loads memory-map those raw files, so
each rank of a distributed job pays neither decompression nor hashing.

Training keeps the images as they are stored, one byte per pixel: :func:`load_raw_split` returns tensors that view a
copy-on-write memory map of the cached files, so every rank on a node reads the same pages of the kernel's page cache
(one 47 MB copy of the training set per node, however many ranks) and :func:`normalize` turns each batch into
float32 when it is used. :func:`load_split` returns the whole split normalized once, for code that wants plain
float tensors (the benchmark's classic reference).

Preparation runs under an exclusive file lock on the cache directory: on each node the first process to arrive
downloads and verifies, the others wait and then find the files ready.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gzip
import hashlib
import logging
import os
import tempfile
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "MNIST_DATA_DIR"
"""Environment variable naming a directory that holds the four IDX files (raw or ``.gz``)."""

CACHE_DIR_ENV = "MNIST_CACHE_DIR"
"""Environment variable overriding the cache directory (where verified raw files are kept)."""

MIRRORS_ENV = "MNIST_MIRRORS"
"""Environment variable: comma-separated base URLs replacing :data:`MIRRORS` (for an internal mirror)."""

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "flytekitplugins-pytorch" / "mnist"

MIRRORS: tuple[str, ...] = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
"""Well-known public mirrors of the original ``.gz`` files, tried in order."""

# SHA-256 of the DECOMPRESSED original IDX files (the MD5s of the same files are the ones published with MNIST).
SHA256: dict[str, str] = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}

SPLITS: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

MEAN = 0.1307
"""Mean pixel value of the MNIST training set (scaled to [0, 1])."""
STD = 0.3081
"""Standard deviation of the MNIST training set pixels (scaled to [0, 1])."""

_IDX_DTYPES = {0x08: np.uint8}
_DOWNLOAD_TIMEOUT_S = 30.0


class MnistDataWarning(UserWarning):
    """A data setting that is not used: ``data_dir`` or ``$MNIST_DATA_DIR`` names no directory (a typo, say), so the
    files come from the cache or a download instead (the same bytes: every file is checked against its SHA-256)."""


class MnistDataError(Exception):
    """The MNIST files cannot be found, downloaded, or verified. The message says which file and what to do.

    Not a ``RuntimeError``: its text may quote a download error such as "Connection refused", and a distributed
    launcher that sorts runtime errors by their text could take it for the consequence of a lost peer.
    """


@dataclasses.dataclass(frozen=True)
class RawSplit:
    """One split of MNIST as stored: one byte per pixel, shared between the processes of a node.

    Attributes:
        images: uint8 tensor ``(N, 1, 28, 28)`` viewing a copy-on-write memory map of the cached IDX file (pages come
            from the page cache, shared by every process that maps the file; writing to it copies the page).
        labels: uint8 tensor ``(N,)`` with values 0-9, mapped the same way (``.long()`` it for a loss).
    """

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclasses.dataclass(frozen=True)
class MnistSplit:
    """One split of MNIST held in memory.

    Attributes:
        images: float32 tensor ``(N, 1, 28, 28)``, normalized once with :data:`MEAN` / :data:`STD`.
        labels: int64 tensor ``(N,)`` with values 0-9.
    """

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def parse_idx(buffer: bytes | memoryview | np.ndarray) -> np.ndarray:
    """Parse an IDX file (the MNIST container format) without copying the payload.

    Args:
        buffer: the decompressed file content.

    Returns:
        A read-only numpy view with the shape given in the header.

    Raises:
        MnistDataError: the header is not an unsigned-byte IDX header or the size does not match it.
    """
    raw = np.frombuffer(buffer, dtype=np.uint8)
    if raw.size < 4 or raw[0] != 0 or raw[1] != 0:
        raise MnistDataError(f"IDX magic is {bytes(raw[:4]).hex()!r}; expected 0000 followed by type and rank bytes")
    type_code, ndim = int(raw[2]), int(raw[3])
    if type_code not in _IDX_DTYPES:
        raise MnistDataError(f"IDX type code is 0x{type_code:02x}; only unsigned byte (0x08) is supported")
    header_len = 4 + 4 * ndim
    if raw.size < header_len:
        raise MnistDataError(f"IDX header is truncated: {raw.size} bytes for a rank-{ndim} header of {header_len}")
    shape = tuple(int(d) for d in raw[4:header_len].view(">u4"))
    expected = header_len + int(np.prod(shape, dtype=np.int64))
    if raw.size != expected:
        raise MnistDataError(f"IDX payload is {raw.size} bytes; the header {shape} requires {expected}")
    return raw[header_len:].reshape(shape)


def default_cache_dir() -> Path:
    """The cache directory: ``$MNIST_CACHE_DIR`` or ``~/.cache/flytekitplugins-pytorch/mnist``.

    Returns:
        The directory path (not created).
    """
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR).expanduser()


def _mirrors_from_env() -> tuple[str, ...]:
    value = os.environ.get(MIRRORS_ENV, "").strip()
    return tuple(m.strip() for m in value.split(",") if m.strip()) if value else MIRRORS


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; other users of a shared cache must be able to read
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read_candidate(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _verify(name: str, data: bytes, origin: str) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[name]:
        raise MnistDataError(
            f"checksum mismatch for {name} (from {origin}): decompressed SHA-256 is {digest}, expected {SHA256[name]}; "
            "the file is corrupt or not the original MNIST file: delete it and provide the original"
        )


def _download(name: str, mirrors: Sequence[str], errors: list[str]) -> bytes | None:
    for base in mirrors:
        url = base.rstrip("/") + f"/{name}.gz"
        try:
            with urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 (fixed https URLs)
                payload = response.read()
            data = gzip.decompress(payload)
        except (urllib.error.URLError, OSError, EOFError, ValueError) as e:
            errors.append(f"{url}: {e}")
            continue
        if hashlib.sha256(data).hexdigest() != SHA256[name]:
            errors.append(f"{url}: decompressed SHA-256 mismatch")
            continue
        logger.info("downloaded %s from %s", name, url)
        return data
    return None


def prepare_mnist(
    data_dir: str | os.PathLike[str] = "",
    cache_dir: str | os.PathLike[str] | None = None,
    mirrors: Sequence[str] | None = None,
    download: bool = True,
) -> Path:
    """Make the four raw, verified IDX files available in the cache directory.

    Args:
        data_dir: directory with the files (raw or ``.gz``); empty means ``$MNIST_DATA_DIR`` when set.
        cache_dir: where verified raw files are kept; ``None`` means :func:`default_cache_dir`.
        mirrors: base URLs to download ``<name>.gz`` from; ``None`` means ``$MNIST_MIRRORS`` or :data:`MIRRORS`.
        download: whether to try the mirrors when a file is found nowhere locally.

    Returns:
        The cache directory, holding ``train-images-idx3-ubyte`` and the three other raw files.

    Raises:
        MnistDataError: a file is missing everywhere and cannot be downloaded, or a file's content fails its checksum.

    Warns:
        MnistDataWarning: `data_dir` (or ``$MNIST_DATA_DIR``) is set but names no directory.
    """
    explicit = str(data_dir) or os.environ.get(DATA_DIR_ENV, "")
    source = Path(explicit).expanduser() if explicit else None
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if source is not None and not source.is_dir():
        setting = f"data_dir={str(data_dir)!r}" if str(data_dir) else f"{DATA_DIR_ENV}={explicit!r}"
        warnings.warn(
            f"{setting} is not a directory, so it is not used: the MNIST files come from the cache ({cache}) or a "
            "download; correct the path, or unset it",
            MnistDataWarning,
            stacklevel=2,
        )
    mirrors = tuple(mirrors) if mirrors is not None else _mirrors_from_env()
    with _locked(cache):
        for name in SHA256:
            target = cache / name
            if target.is_file():
                continue  # only ever written after verification, by rename
            data: bytes | None = None
            searched = [d for d in (source, cache) if d is not None]
            for directory in searched:
                for candidate in (directory / name, directory / f"{name}.gz"):
                    if candidate.is_file():
                        try:
                            data = _read_candidate(candidate)
                        except (OSError, EOFError, gzip.BadGzipFile) as e:
                            raise MnistDataError(f"cannot read {candidate}: {e}; replace it with the original") from e
                        _verify(name, data, str(candidate))
                        break
                if data is not None:
                    break
            errors: list[str] = []
            if data is None and download:
                data = _download(name, mirrors, errors)
            if data is None:
                where = ", ".join(str(d) for d in searched)
                tried = "; ".join(errors) if errors else "download disabled"
                raise MnistDataError(
                    f"MNIST file {name} (or {name}.gz) not found in {where} and not downloadable ({tried}). "
                    f"Put the four MNIST IDX files (raw or .gz) in a directory and pass it as data_dir or set "
                    f"{DATA_DIR_ENV}=<dir>, or set {MIRRORS_ENV} to a reachable mirror."
                )
            _atomic_write(target, data)
    return cache


def _load_raw(path: Path) -> np.ndarray:
    # Copy-on-write memory map: the pages are the page cache's, shared by every process on the node that maps the
    # file, and the array is writable (torch.from_numpy warns about read-only arrays) without touching the file.
    return parse_idx(np.memmap(path, dtype=np.uint8, mode="c"))


def load_raw_split(directory: str | os.PathLike[str], split: str, limit: int = 0) -> RawSplit:
    """Map one split from a directory of raw, verified IDX files (see :func:`prepare_mnist`), without copying it.

    Args:
        directory: the directory returned by :func:`prepare_mnist`.
        split: ``"train"`` or ``"test"``.
        limit: keep only the first ``limit`` examples; 0 keeps all.

    Returns:
        The split as uint8 tensors over the shared page cache (see :class:`RawSplit`).

    Raises:
        MnistDataError: ``split`` is unknown, ``limit`` is negative, or a file is malformed.
    """
    if split not in SPLITS:
        raise MnistDataError(f"split={split!r} is unknown; use one of {sorted(SPLITS)}")
    if limit < 0:
        raise MnistDataError(f"limit={limit!r} is negative; use 0 (all) or a positive count")
    images_name, labels_name = SPLITS[split]
    images = _load_raw(Path(directory) / images_name)
    labels = _load_raw(Path(directory) / labels_name)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
        raise MnistDataError(f"{split}: images {images.shape} and labels {labels.shape} do not form MNIST")
    if limit:
        images, labels = images[:limit], labels[:limit]
    return RawSplit(images=torch.from_numpy(images).unsqueeze(1), labels=torch.from_numpy(labels))


def normalize(images: torch.Tensor) -> torch.Tensor:
    """Turn uint8 pixels into the network's float32 input: ``(x / 255 - MEAN) / STD``, in one pass and one buffer.

    Args:
        images: uint8 tensor of any shape (e.g. a batch ``(B, 1, 28, 28)``).

    Returns:
        A new float32 tensor of the same shape.
    """
    return images.to(torch.float32).mul_(1.0 / (STD * 255.0)).sub_(MEAN / STD)


def load_split(directory: str | os.PathLike[str], split: str, limit: int = 0) -> MnistSplit:
    """Load one split from a directory of raw, verified IDX files, normalized once into float32 tensors.

    The training loop uses :func:`load_raw_split` and normalizes per batch instead (a quarter of the memory, shared
    between ranks); this is for code that wants the whole split as plain tensors.

    Args:
        directory: the directory returned by :func:`prepare_mnist`.
        split: ``"train"`` or ``"test"``.
        limit: keep only the first ``limit`` examples; 0 keeps all.

    Returns:
        The split: float32 images ``(N, 1, 28, 28)`` and int64 labels.

    Raises:
        MnistDataError: ``split`` is unknown, ``limit`` is negative, or a file is malformed.
    """
    raw = load_raw_split(directory, split, limit)
    return MnistSplit(images=normalize(raw.images), labels=raw.labels.to(torch.int64))


def load_raw_mnist(
    data_dir: str | os.PathLike[str] = "", train_limit: int = 0, test_limit: int = 0
) -> tuple[RawSplit, RawSplit]:
    """Prepare (find, download, verify, cache) and map both splits as uint8 (see :func:`load_raw_split`).

    Args:
        data_dir: see :func:`prepare_mnist`.
        train_limit: keep the first ``train_limit`` training examples; 0 keeps all 60,000.
        test_limit: keep the first ``test_limit`` test examples; 0 keeps all 10,000.

    Returns:
        ``(train, test)``.

    Raises:
        MnistDataError: see :func:`prepare_mnist` and :func:`load_raw_split`.
    """
    directory = prepare_mnist(data_dir)
    return load_raw_split(directory, "train", train_limit), load_raw_split(directory, "test", test_limit)


def load_mnist(
    data_dir: str | os.PathLike[str] = "", train_limit: int = 0, test_limit: int = 0
) -> tuple[MnistSplit, MnistSplit]:
    """Prepare (find, download, verify, cache) and load both splits, normalized (see :func:`load_split`).

    Args:
        data_dir: see :func:`prepare_mnist`.
        train_limit: keep the first ``train_limit`` training examples; 0 keeps all 60,000.
        test_limit: keep the first ``test_limit`` test examples; 0 keeps all 10,000.

    Returns:
        ``(train, test)``.

    Raises:
        MnistDataError: see :func:`prepare_mnist` and :func:`load_split`.
    """
    directory = prepare_mnist(data_dir)
    return load_split(directory, "train", train_limit), load_split(directory, "test", test_limit)
