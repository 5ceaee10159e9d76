"""Root-cause analysis (``_failure.py``) on plain data: no processes, no control directory, no torch agent."""

from __future__ import annotations

import pickle

import pytest
from flytekit.exceptions.user import FlyteRecoverableException

from flytekitplugins_pytorch._control import RankError
from flytekitplugins_pytorch._failure import (
    NEVER_RAN_HINT,
    CauseKind,
    RankFailedError,
    RankFailure,
    RankOutcomes,
    find_root_cause,
    is_collateral,
    to_exception,
)

STUCK = "ranks still running when the job was stopped (they had not reached or finished the collective): "


class ShardError(Exception):
    """A user exception with an attribute of its own (module level, so it pickles)."""

    def __init__(self, message: str, shard: int = 0) -> None:
        super().__init__(message)
        self.shard = shard


def report(
    rank: int,
    at: float,
    exc: BaseException | None = None,
    *,
    type_name: str = "builtins.ValueError",
    message: str = "boom",
    collateral: bool = False,
    recoverable: bool = False,
    exc_bytes: bytes | None = None,
) -> RankError:
    """A rank's error report as the rank side writes it."""
    if exc is not None:
        type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        message = str(exc)
        exc_bytes = pickle.dumps(exc)
    return RankError(
        rank=rank,
        timestamp=at,
        type_name=type_name,
        message=message,
        traceback_text=f"Traceback (most recent call last):\n  rank {rank}\n{type_name}: {message}\n",
        recoverable=recoverable,
        collateral=collateral,
        exc_bytes=exc_bytes,
    )


def lost_peer(rank: int, at: float) -> RankError:
    return report(
        rank, at, type_name="torch.distributed.DistNetworkError", message="Connection closed by peer", collateral=True
    )


def outcomes(*errors: RankError, world: int = 3, ranks: range | None = None, **kwargs) -> RankOutcomes:
    started = kwargs.pop("started", frozenset(range(world)))
    return RankOutcomes(
        world_size=world,
        ranks=ranks if ranks is not None else range(world),
        errors=errors,
        started=frozenset(started),
        **kwargs,
    )


# ---------------------------------------------------------------- which rank is blamed -----------------------------

CASES = [
    pytest.param(
        outcomes(report(2, 1.0)), CauseKind.RAISED, 2, "rank 2 (of 3) failed: ValueError: boom", id="one-raise"
    ),
    pytest.param(
        outcomes(lost_peer(0, 1.0), report(2, 2.0)),
        CauseKind.RAISED,
        2,
        "rank 2 (of 3) failed: ValueError: boom",
        id="own-error-beats-an-earlier-lost-peer",
    ),
    pytest.param(
        outcomes(report(2, 1.0, message="first"), report(1, 2.0, message="second")),
        CauseKind.RAISED,
        2,
        "rank 2 (of 3) failed: ValueError: first",
        id="earliest-own-error",
    ),
    pytest.param(
        outcomes(lost_peer(0, 1.0), lost_peer(2, 1.5), exit_codes={1: -9}),
        CauseKind.DIED,
        1,
        "rank 1 (of 3) was killed by SIGKILL (exit code -9)",
        id="silent-death-beats-lost-peers",
    ),
    pytest.param(
        outcomes(exit_codes={2: -9, 1: -15}),
        CauseKind.DIED,
        1,
        "rank 1 (of 3) was killed by SIGTERM (exit code -15)",
        id="lowest-silent-rank",
    ),
    pytest.param(
        outcomes(exit_codes={1: 3}),
        CauseKind.DIED,
        1,
        "rank 1 (of 3) exited with code 3 without raising an exception",
        id="exit-code",
    ),
    pytest.param(
        outcomes(exit_codes={1: -99}), CauseKind.DIED, 1, "rank 1 (of 3) was killed by signal 99", id="unknown-signal"
    ),
    pytest.param(
        outcomes(lost_peer(2, 1.0), exit_codes={2: 1}),
        CauseKind.COLLATERAL,
        2,
        "rank 2 (of 3) failed: DistNetworkError: Connection closed by peer",
        id="a-reporting-rank-is-not-a-silent-death",
    ),
    pytest.param(
        outcomes(lost_peer(1, 2.0), lost_peer(0, 3.0)),
        CauseKind.COLLATERAL,
        1,
        "rank 1 (of 3) failed: DistNetworkError: Connection closed by peer",
        id="earliest-lost-peer",
    ),
    pytest.param(
        outcomes(agent_error="SignalException", elapsed_s=1.54),
        CauseKind.UNKNOWN,
        None,
        "the ranks failed after 1.5s without reporting an error: SignalException",
        id="nobody-to-blame",
    ),
    pytest.param(
        outcomes(world=4, ranks=range(2, 4), exit_codes={3: -9}),
        CauseKind.DIED,
        3,
        "rank 3 (of 4) was killed by SIGKILL (exit code -9)",
        id="fanout-pod-global-rank",
    ),
]


@pytest.mark.parametrize(("given", "kind", "rank", "headline"), CASES)
def test_root_cause(given: RankOutcomes, kind: CauseKind, rank: int | None, headline: str) -> None:
    cause = find_root_cause(given)
    assert (cause.kind, cause.rank, cause.headline) == (kind, rank, headline)


def test_a_rank_that_died_before_its_entrypoint_gets_the_main_guard_hint() -> None:
    cause = find_root_cause(outcomes(exit_codes={1: 1}, started={0, 2}))
    assert cause.headline == f"rank 1 (of 3) exited with code 1 without raising an exception{NEVER_RAN_HINT}"
    assert "if __name__ == '__main__':" in cause.headline


# ---------------------------------------------------------------- what is said about the other ranks --------------


@pytest.mark.parametrize(
    ("given", "details"),
    [
        pytest.param(
            outcomes(report(1, 1.0), lost_peer(0, 2.0), lost_peer(2, 2.1)),
            ("ranks that failed afterwards: 0 (DistNetworkError), 2 (DistNetworkError)",),
            id="all-failed-afterwards",
        ),
        pytest.param(outcomes(report(1, 1.0)), (f"{STUCK}[0, 2]",), id="still-running"),
        pytest.param(outcomes(report(1, 1.0), done={0}), (f"{STUCK}[2]",), id="finished-ranks-are-not-named"),
        pytest.param(
            outcomes(report(1, 1.0), world=4, started={0, 1, 2}),
            (f"{STUCK}[0, 2]", "ranks that never started: [3]"),
            id="never-started",
        ),
        pytest.param(
            outcomes(world=4, ranks=range(2, 4), exit_codes={3: -9}),
            (f"{STUCK}[2]",),
            id="fanout-pod-names-only-its-own-ranks",
        ),
        pytest.param(outcomes(agent_error="?"), (), id="unknown-says-nothing-more"),
    ],
)
def test_details_about_the_other_ranks(given: RankOutcomes, details: tuple[str, ...]) -> None:
    assert find_root_cause(given).details == details


def test_the_whole_message() -> None:
    cause = find_root_cause(outcomes(lost_peer(0, 2.0), report(2, 1.0)))
    assert cause.message == (
        "rank 2 (of 3) failed: ValueError: boom\n"
        "ranks that failed afterwards: 0 (DistNetworkError)\n"
        f"{STUCK}[1]\n"
        "--- traceback of rank 2 ---\n"
        "Traceback (most recent call last):\n  rank 2\nbuiltins.ValueError: boom"
    )


# ---------------------------------------------------------------- the exception the task raises -------------------


def test_the_original_type_is_rebuilt_with_its_attributes() -> None:
    exc = to_exception(find_root_cause(outcomes(report(2, 1.0, ShardError("bad shard", shard=7)))))
    assert isinstance(exc, ShardError) and isinstance(exc, RankFailure)
    assert (exc.rank, exc.world_size, exc.shard) == (2, 3, 7)
    assert str(exc).startswith("rank 2 (of 3) failed: ShardError: bad shard\n")
    assert "--- traceback of rank 2 ---" in str(exc)
    assert type(exc).__name__ == "ShardError" and type(exc).__module__ == __name__


def test_the_same_rebuilt_type_is_reused() -> None:
    first = to_exception(find_root_cause(outcomes(report(0, 1.0, ShardError("a")))))
    second = to_exception(find_root_cause(outcomes(report(1, 1.0, ShardError("b")))))
    assert type(first) is type(second)


def test_a_recoverable_exception_stays_recoverable() -> None:
    error = report(1, 1.0, FlyteRecoverableException("flaky storage"), recoverable=True)
    exc = to_exception(find_root_cause(outcomes(error)))
    assert isinstance(exc, FlyteRecoverableException) and isinstance(exc, RankFailure) and exc.rank == 1


@pytest.mark.parametrize(
    ("recoverable", "expected"),
    [
        pytest.param(False, RankFailedError, id="plain"),
        pytest.param(True, FlyteRecoverableException, id="recoverable-without-its-type"),
    ],
)
@pytest.mark.parametrize("exc_bytes", [None, b"not a pickle"], ids=["unpicklable", "corrupt"])
def test_a_type_that_cannot_be_rebuilt_falls_back_to_a_wrapper(recoverable, expected, exc_bytes) -> None:
    error = report(2, 1.0, recoverable=recoverable, exc_bytes=exc_bytes)
    exc = to_exception(find_root_cause(outcomes(error)))
    assert isinstance(exc, expected) and isinstance(exc, RankFailure)
    assert (exc.rank, exc.world_size) == (2, 3)
    assert str(exc).startswith("rank 2 (of 3) failed: ValueError: boom")


def test_a_silent_death_raises_rank_failed_error_naming_the_rank() -> None:
    exc = to_exception(find_root_cause(outcomes(exit_codes={1: -9})))
    assert type(exc) is RankFailedError and (exc.rank, exc.world_size) == (1, 3)
    assert str(exc).startswith("rank 1 (of 3) was killed by SIGKILL")


def test_nobody_to_blame_raises_rank_failed_error_without_a_rank() -> None:
    exc = to_exception(find_root_cause(outcomes(agent_error="agent gone")))
    assert type(exc) is RankFailedError and exc.rank == -1
    assert "without reporting an error: agent gone" in str(exc)


# ---------------------------------------------------------------- collateral or not (decided in the rank) ---------


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:1234"), True, id="gloo-lost-peer"),
        pytest.param(TimeoutError("timed out waiting for rank 1"), True, id="timeout"),
        pytest.param(ConnectionResetError("connection reset"), True, id="connection-reset"),
        pytest.param(RuntimeError("boom"), False, id="plain-runtime-error"),
        pytest.param(ValueError("timeout must be positive"), False, id="value-error-mentioning-timeout"),
    ],
)
def test_is_collateral(exc: BaseException, expected: bool) -> None:
    assert is_collateral(exc) is expected


def test_torch_dist_errors_are_collateral() -> None:
    dist = pytest.importorskip("torch.distributed")
    assert is_collateral(dist.DistNetworkError("anything"))
