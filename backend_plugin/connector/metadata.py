"""What the connector hands Flyte and gets back, in no SDK's types: the resource metadata Flyte stores between calls
(`JobMetadata`) and a poll's answer (`Answer`). Each SDK's wrapper turns an `Answer` into its own `Resource`
(flytekit's, flyte's); both store the same `JobMetadata` JSON, so either generation reads the other's."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from flyteidl.core.execution_pb2 import TaskExecution, TaskLog

from backend_plugin.targets.registry import DEFAULT, target_for_kind

__all__ = ["JobMetadata", "Answer", "TERMINAL_PHASES"]

TERMINAL_PHASES = frozenset(
    {TaskExecution.SUCCEEDED, TaskExecution.FAILED, TaskExecution.RETRYABLE_FAILED, TaskExecution.ABORTED}
)
"""Phases after which a task attempt's job runs no more: what is held for it (progress, log-link pods) is let go."""


@dataclass
class JobMetadata:
    """What Flyte stores between calls: enough to find the job again, to notice a same-named replacement, and to
    read what the task itself reported. Metadata stored by an older connector (namespace, name, uid only) still
    decodes; `get` then reads no error document and renders no dynamic log links.

    Attributes:
        namespace: the job's namespace.
        name: the job's name.
        uid: `metadata.uid` of the job we created or adopted ("" if unknown).
        output_prefix: the execution's output prefix, where the replicas write `error.pb` / `error-<uuid>.pb` and
            `outputs.pb` ("" if unknown).
        task_config: the task template's config entries outside `pytorch.*` (`link_type` and the values of
            `{{ .taskConfig.<key> }}` in log links).
        error: why the job can never run (a template that cannot be built, a spec the API server rejects); no job
            was created, and `get` reports FAILED with this message. "" for a created job.
        kind: the job's kind (a registered kind's `kind`); metadata stored before kinds were recorded has none and
            is the default kind's (`targets.registry.DEFAULT`).
        dropped: what the job was created without because the cluster's CRD is older than the vendored one (the
            job's meaning kept), said in every `get`'s message; "" when nothing was dropped.
    """

    namespace: str
    name: str
    uid: str = ""
    output_prefix: str = ""
    task_config: dict[str, str] = field(default_factory=dict)
    error: str = ""
    kind: str = DEFAULT.kind
    dropped: str = ""

    def encode(self) -> bytes:
        """JSON of the fields; `kind` only when it is not the default kind's and `dropped` only when set, so such
        metadata reads as before.

        Returns:
            The encoded metadata.
        """
        fields = dataclasses.asdict(self)
        if target_for_kind(self.kind) is DEFAULT:
            del fields["kind"]
        if not self.dropped:
            del fields["dropped"]
        return json.dumps(fields).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> JobMetadata:
        """The metadata `encode` wrote (or an older connector: the fields it lacks take their defaults).

        Args:
            data: what Flyte stored.

        Returns:
            The metadata.
        """
        return cls(**json.loads(data.decode("utf-8")))

    @property
    def identity(self) -> dict[str, Any]:
        """Namespace, name and uid, as the answers' `custom_info` names the job."""
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}


@dataclass(frozen=True)
class Answer:
    """One poll's answer: the phase (flyteidl's `TaskExecution.Phase`, which flyteidl2's shares), why, log links and
    the job's status for Flyte's task details.

    Attributes:
        phase: the phase.
        message: why, in our words.
        log_links: one per configured template and replica.
        custom_info: the job's identity and status (JSON-able).
    """

    phase: int
    message: str = ""
    log_links: tuple[TaskLog, ...] = ()
    custom_info: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """Whether the job runs no more."""
        return self.phase in TERMINAL_PHASES
