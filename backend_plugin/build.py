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

    def reads(self, path: str) -> bool:
        """Whether the job hands `path` to its containers (in an argument, a command or a variable's value).

        The connector writes the task's inputs at the execution's `input_path` only when the job reads them there:
        a template whose container arguments Flyte's connector plugin rendered before `CreateTask` (`{{.input}}`
        already the run's own inputs file) points its pods elsewhere, and a file written at `input_path` would never
        be read; a pod template's arguments arrive with their placeholders, which the backend fills with
        `input_path`.

        Args:
            path: e.g. the execution's `input_path`.

        Returns:
            True when some string of the job holds `path`.
        """
        return bool(path) and _holds(self.job, path)

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


def _holds(value: Any, text: str) -> bool:
    if isinstance(value, str):
        return text in value
    if isinstance(value, Mapping):
        return any(_holds(v, text) for v in value.values())
    if isinstance(value, list):
        return any(_holds(v, text) for v in value)
    return False


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
