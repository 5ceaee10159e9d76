"""``save_checkpoint(state, step)`` / ``load_checkpoint(state)``: one checkpoint API for every place a task runs.

A training loop names what it trains once, as a mapping::

    state = {"model": model, "optimizer": optimizer}
    start = load_checkpoint(state)           # every rank: restored in place; the step to go on from (0: none)
    for step in range(start, steps):
        ...                                  # one optimizer step
        report_progress(step + 1, steps)     # a step boundary (a preemption stops here, see ``preemption.py``)
        if (step + 1) % 50 == 0:
            save_checkpoint(state, step + 1) # global rank 0 writes; a step boundary too

A value with ``state_dict()`` and ``load_state_dict()`` (a module, an optimizer, a scheduler, a grad scaler) is saved
as its state dict and restored in place; any other value (a number, a list, a tensor) is saved as it is and put back
into the mapping on load (read it back from there). The mapping given last is also what the plugin saves by itself
when the ranks stop for a preemption (``preemption.py``), at the step every rank stopped after: a loop that calls
``report_progress`` or this API needs no other code for that.

Global rank 0 writes; every rank reads. Where the checkpoints go, first match wins:

1. ``$FLYTE_PYTORCH_CHECKPOINT_DIR``: a folder the user names (a local run resumes from it whenever it holds a
   checkpoint; on a cluster, a shared volume). Nothing removes it.
2. On a cluster, the Flyte checkpoint prefixes the front-end reads from the execution context: this attempt's own
   prefix (``--checkpoint-path``) and the previous attempt's (``--prev-checkpoint``). A checkpoint in this attempt's
   own prefix wins: only a restarted run of this attempt can have written it (an elastic restart, a pod the operator
   restarted); else the previous attempt's is read, as after a Flyte retry. When rank 0 resumes from the previous
   attempt's, it writes a pointer to it into this attempt's prefix, so a later retry finds it even if this attempt
   saves nothing.
3. A local run (``python file.py``, ``pyflyte run``, ``flyte.run``): the launcher's folder for this execution,
   ``<tmp>/flyte-pytorch-<uid>/checkpoints/<task>-<digest of the task's name and inputs>``. "The same execution"
   locally is the same task with the same inputs: the next such run resumes from what a preempted run (SIGTERM,
   Ctrl-C) saved. A run that ends any other way (it returned, or raised) removes the folder, so a run that was never
   preempted starts from scratch, as it always did.

The layout of a place (a folder or a blob prefix): ``pytorch-checkpoint-<step>.pt`` (``torch.save`` of
``{"format": 1, "step": ..., "state": {...}}``) and ``pytorch-checkpoint.json``, the manifest naming the latest one.
Both are written whole or not at all (a temporary name, then a rename; one object per write in a blob store), the
payload first: a save cut short (SIGKILL at the end of the termination grace) leaves the previous manifest, so the
last complete checkpoint stands. The payload before the latest is removed once the manifest names the new one.

flytekit's ``current_context().checkpoint`` (``read()``/``write()``/``save()``/``restore()``) keeps working as it did;
the two APIs write different files, so a loop uses one of them.

Neither torch nor a Flyte SDK is imported at module level.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from pytorch_core import _checkpoints, preemption, progress
from pytorch_core._checkpoints import CHECKPOINT_DIR_ENV, CheckpointError

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError", "CHECKPOINT_DIR_ENV"]


def save_checkpoint(state: MutableMapping[str, Any], step: int) -> None:
    """Save a checkpoint of ``state`` after ``step`` steps; call it on every rank (global rank 0 writes).

    It is also a step boundary: when the ranks stop for a preemption at this step, this is the save, and the call
    then stops the rank (``preemption.py``).

    Args:
        state: names to what to save: objects with ``state_dict()``/``load_state_dict()`` (modules, optimizers,
            schedulers) are saved as their state dicts, other values as they are. The same mapping is saved at a
            preemption's agreed step.
        step: the steps done so far (the step a resumed run goes on from).

    Raises:
        TypeError: ``state`` is not a mapping of names, or ``step`` is not a whole number.
        ValueError: ``step`` is negative.
    """
    registered = _checkpoints.register(state, "save_checkpoint")
    value = _checkpoints.check_step(step)
    preemption.arm()
    if _checkpoints.is_rank_zero() and not preemption.stopping():
        _checkpoints.write_checkpoint(registered, value)
    progress.note_step(value)
    preemption.boundary(value)


def load_checkpoint(state: MutableMapping[str, Any]) -> int:
    """Restore ``state`` from this task's latest checkpoint, on every rank; return the step to go on from.

    Args:
        state: the names :func:`save_checkpoint` saved: objects with ``load_state_dict()`` are restored in place,
            other values are put back into the mapping. Remembered as what a preemption saves.

    Returns:
        int: the step of the checkpoint (the steps already done), or 0 when there is none.

    Raises:
        TypeError: ``state`` is not a mapping of names.
        CheckpointError: the checkpoint cannot be read, or does not hold a name of ``state`` (a checkpoint of
            another loop: the message names the place to remove to start over).
    """
    registered = _checkpoints.register(state, "load_checkpoint")
    preemption.arm()
    step = _checkpoints.restore(registered)
    progress.note_step(step)
    return step
