"""The preflight (``_preflight.py``), in-process: it never fails a job that torch would run. A peer that cannot reach
the master within the time the task's own ``init_process_group`` would wait is a warning naming it; locally every
rank checks in on the store, in pods they all-reduce through a gloo group (the drill through pods is
``tests/faults/test_preflight_drill.py``).

In pods, rank 0 hosts the preflight's store on ``MASTER_PORT`` and closes it before the task's code runs; the other
ranks must not leave the preflight before that, or their own ``init_process_group`` can connect to the closing store
and fail with "Failed to recv, got 0 bytes" (seen in an e2e run). Real TCPStores on loopback, no agent."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

torch_dist = pytest.importorskip("torch.distributed")

from pytorch_core import _preflight  # noqa: E402
from pytorch_core._preflight import run_preflight, shm_problem  # noqa: E402
from tests.sdk.guarded_run import descendants  # noqa: E402


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the socket is: nothing listens there


def test_a_rank_leaves_the_preflight_only_after_its_host_closed_the_store(monkeypatch, capfd):
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    port = _closed_port()
    timeout = datetime.timedelta(seconds=10)
    host = torch_dist.TCPStore("127.0.0.1", port, world_size=2, is_master=True, timeout=timeout, wait_for_workers=False)
    client = torch_dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, timeout=timeout)
    left = threading.Event()
    thread = threading.Thread(target=lambda: (_preflight._release(client, False, 2), left.set()), daemon=True)
    thread.start()
    _preflight._wait_count(host, "released", 1, 5.0)  # the client has released its part
    time.sleep(0.3)
    assert not left.is_set(), "left the preflight while the host's store was still open"
    del host  # the host closes its store, as rank 0's preflight does
    assert left.wait(_preflight.HANDOVER_WAIT_S), "did not notice the host's store closing"
    thread.join(5)
    assert "Failed to recv" not in capfd.readouterr().err  # the expected failure is kept off stderr


def test_with_the_agents_store_nobody_waits_for_a_close(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    port = _closed_port()
    timeout = datetime.timedelta(seconds=10)
    agent = torch_dist.TCPStore(
        "127.0.0.1", port, world_size=2, is_master=True, timeout=timeout, wait_for_workers=False
    )
    client = torch_dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, timeout=timeout)
    started = time.monotonic()
    _preflight._release(client, False, 2)
    assert time.monotonic() - started < 0.5  # the agent's store stays: no wait
    assert agent.add("released", 0) == 1


@pytest.mark.parametrize("local", [False, True], ids=["in-pods", "local"])
def test_a_peer_that_never_joins_is_a_warning_and_every_port_is_released(monkeypatch, capfd, local: bool) -> None:
    monkeypatch.setenv("_F_WN", "job-master-0")
    monkeypatch.setenv("GROUP_RANK", "0")
    port = _closed_port()
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run_preflight(shm_size=None, join_timeout_s=1.0, local=local)
    err = capfd.readouterr().err
    assert "preflight warning on node 0 (pod job-master-0), rank 0: the other 1 ranks did not all join" in err, err
    assert "its init_process_group waits for them under its own timeout" in err
    with socket.socket() as sock:  # the store rank 0 hosted for the preflight is gone: the task may bind the port
        sock.bind(("127.0.0.1", port))


def _preflight_rank(rank: int, port: int, local: bool, out: str) -> None:
    """One rank of ``test_every_rank_passes_...``: run the preflight, note every gloo group it makes and its stderr."""
    import torch.distributed as dist

    env = {"RANK": str(rank), "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    os.environ.update(env, TORCHELASTIC_USE_AGENT_STORE="False")  # rank 0 hosts the store, as in a pod
    real_group = dist.ProcessGroupGloo

    def noted_group(*args, **kwargs):  # type: ignore[no-untyped-def]
        Path(out, f"gloo-{rank}").write_text("")
        return real_group(*args, **kwargs)

    dist.ProcessGroupGloo = noted_group  # type: ignore[misc]
    with open(Path(out, f"stderr-{rank}"), "w") as err:
        sys.stderr = err
        run_preflight(shm_size=None, join_timeout_s=30.0, local=local)
    Path(out, f"ok-{rank}").write_text("")


@pytest.mark.faults
@pytest.mark.timeout(120)
@pytest.mark.parametrize("local", [False, True], ids=["in-pods", "local"])
def test_every_rank_passes_locally_by_checking_in_and_in_pods_by_an_all_reduce(tmp_path: Path, local: bool) -> None:
    """Three ranks that all join pass without a warning and release the master's port; in pods each one made a gloo
    group (the all-reduce crosses the network between pods), locally none did (a gloo mesh on loopback checks nothing
    the task's own ``init_process_group`` would not)."""
    port = _closed_port()
    before = set(descendants(os.getpid()))  # a fork server an earlier test left serving is not ours
    context = multiprocessing.get_context("fork")
    ranks = [context.Process(target=_preflight_rank, args=(rank, port, local, str(tmp_path))) for rank in range(3)]
    for process in ranks:
        process.start()
    try:
        deadline = time.monotonic() + 90
        while any(process.is_alive() for process in ranks) and time.monotonic() < deadline:
            assert len(set(descendants(os.getpid())) - before) <= 3, "the preflight started processes of its own"
            time.sleep(0.05)
    finally:
        for process in ranks:
            if process.is_alive():
                process.kill()
            process.join(5)
    assert [process.exitcode for process in ranks] == [0, 0, 0]
    assert sorted(path.name for path in tmp_path.glob("ok-*")) == ["ok-0", "ok-1", "ok-2"]
    for rank in range(3):
        assert Path(tmp_path, f"stderr-{rank}").read_text() == ""
    made_gloo = sorted(path.name for path in tmp_path.glob("gloo-*"))
    assert made_gloo == ([] if local else ["gloo-0", "gloo-1", "gloo-2"])
    with socket.socket() as sock:  # the store rank 0 hosted is gone: the task may bind the port (as TCPStore does,
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the closed connections' TIME_WAIT)
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_an_unresolvable_master_is_a_warning(monkeypatch, capfd) -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "23456"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run_preflight(shm_size=None, join_timeout_s=1.0)
    assert "the master address 'no-such-host.invalid' did not resolve within 1s" in capfd.readouterr().err


def test_a_small_dev_shm_is_a_warning(monkeypatch, capfd) -> None:
    for name, value in {"RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    run_preflight(shm_size="1000Pi", join_timeout_s=1.0)
    err = capfd.readouterr().err
    assert "preflight warning on" in err and "less than shm_size='1000Pi'" in err, err


def test_shm_smaller_than_asked_is_named(tmp_path: Path) -> None:
    assert shm_problem(None) is None
    assert shm_problem("1Ki", str(tmp_path)) is None
    problem = shm_problem("1000Pi", str(tmp_path))
    assert problem is not None and "less than shm_size='1000Pi'" in problem
    assert "is not there" in str(shm_problem("1Gi", str(tmp_path / "missing")))
