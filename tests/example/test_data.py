"""The MNIST loader: IDX parsing, checksums on decompressed content, clear errors, download over HTTP, caching."""

from __future__ import annotations

import functools
import gzip
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from examples.mnist.data import MnistDataError, load_raw_split, load_split, normalize, parse_idx, prepare_mnist


def _idx(shape: tuple[int, ...], payload: bytes, type_code: int = 0x08) -> bytes:
    header = bytes([0, 0, type_code, len(shape)]) + b"".join(d.to_bytes(4, "big") for d in shape)
    return header + payload


@pytest.mark.parametrize(
    ("blob", "shape"),
    [
        pytest.param(_idx((3,), b"\x01\x02\x03"), (3,), id="labels-rank1"),
        pytest.param(_idx((2, 2, 2), bytes(range(8))), (2, 2, 2), id="images-rank3"),
        pytest.param(_idx((0, 28, 28), b""), (0, 28, 28), id="empty"),
    ],
)
def test_parse_idx_reads_header_shape(blob: bytes, shape: tuple[int, ...]) -> None:
    array = parse_idx(blob)
    assert array.shape == shape
    assert array.dtype == np.uint8
    assert bytes(array.tobytes()) == blob[4 + 4 * len(shape) :]


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        pytest.param(b"\x01\x00\x08\x01" + (1).to_bytes(4, "big") + b"x", "magic", id="bad-magic"),
        pytest.param(_idx((1,), b"\x00\x00\x00\x00", type_code=0x0C), "type code", id="int32-type"),
        pytest.param(_idx((4,), b"\x00\x00"), "payload", id="truncated-payload"),
        pytest.param(b"\x00\x00\x08\x03\x00", "truncated", id="truncated-header"),
    ],
)
def test_parse_idx_rejects_malformed(blob: bytes, message: str) -> None:
    with pytest.raises(MnistDataError, match=message):
        parse_idx(blob)


def test_missing_data_error_names_directory_env_var_and_remedy(tmp_path: Path, isolated_cache: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MnistDataError) as info:
        prepare_mnist(empty, download=False)
    text = str(info.value)
    assert str(empty) in text and str(isolated_cache) in text
    assert "MNIST_DATA_DIR" in text and "data_dir" in text
    assert "train-images-idx3-ubyte" in text


def test_corrupted_file_fails_checksum_naming_the_file(tmp_path: Path, mnist_dir: Path, isolated_cache: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        (source / name).symlink_to(mnist_dir / name)
    labels = bytearray(gzip.decompress((mnist_dir / "t10k-labels-idx1-ubyte.gz").read_bytes()))
    labels[100] = (labels[100] + 1) % 10  # still a valid IDX file, one label changed
    (source / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(bytes(labels)))
    with pytest.raises(MnistDataError, match=r"checksum mismatch for t10k-labels-idx1-ubyte .*t10k-labels-idx1-ubyte"):
        prepare_mnist(source, download=False)
    assert not (isolated_cache / "t10k-labels-idx1-ubyte").exists()  # nothing unverified reaches the cache


@pytest.fixture()
def mirror(mnist_dir: Path) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 serving the real .gz files; yields (base URL, request paths seen)."""
    seen: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            seen.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(mnist_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_download_from_mirror_verifies_and_caches(tmp_path: Path, mirror: tuple[str, list[str]], isolated_cache):
    url, seen = mirror
    dead = "http://127.0.0.1:9/"  # discard port: connection refused, the next mirror is tried
    directory = prepare_mnist("", mirrors=[dead, url])
    assert directory == isolated_cache
    assert sorted(seen) == sorted(
        f"/{n}.gz" for n in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                             "t10k-labels-idx1-ubyte")
    )  # fmt: skip
    test = load_split(directory, "test")
    assert tuple(test.images.shape) == (10_000, 1, 28, 28) and test.labels[:5].tolist() == [7, 2, 1, 0, 4]
    seen.clear()
    assert prepare_mnist("", mirrors=[url]) == isolated_cache and seen == []  # second call: served from the cache


def test_load_split_normalizes_once_and_limits(mnist_dir: Path, isolated_cache: Path) -> None:
    directory = prepare_mnist(mnist_dir)
    test = load_split(directory, "test", limit=1000)
    assert len(test) == 1000 and test.images.dtype.is_floating_point
    assert abs(float(test.images.mean())) < 0.1 and 0.9 < float(test.images.std()) < 1.1
    with pytest.raises(MnistDataError, match="split='val'"):
        load_split(directory, "val")


def test_raw_split_maps_the_cache_file_instead_of_copying_it(mnist_dir: Path, isolated_cache: Path) -> None:
    directory = prepare_mnist(mnist_dir)
    raw = load_raw_split(directory, "test", limit=500)
    assert raw.images.dtype == torch.uint8 and tuple(raw.images.shape) == (500, 1, 28, 28)
    assert raw.labels.dtype == torch.uint8 and raw.labels[:5].tolist() == [7, 2, 1, 0, 4]
    cache_file = directory / "t10k-images-idx3-ubyte"
    # The ranks share one copy of the data through the page cache only if the tensor views a mapping of the file.
    maps = Path("/proc/self/maps").read_text()
    assert str(cache_file) in maps
    payload = cache_file.read_bytes()[16 : 16 + 500 * 784]
    assert raw.images.numpy().tobytes() == payload
    raw.images[0, 0, 0, 0] = 255  # copy-on-write: the process's page changes, the shared file does not
    assert cache_file.read_bytes()[16] == payload[0]


def test_normalize_matches_the_whole_split_normalized_once(mnist_dir: Path, isolated_cache: Path) -> None:
    directory = prepare_mnist(mnist_dir)
    whole = load_split(directory, "test", limit=300)
    raw = load_raw_split(directory, "test", limit=300)
    assert torch.equal(normalize(raw.images[100:200]), whole.images[100:200])  # per batch == all at once, bitwise
    assert whole.labels.dtype == torch.int64 and torch.equal(whole.labels, raw.labels.long())


def test_raw_files_in_data_dir_are_accepted(tmp_path: Path, mnist_dir: Path, isolated_cache: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    for gz in mnist_dir.glob("*-ubyte.gz"):
        (raw / gz.stem).write_bytes(gzip.decompress(gz.read_bytes()))
    shutil.rmtree(isolated_cache, ignore_errors=True)
    assert (prepare_mnist(raw, download=False) / "t10k-labels-idx1-ubyte").read_bytes() == (
        raw / "t10k-labels-idx1-ubyte"
    ).read_bytes()
