"""Serve the Flyte 2 connector on a loopback port against a fake API server (``python -m
tests.flyte2.serve_connector HOST TARGET``): prints the port, then serves until stdin closes.

A process of its own: flyte's connector server registers Prometheus metric names that flytekit's (imported by other
tests of the session) registers too. The backend config is the connector tests' (small timeouts, instant retries)
with the watch cache on, so polls go through LIST and WATCH; the kubernetes client is the real one.
"""

from __future__ import annotations

import asyncio
import sys

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobService
from flyte2_backend.connector import Flyte2JobConnector, register, serve

LINKS = ({"name": "Logs", "template": "https://logs.example.com/{{ .namespace }}/{{ .podName }}/{{ .containerName }}"},)


def connector(host: str, target: str) -> Flyte2JobConnector:
    from kubernetes import client

    def api_client() -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = host
        return client.ApiClient(configuration)

    config = BackendConfig.from_dict(
        dict(
            target=target,
            watch_cache=True,
            log_links=LINKS,
            api_timeout_s=2.0,
            api_get_budget_s=10.0,
            api_create_budget_s=10.0,
            api_delete_budget_s=10.0,
            api_backoff_initial_s=0.001,
            api_backoff_max_s=0.002,
        )
    )
    return Flyte2JobConnector(JobService(config=config, api_client_factory=api_client))


async def main(host: str, target: str) -> None:
    register(connector(host, target))
    server = asyncio.ensure_future(serve("127.0.0.1:0", workers=4, ready=lambda port: print(port, flush=True)))
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    server.cancel()
    try:
        await server
    except asyncio.CancelledError:
        pass


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
