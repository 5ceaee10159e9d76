"""The console of a rank: every line it prints, on stdout or stderr, starts with ``[rank N] ``.

:class:`RankConsole` (used by ``_rank.rank_entrypoint``) points file descriptors 1 and 2 of the rank at pipes and
copies what arrives to the original descriptors, one whole line per ``write`` with the prefix in front. Working at
the descriptor level catches everything: ``print``, ``logging``, C++ warnings from gloo, ``faulthandler``. Several
ranks share one terminal; a line is written with a single ``write`` call (atomic on a pipe up to 4 KiB), so lines of
different ranks never mix mid-line. ``\\r`` ends a line too, so progress bars still redraw in place. On a terminal
each line starts with an erase of the current line (``\\r`` and ``ESC [K``): the launcher's live progress line
(``_progress_follow.py``), drawn without a newline, is then replaced by the rank's line instead of running into it,
and drawn again below it at its next redraw.

``FLYTE_PYTORCH_RANK_PREFIX=0`` turns it off (the output is then the rank's raw output). Neither torch nor flytekit is
imported here.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import Optional

#: Set to ``0`` to leave a rank's output without the ``[rank N]`` prefix.
RANK_PREFIX_ENV = "FLYTE_PYTORCH_RANK_PREFIX"
#: A line longer than this is written in pieces (each with the prefix) rather than held back.
_MAX_LINE = 64 * 1024
_LINE_END = re.compile(rb"(?<=[\r\n])")
#: Seconds to wait for the copying threads to write what is left when the rank ends.
_DRAIN_TIMEOUT_S = 2.0


def split_lines(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Cut ``buffer`` after each ``\\n`` or ``\\r``. Pure.

    Args:
        buffer: bytes read so far.

    Returns:
        tuple[list[bytes], bytes]: the complete lines (terminator included) and the incomplete rest.
    """
    parts = _LINE_END.split(buffer)
    lines = parts[:-1]
    start = len(buffer) - len(parts[-1])
    rest = buffer[start:]
    while len(rest) > _MAX_LINE:
        lines.append(rest[:_MAX_LINE] + b"\n")
        rest = rest[_MAX_LINE:]
    return lines, rest


#: What starts each line on a terminal: go to the start of the line and erase it (see the module docstring).
ERASE_LINE = b"\r\x1b[K"


def _copy(source: int, target: int, prefix: bytes) -> None:
    """Copy ``source`` to ``target`` line by line with ``prefix`` until end of file (on a terminal each line erases
    the current one first)."""
    if os.isatty(target):
        prefix = ERASE_LINE + prefix
    pending = b""
    while True:
        try:
            chunk = os.read(source, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        lines, pending = split_lines(pending + chunk)
        for line in lines:
            _write_all(target, prefix + line)
    if pending:
        _write_all(target, prefix + pending + b"\n")
    os.close(source)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:  # the console went away: nothing to print to
        pass


class RankConsole:
    """Prefix everything a rank writes to its stdout and stderr (a context manager).

    Args:
        rank: the global rank, for the prefix.
        enabled: ``False`` leaves the output as it is.
    """

    def __init__(self, rank: int, enabled: bool = True) -> None:
        self._prefix = f"[rank {rank}] ".encode()
        self._enabled = enabled
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> RankConsole:
        if not self._enabled:
            return self
        try:
            for fd in (1, 2):
                read_end, write_end = os.pipe()
                self._saved[fd] = os.dup(fd)
                os.dup2(write_end, fd)
                os.close(write_end)
                thread = threading.Thread(
                    target=_copy, args=(read_end, self._saved[fd], self._prefix), name=f"rank-console-{fd}"
                )
                thread.daemon = True
                thread.start()
                self._threads.append(thread)
        except OSError:
            self._restore()
            return self
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def drain(self) -> None:
        """Copy everything written so far to the console and stop prefixing (before the process exits without
        unwinding, ``os._exit``: the copying threads would otherwise die with what they had not written yet)."""
        self._restore()

    def _restore(self) -> None:
        """Flush, give the descriptors back (the pipes then end), and wait for the copies to finish."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # the pipe's last write end is closed here: its copying thread sees end of file
        for thread in self._threads:
            thread.join(_DRAIN_TIMEOUT_S)
        for saved in self._saved.values():
            os.close(saved)
        self._saved.clear()
        self._threads.clear()


def prefix_enabled(value: Optional[str]) -> bool:
    """Whether ``FLYTE_PYTORCH_RANK_PREFIX`` asks for the prefix (anything but ``0``/``false``/``no``/``off``).

    Args:
        value: the variable's value, or ``None`` when unset.

    Returns:
        bool: True unless turned off.
    """
    return (value or "").strip().lower() not in ("0", "false", "no", "off")
