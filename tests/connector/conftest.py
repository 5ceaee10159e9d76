"""Fixtures for connector tests: the fake API server, a connector wired to it, real flytekit error documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakeapi.fixtures import fake_api  # noqa: F401


@pytest.fixture
def connector(fake_api):  # noqa: F811 - the fixture imported above
    """A JobConnector talking to the fake server, with instant retries, and the watch cache off: these tests pin the
    requests of every call, which must stay exactly what they were before the cache (tests/connector/test_get_cache.py
    covers the cache on)."""
    from tests.connector.helpers import make_connector

    return make_connector(fake_api.client)


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
