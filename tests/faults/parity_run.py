"""Run one case of `tests/faults/parity_cases.py` under the plugin or as torchrun's rank (see that module).

python -m tests.faults.parity_run plugin CASE
python -m torch.distributed.run --nproc-per-node 3 -m tests.faults.parity_run torchrun CASE
RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. python -m tests.faults.parity_run pod|plain CASE
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

from tests.faults import parity_cases


def _say(outcome: dict[str, Any]) -> None:
    sys.stdout.write(f"PARITY {json.dumps(outcome)}\n")
    sys.stdout.flush()


def _failure(exc: BaseException) -> dict[str, Any]:
    from flytekit.exceptions.user import FlyteRecoverableException

    text = str(exc).strip()
    return {
        "ok": False,
        "type": type(exc).__name__,
        "type_name": getattr(exc, "type_name", ""),
        "rank": getattr(exc, "rank", None),
        "recoverable": isinstance(exc, FlyteRecoverableException),
        # flytekit puts a line of its own before the exception's text.
        "message": next((line for line in text.splitlines() if "rank" in line), text.splitlines()[0] if text else ""),
    }


def main(mode: str, name: str) -> int:
    """Run case ``name`` in ``mode`` and say its outcome.

    Args:
        mode: ``plugin``, ``pod``, ``torchrun`` or ``plain``.
        name: a key of ``parity_cases.CASES``.

    Returns:
        int: the exit status (0 when it returned).
    """
    if mode == "plugin":
        try:
            value = getattr(parity_cases, f"task_{name}")()
        except BaseException as exc:  # noqa: BLE001 - reported
            _say(_failure(exc))
            return 1
        _say({"ok": True, "value": json.loads(value)})
        return 0
    if mode == "pod":
        from flytekit.core.base_task import IgnoreOutputs

        from pytorch_core._plan import ExecutionKind, plan_launch
        from pytorch_core._progress_follow import ProgressFollower
        from pytorch_core.frontend import current
        from pytorch_core.launcher import _run_direct

        task = getattr(parity_cases, f"pod_{name}")
        plan = plan_launch(task.task_config, os.environ, local=False)
        assert plan.kind is ExecutionKind.CLUSTER_DIRECT, plan.kind
        follower = ProgressFollower(current(), task, local=False, env=os.environ)  # what run_distributed makes
        try:
            value = _run_direct(task._task_function, {}, plan, follower)
        except IgnoreOutputs:
            _say({"ok": True, "value": None, "pod": int(os.environ["RANK"])})
            return 0
        except BaseException as exc:  # noqa: BLE001 - reported
            _say({**_failure(exc), "pod": int(os.environ["RANK"])})
            return 1
        _say({"ok": True, "value": json.loads(value), "pod": int(os.environ["RANK"])})
        return 0
    # torchrun / plain: the function itself; each rank says what it raised and when (torchrun orders by time).
    rank = int(os.environ["RANK"])
    try:
        value = parity_cases.CASES[name]()
    except BaseException as exc:  # noqa: BLE001 - reported, then the exit status torchrun expects
        _say({**_failure(exc), "rank": rank, "pod": rank, "time": time.time()})
        traceback.print_exc()
        return 1
    _say({"ok": True, "value": value, "rank": rank, "pod": rank})
    _release_group()
    return 0


def _release_group() -> None:
    """Destroy a process group the case left open, after its outcome was said. A torch process that exits with a live
    gloo group now and then aborts in a destructor ('terminate called without an active exception', SIGABRT), and
    torchrun then names that rank as the root cause of a run whose every rank returned; the comparison is about the
    function's outcome, not that exit-time race."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
