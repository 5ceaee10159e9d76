"""Makes the `fake_api` fixture available to the fake server's own tests."""

from tests.fakeapi.fixtures import fake_api  # noqa: F401
