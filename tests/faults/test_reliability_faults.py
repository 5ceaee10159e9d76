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
        budget = float(config.api.budget_s(row["call"]))
        assert row["error"] is not None, row
        assert row["seconds"] <= budget + 1.0 < PROPELLER_DEADLINE_S[row["call"]], row
        if row["fault"] == "hung":
            assert row["seconds"] >= config.value("api_timeout_s"), row


def test_a_silent_stall_stops_costing_wrong_answers_within_30_s_at_the_shipped_defaults(tmp_path) -> None:
    """A watch whose connection stays open and delivers nothing, then the job fails: at the shipped
    `watch_silence_s`, GetTask (through flytekit's service) reports the failure within 30 s, at under one API request
    per second."""
    import time

    from tests.connector.test_untrusted_api import (
        FAILED,
        NS,
        RUNNING,
        Propeller,
        connected_for,
        failed,
        name_of,
        poll_until,
        served,
        settle,
    )
    from tests.fakeapi.fixtures import running_fake_api

    with running_fake_api() as (server, client):
        connector = served(server, client, api_backoff_initial_s=0.25, api_backoff_max_s=4.0)
        try:
            p = Propeller(server, connector)
            meta = p.create(tmp_path)
            server.set_job_status(NS, name_of(meta), RUNNING)
            settle(p, meta)
            connected_for(connector.cache(connector.target()), 1.5)
            server.reset_log()
            server.stall_watches()
            server.set_job_status(NS, name_of(meta), FAILED)
            started = time.monotonic()
            seen = poll_until(p, meta, failed, timeout=60.0, every=1.0)
            took = time.monotonic() - started
            assert took <= 30.0, [(round(t, 1), a.name) for t, a in seen]
            assert len(server.requests) <= took, [(r.verb, r.resource) for r in server.requests]
        finally:
            server.unstall_watches()
            connector.close()
