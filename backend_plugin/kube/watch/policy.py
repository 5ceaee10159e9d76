"""When a watch lists again, reopens, or waits: the retry policy of a watch loop, pure (an outcome in, what to do next
out), after client-go's reflector.

- the first round lists; a healthy watch (it delivered something and lasted at least `MIN_HEALTHY_WATCH_S`) is
  reopened at once from the last resourceVersion seen, and clears the count of failures;
- a watch that ends without a line, or at once, is not healthy: reopen after the backoff (no hot loop on a proxy
  that answers every watch with one line and closes it);
- 410 Gone/Expired: list again, at once the first time (as client-go does), after the backoff when it repeats;
- a silent watch (nothing, not even the BOOKMARK the server sends before a watch's timeout, within `silence_s` plus a
  margin: a half-open connection) is reopened at once from its resourceVersion, which replays what it lost; a second
  silent one in a row lists again, after the backoff;
- an answer no API server writes: list again, at once the first time, after the backoff when it repeats;
- any other failure (an HTTP error, no answer, an ERROR event): after the backoff, the same request again (a LIST's
  expired continue token, a 410 from the API, lists again).

The backoff is client-go's: exponential from 0.8 s to 30 s (`watch_backoff_initial_s`, `watch_backoff_max_s`), with
full jitter (`retry.Backoff`).
"""

from __future__ import annotations

from enum import Enum

from backend_plugin.kube.retry import Backoff

__all__ = ["Outcome", "RetryPolicy", "MIN_HEALTHY_WATCH_S"]

MIN_HEALTHY_WATCH_S = 0.5
"""A watch that ends sooner than this (each asks for at least 1 s) is not healthy, whatever it delivered."""


class Outcome(Enum):
    """How one round of a watch loop ended."""

    LISTED = "listed"
    """The LIST is in (the round goes on with a watch)."""
    HEALTHY = "healthy"
    """The watch delivered lines and lasted long enough."""
    UNHEALTHY = "unhealthy"
    """The watch ended without a line, or at once."""
    EXPIRED = "expired"
    """410: the resourceVersion is too old."""
    SILENT = "silent"
    """Nothing arrived within the read timeout."""
    BROKEN = "broken"
    """An answer no API server writes."""
    FAILED = "failed"
    """The request failed (an HTTP error, no answer, an ERROR event)."""
    GONE = "gone"
    """The request failed with 410 (a LIST's continue token, or a watch, too old)."""


class RetryPolicy:
    """The state of one watch loop's retries.

    Args:
        backoff: the waits between failed rounds.

    Attributes:
        need_list: whether the next round lists first.
        failures: failed rounds in a row.
        silent: silent watches in a row.
    """

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.need_list = True
        self.failures = 0
        self.silent = 0

    def heard(self) -> None:
        """A line arrived: an earlier silence no longer counts."""
        self.silent = 0

    def after(self, outcome: Outcome) -> float:
        """What the loop does after `outcome`: sets `need_list`, and returns how long to wait first.

        Args:
            outcome: how the round ended.

        Returns:
            Seconds to wait before the next round (0: at once).
        """
        if outcome is Outcome.LISTED:
            self.need_list = False
            return 0.0
        if outcome is Outcome.HEALTHY:
            self.failures, self.silent = 0, 0
            return 0.0
        if outcome is Outcome.SILENT:
            self.silent += 1
            if self.silent == 1:
                return 0.0  # reopen from the resourceVersion: it replays what a half-open connection lost
            self.need_list = True
        if outcome in (Outcome.EXPIRED, Outcome.BROKEN, Outcome.GONE):
            self.need_list = True
        self.failures += 1
        if outcome in (Outcome.EXPIRED, Outcome.BROKEN) and self.failures == 1:
            return 0.0  # the first relist is immediate; one that keeps failing backs off
        return self.backoff.delay(self.failures - 1)
