"""The launcher end to end: in-process mode, real local multi-process runs, simulated pods (planning: test_plan.py)."""

from __future__ import annotations

import datetime
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from flytekit.core.base_task import IgnoreOutputs
from flytekit.core.checkpointer import SyncCheckpoint
from flytekit.core.context_manager import ExecutionParameters, ExecutionState, FlyteContextManager
from flytekit.exceptions.user import FlyteRecoverableException
from flytekit.models.core.identifier import WorkflowExecutionIdentifier

from flytekitplugins_pytorch import PyTorch
from pytorch_core import _processes, launcher
from pytorch_core.launcher import RankFailure
from tests.faults.drills_local import descendants, is_multiprocessing_helper
from tests.sdk import local_tasks

REPO_ROOT = Path(__file__).resolve().parents[2]


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _living_children() -> list[int]:
    """Descendants of this test process, without multiprocessing's shared resource tracker (it exits with us)."""
    out = []
    for pid in descendants(os.getpid()):
        # multiprocessing's resource tracker and fork server are per-parent helpers that exit with the parent (the
        # server is kept so later launches start ranks in under a second); any rank it forked is still counted.
        if not is_multiprocessing_helper(pid):
            out.append(pid)
    return out


LAUNCHER_MODULES = (
    "pytorch_core.launcher",
    "pytorch_core._plan",
    "pytorch_core._processes",
    "pytorch_core._failure",
    "pytorch_core._control",
    "flytekitplugins_pytorch._context",
    "pytorch_core._rank",
)


def test_launcher_modules_import_without_torch() -> None:
    imports = "; ".join(f"import {name}" for name in LAUNCHER_MODULES)
    code = f"import sys; sys.modules['torch'] = None; {imports}; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip() == "ok"


# ---------------------------------------------------------------- in-process (fast) ---------------------------------


def test_in_process_mode_runs_world_size_1_and_restores_the_environment(monkeypatch) -> None:
    import torch  # noqa: F401 - importing torch sets KMP_INIT_AT_FORK; that is torch's doing, not the launcher's

    monkeypatch.setenv("FLYTE_PYTORCH_INPROCESS", "1")
    before = dict(os.environ)
    assert tuple(local_tasks.all_reduce_task(base=2.5)) == (0, 1, 2.5)
    assert dict(os.environ) == before


# ---------------------------------------------------------------- real local runs (slow) ----------------------------


@pytest.mark.slow
def test_three_ranks_all_reduce_through_a_workflow() -> None:
    import torch  # noqa: F401 - importing torch sets KMP_INIT_AT_FORK; that is torch's doing, not the launcher's

    env_before = dict(os.environ)
    handlers_before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    rank, world, total = local_tasks.all_reduce_wf(base=1.0)
    assert (rank, world, total) == (0, 3, 1.0 + 2.0 + 3.0)
    assert dict(os.environ) == env_before
    assert {sig: signal.getsignal(sig) for sig in handlers_before} == handlers_before
    assert _living_children() == []


@pytest.mark.slow
def test_each_rank_sees_the_operator_variables() -> None:
    views = local_tasks.env_task()
    assert [view["RANK"] for view in views] == ["0", "1", "2", "3"]
    assert [view["PET_NODE_RANK"] for view in views] == ["0", "0", "1", "1"]
    for view in views:
        assert view["WORLD_SIZE"] == "4" and view["PET_NNODES"] == "2" and view["PET_NPROC_PER_NODE"] == "2"
        assert view["MASTER_ADDR"] == view["PET_MASTER_ADDR"] == "127.0.0.1"
        assert view["MASTER_PORT"] == view["PET_MASTER_PORT"] != ""
        assert view["OMP_NUM_THREADS"] == view["torch_threads"] == str(max(1, (os.cpu_count() or 1) // 4))
        assert view["timeout_default_installed"] == "True"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recoverable", "expected_type", "text"),
    [
        pytest.param(False, ValueError, "rank 2 (of 3) failed: ValueError: boom on rank 2", id="value-error"),
        pytest.param(
            True, FlyteRecoverableException, "rank 2 (of 3) failed: FlyteRecoverableException", id="recoverable"
        ),
    ],
)
def test_a_failing_rank_is_reported_by_number_type_and_traceback(recoverable, expected_type, text) -> None:
    with pytest.raises(expected_type) as info:
        local_tasks.failing_task(bad_rank=2, recoverable=recoverable)
    message = str(info.value)
    assert type(info.value) is expected_type and info.value.rank == 2
    assert not isinstance(info.value, RankFailure)  # the rank's own type, rebuilt: no hidden subclass
    assert text in message
    assert "--- traceback of rank 2 ---" in message and "local_tasks.py" in message
    assert _living_children() == []


@pytest.mark.slow
def test_elastic_min_nodes_above_one_runs_locally_without_waiting() -> None:
    world, nnodes = local_tasks.elastic_task()
    assert (world, nnodes) == (2, "2:3")


@pytest.mark.slow
def test_local_world_size_cap_logs_one_line(monkeypatch, caplog) -> None:
    monkeypatch.setenv("FLYTE_PYTORCH_MAX_LOCAL_WORLD_SIZE", "2")
    with caplog.at_level(logging.WARNING, logger=launcher.__name__):
        assert local_tasks.world_size_task() == 2
    lines = [r.getMessage() for r in caplog.records if r.name == launcher.__name__]
    assert len(lines) == 1 and "2 local ranks instead of the declared 4" in lines[0]


def test_gpu_request_without_a_gpu_says_once_that_it_runs_on_cpu(monkeypatch, caplog) -> None:
    monkeypatch.setenv("FLYTE_PYTORCH_INPROCESS", "1")
    monkeypatch.setattr(launcher, "_machine", lambda: (0, 2))
    monkeypatch.setattr(launcher, "_CPU_FALLBACK_SAID", set())
    with caplog.at_level(logging.WARNING, logger=launcher.__name__):
        assert local_tasks.gpu_task() == 0
        assert local_tasks.gpu_task() == 0
        assert local_tasks.world_size_task() == 1
    lines = [r.getMessage() for r in caplog.records if r.name == launcher.__name__]
    assert len(lines) == 1, lines
    assert "gpu_task asks for GPUs (master.limits.gpu=1)" in lines[0] and "run on CPU" in lines[0]


def test_gpu_request_with_a_gpu_says_nothing(monkeypatch, caplog) -> None:
    monkeypatch.setenv("FLYTE_PYTORCH_INPROCESS", "1")
    monkeypatch.setattr(launcher, "_machine", lambda: (1, 2))
    monkeypatch.setattr(launcher, "_CPU_FALLBACK_SAID", set())
    with caplog.at_level(logging.WARNING, logger=launcher.__name__):
        local_tasks.gpu_task()
    assert [r for r in caplog.records if r.name == launcher.__name__] == []


@pytest.mark.skipif(_has_cuda(), reason="the refusal is for machines without CUDA")
@pytest.mark.parametrize("backend", ["nccl", "NCCL"])
def test_nccl_without_cuda_is_refused_with_one_line_naming_gloo(monkeypatch, backend) -> None:
    import torch.distributed as dist

    monkeypatch.setenv("FLYTE_PYTORCH_INPROCESS", "1")
    with pytest.raises(ValueError) as info:
        local_tasks.nccl_task()
    assert "Distributed package doesn't have NCCL" not in str(info.value)
    # The refusal needs no group: the wrapper refuses before torch is asked.
    assert not dist.is_initialized()
    with pytest.raises(ValueError) as direct:
        restore = launcher.install_collective_timeout(None)
        try:
            dist.init_process_group(backend, rank=0, world_size=1, store=dist.HashStore())
        finally:
            restore()
    text = str(direct.value)
    assert "\n" not in text and f"backend={backend!r}" in text and "use backend='gloo' to run locally" in text
    assert "backend=None" in text


@pytest.mark.slow
@pytest.mark.skipif(_has_cuda(), reason="the refusal is for machines without CUDA")
def test_nccl_without_cuda_names_gloo_in_the_headline_of_a_local_launch() -> None:
    with pytest.raises(ValueError) as info:
        local_tasks.nccl_task()
    headline = next(line for line in str(info.value).splitlines() if "(of 3) failed" in line).strip()
    assert re.match(r"rank \d \(of 3\) failed: ValueError: init_process_group\(backend='nccl'\) needs CUDA", headline)
    assert "use backend='gloo' to run locally" in headline
    assert "Distributed package doesn't have NCCL" not in str(info.value)
    assert _living_children() == []


@pytest.mark.slow
def test_a_failed_script_says_its_headline_first_on_one_line_without_torch_agent_lines() -> None:
    script = (
        "from tests.sdk import local_tasks\n"
        "if __name__ == '__main__':\n"
        "    local_tasks.failing_task(bad_rank=2, recoverable=False)\n"
    )
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120
    )
    assert out.returncode != 0
    ours = [line for line in out.stderr.splitlines() if not line.startswith("[rank ")]
    assert ours[0] == f"{launcher.HEADLINE_PREFIX}rank 2 (of 3) failed: ValueError: boom on rank 2", out.stderr
    assert "Terminating process" not in out.stderr
    assert _living_children() == []


def test_torch_agent_terminating_lines_are_quiet_during_a_local_launch() -> None:
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    with _processes._quiet_torch_logs(True):
        assert not spawn_log.isEnabledFor(logging.WARNING)
        assert spawn_log.isEnabledFor(logging.ERROR)
    with _processes._quiet_torch_logs(False):
        assert spawn_log.isEnabledFor(logging.WARNING)


def _task_context(dest: Path, src: Path | None, workdir: Path):
    params = ExecutionParameters(
        execution_date=datetime.datetime.now(datetime.timezone.utc),
        tmp_dir=str(workdir),
        stats=None,
        execution_id=WorkflowExecutionIdentifier("project", "domain", "local-run"),
        logging=logging.getLogger("user"),
        raw_output_prefix=str(workdir / "raw"),
        checkpoint=SyncCheckpoint(checkpoint_dest=str(dest), checkpoint_src=str(src) if src else None),
        decks=[],
        enable_deck=True,
    )
    ctx = FlyteContextManager.current_context()
    state = ExecutionState(
        working_dir=str(workdir), mode=ExecutionState.Mode.LOCAL_TASK_EXECUTION, user_space_params=params
    )
    return ctx.with_execution_state(state), params


@pytest.mark.slow
def test_checkpoint_resume_decks_and_file_outputs_from_rank_0(tmp_path) -> None:
    """Two attempts with flytekit's retry wiring: attempt 2 reads attempt 1's checkpoint as its previous one."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    first, second = tmp_path / "cp1", tmp_path / "cp2"
    done = []
    for dest, src in ((first, None), (second, first)):
        builder, params = _task_context(dest, src, workdir)
        with FlyteContextManager.with_context(builder):
            epochs, weights = launcher.run_distributed(local_tasks.context_task, {"epochs": 2})
        done.append(epochs)
        assert Path(weights.path).read_text() == f"weights after {epochs} epochs"
        assert [deck.name for deck in params.decks] == ["rank0-report"]
        assert f"epochs done: {epochs}" in params.decks[0].html
    assert done == [2, 4]


# ---------------------------------------------------------------- the real CLI and cluster replicas (slow) ---------

WORKFLOW_FILE = """
import os
from flytekit import workflow
from flytekitplugins_pytorch import pytorch_task


@pytorch_task(workers_count=1, enable_deck=True)
def hello(n: int) -> str:
    import sys

    import torch
    import torch.distributed as dist

    print("user print from", os.environ["RANK"])
    print("user stderr from", os.environ["RANK"], file=sys.stderr)
    dist.init_process_group("gloo")
    t = torch.tensor([float(n)])
    dist.all_reduce(t)
    return f"rank {dist.get_rank()} of {dist.get_world_size()} says {t.item():.0f}"


@workflow
def wf(n: int = 3) -> str:
    return hello(n=n)
"""


@pytest.mark.slow
def test_pyflyte_run_of_a_workflow_file(tmp_path) -> None:
    script = tmp_path / "hello_wf.py"
    script.write_text(textwrap.dedent(WORKFLOW_FILE))
    pyflyte = Path(sys.executable).with_name("pyflyte")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run(
        [str(pyflyte), "run", str(script), "wf", "--n", "3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "rank 0 of 2 says 6" in out.stdout
    # Every line a rank prints carries its rank; the launcher's own lines do not.
    for rank in (0, 1):
        assert f"[rank {rank}] user print from {rank}\n" in out.stdout
        assert f"[rank {rank}] user stderr from {rank}\n" in out.stderr
    assert "rank 0 of 2 says 6" in [line for line in out.stdout.splitlines() if not line.startswith("[rank")][-1]
    # The Deck's path is printed at the end of the local run, and the file is there.
    deck = re.search(r"Deck of hello_wf\.hello: file://(\S+)", out.stderr)
    assert deck is not None, out.stderr[-2000:]
    assert Path(deck.group(1)).is_file()


POD_SCRIPT = """
import sys
from flytekit.core.base_task import IgnoreOutputs
from pytorch_core.launcher import run_distributed
from tests.sdk.local_tasks import all_reduce_task

if __name__ == "__main__":
    try:
        print("RESULT", tuple(run_distributed(all_reduce_task, {"base": 1.0})))
    except IgnoreOutputs:
        print("RESULT ignore-outputs")
"""


@pytest.mark.slow
def test_two_simulated_pods_run_their_ranks_and_only_rank_0_returns() -> None:
    """Two processes with the variables the operator sets, rendezvousing on loopback like master and worker pods."""
    port = _processes.free_port()
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), RANK=str(rank), WORLD_SIZE="2")
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PET_NNODES="2", PET_NODE_RANK=str(rank))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", POD_SCRIPT], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
            )
        )
    results = [proc.communicate(timeout=180)[0] for proc in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert "RESULT (0, 2, 3.0)" in results[0]
    assert "RESULT ignore-outputs" in results[1]


def test_a_non_zero_pod_rank_ignores_outputs(monkeypatch) -> None:
    """nproc_per_node=1 pod with RANK=1: the function runs in the pod process, then IgnoreOutputs (no peer runs
    here, so no preflight: it would wait for rank 0)."""
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    calls = []
    config = PyTorch(preflight=False)
    task = SimpleNamespace(task_config=config, _task_function=lambda x: calls.append(x) or x, name="t")
    with pytest.raises(IgnoreOutputs):
        launcher.run_distributed(task, {"x": 7})
    assert calls == [7]


def test_import_roots_name_the_package_root_pyflyte_run_removed_from_sys_path(tmp_path, monkeypatch) -> None:
    """`pyflyte run pkgdir/wf.py` imports `pkg.wf` with the root on sys.path only during the import; ranks need it."""
    import importlib
    import sys

    from pytorch_core._processes import _import_roots

    pkg = tmp_path / "roots_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "wf.py").write_text("def train():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("roots_pkg.wf")
    assert _import_roots(module.train) == ()  # still on sys.path: nothing to forward
    sys.path.remove(str(tmp_path))  # what flytekit's module loader does after the import
    try:
        assert _import_roots(module.train) == (str(tmp_path.resolve()),)
    finally:
        sys.modules.pop("roots_pkg.wf", None)
        sys.modules.pop("roots_pkg", None)


@pytest.mark.slow
def test_a_rank_without_progress_stops_itself_and_is_named() -> None:
    from pytorch_core._failure import HangError

    started = time.monotonic()
    with pytest.raises(HangError) as info:
        local_tasks.stalls_task()
    took = time.monotonic() - started
    text = str(info.value)
    lead = "rank 1 (of 2) failed: HangError: rank 1 (of 2) on node 1 (pod "
    assert info.value.rank == 1 and lead in text, text
    assert "made no progress for 2s and was stopped by progress_timeout=2s" in text, text
    assert "in stalls_task, outside torch.distributed" in text, text
    assert took < 30  # far below the 60 s collective timeout
    assert _living_children() == []
