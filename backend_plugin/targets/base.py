"""The interface every job kind implements: `JobTarget`.

One subclass per kind, in its own package (`backend_plugin.targets.<kind>.target`), holding the kind's
`Declaration` (its facts: API coordinates, CRD, pod template paths, limits, config section) and registered through
it in `backend_plugin.targets`. The connector and `pytorchjob render` hold a `JobTarget` and call only these methods
(through `backend_plugin.build.build_job` for a new job), so they never name or compare a kind: what differs per
kind (its plan and what it refuses, its writer, which reads its status needs, its status table, its log links, its
primary images, its warnings, how discovery recognises it) is answered here. Each method is pure: nothing here
talks to the API.
"""

from __future__ import annotations

import abc
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from flyteidl.core.execution_pb2 import TaskLog

from backend_plugin.admission.installed import Fitted, InstalledCrd
from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.kinds.declaration import Declaration
from backend_plugin.pods import PodPlan, plan_pods
from backend_plugin.spec import TaskSpec
from backend_plugin.status import JobStatus
from backend_plugin.task_errors import ErrorReport

__all__ = ["JobTarget", "Reads", "Observed", "PrimaryImage"]


class PrimaryImage(NamedTuple):
    """The image of one primary (training) container of a job.

    Attributes:
        role: the replica type or node it runs as (`Master`, `Worker`, `node`), for messages.
        field: where the image is in the job (`spec.trainer.image`).
        image: the image reference.
    """

    role: str
    field: str
    image: str


@dataclass(frozen=True)
class Reads:
    """What a job's answer needs read besides the job (so that a steady running job costs nothing).

    Attributes:
        pods: the job's pods, as they are now (the status explains a failure or a stuck start with them).
        error_report: the task's error documents under the output prefix (the job failed).
        events: the job's events (it has not started in time).
        link_pods: the job's pods, for the names of its log links: the connector lists them once per job status and
            keeps them (`connector.log_pods`), so a steady poll lists nothing.
    """

    pods: bool = False
    error_report: bool = False
    events: bool = False
    link_pods: bool = False


@dataclass(frozen=True)
class Observed:
    """What the connector read for one status evaluation, besides the job.

    Attributes:
        pods: the job's pods, None when they were not listed (not needed, or the list failed).
        errors: the task's error documents, None when they were not read.
        events: the job's events, None when they were not read.
        events_problem: why the events could not be read ("" when they could or were not needed).
    """

    pods: Optional[Sequence[Mapping[str, Any]]] = None
    errors: Optional[ErrorReport] = None
    events: Optional[Sequence[Mapping[str, Any]]] = None
    events_problem: str = ""


class JobTarget(abc.ABC):
    """One Kubeflow job kind: how a task becomes one, and how one is read back.

    Attributes:
        declaration: the kind's facts (`Declaration`); `kind`, `group`, `version`, `plural`, `config_name`,
            `description`, `pod_label` and `status_keys` read them.
        link_pod_keys: the pod labels (or annotations) `links` reads: of a pod held for the links, the connector
            keeps only these (`connector.log_pods.slim_pod`).
    """

    declaration: Declaration
    link_pod_keys: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """The object's `kind`."""
        return self.declaration.kind

    @property
    def group(self) -> str:
        """API group."""
        return self.declaration.group

    @property
    def version(self) -> str:
        """API version."""
        return self.declaration.version

    @property
    def plural(self) -> str:
        """Resource name in URLs and RBAC."""
        return self.declaration.plural

    @property
    def config_name(self) -> str:
        """Its `BackendConfig.target` value (and `pytorchjob render --target`)."""
        return self.declaration.config_name

    @property
    def description(self) -> str:
        """The CRD and its controller, for messages (`<plural>.<group> (<controller>)`)."""
        return self.declaration.description

    @property
    def pod_label(self) -> str:
        """The pod label whose value is the job's name."""
        return self.declaration.pod_label

    @property
    def status_keys(self) -> tuple[str, ...]:
        """`status` fields copied into the connector's `custom_info`."""
        return self.declaration.status_keys

    @property
    def api_version(self) -> str:
        """`<group>/<version>`."""
        return self.declaration.api_version

    def pod_selector(self, name: str) -> str:
        """The label selector of the job's pods.

        Args:
            name: the job's name.

        Returns:
            `<pod_label>=<name>`.
        """
        return f"{self.pod_label}={name}"

    def events_selector(self, name: str) -> str:
        """The field selector of the job's events.

        Args:
            name: the job's name.

        Returns:
            `involvedObject.kind=<kind>,involvedObject.name=<name>`.
        """
        return f"involvedObject.kind={self.kind},involvedObject.name={name}"

    def serves(self, resources: Sequence[Any]) -> bool:
        """Discovery: whether an API server's resource list for `<group>/<version>` serves this kind.

        Args:
            resources: the `resources` of `GET /apis/<group>/<version>` (an APIResourceList).

        Returns:
            True when the list names `plural`.
        """
        return any(isinstance(r, Mapping) and r.get("name") == self.plural for r in resources)

    def plan(self, spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
        """Decide and check everything the job's pods get from the config and the execution (`pods.plan_pods`),
        and refuse what this kind cannot express; the default refuses nothing more than the plan.

        Args:
            spec: the task (`template.read_template`).
            metadata: the execution.
            config: the backend config.

        Returns:
            The plan `write` writes.

        Raises:
            TemplateError: the task cannot run as this kind; the message names the setting and what is allowed.
        """
        return plan_pods(spec, metadata, config)

    def fit(self, job: dict[str, Any], plan: PodPlan, crd: InstalledCrd) -> Fitted:
        """The job as a cluster's installed CRD accepts it with the same meaning, where that CRD is older than the
        vendored one: fields written otherwise (in what the older CRD has for them), or dropped where the task does
        not need them, each said in `Fitted.notes`; a field the meaning needs stays, with advice on what to do, and
        the admission model refuses it. The default fits nothing: every field the installed CRD lacks is refused.

        Args:
            job: what `write` returned (the function may change a copy, never this one).
            plan: the plan it was written from (where each value came from: the task, the config, the execution).
            crd: the installed CRD.

        Returns:
            The fitted job, the notes, and advice for what stays undeclared.
        """
        return Fitted(job)

    @abc.abstractmethod
    def write(self, plan: PodPlan) -> dict[str, Any]:
        """The job for one execution of a task (pure; never raises: `plan` checked everything).

        Args:
            plan: what `plan` returned.

        Returns:
            The job as a plain JSON-able dict with a stable key order.
        """

    @abc.abstractmethod
    def warnings(self, spec: TaskSpec, config: BackendConfig) -> list[str]:
        """Backend defaults this kind cannot express and drops (not the task's choice); logged and printed.

        Args:
            spec: the task.
            config: the backend config.

        Returns:
            One message per dropped default (empty when nothing is dropped).
        """

    @abc.abstractmethod
    def primary_images(self, job: Mapping[str, Any]) -> list[PrimaryImage]:
        """The image of every primary (training) container of a written job.

        Args:
            job: the job as `write` returned it.

        Returns:
            One entry per primary container (per role, or one for every node).
        """

    @abc.abstractmethod
    def reads(self, job: Mapping[str, Any], config: BackendConfig, now: datetime.datetime) -> Reads:
        """Which reads `status` and `links` need for this job, besides the job itself.

        Args:
            job: the job as read from the API.
            config: the backend config (timeouts, log links).
            now: the current time (timezone-aware).

        Returns:
            The reads.
        """

    @abc.abstractmethod
    def status(
        self, job: Mapping[str, Any], observed: Observed, config: BackendConfig, now: datetime.datetime
    ) -> JobStatus:
        """The Flyte phase and message of a job (pure).

        Args:
            job: the job as read from the API.
            observed: what `reads` asked for and the connector could read.
            config: the backend config.
            now: the current time (timezone-aware).

        Returns:
            The status.
        """

    @abc.abstractmethod
    def links(
        self,
        job: Mapping[str, Any],
        pods: Optional[Sequence[Mapping[str, Any]]],
        config: BackendConfig,
        now: datetime.datetime,
        task_config: Mapping[str, str],
    ) -> list[TaskLog]:
        """The job's log links.

        Args:
            job: the job as read from the API.
            pods: its pods when listed; None otherwise.
            config: supplies `log_links`.
            now: finish time of replicas still running.
            task_config: the task template's config entries outside `pytorch.*` (`link_type`, `taskConfig`).

        Returns:
            One link per template and replica (or node).

        Raises:
            ConfigError: a template is malformed.
        """
