"""A `map_task` over a pytorch task: the EIDF guide's `completions: 3`, written the Flyte way."""

from __future__ import annotations

from flytekit import map_task, workflow

from tests.cluster.workflows import seed_allreduce


@workflow
def repeated_training(xs: list[int] = [10, 20, 30]) -> list[list[int]]:  # noqa: B006 - Flyte defaults are values
    """One distributed run (master + 2 workers) per item of `xs`."""
    return map_task(seed_allreduce)(x=xs)
