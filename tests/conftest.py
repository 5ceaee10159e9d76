"""Suite-wide options: ``--update-golden`` (see tests/golden.py).

The test tiers are markers (pyproject.toml): a plain ``python -m pytest`` runs the fast tier; CI adds
``-m "e2e or faults or slow"``.
"""

from __future__ import annotations

import pytest

from tests import golden


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        golden.UPDATE_OPTION,
        action="store_true",
        default=False,
        help="rewrite the golden files of the selected tests instead of only comparing (review the diff)",
    )


def pytest_configure(config: pytest.Config) -> None:
    golden.set_updating(bool(config.getoption(golden.UPDATE_OPTION)))
