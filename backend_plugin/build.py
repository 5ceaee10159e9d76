"""The one build path: `build_job(template, execution, config, target)` -> the job, its warnings and the admission
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
from typing import Any, Optional

from backend_plugin.admission import JobNotAdmitted, Problem, admit, stamp
from backend_plugin.admission.installed import Fitted, InstalledCrd
from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.pods import PodPlan
from backend_plugin.spec import TaskSpec
from backend_plugin.targets.base import JobTarget
from backend_plugin.template import read_template

__all__ = ["BuiltJob", "WrittenJob", "build_job", "write_job", "finish_job"]


@dataclass(frozen=True)
class WrittenJob:
    """A job as its kind wrote it, before it is fitted to a cluster's CRD, stamped and judged (`write_job`).

    Attributes:
        job: the job as written (not stamped; never changed afterwards).
        target: its kind's target.
        spec: the task it was built from.
        plan: the plan it was written from.
        warnings: the kind's warnings (`JobTarget.warnings`).
    """

    job: dict[str, Any]
    target: JobTarget
    spec: TaskSpec
    plan: PodPlan
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class BuiltJob:
    """A job as the backend would send it, and what it has to say about it.

    Attributes:
        job: the stamped job.
        target: its kind's target.
        spec: the task it was built from.
        warnings: backend defaults the kind cannot express and drops, a placement no node can match
            (`JobTarget.warnings`): logged by the connector, printed by `render`.
        problems: every finding of the admission model (`admission.admit`), refusing or not.
        crd: the installed CRD the job was fitted to and judged by; None for the vendored one.
        fitted: what `JobTarget.fit` wrote otherwise or dropped for `crd` (None without one).
    """

    job: dict[str, Any]
    target: JobTarget
    spec: TaskSpec
    warnings: tuple[str, ...]
    problems: tuple[Problem, ...]
    crd: Optional[InstalledCrd] = None
    fitted: Optional[Fitted] = None

    @property
    def dropped(self) -> tuple[str, ...]:
        """What fitting the job to the installed CRD dropped (said in the task's message too)."""
        return self.fitted.dropped if self.fitted is not None else ()

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
    template: Mapping[str, Any],
    execution: ExecutionMetadata,
    config: BackendConfig,
    target: JobTarget,
    crd: Optional[InstalledCrd] = None,
) -> BuiltJob:
    """Build the job one execution of a task becomes, as the connector sends it (pure): `write_job`, then
    `finish_job`.

    Args:
        template: the task template (anything `template.read_template` accepts).
        execution: the execution (`execution.execution_metadata`, or `render`'s sample one).
        config: the backend config.
        target: the job kind to build.
        crd: the cluster's installed CRD of the kind, when known (read by the connector, `render --crd`): the job
            is fitted to it and judged by it; None: the vendored CRD.

    Returns:
        The stamped job, the kind's warnings (and what fitting it to `crd` wrote otherwise or dropped) and the
        admission model's findings.

    Raises:
        TemplateError: the template is not a valid pytorch task, or it cannot run as `target` with this execution and
            config; the message names the setting and what is allowed.
    """
    return finish_job(write_job(template, execution, config, target), crd)


def write_job(
    template: Mapping[str, Any], execution: ExecutionMetadata, config: BackendConfig, target: JobTarget
) -> WrittenJob:
    """Read the template, plan the job (refusing what the kind cannot express) and write it (pure).

    Args:
        template: the task template.
        execution: the execution.
        config: the backend config.
        target: the job kind.

    Returns:
        The job as written, with its plan and the kind's warnings.

    Raises:
        TemplateError: as `build_job`.
    """
    spec = read_template(template)
    plan = target.plan(spec, execution, config)
    return WrittenJob(target.write(plan), target, spec, plan, tuple(target.warnings(spec, config)))


def finish_job(written: WrittenJob, crd: Optional[InstalledCrd] = None) -> BuiltJob:
    """Fit a written job to the cluster's installed CRD (when given), stamp it and put it through the admission
    model (pure; `written` is not changed).

    Args:
        written: what `write_job` returned.
        crd: the installed CRD of its kind; None: the vendored CRD.

    Returns:
        The stamped job and what there is to say about it.
    """
    target, spec = written.target, written.spec
    if crd is None:
        job = stamp(written.job)
        return BuiltJob(job, target, spec, written.warnings, tuple(admit(job)))
    fitted = target.fit(written.job, written.plan, crd)
    job = stamp(fitted.job)
    problems = tuple(admit(job, crd, fitted.advice))
    return BuiltJob(job, target, spec, written.warnings + fitted.notes, problems, crd, fitted)
