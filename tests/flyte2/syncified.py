"""A syncified function, as flyte's own APIs are (``flyte.syncify``): a sync call runs it on flyte's background event
loop, in a thread flyte starts when this module is imported. Imported by name, so a rank gets it by reference."""

from __future__ import annotations

from flyte.syncify import syncify


@syncify
async def add(a: int, b: int) -> int:
    return a + b
