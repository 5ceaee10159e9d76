"""One retry loop for every Kubernetes API call: exponential backoff with full jitter within a time budget.

Pure but for the injected `sleep` and clock, so tests run it instantly and deterministically.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Backoff", "retry"]

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How long to wait between attempts and for how long to keep trying.

    Attributes:
        initial_s: the cap of the first sleep; doubled after each attempt.
        max_s: the largest cap of one sleep.
        budget_s: total seconds the attempts and sleeps may take; a sleep that would pass it is not taken.
        sleep: sleeps between attempts (tests make it instant).
        clock: monotonic seconds (tests freeze it).
        jitter: draws the sleep in [0, cap] (full jitter, so many callers do not retry in lockstep).
    """

    initial_s: float
    max_s: float
    budget_s: float
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[float, float], float] = field(default=random.uniform)

    def delay(self, attempt: int) -> float:
        """The sleep before retry number `attempt + 1`.

        Args:
            attempt: attempts made so far, minus one (0 after the first failure).

        Returns:
            A random duration in [0, min(max_s, initial_s * 2**attempt)].
        """
        return self.jitter(0, min(self.max_s, self.initial_s * (2**attempt)))


def retry(
    call: Callable[[], T],
    should_retry: Callable[[Exception], bool],
    backoff: Backoff,
    on_give_up: Callable[[Exception, int, float], Exception],
    on_retry: Callable[[Exception, int, float], None] = lambda error, attempt, delay: None,
) -> T:
    """Call `call` until it succeeds, its error is not retryable, or the budget would be exceeded.

    Args:
        call: the attempt; its exceptions decide what happens next.
        should_retry: whether an exception is worth another attempt.
        backoff: the timing.
        on_give_up: for a retryable exception when the budget is spent, (error, attempts made, seconds elapsed)
            -> the exception to raise instead (chained to the last error).
        on_retry: called before each sleep with (error, attempts made, delay), e.g. to log.

    Returns:
        What `call` returned.

    Raises:
        Exception: the attempt's exception when it is not retryable; `on_give_up`'s when the budget is spent.
    """
    start = backoff.clock()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:  # noqa: BLE001 - re-raised or replaced below, never swallowed
            if not should_retry(error):
                raise
            delay = backoff.delay(attempt)
            elapsed = backoff.clock() - start
            if elapsed + delay > backoff.budget_s:
                raise on_give_up(error, attempt + 1, elapsed) from error
            on_retry(error, attempt + 1, delay)
            backoff.sleep(delay)
            attempt += 1
