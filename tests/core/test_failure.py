"""Root-cause analysis (``_failure.py``) on plain data: no processes, no control directory, no torch agent."""

from __future__ import annotations

import pickle

import pytest

from pytorch_core._control import RankError
from pytorch_core._failure import (
    NEVER_RAN_HINT,
    CauseKind,
    HangError,
    RankFailedError,
    RankFailure,
    RankOutcomes,
    find_root_cause,
    is_collateral,
    main_thread_frames,
    to_exception,
)
from pytorch_core.frontend import RecoverableError

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


@pytest.mark.parametrize(
    "message",
    [
        "Default process group has not been initialized, please make sure to call init_process_group.",
        "init_process_group(backend='nccl') needs CUDA and NCCL, and this machine has no CUDA device: use gloo",
    ],
)
def test_a_rank_without_a_process_group_does_not_say_the_others_missed_a_collective(message: str) -> None:
    cause = find_root_cause(outcomes(report(0, 1.0, ValueError(message)), lost_peer(2, 2.0)))
    assert cause.headline == f"rank 0 (of 3) failed: ValueError: {message}"
    assert cause.details == ("ranks that failed afterwards: 2 (DistNetworkError)",)
    assert STUCK not in cause.message


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
    assert type(exc) is ShardError and not isinstance(exc, RankFailure)
    assert (exc.rank, exc.world_size, exc.shard) == (2, 3, 7)
    assert str(exc).startswith("rank 2 (of 3) failed: ShardError: bad shard\n")
    assert "--- traceback of rank 2 ---" in str(exc)


@pytest.mark.parametrize(
    "original",
    [
        pytest.param(ValueError("boom"), id="ValueError"),
        pytest.param(KeyError("missing"), id="KeyError"),
        pytest.param(ShardError("bad shard", shard=7), id="own-type-with-attribute"),
        pytest.param(RecoverableError("flaky storage"), id="RecoverableError"),
    ],
)
def test_a_rebuilt_exception_is_its_own_type_and_pickles(original: BaseException) -> None:
    error = report(1, 1.0, original, recoverable=isinstance(original, RecoverableError))
    exc = to_exception(find_root_cause(outcomes(error)))
    back = pickle.loads(pickle.dumps(exc))
    assert type(exc) is type(original) and type(back) is type(original)
    assert str(back) == str(exc) and (back.rank, back.world_size) == (1, 3)
    assert back.__dict__ == exc.__dict__
    try:
        raise exc
    except type(original) as caught:  # ``except ValueError`` catches it, as the user expects
        assert caught is exc


def test_an_attribute_named_rank_of_the_users_own_is_kept() -> None:
    original = ShardError("bad")
    original.rank = "theirs"  # type: ignore[attr-defined]
    exc = to_exception(find_root_cause(outcomes(report(2, 1.0, original))))
    assert exc.rank == "theirs" and exc.world_size == 3  # type: ignore[attr-defined]


class NeedsTwoArguments(Exception):
    """Cannot be rebuilt from its message alone: pickling it back calls ``__init__`` with one argument."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(code, text)
        self.code = code


def test_a_type_that_does_not_pickle_back_is_a_named_rank_failure() -> None:
    exc = to_exception(find_root_cause(outcomes(report(2, 1.0, NeedsTwoArguments(7, "bad")))))
    assert type(exc) is RankFailure
    assert exc.type_name == f"{__name__}.NeedsTwoArguments" and exc.original_message == "(7, 'bad')"
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is RankFailure and isinstance(back, RuntimeError)
    assert (back.rank, back.world_size, back.type_name, str(back)) == (2, 3, exc.type_name, str(exc))


@pytest.mark.parametrize(
    ("recoverable", "expected"),
    [
        pytest.param(False, RankFailure, id="plain"),
        pytest.param(True, RecoverableError, id="recoverable-without-its-type"),
    ],
)
@pytest.mark.parametrize("exc_bytes", [None, b"not a pickle"], ids=["unpicklable", "corrupt"])
def test_a_type_that_cannot_be_rebuilt_falls_back_to_rank_failure(recoverable, expected, exc_bytes) -> None:
    error = report(2, 1.0, recoverable=recoverable, exc_bytes=exc_bytes)
    exc = to_exception(find_root_cause(outcomes(error)))
    assert isinstance(exc, expected) and isinstance(exc, RankFailure) and not isinstance(exc, RankFailedError)
    assert (exc.rank, exc.world_size, exc.type_name, exc.original_message) == (2, 3, "builtins.ValueError", "boom")
    assert str(exc).startswith("rank 2 (of 3) failed: ValueError: boom")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and isinstance(back, expected) and back.rank == 2


def test_a_silent_death_raises_rank_failed_error_naming_the_rank() -> None:
    exc = to_exception(find_root_cause(outcomes(exit_codes={1: -9})))
    assert type(exc) is RankFailedError and (exc.rank, exc.world_size) == (1, 3)
    assert str(exc).startswith("rank 1 (of 3) was killed by SIGKILL")


def test_nobody_to_blame_raises_rank_failed_error_without_a_rank() -> None:
    exc = to_exception(find_root_cause(outcomes(agent_error="agent gone")))
    assert type(exc) is RankFailedError and exc.rank == -1
    assert "without reporting an error: agent gone" in str(exc)


# ---------------------------------------------------------------- collateral or not (decided in the rank) ---------


def _raised_in(path: str, exc: BaseException) -> BaseException:
    """``exc`` as raised by code compiled under ``path`` (what the rank's traceback records)."""
    code = compile("raise exc", path, "exec")
    try:
        exec(code, {"exc": exc})
    except BaseException as raised:  # noqa: BLE001 - caught to return it
        return raised
    raise AssertionError("not raised")


GLOO = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
DATALOADER = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py"
USER = "/home/me/train.py"


@pytest.mark.parametrize(
    ("exc", "where", "expected"),
    [
        pytest.param(RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:1"), GLOO, True, id="gloo-lost-peer"),
        pytest.param(RuntimeError("Timed out waiting 3000ms for recv"), GLOO, True, id="gloo-timeout"),
        pytest.param(RuntimeError("boom"), GLOO, True, id="anything-from-a-collective"),
        # The words of an error are never evidence: these are the ranks' own errors.
        pytest.param(RuntimeError("[gloo] Connection closed by peer"), USER, False, id="user-text-like-gloo"),
        pytest.param(RuntimeError("DataLoader timed out after 1 seconds"), DATALOADER, False, id="dataloader-timeout"),
        pytest.param(TimeoutError("metadata service timed out"), USER, False, id="user-timeout-error"),
        pytest.param(ConnectionResetError("connection reset by store socket"), USER, False, id="user-connection"),
        pytest.param(RuntimeError("boom"), USER, False, id="plain-runtime-error"),
        pytest.param(ValueError("timeout must be positive"), GLOO, False, id="value-error-from-torch"),
    ],
)
def test_is_collateral_by_type_and_place_never_by_text(exc: BaseException, where: str, expected: bool) -> None:
    assert is_collateral(_raised_in(where, exc)) is expected


def test_torch_dist_errors_are_collateral() -> None:
    dist = pytest.importorskip("torch.distributed")
    assert is_collateral(dist.DistNetworkError("anything"))


# ---------------------------------------------------------------- ranks that did not arrive -------------------------

USER_SLEEP_DUMP = """Thread 0x00007f0000000002 (most recent call first):
  File "/work/pytorch_core/_rank.py", line 160 in watch
  File "/usr/lib/python3.11/threading.py", line 975 in run

Current thread 0x00007f0000000001 (most recent call first):
  File "/home/me/train.py", line 42 in step_loop
  File "/home/me/train.py", line 60 in train
  File "/work/pytorch_core/_rank.py", line 230 in rank_entrypoint
  File "/venv/torch/distributed/elastic/multiprocessing/api.py", line 600 in _wrap
"""

IN_COLLECTIVE_DUMP = """Current thread 0x00007f0000000001 (most recent call first):
  File "/venv/torch/distributed/distributed_c10d.py", line 2800 in all_reduce
  File "/venv/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/home/me/train.py", line 50 in step_loop
  File "/work/pytorch_core/_rank.py", line 230 in rank_entrypoint
"""


def timeout_report(rank: int, at: float) -> RankError:
    return report(
        rank,
        at,
        type_name="builtins.RuntimeError",
        message="[../gloo/transport/tcp/pair.cc:446] Timed out waiting 10000ms for send operation to complete\nmore",
        collateral=True,
    )


def test_a_sleeping_rank_is_named_with_where_it_was() -> None:
    cause = find_root_cause(
        outcomes(timeout_report(2, 1.0), timeout_report(0, 1.1), stacks={1: USER_SLEEP_DUMP}, exit_codes={2: 1})
    )
    assert cause.kind is CauseKind.NOT_ARRIVED and cause.rank == 1
    assert cause.headline == (
        "rank 1 (of 3) did not arrive: still running at /home/me/train.py:42 in step_loop, outside "
        "torch.distributed; rank 2 gave up waiting: RuntimeError: [../gloo/transport/tcp/pair.cc:446] Timed out "
        "waiting 10000ms for send operation to complete"
    )
    assert "ranks that gave up waiting: 2 (RuntimeError), 0 (RuntimeError)" in cause.details
    assert "--- stack of rank 1 when rank 2 gave up (most recent call first) ---" in cause.message
    assert "  /home/me/train.py:42 in step_loop\n" in cause.message and " in watch" not in cause.message
    exc = to_exception(cause)
    assert isinstance(exc, HangError) and exc.rank == 1  # not the waiting rank's RuntimeError
    # Still running the task's code: it would be late again on every attempt, so no retry even with retry_hangs.
    assert not isinstance(exc, RecoverableError)
    permanent = to_exception(cause, retry_hangs=False)
    assert type(permanent) is HangError and not isinstance(permanent, RecoverableError)
    assert pickle.loads(pickle.dumps(exc)).rank == 1 and type(pickle.loads(pickle.dumps(exc))) is type(exc)


def test_only_the_first_of_several_dumps_is_read() -> None:
    frames = main_thread_frames(USER_SLEEP_DUMP + USER_SLEEP_DUMP.replace("line 42", "line 43"))
    assert [str(f) for f in frames][:2] == ["/home/me/train.py:42 in step_loop", "/home/me/train.py:60 in train"]


def test_a_rank_that_returned_without_joining_is_named() -> None:
    store_timeout = report(
        0,
        5.0,
        type_name="torch.distributed.DistStoreError",
        message="wait timeout after 10000ms, keys: /default_pg/0//cpu//0/1",
        collateral=True,
    )
    cause = find_root_cause(outcomes(store_timeout, done={1}, stacks={2: IN_COLLECTIVE_DUMP}))
    assert cause.kind is CauseKind.NOT_ARRIVED and cause.rank == 1
    assert cause.headline.startswith(
        "rank 1 (of 3) did not arrive: its function returned without joining the others; rank 0 gave up waiting: "
        "DistStoreError: wait timeout"
    )


def test_ranks_waiting_in_a_collective_are_not_blamed_when_another_is_not() -> None:
    cause = find_root_cause(
        outcomes(timeout_report(0, 1.0), stacks={1: USER_SLEEP_DUMP, 2: IN_COLLECTIVE_DUMP}, world=3)
    )
    assert cause.rank == 1 and "rank 2" not in cause.headline.split(";")[0]


def test_ranks_all_in_other_collectives_are_named_with_the_call() -> None:
    cause = find_root_cause(outcomes(timeout_report(0, 1.0), stacks={1: IN_COLLECTIVE_DUMP}, world=2))
    assert cause.headline.startswith(
        "rank 1 (of 2) did not arrive: still running, waiting in torch.distributed's all_reduce called at "
        "/home/me/train.py:50 in step_loop; rank 0 gave up waiting"
    )


def test_several_missing_ranks_are_listed() -> None:
    cause = find_root_cause(outcomes(timeout_report(0, 1.0), done={2}, stacks={1: USER_SLEEP_DUMP}, world=4))
    assert cause.headline.startswith(
        "ranks [1, 2] (of 4) did not arrive: rank 1 still running at /home/me/train.py:42 in step_loop, outside "
        "torch.distributed; rank 2 its function returned without joining the others; rank 0 gave up"
    )
