"""Golden files: read and compared by the tests, written only when asked.

``python -m pytest --update-golden [tests...]`` rewrites the golden files the selected tests own; review the diff and
commit it. Without the flag a test never writes one, and a missing golden file fails the test (it used to be written
silently, so a deleted golden passed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: The pytest option that allows writing golden files (registered in tests/conftest.py).
UPDATE_OPTION = "--update-golden"

_update = False


def set_updating(value: bool) -> None:
    """Called once by tests/conftest.py with the value of ``--update-golden``.

    Args:
        value: whether this run may write golden files.
    """
    global _update
    _update = value


def updating() -> bool:
    """Whether this run writes golden files (``--update-golden``).

    Returns:
        True only under the explicit flag.
    """
    return _update


def text(path: Path, current: str | None = None) -> str:
    """The golden file's text; under ``--update-golden`` `current` is written to it first.

    Args:
        path: the golden file.
        current: what the code produces now (written only under ``--update-golden``; ``None`` never writes).

    Returns:
        The text of the golden file.
    """
    if _update and current is not None:
        path.write_text(current, encoding="utf-8")
    if not path.is_file():
        pytest.fail(f"golden file {path} is missing: run `python -m pytest {UPDATE_OPTION}` on this test and review it")
    return path.read_text(encoding="utf-8")
