"""What happens when a ``pytorch`` task executes: local multi-process launch and cluster-side rank handling.

``run_distributed(task, kwargs)`` is called by the task classes' ``execute``. It is a short composition of four
modules, one job each:

=====================  ==========================================================================================
``_plan.py``           pure: config + environment -> :class:`LaunchPlan` (where the task runs, how many ranks)
``_processes.py``      start the ranks (torch's elastic agent, fork server), stop them on a signal, no orphans
``_failure.py``        pure: what the ranks reported -> the root-cause rank and the exception the task raises
``_control.py``        the files a rank writes and the launcher reads (with ``_rank.py``, the rank side, and
                       ``_context.py``, the Flyte context carried into each rank, whose checkpoint resumes after a
                       restart within the attempt)
``_hang.py``           in each rank: naming the rank that did not arrive through the group's store (pods share no
                       folder), and ``progress_timeout``
``_preflight.py``      in each rank, before the task's code: master address, ``/dev/shm``, one all-reduce
``progress.py``        ``report_progress``: in each rank the step boundary; global rank 0 hands its snapshots to
                       the launcher, whose thread (``_progress_follow.py``) shows them
``preemption.py``      in each rank: on SIGTERM or Ctrl-C every rank stops after one agreed step (through the
                       group's store) and rank 0 saves through ``checkpoint.py`` (``save_checkpoint``,
                       ``load_checkpoint``); the launcher ends such a run as preempted (:func:`_preempted`)
=====================  ==========================================================================================

Where it runs (see ``_plan.py``): locally as real ranks on this machine; in-process with world size 1
(``FLYTE_PYTORCH_INPROCESS=1``); in a PyTorchJob pod, directly in the pod process or as ``nproc_per_node`` ranks.

Only global rank 0 returns the function's value (and its Decks); on a cluster, every other rank and every pod that
does not hold rank 0 ends with flytekit's ``IgnoreOutputs``, so exactly one ``outputs.pb`` is written.

A failed rank fails the task with the **earliest** failing rank's exception, of its own type when it can be rebuilt
here (else a :class:`RankFailure` naming the type), with a message ``rank 2 (of 3) failed: ValueError: boom``
followed by that rank's traceback.
Errors that are consequences of a lost peer (gloo/NCCL connection errors, collective timeouts) only win when no rank
failed for its own reason. ``FlyteRecoverableException`` stays recoverable so Flyte retries the task. Locally, the
headline is also written to stderr as one unwrapped line (``pytorch task failed: rank 2 (of 3) failed: ...``) before
flytekit prints the failure, and a task that asks for GPUs on a machine without CUDA says once that it runs on CPU.

Environment variables read here:

- ``FLYTE_PYTORCH_INPROCESS=1``: in-process mode (above).
- ``FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE=N``: cap the local world size (nodes are reduced first, then processes per
  node); one log line says so when the declared size is larger.
- ``FLYTE_PYTORCH_COLLECTIVE_TIMEOUT=SECONDS``: timeout of ``init_process_group`` calls without one (see
  :func:`pytorch_core._rank.default_collective_timeout`; unset, torch's own default applies).
- ``FLYTE_PYTORCH_LOCAL_THREADS=N``: intra-op threads per local rank instead of ``max(1, cpus // local ranks)``.
- ``FLYTE_PYTORCH_PROGRESS_LINE``, ``FLYTE_PYTORCH_PROGRESS_LOG_S``, ``FLYTE_PYTORCH_PROGRESS_INTERVAL_S``: how global
  rank 0's live progress is shown (``_progress_follow.py``).
- ``FLYTE_PYTORCH_TERMINATION_GRACE_S``: seconds from a SIGTERM to the SIGKILL (locally also the agent's own wait,
  5 s by default; in a pod, 30 s unless set): what a preemption's stop and save must fit in (``preemption.py``).
- ``FLYTE_PYTORCH_CHECKPOINT_DIR``: where ``save_checkpoint`` writes; a local run that does not set it gets a folder
  of its execution (the task's name and inputs), removed when the run ends without a preemption (``checkpoint.py``).

torch is imported lazily; this module imports without torch.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, Optional, Protocol

from pytorch_contract.install import install_hint
from pytorch_contract.preemption import FILE_NAME as PREEMPTION_FILE
from pytorch_contract.preemption import PREEMPTED_EXIT_CODE, TERMINATION_GRACE_ENV, PreemptionRecord
from pytorch_contract.preemption import parse_record as parse_preemption_record
from pytorch_core import _checkpoints, preemption, progress
from pytorch_core._checkpoints import CHECKPOINT_DIR_ENV, local_checkpoint_dir, remove_local_checkpoints
from pytorch_core._control import dumps
from pytorch_core._failure import (
    HangError,
    RankFailedError,
    RankFailure,
    RankOutcomes,
    find_root_cause,
    is_collateral,
    to_exception,
)
from pytorch_core._hang import mark_done, mark_failed, name_culprit, pending_error
from pytorch_core._nested import NestedLaunchError, refuse_nested_launch
from pytorch_core._plan import (
    INPROCESS_ENV,
    LOCAL_ADDR,
    LOCAL_MONITOR_INTERVAL_S,
    LOCAL_THREADS_ENV,
    MAX_LOCAL_WORLD_SIZE_ENV,
    ExecutionKind,
    LaunchPlan,
    TaskConfig,
    cluster_role,
    direct_view,
    indexed_pod_env,
    plan_launch,
    resolve_nproc,
)
from pytorch_core._preflight import run_preflight
from pytorch_core._processes import AgentResult, EnvPatch, free_port, local_grace_s, run_ranks
from pytorch_core._progress_follow import ProgressFollower
from pytorch_core._rank import COLLECTIVE_TIMEOUT_ENV, call_function, install_collective_timeout, preflight_timeout_s
from pytorch_core.frontend import FrontEnd, PreemptedError, current, using
from pytorch_core.preemption import Preempted

__all__ = [
    "run_distributed",
    "RankFailure",
    "RankFailedError",
    "NestedLaunchError",
    "ExecutionKind",
    "LaunchPlan",
    "plan_launch",
    "resolve_nproc",
    "cluster_role",
    "INPROCESS_ENV",
    "MAX_LOCAL_WORLD_SIZE_ENV",
    "LOCAL_THREADS_ENV",
    "COLLECTIVE_TIMEOUT_ENV",
    "LOCAL_MONITOR_INTERVAL_S",
]

logger = logging.getLogger(__name__)


class DistributedTask(Protocol):
    """What ``run_distributed`` needs of a task: ``PyTorchFunctionTask`` and ``ElasticPyTorchFunctionTask`` fit."""

    @property
    def task_config(self) -> TaskConfig: ...

    @property
    def name(self) -> str: ...

    @property
    def _task_function(self) -> Callable[..., Any]: ...


def run_distributed(task: DistributedTask, kwargs: dict[str, Any], frontend: FrontEnd | None = None) -> Any:
    """Execute a ``pytorch`` task: locally as real ranks, or as this replica's part of a PyTorchJob.

    Args:
        task: a ``pytorch`` task of either front-end (its ``task_config``, ``name`` and function are used).
        kwargs: the task's inputs as Python values.
        frontend: the Flyte SDK the task was defined with (`pytorch_core.frontend.FrontEnd`); default: the task's
            ``pytorch_frontend`` attribute, else the current one.

    Returns:
        Any: what the function returned on global rank 0.

    Raises:
        BaseException: a rank raised: an exception of its own type when it can be rebuilt and pickled here, else a
            :class:`RankFailure` carrying the type's name (a recoverable exception stays recoverable).
        RankFailedError: a rank died or did not arrive without raising an exception.
        BaseException: on a cluster, in every pod and rank that is not global rank 0, the front-end's
            ``ignore_outputs`` (flytekit's ``IgnoreOutputs``).
        ValueError: the launch settings (``nproc_per_node``, ``FLYTE_PYTORCH_*``, the operator's variables) are
            invalid.
        NestedLaunchError: this process is a rank (or the fork server) of another launch, typically because the
            task's module calls its workflow at import (see ``_nested.py``).
    """
    chosen = frontend if frontend is not None else getattr(task, "pytorch_frontend", None) or current()
    with using(chosen), EnvPatch(_pod_rank_env(chosen)):
        return _run(task, kwargs, chosen)


def _pod_rank_env(frontend: FrontEnd) -> dict[str, str]:
    """In a pod whose rank comes from its completion index (a JobSet pod), ``RANK`` and ``PET_NODE_RANK``, set for the
    launch so that the task and its ranks see what a PyTorchJob replica sees (``_plan.indexed_pod_env``); nothing
    locally or elsewhere."""
    return {} if frontend.is_local() else indexed_pod_env(os.environ)


def _run(task: DistributedTask, kwargs: dict[str, Any], frontend: FrontEnd) -> Any:
    refuse_nested_launch(task.name)
    require_torch(task.name)
    fn = task._task_function
    cuda_devices, cpu_count = _machine()
    try:
        plan = plan_launch(
            task.task_config, os.environ, local=frontend.is_local(), cuda_devices=cuda_devices, cpu_count=cpu_count
        )
        local = plan.kind in (ExecutionKind.LOCAL, ExecutionKind.IN_PROCESS)
        follower = ProgressFollower(frontend, task, local=local, env=os.environ)
    except ValueError as bad:
        # A FLYTE_PYTORCH_* variable (or a launch setting) that is not valid: locally, its one line comes first,
        # before the SDK prints the traceback around it.
        if frontend.is_local():
            say_headline(str(bad))
        raise
    if plan.kind is ExecutionKind.LOCAL and plan.world_size < plan.declared_world_size:
        logger.warning(
            "%s: running %d local ranks instead of the declared %d (%s=%s)",
            task.name,
            plan.world_size,
            plan.declared_world_size,
            MAX_LOCAL_WORLD_SIZE_ENV,
            os.environ.get(MAX_LOCAL_WORLD_SIZE_ENV),
        )
    if local and cuda_devices == 0:
        _say_cpu_fallback(task)
    if plan.kind is ExecutionKind.CLUSTER_DIRECT:
        return _run_direct(fn, kwargs, plan, follower)
    if not local:
        return _outcome(run_ranks(fn, kwargs, plan, follower=follower), plan)
    plan, folder = _local_checkpoints(task.name, kwargs, plan)
    try:
        if plan.kind is ExecutionKind.IN_PROCESS:
            value = _run_in_process(fn, kwargs, plan, follower)
        else:
            value = _outcome(run_ranks(fn, kwargs, plan, follower=follower), plan)
    except (PreemptedError, KeyboardInterrupt, SystemExit):
        raise  # stopped by a signal: the next run of this execution resumes from the folder
    except BaseException:
        if folder is not None:
            remove_local_checkpoints(folder)
        raise
    if folder is not None:
        remove_local_checkpoints(folder)
    return value


def _local_checkpoints(name: str, kwargs: dict[str, Any], plan: LaunchPlan) -> tuple[LaunchPlan, Optional[str]]:
    """A local run's checkpoint folder and termination grace, given to its ranks (``checkpoint.py``,
    ``preemption.py``).

    Returns:
        tuple[LaunchPlan, Optional[str]]: the plan with both in ``rank_env``, and the folder when it is the
        launcher's own (``None`` when ``$FLYTE_PYTORCH_CHECKPOINT_DIR`` names one: the user's folder stays).
    """
    env = {TERMINATION_GRACE_ENV: f"{local_grace_s(os.environ):g}"}
    folder: Optional[str] = None
    if not os.environ.get(CHECKPOINT_DIR_ENV, "").strip():
        inputs = sorted(kwargs.items(), key=lambda item: item[0])  # in name order: an SDK may pass them in any
        try:
            digest = hashlib.sha256(dumps(inputs)).hexdigest()
        except Exception:  # noqa: BLE001 - inputs that do not pickle (an in-process run): their text names them
            digest = hashlib.sha256(repr(inputs).encode()).hexdigest()
        folder = local_checkpoint_dir(name, digest)
        env[CHECKPOINT_DIR_ENV] = folder
    return dataclasses.replace(plan, rank_env={**plan.rank_env, **env}), folder


def _call_reporting(fn: Callable[..., Any], kwargs: dict[str, Any], follower: ProgressFollower) -> Any:
    """Run ``fn`` in this process with live progress: global rank 0 hands its snapshots straight to ``follower``
    (``progress.py``), which shows them in its thread until the function ended."""
    progress.start_rank()
    _checkpoints.reset()
    preemption.start()
    if progress.in_rank_zero():
        progress.start_reporting(follower.offer)
    follower.start()
    failed = True
    try:
        value = call_function(fn, kwargs)
        stopped = preemption.outcome()  # it returned because preemption_requested() said so
        if stopped is not None:
            raise stopped
        progress.finish_reporting()
        failed = False
        return value
    finally:
        preemption.end()
        progress.stop_reporting()
        progress.end_rank()
        follower.stop(failed=failed)


#: What starts the line :func:`say_headline` writes.
HEADLINE_PREFIX = "pytorch task failed: "

#: Tasks already told that their GPU request runs on CPU here (the notice is said once per task and process).
_CPU_FALLBACK_SAID: set[str] = set()


def gpu_request(task: Any) -> str | None:
    """What in ``task`` asks for GPUs, in the words the user wrote it, or ``None``.

    Args:
        task: a ``pytorch`` task (its ``task_config`` and, where flytekit has them, ``resources`` and
            ``accelerator``).

    Returns:
        str | None: e.g. ``"worker.limits.gpu=1"``, ``"accelerator='nvidia-tesla-a100'"``, ``"nproc_per_node='gpu'"``;
        ``None`` when nothing asks for a GPU.
    """
    config = task.task_config
    places: list[tuple[str, Any]] = [("", getattr(task, "resources", None))]
    for role in ("master", "worker"):
        places.append((f"{role}.", getattr(config, role, None)))
    for prefix, holder in places:
        for kind in ("requests", "limits"):
            amount = getattr(getattr(holder, kind, None), "gpu", None)
            if amount not in (None, 0, "0"):
                return f"{prefix}{kind}.gpu={amount}"
    accelerator = getattr(config, "accelerator", None) or getattr(task, "accelerator", None)
    if accelerator is not None:
        name = getattr(accelerator, "device", accelerator)
        return f"accelerator={name!r}"
    if str(getattr(config, "nproc_per_node", "")).lower() == "gpu":
        return "nproc_per_node='gpu'"
    return None


def _say_cpu_fallback(task: DistributedTask) -> None:
    """One line on stderr, once per task: it asks for GPUs, this machine has none, so its ranks run on CPU."""
    if task.name in _CPU_FALLBACK_SAID:
        return
    asked = gpu_request(task)
    if asked is None:
        return
    _CPU_FALLBACK_SAID.add(task.name)
    logger.warning(
        "%s asks for GPUs (%s) but this machine has no CUDA device: its local ranks run on CPU "
        "(torch.cuda.is_available() is False in them; on the cluster the request applies)",
        task.name,
        asked,
    )


class TorchMissingError(ModuleNotFoundError):
    """torch is not installed where a ``pytorch`` task runs (defining and registering one needs no torch)."""


def torch_requirement() -> str:
    """The torch pin of this package's ``[torch]`` extra (``torch==2.13.0``), read from the installed metadata;
    ``torch`` when the package is not installed (a source checkout on ``PYTHONPATH``)."""
    from importlib import metadata

    try:
        requires = metadata.requires("flytekitplugins-pytorch") or []
    except metadata.PackageNotFoundError:
        requires = []
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        if re.match(r"torch\b(?![-_.\w])", spec.strip()) and "torch" in marker:
            return spec.strip().replace(" ", "")
    return "torch"


def require_torch(task_name: str) -> None:
    """Fail in one line, naming torch and the install command, when torch cannot be imported.

    Args:
        task_name: the task, for the message.

    Raises:
        TorchMissingError: torch is not installed (or its import is blocked).
    """
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise TorchMissingError(
            f"{task_name} runs torch.distributed, but torch is not installed in this Python ({sys.executable}): "
            f"pip install '{torch_requirement()}' (or {install_hint('torch')})",
            name="torch",
        )


def _machine() -> tuple[int, int]:
    """(visible CUDA devices, usable CPUs), without initialising CUDA in this process where NVML can count.

    ``torch.cuda.device_count()`` asks NVML, which leaves the process safe to fork (0 without a CUDA build);
    ``torch.cuda.is_available()`` would initialise the CUDA driver, and ranks forked from this process could then not
    use CUDA (see ``_forkserver.py``).
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        import torch

        cuda = torch.cuda.device_count()
    except ImportError:
        cuda = 0
    return cuda, cpus


def _run_in_process(
    fn: Callable[..., Any], kwargs: dict[str, Any], plan: LaunchPlan, follower: ProgressFollower
) -> Any:
    """World size 1 in the task process, with the variables a rank sees; the environment is restored afterwards."""
    env = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "GROUP_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": LOCAL_ADDR,
        "MASTER_PORT": str(free_port()),
        "PET_MASTER_ADDR": LOCAL_ADDR,
        **plan.rank_env,
    }
    env["PET_MASTER_PORT"] = env["MASTER_PORT"]
    with EnvPatch(env), _resumable_checkpoint():
        restore = install_collective_timeout(
            plan.collective_timeout_s, retry_hangs=plan.retry_hangs, progress_timeout_s=plan.progress_timeout_s
        )
        try:
            return _call_reporting(fn, kwargs, follower)
        except Preempted as stop:
            # This process got the signal (it is the only rank): once saved, it ends as the signal ends it today.
            raise _preempted(stop.record, stop.where, plan, signal.Signals[stop.record.signal]) from None
        finally:
            restore()


def _run_direct(fn: Callable[..., Any], kwargs: dict[str, Any], plan: LaunchPlan, follower: ProgressFollower) -> Any:
    """A pod with one rank: the function runs in the pod process, under the operator's ``RANK``, with the per-node
    variables an agent would add (``_plan.direct_view``)."""
    rank = int(os.environ.get("RANK", "0"))
    with EnvPatch(direct_view(rank, int(os.environ.get("WORLD_SIZE", "1")))), _resumable_checkpoint():
        restore = install_collective_timeout(
            plan.collective_timeout_s, retry_hangs=plan.retry_hangs, progress_timeout_s=plan.progress_timeout_s
        )
        try:
            if plan.preflight:
                run_preflight(shm_size=plan.shm_size, join_timeout_s=preflight_timeout_s(plan.collective_timeout_s))
            value = _call_reporting(fn, kwargs, follower)
            mark_done()
        except Preempted as stop:
            raise _preempted(stop.record, stop.where, plan, None) from None
        except BaseException as raised:
            exc = pending_error(raised)
            collateral = is_collateral(exc)
            if isinstance(exc, HangError) or not collateral:
                mark_failed(exc)  # a peer waiting for this rank names it with this type, not as a hang
            named = name_culprit(exc) if collateral else None
            if named is not None:
                # Flyte's error document of this pod then leads with the rank that did not arrive (_hang.py).
                raise named from raised
            if exc is not raised:
                raise exc from raised
            raise
        finally:
            restore()
    if rank != 0:
        raise current().ignore_outputs(
            f"rank {os.environ.get('RANK')} of a PyTorchJob: only rank 0 writes the task outputs"
        )
    remove_recovered_errors()
    return value


def say_headline(headline: str) -> None:
    """Write a failed local launch's headline to stderr as one plain line, before anything else reports the failure.

    flytekit (``python file.py``, ``pyflyte run``) prints a failure as a rich traceback: dozens of boxed frames, then
    the exception's text wrapped at the console's width, often mid-path. The headline said here comes first and whole.

    Args:
        headline: the root cause's first line, e.g. ``rank 2 (of 3) failed: ValueError: boom``.
    """
    sys.stderr.write(f"{HEADLINE_PREFIX}{headline}\n")
    sys.stderr.flush()


def _outcome(result: AgentResult, plan: LaunchPlan) -> Any:
    """Return rank 0's value (success), or raise for the root-cause rank (failure) or for a preemption."""
    stop = _preemption_of(result, plan)
    if stop is not None:
        record, where = stop
        raise _preempted(record, where, plan, result.interrupted)
    if result.failed:
        outcomes = RankOutcomes(
            world_size=plan.world_size,
            ranks=plan.local_ranks,
            errors=result.record.errors,
            started=result.record.started,
            done=result.record.done,
            exit_codes=result.exit_codes,
            agent_error=result.agent_error,
            elapsed_s=result.elapsed_s,
            stacks=result.record.stacks,
        )
        cause = find_root_cause(outcomes)
        if plan.kind is ExecutionKind.LOCAL:
            say_headline(cause.headline)
        raise to_exception(cause, retry_hangs=plan.retry_hangs)
    rank0 = result.record.load_result()
    if rank0 is None:
        if plan.kind is ExecutionKind.LOCAL:
            raise RankFailedError("all ranks finished but rank 0 wrote no result; this is a launcher bug")
        raise current().ignore_outputs("global rank 0 runs in another pod: only it writes the task outputs")
    current().adopt(list(rank0.decks), rank0.value, rank0.metadata)
    if plan.kind is not ExecutionKind.LOCAL:
        remove_recovered_errors()
    return rank0.value


def _preemption_of(result: AgentResult, plan: LaunchPlan) -> Optional[tuple[PreemptionRecord, str]]:
    """The preemption the ranks stopped for, when they did: a rank wrote its record, and no rank failed for a reason
    of its own (a peer that lost a rank that left, or a rank killed at the end of the grace, are consequences).

    Returns:
        Optional[tuple[PreemptionRecord, str]]: the record (global rank 0's when it wrote one: it knows the
        checkpoint's step) and where the checkpoints are; ``None`` when this launch was not preempted.
    """
    marks = result.record.preempted
    if result.before_first_step and result.interrupted is not None:
        return _before_first_step(result.interrupted, plan), _checkpoint_folder(plan)
    if any(not error.collateral for error in result.record.errors):
        return None
    if not marks:
        if result.interrupted is None or not result.record.stopping:
            return None
        # The ranks were stopping when the grace ran out (a step longer than the grace): still not the task's error.
        unfinished = PreemptionRecord(
            stopped_at=None,
            checkpoint_step=None,
            signal=result.interrupted.name,
            rank=min(result.record.stopping),
            pod=os.environ.get("_F_WN") or os.environ.get("HOSTNAME") or os.uname().nodename,
            requested_at=time.time(),
            grace_s=local_grace_s(os.environ) if plan.kind is ExecutionKind.LOCAL else preemption.grace_s(),
        )
        return unfinished, ""
    if result.interrupted is None and not result.failed:
        return None  # a preemption that came too late to stop anyone: the ranks finished
    chosen = marks.get(0) or marks[min(marks)]
    try:
        record = parse_preemption_record(json.dumps({k: v for k, v in chosen.items() if k != "where"}))
    except ValueError:
        return None
    folder = _checkpoint_folder(plan)
    if not record.resume_known and folder:
        # Rank 0 never said what stands (it was killed mid-save, say): a folder on this machine says it.
        record = dataclasses.replace(record, resumes_from=_checkpoints.folder_step(folder), resume_known=True)
    return record, str(chosen.get("where", "")) or folder


def _checkpoint_folder(plan: LaunchPlan) -> str:
    """The checkpoint folder on this machine (a local run's, or ``$FLYTE_PYTORCH_CHECKPOINT_DIR``), or ``""``: a pod's
    checkpoint prefix is not read here."""
    return plan.rank_env.get(CHECKPOINT_DIR_ENV) or os.environ.get(CHECKPOINT_DIR_ENV, "").strip()


def _before_first_step(interrupted: signal.Signals, plan: LaunchPlan) -> PreemptionRecord:
    """The record of a launch whose launcher got a signal before any rank reported a step: nothing was saved at the
    stop, and the next run starts where the checkpoint place says (read where it is a folder on this machine: a
    local run's, or ``$FLYTE_PYTORCH_CHECKPOINT_DIR``; a pod's checkpoint prefix is not read, so its record cannot
    tell)."""
    local = plan.kind is ExecutionKind.LOCAL
    folder = _checkpoint_folder(plan)
    known = bool(folder)
    return PreemptionRecord(
        stopped_at=None,
        checkpoint_step=None,
        signal=interrupted.name,
        rank=min(plan.local_ranks) if plan.local_ranks else 0,
        pod=os.environ.get("_F_WN") or os.environ.get("HOSTNAME") or os.uname().nodename,
        requested_at=time.time(),
        grace_s=local_grace_s(os.environ) if local else preemption.grace_s(),
        by="launcher",
        before_first_step=True,
        resumes_from=_checkpoints.folder_step(folder) if known else None,
        resume_known=known,
    )


def _preempted(
    record: PreemptionRecord, where: str, plan: LaunchPlan, interrupted: Optional[signal.Signals]
) -> BaseException:
    """The end of a launch whose ranks stopped for a preemption.

    Locally: one line on stderr saying where the next run resumes from; a launcher that got the signal itself then
    lets the signal's previous handler act, as it did before (SIGTERM ends the process, Ctrl-C raises
    ``KeyboardInterrupt``); otherwise the front-end's preempted error. In a pod: the record beside the outputs, the
    container's exit code :data:`PREEMPTED_EXIT_CODE` once the SDK has written its error document, and the
    front-end's preempted error (a recoverable error of system origin).

    Returns:
        BaseException: what the task raises.
    """
    local = plan.kind in (ExecutionKind.LOCAL, ExecutionKind.IN_PROCESS)
    message = preemption.error_message(record, where, local=local)
    if local:
        sys.stderr.write(f"pytorch task {message}\n")
        sys.stderr.flush()
        if interrupted is not None:
            signal.raise_signal(interrupted)
            return RankFailedError(f"the launch was stopped by {interrupted.name}; the ranks were stopped")
        return current().preempted(message)
    try:
        current().write_output_file(PREEMPTION_FILE, record.to_json())
    except Exception as exc:  # noqa: BLE001 - the error document says it too
        logger.warning("could not write %s beside the outputs: %s", PREEMPTION_FILE, exc)
    exit_as_preempted()
    return current().preempted(message)


_EXIT_REGISTERED = False


def exit_as_preempted() -> None:
    """End this pod's process with :data:`PREEMPTED_EXIT_CODE` when it exits, whatever code the SDK's entrypoint
    exits with after it wrote its error document (flytekit's ``FLYTE_FAIL_ON_ERROR`` exits 1, Flyte 2's runtime 0).
    Registered once, in a pod only: the training operator's ``ExitCode`` policy restarts the pod for it."""
    global _EXIT_REGISTERED
    if _EXIT_REGISTERED:
        return
    _EXIT_REGISTERED = True

    def exit_now() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(PREEMPTED_EXIT_CODE)

    atexit.register(exit_now)


def _resumable_checkpoint() -> contextlib.AbstractContextManager[None]:
    """For a function run in this process: its checkpoint reads this attempt's own checkpoint when a restarted run
    of the attempt wrote one (the front-end's ``resumable_checkpoint``), for the call only."""
    return current().resumable_checkpoint()


def remove_recovered_errors() -> None:
    """Delete the error documents a restarted run of this attempt left in its output prefix when its global rank 0
    succeeded (the front-end's ``remove_recovered_errors``; best effort)."""
    current().remove_recovered_errors()
