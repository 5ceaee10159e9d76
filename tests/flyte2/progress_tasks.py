"""Flyte 2 tasks with live progress, run locally by tests/flyte2/test_progress.py
(``python -m tests.flyte2.progress_tasks <case>``); each case prints one JSON line last.

- ``report``: 3 ranks report progress in a task with ``report=True``; each mid-run flush of the report is observed
  right after it happened (the page in ``report.html`` of the action's output path, read back from disk);
- ``no_report``: the same task without a report: nothing is flushed;
- ``output_file``: a plain task writes a file beside its outputs through the front-end's file access.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

import flyte

from flyte2_pytorch import PyTorch, Worker, _progress, report_progress
from flyte2_pytorch._frontend import FLYTE2

three = flyte.TaskEnvironment(name="progress-three", plugin_config=PyTorch(worker=Worker(replicas=2)))
plain = flyte.TaskEnvironment(name="progress-plain")

#: What each call of the front-end's page publication saw: (final, the page's line as report.html holds it).
SEEN: list[dict[str, Any]] = []


def _observing(original: Any) -> Any:
    def publish(task: Any, html: str, final: bool) -> bool:
        done = original(task, html, final)
        path = None
        on_disk = None
        context = flyte.ctx()
        if context is not None and done:
            path = flyte.storage.join(str(context.output_path), "report.html")
            try:
                with open(path, encoding="utf-8") as f:
                    found = re.search(r"<h3>(step [^<]*)</h3>", f.read())
                on_disk = found.group(1) if found else None
            except OSError:
                on_disk = None
        SEEN.append({"final": final, "published": done, "page": re.search(r"<h3>(step [^<]*)</h3>", html).group(1),
                     "on_disk": on_disk})  # fmt: skip
        return done

    return publish


def _loop(steps: int) -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    for step in range(1, steps + 1):
        time.sleep(0.05)
        report_progress(step, steps, loss=1.0 / step)
    dist.destroy_process_group()
    return steps


@three.task(report=True)
def with_report(steps: int) -> int:
    return _loop(steps)


@three.task
def without_report(steps: int) -> int:
    return _loop(steps)


@plain.task
def output_file(text: str) -> str:
    path = FLYTE2.write_output_file("pytorch-progress.json", text.encode())
    with open(str(path).removeprefix("file://"), encoding="utf-8") as f:
        return f"{path}|{f.read()}"


def main(case: str) -> None:
    flyte.init()
    _progress.publish_progress = _observing(_progress.publish_progress)
    if case == "report":
        run = flyte.run(with_report, steps=80)
    elif case == "no_report":
        run = flyte.run(without_report, steps=40)
    else:
        run = flyte.run(output_file, text='{"step": 1}')
    print(json.dumps({"output": run.outputs()[0], "seen": SEEN}))


if __name__ == "__main__":
    main(sys.argv[1])
