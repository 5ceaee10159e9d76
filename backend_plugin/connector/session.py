"""What the connector builds once per API client and then only reads: `Session`.

The API client (urllib3's retries off, a connection per thread), the watch cache of every registered kind, what each
kind's installed CRD declares, the server's clock, the pools `get` and the progress reads run on, the progress
records, the log-link pods and the jobs to create again after a preemption held. `JobService.session` builds one
(importing the kubernetes client, seconds on a busy machine) and publishes it; every later call reads the published
one without a lock. `close` shuts the pools and stops every watch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from backend_plugin.config import BackendConfig
from backend_plugin.connector import shapes
from backend_plugin.connector.cluster_crds import ClusterCrds
from backend_plugin.connector.log_pods import LogPods
from backend_plugin.connector.phases import Started
from backend_plugin.connector.progress import LiveProgress
from backend_plugin.connector.recovery import Recoveries
from backend_plugin.kube.api import Api, ApiClientFactory, ServerClock, with_pool_size, without_client_retries
from backend_plugin.kube.retry import Backoff
from backend_plugin.kube.watch import JobWatchCache
from backend_plugin.targets.registry import KINDS, JobTarget

__all__ = ["Session", "MANAGED_BY_LABEL", "PROGRESS_READ_THREADS", "resource_of"]

logger = logging.getLogger(__name__)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""The label (from `BackendConfig.default_labels`) the watch cache selects our jobs by."""

PROGRESS_READ_THREADS = 8
"""Threads that read progress records (`blobs.read_progress_record`), apart from the `get` pool so that a slow blob
store never holds the threads API reads need: at 30 ms a read, 8 threads read 260 records a second, the 333 a second of
10,000 running tasks read every 30 s less the polls a read's wait covers; a read they cannot start at once waits its
turn in their queue (one per task attempt at most) while the polls show the record held."""


def resource_of(target: JobTarget) -> str:
    """`<plural>.<group>/<version>`: what a watch cache is kept per.

    Args:
        target: the job kind.

    Returns:
        The resource's name.
    """
    return f"{target.plural}.{target.api_version}"


@dataclass
class Session:
    """Built once per API client factory (`build`), then read without a lock.

    Attributes:
        factory: the factory the client came from (a new one builds a new session).
        config: the backend config.
        api: the API client.
        server_clock: the API server's clock, learnt from its answers.
        crds: what each kind's installed CRD declares (per cluster).
        caches: per resource (`resource_of`), the watch cache of that kind's jobs; None when the cache is off.
        get_pool: where the served `get` runs a poll the cache cannot answer.
        progress_pool: where progress records are read.
        progress: the progress records held.
        log_pods: the log-link pods held.
        auto_target: the kind `target: auto` found (asked once per session).
        recoveries: the jobs held to be created again after a preemption (`connector.recovery`).
        started: the attempts answered RUNNING (`connector.phases`: the phase never goes back).
    """

    factory: ApiClientFactory
    config: BackendConfig
    api: Api
    server_clock: ServerClock
    crds: ClusterCrds
    caches: dict[str, Optional[JobWatchCache]]
    get_pool: ThreadPoolExecutor
    progress_pool: ThreadPoolExecutor
    progress: LiveProgress
    log_pods: LogPods
    auto_target: Optional[JobTarget] = field(default=None)
    recoveries: Recoveries = field(default_factory=Recoveries)
    started: Started = field(default_factory=Started)

    @classmethod
    def build(
        cls, factory: ApiClientFactory, config: BackendConfig, server_clock: ServerClock, sleep: Callable[[float], None]
    ) -> Session:
        """A session over a new client of `factory`: the client, every kind's watch cache (their threads start on
        first use), the pools (their threads start on first use) and empty memories.

        Args:
            factory: builds the kubernetes `ApiClient`.
            config: the backend config.
            server_clock: the API server's clock (kept across sessions: the same cluster, most often).
            sleep: sleeps between retries (tests make it instant).

        Returns:
            The session.
        """
        settings = config.api
        client = with_pool_size(without_client_retries(factory()), settings.get_threads + 4)
        api = Api(client, Backoff(settings.backoff_initial_s, settings.backoff_max_s, sleep=sleep),
                  settings.connect_timeout_s, server_clock)  # fmt: skip
        selector = _selector(config)
        caches = {
            resource_of(t): JobWatchCache(
                client,
                t.group,
                t.version,
                t.plural,
                selector,
                config.watch,
                server_clock=server_clock,
                check=shapes.job_problem,
            )  # fmt: skip
            if selector
            else None
            for t in KINDS
        }
        return cls(
            factory=factory,
            config=config,
            api=api,
            server_clock=server_clock,
            crds=ClusterCrds(),
            caches=caches,
            get_pool=ThreadPoolExecutor(settings.get_threads, thread_name_prefix="connector-get"),
            progress_pool=ThreadPoolExecutor(PROGRESS_READ_THREADS, thread_name_prefix="connector-progress"),
            progress=LiveProgress(config.status.progress_read_interval_s, config.watch.idle_s),
            log_pods=LogPods(config.watch.idle_s),
        )

    def cache(self, target: JobTarget) -> Optional[JobWatchCache]:
        """The watch cache of `target`'s jobs (None when the cache is off).

        Args:
            target: the job kind.

        Returns:
            The cache, or None.
        """
        return self.caches.get(resource_of(target))

    def close(self) -> None:
        """Shut both pools (work not started is dropped) and stop every watch; a watch thread still in a read is a
        daemon and ends with its read (logged)."""
        self.get_pool.shutdown(wait=False, cancel_futures=True)
        self.progress_pool.shutdown(wait=False, cancel_futures=True)
        for cache in self.caches.values():
            if cache is not None:
                try:
                    cache.stop()
                except RuntimeError as e:
                    logger.warning("%s", e)


def _selector(config: BackendConfig) -> str:
    """The label selector of our jobs, or "" when `watch_cache` is off or `default_labels` has no label to select
    them by (said once)."""
    if not config.watch.cache:
        return ""
    managed_by = config.job.default_labels.get(MANAGED_BY_LABEL)
    if not managed_by:
        logger.warning(
            "watch_cache is on but default_labels has no %s label to select our jobs by; every get reads the API",
            MANAGED_BY_LABEL,
        )
        return ""
    return f"{MANAGED_BY_LABEL}={managed_by}"
