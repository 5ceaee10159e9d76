"""The `kind` fixture: every registered job kind (`backend_plugin.targets.registry.KINDS`), so that one test covers
each of them. A kind's test folder (`tests/targets/<kind>/`) holds its own tests and `facts.py`, what the shared tests
need of it (its pods, its success condition, its steady running status, its validator)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, NamedTuple

import pytest

from backend_plugin.targets.registry import KINDS, JobTarget


class Kind(NamedTuple):
    """A registered kind under test: its target and its test facts."""

    target: JobTarget
    facts: ModuleType

    @property
    def name(self) -> str:
        return self.target.config_name

    def __getattr__(self, item: str) -> Any:  # facts first: pod, validate, SUCCEEDED
        return getattr(self.facts, item)


def facts_of(target: JobTarget) -> ModuleType:
    """The kind's `tests/targets/<kind>/facts.py`."""
    return importlib.import_module(f"tests.targets.{target.config_name}.facts")


@pytest.fixture(params=KINDS, ids=[t.config_name for t in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    """Each registered job kind in turn."""
    return Kind(request.param, facts_of(request.param))
