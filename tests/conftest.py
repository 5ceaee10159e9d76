"""Suite-wide options: ``--update-golden`` (see tests/golden.py); fixtures shared by the connector's and the kinds'
tests: ``flytekit_errors``.

The test tiers are markers (pyproject.toml): a plain ``python -m pytest`` runs the fast tier; CI adds
``-m "e2e or faults or slow"``.
"""

from __future__ import annotations

from pathlib import Path

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


@pytest.fixture(scope="session")
def flytekit_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Error documents written by flytekit itself (`pyflyte-execute` of tasks that raise), once per session.

    Keys: `user` (ValueError: NON_RECOVERABLE, single `error.pb`), `user_worker` (the same with `_F_DES`, worker
    `job-worker-1`), `recoverable_worker` (FlyteRecoverableException, worker `job-worker-0`).
    """
    from tests.connector.helpers import write_flytekit_error

    root = tmp_path_factory.mktemp("flytekit-errors")
    return {
        "user": write_flytekit_error("raises_value_error", root / "user"),
        "user_worker": write_flytekit_error("raises_value_error", root / "user-worker", worker="job-worker-1"),
        "recoverable_worker": write_flytekit_error(
            "raises_recoverable", root / "recoverable-worker", worker="job-worker-0"
        ),
    }
