"""In pods, rank 0 hosts the preflight's store on ``MASTER_PORT`` and closes it before the task's code runs; the other
ranks must not leave the preflight before that, or their own ``init_process_group`` can connect to the closing store
and fail with "Failed to recv, got 0 bytes" (seen in an e2e run). Real TCPStores on loopback, no agent."""

from __future__ import annotations

import datetime
import socket
import threading
import time

import pytest

torch_dist = pytest.importorskip("torch.distributed")

from pytorch_core import _preflight  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_rank_leaves_the_preflight_only_after_its_host_closed_the_store(monkeypatch, capfd):
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    port = _free_port()
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
    port = _free_port()
    timeout = datetime.timedelta(seconds=10)
    agent = torch_dist.TCPStore(
        "127.0.0.1", port, world_size=2, is_master=True, timeout=timeout, wait_for_workers=False
    )
    client = torch_dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, timeout=timeout)
    started = time.monotonic()
    _preflight._release(client, False, 2)
    assert time.monotonic() - started < 0.5  # the agent's store stays: no wait
    assert agent.add("released", 0) == 1
