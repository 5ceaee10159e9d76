"""One create path: build the job for the cluster, write the inputs it reads, POST it (or adopt the job of its name
that is ours), and, after a strict 400, build it once more for what the 400 named.

- the job is written (`build.write_job`), fitted to the kind's installed CRD as `ClusterCrds` knows it and judged by
  it (`build.finish_job`; the CRD read again first when what is known changes the job and is older than
  `api_crd_recheck_s`): a template that cannot be built, or a job the cluster would refuse, is recorded in the
  metadata (`error`) with nothing sent, inputs.pb included, and the next `get` reports a permanent FAILED;
- the inputs are written where the job reads them (`BuiltJob.reads`), in the form the SDK's pods read (the caller's
  `write_inputs`);
- the POST has `fieldValidation=Strict`. One retry loop, inside the create's deadline, over attempts of one request
  each: a POST, and where it says AlreadyExists or got no answer, one GET of the job of that name, which is adopted
  when it is ours (`admission.is_our_job`) and is a `Conflict` otherwise (`adopt_existing`, the one place that
  decides). A create whose answer was lost is looked for before it is sent again, so a slow API server never gets
  two jobs;
- a strict 400 names fields the installed CRD lacks: what it declares is learnt (`ClusterCrds.learn`) and the job is
  built again for it and created, once; a job the kind cannot write otherwise, or a second 400, fails the task for good
  in our words (never the API server's `strict decoding error`, never the same request twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Optional

from backend_plugin import admission
from backend_plugin.admission import crds, structural
from backend_plugin.admission.installed import InstalledCrd, strict_refusal, unknown_fields
from backend_plugin.build import BuiltJob, WrittenJob, finish_job
from backend_plugin.connector.metadata import JobMetadata
from backend_plugin.connector.session import Session
from backend_plugin.errors import Conflict, MalformedAnswer, NotFound, Rejected, TemplateError, Unavailable
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.kube import api as kube_api
from backend_plugin.kube.api import Request, shape
from backend_plugin.kube.retry import Deadline, retry
from backend_plugin.targets.registry import target_for_kind

__all__ = ["JobCreator", "spec_differences"]

logger = logging.getLogger(__name__)

InputsWriter = Callable[[Any, str], None]
"""Writes a task's inputs where its pods read them (`inputs`, `path`), in the form its SDK's entrypoint reads."""


def spec_differences(desired: Any, stored: Any, path: str = "spec") -> list[str]:
    """Fields where a stored object differs from the one we would create, ignoring what the server added.

    Every value we set must be present and equal in `stored`; keys only in `stored` are defaults filled in by the
    API server or the operator's webhook and do not count.

    Args:
        desired: the value we would send.
        stored: the value the API server holds.
        path: the dotted path of these values, for the report.

    Returns:
        Dotted paths that differ (empty when `stored` matches).
    """
    if isinstance(desired, dict) and isinstance(stored, dict):
        out: list[str] = []
        for key, value in desired.items():
            if key not in stored:
                out.append(f"{path}.{key}")
            else:
                out.extend(spec_differences(value, stored[key], f"{path}.{key}"))
        return out
    if isinstance(desired, list) and isinstance(stored, list):
        if len(desired) != len(stored):
            return [path]
        out = []
        for i, (a, b) in enumerate(zip(desired, stored, strict=True)):
            out.extend(spec_differences(a, b, f"{path}[{i}]"))
        return out
    if desired == stored or str(desired) == str(stored) and isinstance(stored, (int, float, str)):
        return []
    return [path]


class JobCreator:
    """The create of one session.

    Args:
        session: the API client, the config and what the installed CRDs declare.
    """

    def __init__(self, session: Session) -> None:
        self.session = session

    def create(
        self,
        written: WrittenJob,
        base: JobMetadata,
        execution: ExecutionMetadata,
        inputs: Any,
        write_inputs: InputsWriter,
        deadline: Deadline,
    ) -> JobMetadata:
        """Create the job `written` is, for the cluster (see the module docstring).

        Args:
            written: the job as its kind wrote it.
            base: the metadata without the created job's uid.
            execution: the execution (its `input_path`).
            inputs: the task's inputs, for `write_inputs`.
            write_inputs: writes them.
            deadline: the create's deadline.

        Returns:
            The job's metadata, or `base` with the reason the job can never run in `error`.

        Raises:
            Conflict: a different job with the same name exists.
            KubeApiError: any other API failure, after retries for transient ones.
        """
        target, session = written.target, self.session
        crd = session.crds.current(target, session.api, deadline)
        sent: Optional[dict] = None
        refused = ""
        inputs_written = False
        for fresh in (True, False):  # the job for the CRD known; once more for what a strict 400 named
            try:
                built = self._built(written, crd, deadline, recheck=fresh)
                job = self.admitted(built)
            except TemplateError as e:  # admission.JobNotAdmitted included: nothing has been sent
                logger.warning("task template for %s/%s cannot run as a %s: %s", base.namespace, base.name,
                               target.kind, e)  # fmt: skip
                return replace(base, error=f"the task template cannot run: {e}")
            if job == sent:  # nothing the kind can write otherwise: the same request would be refused again
                logger.warning("%s", refused)
                return replace(base, error=refused)
            _log_warnings(job, built)
            if not inputs_written and built.reads(execution.input_path):  # not when Flyte rendered `{{.input}}`
                write_inputs(inputs, execution.input_path)
                inputs_written = True
            try:
                created = self.post(job, deadline)
            except Rejected as e:
                fields = unknown_fields(e.status.message if e.status is not None else "")
                if not fields:
                    logger.warning("%s", e)
                    return replace(base, error=f"the API server rejected the job: {e}")
                crd, unmapped = session.crds.learn(target, fields, session.api, deadline, read=fresh)
                refused = f"the API server rejected the job: {strict_refusal(crd, target.declaration, fields)}"
                if unmapped or not fresh:
                    logger.warning("%s", refused)
                    return replace(base, error=refused)
                sent = job
                continue
            return replace(base, namespace=created.namespace, name=created.name, uid=created.uid, kind=created.kind,
                           dropped="; ".join(built.dropped))  # fmt: skip
        raise AssertionError("unreachable: the second pass returns")  # pragma: no cover

    def _built(self, written: WrittenJob, crd: Optional[InstalledCrd], deadline: Deadline, recheck: bool) -> BuiltJob:
        """The written job fitted to `crd` and judged by it; when that changes the job (fits it, or refuses it) and
        what is known is older than `api_crd_recheck_s`, the CRD is read again first (`recheck`)."""
        built = finish_job(written, crd)
        if recheck and crd is not None and built.fitted is not None and (built.fitted.notes or built.refusals):
            fresh, changed = self.session.crds.recheck(written.target, self.session.api, deadline,
                                                       self.session.config.api.crd_recheck_s)  # fmt: skip
            if changed:
                built = finish_job(written, fresh)
        return built

    def admitted(self, built: BuiltJob) -> dict:
        """The job as the connector sends it (stamped by `build_job`), once the admission model admits it; its notes
        (a job close to the size limit, a rule not evaluated) are logged.

        Args:
            built: what `build_job` returned.

        Returns:
            The stamped job.

        Raises:
            admission.JobNotAdmitted: the cluster would reject it, prune part of it, or never start its pods.
        """
        job = built.admitted()
        meta = job["metadata"]
        for note in built.notes:
            logger.warning("%s %s/%s: %s", job.get("kind"), meta.get("namespace"), meta.get("name"), note.message)
        return job

    def post(self, job: dict, deadline: Deadline) -> JobMetadata:
        """POST a built job with `fieldValidation=Strict`, never creating a second copy: one retry loop of attempts
        of one request each (the POST, then the GET that adopts the job it may have created).

        Args:
            job: the job as `admitted` returns it (its `kind` picks the target); sent as it is.
            deadline: the create's deadline.

        Returns:
            The job's namespace, name and uid.

        Raises:
            Conflict: a different job with the same name exists.
            Rejected: the API server refuses the job and always will (invalid, too large, ...).
            KubeApiError: the create failed (retried within the deadline for transient failures).
        """
        api = self.session.api
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        target = target_for_kind(str(job.get("kind") or ""))
        request = Request("create", f"{target.kind} {namespace}/{name}", namespace, "create", target.plural,
                          target.group, retry_transient=False, secrets=secret_values(job))  # fmt: skip

        def send(timeout: tuple[float, float]) -> Any:
            return api.custom.create_namespaced_custom_object(
                target.group, target.version, namespace, target.plural, job, field_validation="Strict",
                _request_timeout=timeout, _preload_content=False,
            )  # fmt: skip

        def decode(created: Any) -> dict:
            if not isinstance(created, dict) or not isinstance(created.get("metadata"), dict):
                # The create may have happened: the adopting read finds out.
                raise MalformedAnswer("create", request.subject,
                                      f"the API answered with {shape(created)}, not a {target.kind}")  # fmt: skip
            return created

        def attempt() -> JobMetadata:
            try:
                created = api.call(request, send, deadline, decode)
            except Conflict:
                return self.adopt_existing(job, deadline)
            except Unavailable as e:
                # The create may have happened without us seeing the answer: look before trying again.
                try:
                    return self.adopt_existing(job, deadline)
                except (NotFound, Unavailable):
                    pass  # not there (or unknown): a repeated POST is safe, the name is deterministic (409)
                raise e from None
            logger.info("created %s %s/%s", target.kind, namespace, name)
            return JobMetadata(namespace, name, str(created["metadata"].get("uid", "")), kind=target.kind)

        return retry(
            attempt,
            lambda e: isinstance(e, Unavailable),
            api.backoff,
            deadline,
            lambda error, attempts, elapsed: request.gave_up(error, attempts, elapsed, deadline),
            lambda e, n, delay: logger.info("%s; job not found, retrying create in %.2fs", e, delay),
            min_attempt_s=kube_api.MIN_ATTEMPT_S,
            least_delay=lambda e: float(getattr(e, "retry_after_s", 0.0) or 0.0),
        )

    def adopt_existing(self, job: dict, deadline: Deadline) -> JobMetadata:
        """After a 409, or a create whose answer was lost: take over the job of this name when it is ours, else raise
        `Conflict`. The one place that decides whether an existing job is ours.

        Ours is `admission.is_our_job`: the stored job's `pytorch.flyte.org/spec-sha256` annotation is the digest of
        the job we would send (the API server keeps annotations as sent, so its defaults, pruning and mutating
        webhooks do not count); a stored job without the annotation is ours when the job we sent, pruned by its
        CRD, is contained in it. The read is one request: the create's retry loop is the only one.

        Args:
            job: the job we tried to create.
            deadline: the create's deadline.

        Returns:
            The existing job's namespace, name and uid.

        Raises:
            Conflict: the job of this name is being deleted, or is another job (the message names where it differs).
            NotFound: there is no job of this name (the create did not happen).
            KubeApiError: it could not be read.
        """
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        target = target_for_kind(str(job.get("kind") or ""))
        subject = f"{target.kind} {namespace}/{name}"
        request = Request("create", subject, namespace, "get", target.plural, target.group, retry_transient=False)
        stored = self.session.api.read_object(request, target.group, target.version, target.plural, name,
                                              f"a {target.kind} object", deadline)  # fmt: skip
        if (stored.get("metadata") or {}).get("deletionTimestamp"):
            raise Conflict("create", subject, "a job with this name exists and is being deleted; retry once it is gone")
        if not admission.is_our_job(stored, job):
            raise Conflict(
                "create",
                subject,
                f"a different {target.kind} with this name already exists ({_how_it_differs(job, stored)}); delete "
                f"it with `kubectl delete {target.kind.lower()} -n {namespace} {name}` or rerun under a new execution",
            )
        logger.info("adopted existing %s %s/%s: it is the job we create", target.kind, namespace, name)
        return JobMetadata(namespace, name, str(stored["metadata"].get("uid", "")), kind=target.kind)


def _log_warnings(job: dict, built: BuiltJob) -> None:
    """The kind's warnings for a job about to be created: backend defaults it drops, and what fitting it to the
    cluster's installed CRD wrote otherwise or dropped."""
    meta = job["metadata"]
    for warning in built.warnings:
        logger.warning("%s %s/%s: %s", built.target.kind, meta.get("namespace"), meta.get("name"), warning)


def _how_it_differs(sent: dict, stored: dict) -> str:
    """Where another job under our name differs from ours, for the Conflict: the fields of our spec (pruned by the
    CRD, as the server stores it) it lacks or holds otherwise, else what else tells them apart."""
    schema = crds.schema_for(str(sent.get("apiVersion")), str(sent.get("kind")))
    diffs = spec_differences(structural.prune(sent, schema).get("spec"), stored.get("spec"))
    if diffs:
        return "differs in " + ", ".join(diffs[:5]) + (f" and {len(diffs) - 5} more" if len(diffs) > 5 else "")
    digest = ((stored.get("metadata") or {}).get("annotations") or {}).get(admission.SPEC_DIGEST_ANNOTATION)
    if digest is not None:
        return f"its {admission.SPEC_DIGEST_ANNOTATION} annotation is the digest of another spec, labels or annotations"
    return "differs in its labels or annotations"


def secret_values(job: dict) -> tuple[str, ...]:
    """The job's `env[].value`s an API server's message must not carry into our errors, less those the job's own
    metadata already shows: its namespace, name, label and annotation values are the object's key and labels, which
    the server names in its messages (a project and domain in `FLYTE_INTERNAL_EXECUTION_PROJECT`/`_DOMAIN` are
    the parts of a namespace such as `flytesnacks-development`; blanking them made `namespaces "<redacted>-<redacted>"
    not found`). A value that appears nowhere in the metadata stays redacted.

    Args:
        job: the job about to be created.

    Returns:
        The values to redact from the API server's answers.
    """
    meta = job.get("metadata") or {}
    shown = [str(meta.get("namespace") or ""), str(meta.get("name") or "")]
    for key in ("labels", "annotations"):
        shown.extend(str(v) for v in (meta.get(key) or {}).values())
    return tuple(v for v in _env_values(job) if not any(v in text for text in shown))


def _env_values(job: Any) -> tuple[str, ...]:
    """Every `env[].value` in a job: the values an API server's message must not carry into our errors."""
    out: list[str] = []
    if isinstance(job, dict):
        for key, value in job.items():
            if key == "env" and isinstance(value, list):
                out.extend(str(e["value"]) for e in value if isinstance(e, dict) and isinstance(e.get("value"), str))
            else:
                out.extend(_env_values(value))
    elif isinstance(job, list):
        for item in job:
            out.extend(_env_values(item))
    return tuple(out)
