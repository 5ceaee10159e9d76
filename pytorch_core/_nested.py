"""No launch from inside a launch: the guard that keeps a module-level workflow call from multiplying processes.

Every rank imports the task's module again (to unpickle the task function, or as ``__mp_main__`` when the launcher
ran ``python file.py``), and the fork server imports it once to preload it. A module that calls its workflow at
import time (``wf()`` at module level, without ``if __name__ == "__main__":``) would then start a new launch in every
rank and in the fork server, each of which starts ranks that do the same: a fork bomb.

So the launching process marks everything it starts: :data:`LAUNCHER_PID_ENV` (the launcher's pid) is in the
environment of the fork server and of every rank, and :func:`refuse_nested_launch` (the first thing
``run_distributed`` does) raises :class:`NestedLaunchError` when

- the variable names another process (a rank, the fork server, or anything they started), or
- multiprocessing is still bootstrapping this process (``python file.py``: the rank imports ``__main__`` before it
  runs anything), or
- this process is the fork server preloading the task's module (:func:`preload_modules`).

While bootstrapping, nothing could report the error to the launcher (the rank does not yet know its control
directory), and letting it propagate prints multiprocessing's long "bootstrapping phase" traceback. The rank then
writes the one-line message to stderr and exits with :data:`NESTED_LAUNCH_EXIT_CODE`, which the failure analysis
(``_failure.py``) turns into the same message in the task's error headline.

Neither torch nor flytekit is imported here.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
from collections.abc import Mapping
from typing import Optional

#: Set in the environment of the fork server and every rank: the pid of the process that launched them.
LAUNCHER_PID_ENV = "FLYTE_PYTORCH_LAUNCHER_PID"
#: Modules the fork server imports through :func:`preload_modules` (comma-separated; set when the server starts).
PRELOAD_ENV = "FLYTE_PYTORCH_PRELOAD"
#: Exit code of a rank that refused a launch while multiprocessing was bootstrapping it (it never reached the task).
#: 86 is unused by Python, torch and the shells (1, 2, 126-165 and 255 are taken).
NESTED_LAUNCH_EXIT_CODE = 86

#: True while the fork server imports the task's module (see :func:`preload_modules`).
_preloading = False
#: In the fork server (and the ranks it forks, which inherit its memory): module -> the refusal its import met.
_refused_at_preload: dict[str, str] = {}
#: Refusals met during the current preload import.
_refusals: list[str] = []

HOW_TO_FIX = (
    'guard the call with `if __name__ == "__main__":` (or run the workflow with `pyflyte run file.py wf` and do not '
    "call it at import)"
)


class NestedLaunchError(Exception):
    """A ``pytorch`` task was launched from inside a rank (or the fork server) of another launch; refused.

    Deliberately not a ``RuntimeError``: the failure analysis must never take it for a lost-peer consequence.
    """


def nested_launch_reason(
    environ: Mapping[str, str], pid: int, *, bootstrapping: bool, preloading: bool
) -> Optional[str]:
    """Why a launch in this process would be nested, or ``None`` when it is a top-level launch. Pure.

    Args:
        environ: the process environment.
        pid: this process's id.
        bootstrapping: multiprocessing is still preparing this process (importing the parent's ``__main__``).
        preloading: this process is the fork server importing the task's module.

    Returns:
        Optional[str]: the full error message, or ``None``.
    """
    launcher = environ.get(LAUNCHER_PID_ENV, "")
    if preloading:
        where = "the fork server of a launch, while it imports the task's module"
    elif bootstrapping:
        where = "a rank process while it imports the script's __main__ module"
    elif launcher and launcher != str(pid):
        rank = environ.get("RANK")
        where = f"rank {rank} of a launch" if rank is not None else "a process started by a launch"
        where += f" (launcher pid {launcher})"
    else:
        return None
    return (
        f"a pytorch task was launched from inside {where}; refused, as it would start ranks without end. "
        "The module that defines the task calls the workflow when it is imported, and every rank imports that "
        f"module again: {HOW_TO_FIX}."
    )


def refuse_nested_launch(task_name: str) -> None:
    """Raise (or, while bootstrapping, exit) when a launch in this process would be nested.

    Args:
        task_name: the task, for the message.

    Raises:
        NestedLaunchError: this process is a rank, the fork server, or one of their descendants.
    """
    bootstrapping = bool(getattr(multiprocessing.current_process(), "_inheriting", False))
    reason = nested_launch_reason(os.environ, os.getpid(), bootstrapping=bootstrapping, preloading=_preloading)
    if reason is None:
        return
    message = f"{task_name}: {reason}"
    if _preloading:
        _refusals.append(message)
    if bootstrapping:
        # Nobody can receive an exception here; one line, then an exit code the launcher recognises.
        sys.stderr.write(f"NestedLaunchError: {message}\n")
        sys.stderr.flush()
        os._exit(NESTED_LAUNCH_EXIT_CODE)
    raise NestedLaunchError(message)


def preload_modules() -> None:
    """In the fork server: import the modules named by :data:`PRELOAD_ENV`, ignoring any that fail.

    multiprocessing's fork server survives only ``ImportError`` from a preloaded module; a task module whose
    import calls its workflow raises :class:`NestedLaunchError` instead, and any other import-time error would end
    the server too. Such a module is simply not preloaded: the ranks import it and report the error themselves, and
    a refused launch is remembered, so that every rank of a task from that module fails with it at once
    (:func:`raise_if_refused_at_preload`).
    """
    global _preloading
    _preloading = True
    try:
        for name in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):
            del _refusals[:]
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001, S110 - the rank imports it again and reports what fails
                pass
            if _refusals:
                _refused_at_preload[name] = _refusals[0]
    finally:
        _preloading = False


def raise_if_refused_at_preload(module: Optional[str]) -> None:
    """In a rank: fail when the fork server's import of the task's module attempted a launch.

    The function itself is usually pickled by value (``pyflyte run`` binds the module's name to the task object, not
    to the function), so the rank never imports the module and would run the task as if nothing were wrong, while
    the same module-level call started the launch this rank belongs to.

    Args:
        module: the task function's ``__module__``.

    Raises:
        NestedLaunchError: the module's import attempted a launch in the fork server.
    """
    message = _refused_at_preload.get(module or "")
    if message is not None:
        raise NestedLaunchError(message)
