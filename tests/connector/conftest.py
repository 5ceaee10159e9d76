"""Fixtures for connector tests: the fake API server and a connector wired to it (flytekit's own error documents are
the suite's `flytekit_errors`, tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.fakeapi.fixtures import fake_api  # noqa: F401


@pytest.fixture
def connector(fake_api):  # noqa: F811 - the fixture imported above
    """A JobConnector talking to the fake server, with instant retries, and the watch cache off: these tests pin the
    requests of every call, which must stay exactly what they were before the cache (tests/connector/test_get_cache.py
    covers the cache on)."""
    from tests.connector.helpers import make_connector

    return make_connector(fake_api.client)
