"""A server module of these tests in a process of its own: ``python -m MODULE ARGS...`` prints its port, then serves
until its stdin closes (`serve_generation`, `serve_connector`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STOP_S = 20


def repo_env() -> dict[str, str]:
    """This process's environment with the repository importable first (for a test's child interpreter)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


@contextmanager
def served(module: str, *args: str) -> Iterator[int]:
    """Start the server, yield its loopback port, then close its stdin and wait (killing it after `STOP_S`).

    Args:
        module: the server's module.
        *args: its arguments.

    Yields:
        The port it printed.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=repo_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"{module} {' '.join(args)} did not start"
        yield int(line)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@contextmanager
def served_all(servers: dict[str, tuple[str, ...]]) -> Iterator[dict[str, int]]:
    """`served` for several servers at once: name -> (module, *args) in, name -> port out."""
    with ExitStack() as stack:
        yield {name: stack.enter_context(served(*argv)) for name, argv in servers.items()}
