"""Flyte 2's side of live progress: the ``Progress`` report tab, flushed mid-run, and the record beside the outputs.

The launcher's progress thread (``pytorch_core._progress_follow``) calls these in the task process, in the task's
``contextvars`` context, where ``flyte``'s task context lives. flyte's syncified calls (``flyte.report.flush()``)
would run on flyte's background loop, outside that context, so the coroutines underneath them run here in an event
loop of this thread's own.

- :func:`publish_progress`: when the task has ``report=True``, the report's ``Progress`` tab gets the page and the
  report is flushed: ``report.html`` in the action's output path (what the Flyte 2 UI shows; in a local run a file of
  the run's local output folder). At the end of the task Flyte 2 flushes the report itself.
- :func:`write_output_file`: a small file in the action's output path through ``flyte.storage``.

flyte is imported inside the functions; flytekit never.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

__all__ = ["publish_progress", "write_output_file", "TAB_NAME"]

TAB_NAME = "Progress"
"""The report tab's name."""


def publish_progress(task: Any, html: str, final: bool) -> bool:
    """Put ``html`` in the report's ``Progress`` tab and, mid-run, flush the report.

    Args:
        task: the task; only a task with ``report=True`` has a report.
        html: the page.
        final: the run ended: update the tab only (Flyte 2 flushes the report when the task ends).

    Returns:
        bool: ``False`` when the task has no report, or this is not a task context (nothing done).
    """
    if not getattr(task, "report", False):
        return False
    import flyte.report
    from flyte._context import internal_ctx

    if not internal_ctx().is_task_context():
        return False
    flyte.report.get_tab(TAB_NAME).replace(html)
    if not final:
        flush = flyte.report.flush.fn  # type: ignore[attr-defined]  # the coroutine function syncify wraps
        asyncio.run(flush())
    return True


def write_output_file(name: str, data: bytes) -> Optional[str]:
    """Write ``data`` as ``name`` in the action's output path.

    Args:
        name: the file name.
        data: its content.

    Returns:
        Optional[str]: the path written, or ``None`` outside a task context.
    """
    import flyte
    import flyte.storage

    context = flyte.ctx()
    output_path = getattr(context, "output_path", None) if context is not None else None
    if not output_path:
        return None
    path = flyte.storage.join(str(output_path), name)
    asyncio.run(flyte.storage.put_stream(data, to_path=path))
    return path
