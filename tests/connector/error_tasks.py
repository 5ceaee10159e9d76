"""Plain flytekit tasks that raise, run by `pyflyte-execute` so that flytekit itself writes their error documents."""

from __future__ import annotations

from flytekit import task
from flytekit.exceptions.user import FlyteRecoverableException

VALUE_ERROR = "rank 2 cannot read shard 7: checksum mismatch"
RECOVERABLE = "the node was preempted; retry from the last checkpoint"


@task
def raises_value_error() -> int:
    """A non-recoverable user error (any exception but FlyteRecoverableException)."""
    if VALUE_ERROR:  # flytekit requires a function returning a value to have a return statement
        raise ValueError(VALUE_ERROR)
    return 0


@task
def raises_recoverable() -> int:
    """A recoverable user error."""
    if RECOVERABLE:
        raise FlyteRecoverableException(RECOVERABLE)
    return 0
