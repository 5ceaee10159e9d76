"""Tests of ``pytorch_core``, the launcher that knows no Flyte SDK.

Every test here runs with no front-end set (`pytorch_core.frontend.PLAIN`), as a launch that no SDK started does:
importing a front-end's package elsewhere in the session (``flytekitplugins_pytorch`` sets itself as the default)
changes nothing here, so these tests say the same alone and in the whole suite. How a front-end's SDK sees the
core's failures (its retryable exception, its way of withholding outputs) is tested with that front-end
(``tests/sdk/test_frontend.py``, ``tests/flyte2``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytorch_core import frontend


@pytest.fixture(autouse=True)
def no_front_end(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`PLAIN` is the default front-end for the test (and what it was before, after)."""
    monkeypatch.setattr(frontend, "_default", frontend.PLAIN)
    yield
