"""Every line a rank prints carries ``[rank N]``: line splitting on plain data, then a real process's descriptors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytorch_core._console import prefix_enabled, split_lines


@pytest.mark.parametrize(
    ("buffer", "lines", "rest"),
    [
        pytest.param(b"", [], b"", id="empty"),
        pytest.param(b"abc", [], b"abc", id="no-end-yet"),
        pytest.param(b"a\nb\n", [b"a\n", b"b\n"], b"", id="two-lines"),
        pytest.param(b"a\nbc", [b"a\n"], b"bc", id="a-line-and-a-half"),
        pytest.param(b"10%\r20%\r", [b"10%\r", b"20%\r"], b"", id="progress-bar-redraws"),
        pytest.param(b"\n\n", [b"\n", b"\n"], b"", id="blank-lines"),
    ],
)
def test_split_lines(buffer: bytes, lines: list[bytes], rest: bytes) -> None:
    assert split_lines(buffer) == (lines, rest)


def test_a_huge_line_is_written_in_pieces() -> None:
    lines, rest = split_lines(b"x" * (200 * 1024))
    assert len(lines) == 3 and all(line.endswith(b"\n") for line in lines) and len(rest) == 200 * 1024 - 3 * 65536


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("", True), ("1", True), ("0", False), ("off", False)])
def test_prefix_switch(value: str | None, expected: bool) -> None:
    assert prefix_enabled(value) is expected


_PROGRAM = r"""
import os, sys, logging
from pytorch_core._console import RankConsole
print("before")
with RankConsole(2):
    print("hello from print")
    sys.stdout.write("half a ")
    sys.stdout.flush()
    sys.stdout.write("line\n")
    print("to stderr", file=sys.stderr)
    logging.getLogger("x").warning("a log line")
    os.write(1, b"raw fd write\n")
    os.write(2, b"no newline at the end")
print("after")
"""


def test_every_line_of_a_process_is_prefixed_and_whole() -> None:
    out = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "before",
        "[rank 2] hello from print",
        "[rank 2] half a line",
        "[rank 2] raw fd write",
        "after",
    ]
    assert out.stderr.splitlines() == ["[rank 2] to stderr", "[rank 2] a log line", "[rank 2] no newline at the end"]
