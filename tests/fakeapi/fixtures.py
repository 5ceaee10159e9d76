"""pytest fixtures around the fake API server: `fake_api` yields (server, kubernetes ApiClient)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pytest

from tests.fakeapi.server import FakeKubeApi


class FakeApi(NamedTuple):
    """The running server and a kubernetes ApiClient pointed at it (unpack as `server, client = fake_api`)."""

    server: FakeKubeApi
    client: Any


def validate_on_create(_server: FakeKubeApi, job: dict) -> None:
    """Create hook: every job created through the API must pass its kind's validator (`tests/targets/<kind>/facts.py`:
    the CRD, webhook and core/v1 checks of that kind)."""
    from backend_plugin.targets.registry import BY_KIND, DEFAULT
    from tests.targets.conftest import facts_of

    facts_of(BY_KIND.get(str(job.get("kind")), DEFAULT)).validate(job)


@functools.lru_cache(maxsize=1)
def warm_validators() -> None:
    """Load every kind's CRD and core/v1 schemas once, before any client call is timed (each kind's `WARM_UP` job).

    The first validation reads the schemas from disk (about a second on a busy 2-core machine); inside a create hook
    that is longer than the connector tests' 1 s client timeout, which made the first create of a session look slow.
    The vendored CRDs the server answers `GET customresourcedefinitions/<name>` with are parsed here too (1.4 s for
    the first, read inside the connector's half-second CRD read on a create).
    """
    from backend_plugin.targets.registry import KINDS
    from tests.fakeapi import pruning
    from tests.targets.conftest import facts_of

    for target in KINDS:
        facts = facts_of(target)
        facts.validate(facts.WARM_UP)
        pruning.vendored_crd(target.plural)


@contextmanager
def running_fake_api(validate: bool = True) -> Iterator[FakeApi]:
    """Start a fake API server (validating creates unless `validate` is False) and stop it afterwards.

    Raises:
        AssertionError: on exit, when a create hook rejected a job (the create already got a 422).
    """
    if validate:
        warm_validators()
    server = FakeKubeApi(on_create=[validate_on_create] if validate else [])
    with server:
        client = server.api_client()
        try:
            yield FakeApi(server, client)
        finally:
            client.close()
    assert not server.hook_errors, "jobs rejected by the create hook:\n" + "\n".join(server.hook_errors)


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    """A fake Kubernetes API server on 127.0.0.1 with a configured ApiClient; creates are schema-validated."""
    with running_fake_api() as api:
        yield api
