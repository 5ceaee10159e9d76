"""When the launcher may be forked into the fork server (``_forkserver.py``), and ``preload_modules`` imported in
the launcher (``_processes.py``); on plain data, no launch (the launches are in ``tests/sdk/test_forkserver.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytorch_core._forkserver import FRESH_FORKSERVER_ENV, fork_refusal, gpu_driver_loaded
from pytorch_core._processes import import_preloads
from pytorch_core.config import ConfigError

LINUX, SUPPORTED = "linux", (3, 11)


@pytest.mark.parametrize(
    ("environ", "platform", "version", "expected"),
    [
        pytest.param({}, LINUX, SUPPORTED, None, id="linux 3.11"),
        pytest.param({}, LINUX, (3, 10), None, id="oldest supported"),
        pytest.param({}, LINUX, (3, 13), None, id="newest supported"),
        pytest.param({FRESH_FORKSERVER_ENV: "1"}, LINUX, SUPPORTED, FRESH_FORKSERVER_ENV, id="opted out"),
        pytest.param({FRESH_FORKSERVER_ENV: "0"}, LINUX, SUPPORTED, None, id="opt-out off"),
        pytest.param({}, "darwin", SUPPORTED, "not safe on darwin", id="macOS"),
        pytest.param({}, LINUX, (3, 14), "Python 3.14", id="3.14 authenticates its clients"),
    ],
)
def test_fork_refusal(environ, platform, version, expected) -> None:
    reason = fork_refusal(environ, platform=platform, version=version)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


_MAPS = """\
7f1c2a000000-7f1c2a200000 r-xp 00000000 fe:00 123 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2b000000-7f1c2b100000 r-xp 00000000 fe:00 456 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.104.05
7f1c2c000000-7f1c2c100000 r-xp 00000000 fe:00 789 /opt/venv/lib/python3.11/site-packages/torch/lib/libcudart.so.12
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 [stack]
"""


def test_a_loaded_gpu_driver_is_found_in_the_maps() -> None:
    # NVML and the CUDA runtime library alone (torch imported, devices counted through NVML) are safe to fork.
    assert gpu_driver_loaded(_MAPS) is None
    driver = "7f1c2d000000-7f1c2d900000 r-xp 00000000 fe:00 999 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05\n"
    assert gpu_driver_loaded(_MAPS + driver) == "libcuda.so.535.104.05"
    hip = "7f1c2e000000-7f1c2e100000 r-xp 00000000 fe:00 998 /opt/rocm/lib/libamdhip64.so.6.2.0\n"
    assert gpu_driver_loaded(hip + _MAPS) == "libamdhip64.so.6.2.0"
    assert gpu_driver_loaded(Path("/proc/self/maps").read_text()) is None  # this machine's torch has no CUDA


def test_a_preload_that_fails_to_import_names_the_module_and_the_error() -> None:
    import_preloads(("json",))
    with pytest.raises(ConfigError) as info:
        import_preloads(("json", "no_such_module_for_this_test"))
    message = str(info.value)
    assert "importing 'no_such_module_for_this_test' failed (ModuleNotFoundError" in message
    assert message.startswith("preload_modules=['json', 'no_such_module_for_this_test']")


# In a fresh interpreter (the test process must not ignore SIGTERM, nor carry the at-fork hook): a "server" protected
# as the fork server is, a SIGTERM to it, a "rank" it forks, and a worker the rank forks after setting its own handler.
_PROTECT = textwrap.dedent(
    """
    import json, os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from pytorch_core._forkserver import _in_fork_server, protect_server

    def disposition():
        handler = signal.getsignal(signal.SIGTERM)
        return {signal.SIG_DFL: "default", signal.SIG_IGN: "ignored"}.get(handler, "handler")

    seen = {"in_server_before": _in_fork_server()}
    protect_server()
    protect_server()  # once is enough: a second call adds no second hook
    os.kill(os.getpid(), signal.SIGTERM)  # ignored: the "server" goes on
    time.sleep(0.05)
    seen["server"] = disposition()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a rank
        rank = {"rank": disposition()}
        signal.signal(signal.SIGTERM, lambda *_: None)  # the rank's own handler
        worker = os.fork()
        if worker == 0:
            os.write(write, json.dumps({**rank, "worker": disposition()}).encode())
            os._exit(0)
        os.waitpid(worker, 0)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    seen.update(json.loads(os.read(read, 4096)))
    seen["server_after_fork"] = disposition()
    print(json.dumps(seen))
    """
)


def test_the_protected_server_ignores_sigterm_and_its_ranks_start_at_the_default() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _PROTECT, str(Path(__file__).resolve().parents[2])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == {
        "in_server_before": False,  # only multiprocessing's server loop counts as the server
        "server": "ignored",
        "rank": "default",  # restored right after the fork, before anything of the rank runs
        "worker": "handler",  # what the rank set itself is what its own children inherit
        "server_after_fork": "ignored",
    }
