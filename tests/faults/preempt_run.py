"""Run the preemption drills' loop as a local launch, in a process a drill can signal (see ``drills_preempt.py``).

python -m tests.faults.preempt_run train '{"steps": 12, "directory": "...", ...}'
python -m tests.faults.preempt_run plain       (or plain-fork: start_method="fork")
python -m tests.faults.preempt_run reports '{"fail_rank": 2, "fail_at": 8}'   (or slow-start: tests.faults.edge_tasks)
python -m torch.distributed.run --nproc-per-node 3 -m tests.faults.preempt_run rank

``train`` runs ``tests.faults.preempt_tasks.train`` on 3 local ranks through the core launcher (no Flyte SDK: the
launch a front-end makes, minus the SDK's context) and prints ``RESULT <json weights>``; a run whose ranks stopped
for a preemption prints ``PREEMPTED <message>`` and exits 3 (a launcher that got the signal itself ends as the signal
ends it). The drill's run name is ``$PREEMPT_DRILL_RUN`` (the ranks read it too): the inputs stay the same from run to
run, so the next run is the same execution and resumes. ``plain`` runs a loop that uses none of the API on 3 local
ranks; ``rank`` is one rank of it, for torchrun.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

PREEMPTED_EXIT = 3


@dataclass
class _Task:
    task_config: Any
    name: str
    _task_function: Any


def _train(**kwargs: Any) -> list[float]:
    from tests.faults.preempt_tasks import train

    return train(run=os.environ.get("PREEMPT_DRILL_RUN", "a"), **kwargs)


def main(argv: list[str]) -> int:
    """Run one launch.

    Args:
        argv: ``["train", json kwargs]``, ``["plain"]``, ``["plain-fork"]`` or ``["rank"]``.

    Returns:
        int: the exit status.
    """
    from pytorch_core.config import PyTorch, Worker
    from pytorch_core.frontend import PLAIN, PreemptedError
    from pytorch_core.launcher import run_distributed
    from tests.faults import preempt_tasks

    if argv[0] == "rank":  # one rank of the plain loop, as torchrun's ranks run it
        preempt_tasks.plain_loop()
        return 0
    if argv[0] in ("reports", "slow-start"):  # the loops of tests/faults/test_edge_words.py
        from tests.faults import edge_tasks

        loop = edge_tasks.reports_only if argv[0] == "reports" else edge_tasks.slow_start
        inputs = json.loads(argv[1]) if len(argv) > 1 else {}
        config = PyTorch(worker=Worker(replicas=2), preflight=False)
        try:
            value = run_distributed(_Task(config, f"edge_drill.{argv[0]}", loop), inputs, PLAIN)
        except PreemptedError as stop:
            print(f"PREEMPTED {stop}", flush=True)
            return PREEMPTED_EXIT
        print(f"RESULT {json.dumps(value)}", flush=True)
        return 0
    config = PyTorch(worker=Worker(replicas=2))
    if argv[0] in ("plain", "plain-fork"):
        if argv[0] == "plain-fork":  # the ranks forked from the launcher itself
            config = PyTorch(worker=Worker(replicas=2), start_method="fork")
        run_distributed(_Task(config, "preempt_drill.plain", preempt_tasks.plain_loop), {}, PLAIN)
        return 0
    kwargs = json.loads(argv[1])
    try:
        weights = run_distributed(_Task(config, "preempt_drill.train", _train), kwargs, PLAIN)
    except PreemptedError as stop:
        print(f"PREEMPTED {stop}", flush=True)
        return PREEMPTED_EXIT
    print(f"RESULT {json.dumps(weights)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
