"""The one build path: `build_job(template, execution, config, kind)` -> the job, its warnings and the admission
model's findings.

`pytorchjob render` prints what it returns and the connector's `create` sends it: read the template
(`template.read_template`), plan the pods and refuse what the kind cannot express (`JobTarget.plan`), write the job
(`JobTarget.write`, which never raises), stamp it with the digest the connector adopts its own job by
(`admission.stamp`), and put it through the admission model (`admission.admit`). Pure: no I/O, no clock; the same
inputs give the same job byte for byte, in `render` and in `create`. In the manner of torchx's `submit_dryrun`, whose
result `schedule` sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backend_plugin.admission import JobNotAdmitted, Problem, admit, stamp
from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.spec import TaskSpec
from backend_plugin.targets.base import JobTarget
from backend_plugin.template import read_template

__all__ = ["BuiltJob", "build_job"]


@dataclass(frozen=True)
class BuiltJob:
    """A job as the backend would send it, and what it has to say about it.

    Attributes:
        job: the stamped job.
        kind: its kind.
        spec: the task it was built from.
        warnings: backend defaults the kind cannot express and drops, a placement no node can match
            (`JobTarget.warnings`): logged by the connector, printed by `render`.
        problems: every finding of the admission model (`admission.admit`), refusing or not.
    """

    job: dict[str, Any]
    kind: JobTarget
    spec: TaskSpec
    warnings: tuple[str, ...]
    problems: tuple[Problem, ...]

    @property
    def notes(self) -> list[Problem]:
        """The findings that do not refuse the job (a rule not evaluated, a job close to a size limit)."""
        return [p for p in self.problems if not p.refuses]

    @property
    def refusals(self) -> list[Problem]:
        """The findings the cluster would reject, silently prune or never start."""
        return [p for p in self.problems if p.refuses]

    def admitted(self) -> dict[str, Any]:
        """The job, when the cluster would admit it intact.

        Returns:
            The stamped job.

        Raises:
            JobNotAdmitted: with every refusing finding (a permanent `TemplateError` naming each user setting).
        """
        refusing = self.refusals
        if refusing:
            raise JobNotAdmitted(str(self.job.get("kind")), refusing)
        return self.job


def build_job(
    template: Mapping[str, Any], execution: ExecutionMetadata, config: BackendConfig, kind: JobTarget
) -> BuiltJob:
    """Build the job one execution of a task becomes, as the connector sends it (pure).

    Args:
        template: the task template (anything `template.read_template` accepts).
        execution: the execution (`execution.execution_metadata`, or `render`'s sample one).
        config: the backend config.
        kind: the job kind to build.

    Returns:
        The stamped job, the kind's warnings and the admission model's findings.

    Raises:
        TemplateError: the template is not a valid pytorch task, or it cannot run as `kind` with this execution and
            config; the message names the setting and what is allowed.
    """
    spec = read_template(template)
    job = stamp(kind.write(kind.plan(spec, execution, config)))
    return BuiltJob(job, kind, spec, tuple(kind.warnings(spec, config)), tuple(admit(job)))
