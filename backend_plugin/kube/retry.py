"""One retry loop for every Kubernetes API call: exponential backoff with full jitter, inside one deadline.

A `Deadline` is made once per connector operation (create, get, delete) and passed down to every API call inside
it, so the operation as a whole answers within its budget: the loop starts no attempt that could not finish in
time, and the caller sizes each attempt's timeouts with `Deadline.remaining`. Pure but for the injected `sleep` and
clock, so tests run it instantly and deterministically.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Backoff", "Deadline", "retry"]

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How long to wait between attempts.

    Attributes:
        initial_s: the cap of the first sleep; doubled after each attempt.
        max_s: the largest cap of one sleep.
        sleep: sleeps between attempts (tests make it instant).
        jitter: draws the sleep in [0, cap] (full jitter, so many callers do not retry in lockstep).
    """

    initial_s: float
    max_s: float
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[float, float], float] = field(default=random.uniform)

    def delay(self, attempt: int) -> float:
        """The sleep before retry number `attempt + 1`.

        Args:
            attempt: attempts made so far, minus one (0 after the first failure).

        Returns:
            A random duration in [0, min(max_s, initial_s * 2**attempt)].
        """
        return self.jitter(0, min(self.max_s, self.initial_s * 2.0 ** min(attempt, 60)))  # no float overflow


class Deadline:
    """The time one operation may take, counted from when it was made.

    Args:
        budget_s: seconds the whole operation may take.
        name: the setting the budget comes from, for messages (`api_get_budget_s`).
        clock: monotonic seconds (tests freeze or drive it).

    Attributes:
        budget_s, name, clock: as given.
        start: the clock's value when the deadline was made.
    """

    def __init__(self, budget_s: float, name: str = "budget", clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s = float(budget_s)
        self.name = name
        self.clock = clock
        self.start = clock()

    def elapsed(self) -> float:
        """Seconds since the deadline was made.

        Returns:
            The elapsed time.
        """
        return self.clock() - self.start

    def remaining(self) -> float:
        """Seconds left, never negative.

        Returns:
            `budget_s - elapsed()`, or 0.
        """
        return max(0.0, self.budget_s - self.elapsed())

    def describe(self) -> str:
        """`<name>=<budget>`, for messages.

        Returns:
            e.g. `api_get_budget_s=10`.
        """
        return f"{self.name}={self.budget_s:g}"


def retry(
    call: Callable[[], T],
    should_retry: Callable[[Exception], bool],
    backoff: Backoff,
    deadline: Deadline,
    on_give_up: Callable[[Exception, int, float], Exception],
    on_retry: Callable[[Exception, int, float], None] = lambda error, attempt, delay: None,
    min_attempt_s: float = 0.0,
    least_delay: Callable[[Exception], float] = lambda error: 0.0,
) -> T:
    """Call `call` until it succeeds, its error is not retryable, or another attempt would not fit the deadline.

    Args:
        call: the attempt; its exceptions decide what happens next.
        should_retry: whether an exception is worth another attempt.
        backoff: the sleeps between attempts.
        deadline: the operation's deadline, shared with every other call of the operation.
        on_give_up: for a retryable exception when no attempt fits any more, (error, attempts made, seconds elapsed
            in this loop) -> the exception to raise instead (chained to the last error).
        on_retry: called before each sleep with (error, attempts made, delay), e.g. to log.
        min_attempt_s: the least time left after the sleep for another attempt to be worth starting.
        least_delay: the shortest sleep the server asked for after this error (its `Retry-After`), 0 when none:
            the sleep is never shorter, and when it does not fit the deadline the loop gives up instead.

    Returns:
        What `call` returned.

    Raises:
        Exception: the attempt's exception when it is not retryable; `on_give_up`'s when the deadline is near.
    """
    start = deadline.clock()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:  # noqa: BLE001 - re-raised or replaced below, never swallowed
            if not should_retry(error):
                raise
            delay = max(backoff.delay(attempt), least_delay(error))
            if delay + min_attempt_s > deadline.remaining():
                raise on_give_up(error, attempt + 1, deadline.clock() - start) from error
            on_retry(error, attempt + 1, delay)
            backoff.sleep(delay)
            attempt += 1
