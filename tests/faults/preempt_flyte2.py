"""The preemption drills' loop as a Flyte 2 task run with ``flyte.run`` (local mode), for the Ctrl-C drill: Flyte 2
runs a task in a thread of its own, where the launcher cannot handle signals, so a terminal's Ctrl-C reaches the
ranks directly and the program's exit waits for their save.

python -m tests.faults.preempt_flyte2 '{"steps": 12, "directory": "...", ...}'

prints ``RESULT <json weights>`` when the run completes.
"""

from __future__ import annotations

import json
import os
import sys

import flyte

from flyte2_pytorch import PyTorch, Worker

env = flyte.TaskEnvironment(name="preempt-drill", plugin_config=PyTorch(worker=Worker(replicas=2)))


@env.task
def flyte2_train(steps: int, step_seconds: float, directory: str, every: int) -> list[float]:
    """Three ranks: the drill loop (``tests.faults.preempt_tasks.train``)."""
    from tests.faults.preempt_tasks import train

    return train(steps, step_seconds, directory, run=os.environ.get("PREEMPT_DRILL_RUN", "a"), every=every)


if __name__ == "__main__":
    flyte.init()
    run = flyte.run(flyte2_train, **json.loads(sys.argv[1]))
    print(f"RESULT {json.dumps(list(run.outputs()[0]))}", flush=True)
