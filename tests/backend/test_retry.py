"""The one retry loop (`backend_plugin.kube.retry`): backoff with jitter inside one deadline per operation."""

from __future__ import annotations

import pytest

from backend_plugin.kube.retry import Backoff, Deadline, retry


class Flaky(Exception):
    pass


def test_retry_backs_off_with_jitter_until_success() -> None:
    sleeps: list[float] = []
    calls = iter([Flaky(), Flaky(), "ok"])

    def call() -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    backoff = Backoff(0.25, 4.0, sleep=sleeps.append, jitter=lambda lo, hi: hi)
    deadline = Deadline(30.0, clock=lambda: 0.0)
    assert retry(call, lambda e: isinstance(e, Flaky), backoff, deadline, lambda e, n, t: RuntimeError()) == "ok"
    assert sleeps == [0.25, 0.5]


def test_retry_gives_up_within_the_budget_and_chains_the_cause() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def call() -> None:
        raise Flaky("503")

    backoff = Backoff(1.0, 4.0, sleep=sleep, jitter=lambda lo, hi: hi)
    deadline = Deadline(5.0, clock=lambda: now[0])
    with pytest.raises(RuntimeError, match="gave up after 3 attempts") as info:
        retry(call, lambda e: True, backoff, deadline, lambda e, n, t: RuntimeError(f"gave up after {n} attempts"))
    assert isinstance(info.value.__cause__, Flaky) and now[0] == 3.0  # slept 1 + 2; a 4 s sleep would pass 5 s


def test_one_deadline_is_shared_by_every_loop_of_an_operation() -> None:
    """A second loop in the same operation has only what the first one left (here: no retry at all), and a loop
    starts no retry that would not leave `min_attempt_s` after its sleep."""
    now = [0.0]
    attempts: list[float] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def call() -> None:
        attempts.append(now[0])
        now[0] += 1.0  # each attempt takes a second
        raise Flaky("503")

    backoff = Backoff(0.5, 0.5, sleep=sleep, jitter=lambda lo, hi: hi)
    deadline = Deadline(6.0, clock=lambda: now[0])
    for _ in range(2):
        with pytest.raises(RuntimeError):
            retry(call, lambda e: True, backoff, deadline, lambda e, n, t: RuntimeError(), min_attempt_s=1.0)
    assert attempts == [0.0, 1.5, 3.0, 4.5, 5.5] and now[0] == 6.5 and deadline.remaining() == 0.0


def test_retry_raises_other_errors_at_once() -> None:
    def call() -> None:
        raise KeyError("x")

    backoff = Backoff(1.0, 4.0, sleep=lambda s: pytest.fail("slept"))
    with pytest.raises(KeyError):
        retry(
            call,
            lambda e: isinstance(e, Flaky),
            backoff,
            Deadline(5.0, clock=lambda: 0.0),
            lambda e, n, t: RuntimeError(),
        )
