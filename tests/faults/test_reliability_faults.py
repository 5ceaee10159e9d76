"""Drill 14 at the shipped defaults: every call answers inside propeller's deadline under a hung, a refusing and a
failing API (the nine cases run at once, so the wall time is the slowest, about the create budget)."""

from __future__ import annotations

import pytest

from backend_plugin.config import BackendConfig
from tests.faults.drills_reliability import PROPELLER_DEADLINE_S, measure_all

pytestmark = pytest.mark.faults


def test_every_call_answers_inside_propellers_deadline_at_the_shipped_defaults() -> None:
    config = BackendConfig()
    rows = measure_all(config)
    assert len(rows) == 9
    for row in rows:
        budget = float(getattr(config, f"api_{row['call']}_budget_s"))
        assert row["error"] is not None, row
        assert row["seconds"] <= budget + 1.0 < PROPELLER_DEADLINE_S[row["call"]], row
        if row["fault"] == "hung":
            assert row["seconds"] >= config.api_timeout_s, row
