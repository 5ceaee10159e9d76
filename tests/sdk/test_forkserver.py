"""The fork server forked from the launcher (``_forkserver.py``) and ``preload_modules``, in launches of a flytekit
workflow; the server's checks on plain data are in ``tests/core/test_forkserver.py``.

The launches run in fresh interpreters: whether the launcher may be forked depends on the process's history (an
OpenMP team, a fork server already running), which the test process must not carry into other tests.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from flytekitplugins_pytorch import Elastic, PyTorch, pytorch_task
from flytekitplugins_pytorch.config import ConfigError
from pytorch_core._forkserver import FRESH_FORKSERVER_ENV
from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]


# A fresh interpreter launches a 2-rank task (each rank reports its parent's pid and name, and whether a preloaded
# module is already there), optionally after a parallel torch op, and prints what it saw as JSON.
_PROBE = textwrap.dedent(
    """
    import json, multiprocessing.forkserver as mpf, os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.sdk.forkserver_tasks import report_wf
    if sys.argv[2] == "openmp":
        import torch
        torch.set_num_threads(2)
        a = torch.ones(1 << 20)
        (a * 2).sum()  # a parallel region in the launcher: GNU OpenMP's team now exists here
    print("printed once, before the first launch")  # stdout is a pipe here: block-buffered, not yet written
    first = report_wf()
    server = mpf._forkserver._forkserver_pid
    second = report_wf()
    # The whole process group's SIGTERM and SIGINT reach the server too: it lives on, and a process it forks next
    # starts with SIGTERM at its default action.
    import multiprocessing, signal, time
    from tests.sdk.forkserver_tasks import signals_at_start
    os.kill(server, signal.SIGTERM)
    os.kill(server, signal.SIGINT)
    time.sleep(0.5)
    state = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[0]
    ctx = multiprocessing.get_context("forkserver")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=signals_at_start, args=(send,))
    child.start()
    started = receive.recv()
    child.join()
    print(json.dumps({
        "server_state_after_signals": state,
        "same_server_after_signals": mpf._forkserver._forkserver_pid == server,
        "child": started,
        "launcher": os.getpid(),
        "launcher_cmdline": Path(f"/proc/{os.getpid()}/cmdline").read_bytes().decode(),
        "server": server,
        "server_comm": Path(f"/proc/{server}/comm").read_text().strip(),
        "server_cmdline": Path(f"/proc/{server}/cmdline").read_bytes().decode(),
        "first": first, "second": second,
    }))
    """
)


#: The probe's launcher, fork server, resource tracker and 2 ranks (plus the throwaway OpenMP check): a nested
#: launch would exceed this at once.
MAX_PROCS = 8


def _probe(mode: str, env_extra: dict[str, str] | None = None) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env.update(env_extra or {})
    cmd = [sys.executable, "-c", _PROBE, str(ROOT), mode]
    result = run_guarded(cmd, max_procs=MAX_PROCS, timeout_s=120, cwd=str(ROOT), env=env)
    assert result.killed_for == "", f"killed by the guard: {result.killed_for}\n{result.output[-3000:]}"
    assert result.returncode == 0, result.output[-3000:]
    assert result.leftover == [], f"still running after the launcher ended: {result.leftover}"
    # A forked process must not write the launcher's unwritten output again (every rank would, once per launch).
    lines = result.output.splitlines()
    assert lines.count("printed once, before the first launch") == 1, result.output[-3000:]
    return json.loads([line for line in lines if line.startswith('{"server_state')][-1])


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux") or sys.version_info >= (3, 14), reason="forks on Linux only")
def test_a_clean_launcher_is_forked_into_the_server_and_its_modules_are_shared() -> None:
    seen = _probe("clean")
    assert seen["server_comm"] == "pt-forkserver"
    assert seen["server_cmdline"] == seen["launcher_cmdline"]  # a fork: the same command line, not a new `python -c`
    for run in (seen["first"], seen["second"]):  # the second launch is served by the same server
        assert [r["parent"] for r in run] == [seen["server"]] * 2
        assert [r["name"] for r in run] == ["pt-rank-0", "pt-rank-1"]
        assert all(r["preloaded"] for r in run), run  # imported by the launcher, inherited by every rank
    _survives_group_signals(seen)


def _survives_group_signals(seen: dict) -> None:
    """The server outlived a SIGTERM and a SIGINT (a signal to the whole process group reaches it too), ignores
    SIGTERM, and the process it forked next started with SIGTERM at its default action and SIGINT not ignored."""
    assert seen["server_state_after_signals"] not in ("Z", "X"), seen
    assert seen["same_server_after_signals"], seen
    assert seen["child"] == {"sigterm_default": True, "sigint_ignored": False, "parent_ignores_sigterm": True}, seen


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["openmp", "opt-out"])
def test_a_launcher_that_cannot_be_forked_gets_a_fresh_server(mode: str) -> None:
    """After a parallel op a forked rank would hang in its first one; the opt-out asks for a fresh server."""
    seen = _probe("openmp" if mode == "openmp" else "clean", {FRESH_FORKSERVER_ENV: "1"} if mode == "opt-out" else {})
    assert "multiprocessing.forkserver" in seen["server_cmdline"]  # multiprocessing's own: python -c '...main(...)'
    assert seen["server_comm"] != "pt-forkserver"
    for run in (seen["first"], seen["second"]):
        assert [r["parent"] for r in run] == [seen["server"]] * 2
        assert all(r["preloaded"] for r in run), run  # a fresh server preloads preload_modules itself
    _survives_group_signals(seen)


def test_preload_modules_are_checked_at_decoration() -> None:
    assert PyTorch(preload_modules=["json", "torch._dynamo", "json"]).preload_modules == ("json", "torch._dynamo")
    assert Elastic(preload_modules=("json",)).preload_modules == ("json",)
    cases = [
        ("torch._dynamo", "one string, not a list"),
        (7, "not a list of module names (int)"),
        (["torch..dynamo"], "'torch..dynamo' is not a dotted module name"),
        (["ok", 3], "3 is not a dotted module name"),
        (["torch._dynamo\n"], "is not a dotted module name"),
    ]
    for value, says in cases:
        with pytest.raises(ConfigError, match="preload_modules") as info:
            pytorch_task(workers_count=1, preload_modules=value)
        assert says in str(info.value) and 'e.g. ["torch._dynamo"]' in str(info.value)
        assert info.value.field == "pytorch_task.preload_modules"  # the keyword as typed
