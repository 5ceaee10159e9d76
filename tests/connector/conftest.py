"""Fixtures for connector tests: the fake API server and a connector wired to it."""

from __future__ import annotations

import pytest

from tests.fakeapi.fixtures import fake_api  # noqa: F401


@pytest.fixture
def connector(fake_api):  # noqa: F811 - the fixture imported above
    """A PyTorchJobConnector talking to the fake server, with instant retries and a fixed clock."""
    from tests.connector.helpers import make_connector

    return make_connector(fake_api.client)
