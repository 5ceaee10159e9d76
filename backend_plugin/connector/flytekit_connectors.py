"""flytekit's connectors for task type `pytorch` (versions 0 and 1): thin wrappers over the process's one
`JobService`, turning its answers into flytekit's `Resource`.

`ServedJobConnector` is the one `register` gives flytekit's `ConnectorRegistry`: its `get` is a coroutine, so
flytekit's service awaits it in the event loop instead of queueing it on asyncio's default pool of min(32, CPUs + 4)
threads (`JobService.get_async`: the watch cache's answers inline, every other poll on the service's pool).
`JobConnector` is the same with a sync `get` (flytekit runs it in its default pool), for callers that poll from a
thread. `create` and `delete` are sync in both: flytekit runs them in its default pool; they are rare.
"""

from __future__ import annotations

from typing import Any, Optional

from flytekit.extend.backend.base_connector import AsyncConnectorBase, ConnectorRegistry, Resource
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate

from backend_plugin.connector import blobs
from backend_plugin.connector.metadata import Answer, JobMetadata
from backend_plugin.connector.service import JobService, shared_service
from backend_plugin.kube.watch import JobWatchCache
from backend_plugin.targets.registry import JobTarget
from pytorch_contract.template_keys import TASK_TYPE

__all__ = ["JobConnector", "ServedJobConnector", "register", "resource_of_answer"]


def resource_of_answer(answer: Answer) -> Resource:
    """flytekit's `Resource` of an answer.

    Args:
        answer: the service's answer.

    Returns:
        The same phase, message, log links and job status.
    """
    return Resource(phase=answer.phase, message=answer.message, log_links=list(answer.log_links),
                    custom_info=answer.custom_info)  # fmt: skip


class JobConnector(AsyncConnectorBase):
    """Runs `pytorch` tasks as Kubeflow jobs of the configured kind (`BackendConfig.target`), through a `JobService`.

    Args:
        task_type_version: 1 for templates from this SDK and flytekit's kfpytorch plugin, 0 for legacy ones.
        config: backend config; given with any of the next three, the connector has a service of its own (tests,
            benchmarks); given none, it uses the process's one (`shared_service`).
        api_client_factory: builds the kubernetes ApiClient on first use.
        clock: the current time (tests freeze it).
        sleep: sleeps between retries (tests make it instant).
        service: the service to use (overrides the four above).
    """

    name = "Kubeflow Job Connector"

    def __init__(
        self,
        task_type_version: int = 1,
        config: Any = None,
        api_client_factory: Any = None,
        clock: Any = None,
        sleep: Any = None,
        service: Optional[JobService] = None,
    ) -> None:
        super().__init__(task_type_name=TASK_TYPE, task_type_version=task_type_version, metadata_type=JobMetadata)
        if service is None:
            own = any(x is not None for x in (config, api_client_factory, clock, sleep))
            service = JobService(config, api_client_factory, clock, sleep) if own else shared_service()
        self.service = service

    def create(
        self,
        task_template: TaskTemplate,
        output_prefix: str,
        inputs: Optional[LiteralMap] = None,
        task_execution_metadata: Optional[TaskExecutionMetadata] = None,
        **kwargs: Any,
    ) -> JobMetadata:
        """`JobService.create`, writing Flyte 1's inputs (a `LiteralMap`, empty when None).

        Args:
            task_template: the task's template.
            output_prefix: the execution's output prefix.
            inputs: the task's inputs.
            task_execution_metadata: execution identity, namespace, labels, annotations, env, service account.
            **kwargs: ignored (future flytekit arguments).

        Returns:
            What `JobService.create` returns.
        """
        return self.service.create(task_template, output_prefix, inputs, task_execution_metadata, blobs.write_inputs)

    def get(self, resource_meta: JobMetadata, **kwargs: Any) -> Resource:
        """`JobService.get`, as flytekit's `Resource`.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.

        Returns:
            Phase, message, log links and the job's status.
        """
        return resource_of_answer(self.service.get(resource_meta))

    def delete(self, resource_meta: JobMetadata, **kwargs: Any) -> None:
        """`JobService.delete`.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.
        """
        self.service.delete(resource_meta)

    # What callers that hold a connector ask of its service.
    @property
    def config(self) -> Any:
        """The service's backend config."""
        return self.service.config

    def api(self) -> Any:
        """The service's API client (`JobService.api`).

        Returns:
            The `Api`.
        """
        return self.service.api()

    def target(self) -> JobTarget:
        """The kind the service creates (`JobService.target`).

        Returns:
            The target.
        """
        return self.service.target()

    def cache(self, target: JobTarget) -> Optional[JobWatchCache]:
        """The watch cache of `target`'s jobs (None when off).

        Args:
            target: the job kind.

        Returns:
            The cache.
        """
        return self.service.session().cache(target)

    @property
    def progress(self) -> Any:
        """The live progress the service holds (`connector.progress.LiveProgress`)."""
        return self.service.session().progress

    def close(self) -> None:
        """`JobService.close`: the pools shut, the watches stopped."""
        self.service.close()


class ServedJobConnector(JobConnector):
    """The connector as `pyflyte serve connector` runs it: `get` is a coroutine (`JobService.get_async`)."""

    name = JobConnector.name

    async def get(self, resource_meta: JobMetadata, **kwargs: Any) -> Resource:
        """`JobService.get_async`, as flytekit's `Resource`.

        Args:
            resource_meta: what `create` returned.
            **kwargs: ignored.

        Returns:
            What `JobConnector.get` returns.

        Raises:
            KubeApiError: the job could not be read (after retries, within `api_get_budget_s`); Flyte polls again.
        """
        return resource_of_answer(await self.service.get_async(resource_meta))


def register() -> None:
    """Register the served connector for `pytorch` task versions 0 and 1, both over the process's one service
    (idempotent)."""
    for version in (0, 1):
        try:
            found = ConnectorRegistry.get_connector(TASK_TYPE, version)
            if isinstance(found, ServedJobConnector) and found.service is shared_service():
                continue
        except Exception:  # noqa: BLE001 - FlyteConnectorNotFound: not registered yet
            pass
        ConnectorRegistry.register(ServedJobConnector(task_type_version=version), override=True)
