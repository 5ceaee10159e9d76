"""A real TCPStore on loopback and a client of it per caller, as ranks in different pods each have their own."""

from __future__ import annotations

import contextlib
import datetime
import socket
from collections.abc import Callable, Iterator
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def tcp_store() -> Iterator[Callable[[], Any]]:
    """A store served in this process; the block gets ``connect()``, which returns a new client of it."""
    import torch.distributed as dist

    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    clients = []

    def connect() -> Any:
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=5))
        clients.append(client)
        return client

    yield connect
    clients.clear()
    del server
