"""No fork bomb (``_nested.py``): which process refuses to launch again, and the one headline of ranks that refused;
on plain data (the module-level workflow call run end to end is in ``tests/sdk/test_nested_launch.py``)."""

from __future__ import annotations

import os

import pytest

from pytorch_core._failure import NESTED_LAUNCH_HEADLINE, RankOutcomes, find_root_cause
from pytorch_core._nested import (
    LAUNCHER_PID_ENV,
    NESTED_LAUNCH_EXIT_CODE,
    NestedLaunchError,
    nested_launch_reason,
    raise_if_refused_at_preload,
    refuse_nested_launch,
)

GUARD = '`if __name__ == "__main__":`'


@pytest.mark.parametrize(
    ("environ", "pid", "bootstrapping", "preloading", "expected"),
    [
        pytest.param({}, 10, False, False, None, id="top-level launch"),
        pytest.param({LAUNCHER_PID_ENV: "10"}, 10, False, False, None, id="the launcher itself"),
        pytest.param({LAUNCHER_PID_ENV: "10", "RANK": "1"}, 11, False, False, "rank 1 of a launch", id="in a rank"),
        pytest.param({LAUNCHER_PID_ENV: "10"}, 12, False, False, "a process started by a launch", id="descendant"),
        pytest.param({}, 11, True, False, "while it imports the script's __main__", id="bootstrapping"),
        pytest.param({LAUNCHER_PID_ENV: "10"}, 13, False, True, "the fork server", id="fork server preload"),
    ],
)
def test_nested_launch_reason(environ, pid, bootstrapping, preloading, expected):
    reason = nested_launch_reason(environ, pid, bootstrapping=bootstrapping, preloading=preloading)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason and GUARD in reason


def test_a_rank_refuses_a_launch(monkeypatch):
    monkeypatch.setenv(LAUNCHER_PID_ENV, str(os.getpid() + 1))
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(NestedLaunchError, match=r"^my\.task: .*rank 2 of a launch.*if __name__ == "):
        refuse_nested_launch("my.task")


def test_a_module_refused_at_preload_fails_its_ranks(monkeypatch):
    from pytorch_core import _nested

    monkeypatch.setitem(_nested._refused_at_preload, "user_mod", "user_mod.t: refused")
    raise_if_refused_at_preload("other_mod")  # another module: nothing to say
    with pytest.raises(NestedLaunchError, match="user_mod.t: refused"):
        raise_if_refused_at_preload("user_mod")


def test_ranks_that_refused_while_bootstrapping_are_the_headline():
    outcomes = RankOutcomes(
        world_size=3,
        ranks=range(3),
        exit_codes={0: NESTED_LAUNCH_EXIT_CODE, 1: NESTED_LAUNCH_EXIT_CODE, 2: NESTED_LAUNCH_EXIT_CODE},
        agent_error="ChildFailedError",
    )
    cause = find_root_cause(outcomes)
    assert cause.rank == 0
    assert cause.headline == f"ranks [0, 1, 2] (of 3) {NESTED_LAUNCH_HEADLINE}"
    assert GUARD in cause.headline
