"""The admission model: what the API server, the kind's CRD and the kubelet's pod validation would do with a job we
are about to create. Pure: a job in, problems out. `pytorchjob render` runs it on every job (`--check` prints the
whole report) and the connector runs it before create, so nothing that would be rejected, silently pruned or left
unable to start a pod leaves the backend.

What it checks (docs/admission.md has the table):

- the vendored CRD's structural schema (`backend_plugin/crds/`): an undeclared field (the CRDs' embedded pod schema
  is older than the `kubernetes` client), types, `required`, `enum`, lengths, `maxItems`, list-map keys, patterns;
- the CRD's `x-kubernetes-validations` CEL rules, evaluated as written (`cel-python`);
- the kind's own rules beyond its CRD, as its declaration states them (`Declaration.checks`: what its validating
  webhook refuses, what the API server would refuse in the objects its controller creates from the job);
- the object size: 1.5 MiB stored (etcd), 3 MiB per request;
- metadata of the job and of every embedded pod template: label keys and values, annotation keys, the 256 KiB
  annotation total (`pytorch_contract.k8s_metadata`);
- the pod-spec rules of every embedded pod template (`pytorch_contract.pod_rules`): tolerations, `nodeSelector`,
  container names, environment names, resource quantities; and for an env list a kind writes outside its pod
  templates, its names;
- the names the kind's controllers derive from the job's name (`Declaration.generated_names`: pods, Services).

Each verdict is about the object as it is (the one `render` prints and the connector sends). What a Flyte execution
would add to it (the writer's environment entries, the size they take) and what only some Kubernetes versions or
feature gates accept are notes that name the headroom or the version, never refusals. The upstream function each
rule follows is named in its docstring (and in `pytorch_contract` for the shared rules).

Where a kind holds its pod templates and env lists, which CRD serves it and what its limits are, is the kind's own
declaration (`backend_plugin.targets.<kind>.declaration`); this module never names a kind.

By default the schema is the vendored CRD's; `admit(job, crd)` judges the job by a cluster's installed CRD instead
(`installed.InstalledCrd`: read from the cluster, given to `render --crd`, or learned from a strict 400), and a field
that CRD does not declare is refused naming the release it is from and what to do (the kind's own advice where its
`JobTarget.fit` gave one).

Every problem names the user's setting (`Worker.pod_template labels`, `environment`), what is wrong and what to do.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Optional

from backend_plugin.admission import cel, crds, structural
from backend_plugin.admission.identity import SPEC_DIGEST_ANNOTATION, is_our_job, spec_digest, stamp
from backend_plugin.admission.installed import InstalledCrd, schema_declares
from backend_plugin.admission.settings import get_path, setting_for
from backend_plugin.admission.structural import NOTE, PRUNED, REJECTED, Path, format_path
from backend_plugin.errors import TemplateError
from backend_plugin.kinds import DECLARED, Declaration, declaration_for
from pytorch_contract.crd_patterns import pattern_matches
from pytorch_contract.install import install_hint
from pytorch_contract.job_limits import (
    LARGE_VALUE_ADVICE,
    REQUEST_MAX_BYTES,
    STORED_MAX_BYTES,
    WRITER_ENV_ENTRIES,
    WRITER_ENV_NAMES,
)
from pytorch_contract.k8s_metadata import annotation_problems, label_problems
from pytorch_contract.k8s_names import DNS1035_LABEL, QUALIFIED_NAME
from pytorch_contract.pod_rules import (
    container_name_problems,
    env_name_problems,
    env_name_warnings,
    node_selector_problems,
    toleration_problems,
    toleration_warnings,
)
from pytorch_contract.quantity import QuantityError, is_quantity, parse_quantity, quantity_problem

__all__ = [
    "Problem",
    "JobNotAdmitted",
    "admit",
    "check_admission",
    "prepare",
    "job_size",
    "is_integer_resource",
    "REJECTED",
    "PRUNED",
    "UNSTARTABLE",
    "NOTE",
    "CEL_UNAVAILABLE",
    "SPEC_DIGEST_ANNOTATION",
    "spec_digest",
    "stamp",
    "is_our_job",
]

UNSTARTABLE = "unstartable"
"""The job is admitted, but the API server refuses every pod its controller creates from it."""

CEL_UNAVAILABLE = f"cel-python is not installed ({install_hint('backend')})"
"""The note's setting when the CEL rules could not be evaluated (a base install renders without the extra)."""

_REFUSING = (REJECTED, PRUNED, UNSTARTABLE)
_SIZE_MARGIN = 64 * 1024  # what the server adds when it stores a job (uid, managedFields, status): about this


@dataclass(frozen=True)
class Problem:
    """One thing the cluster would refuse, drop or never start.

    Attributes:
        verdict: `REJECTED` (the create fails), `PRUNED` (the server would drop it silently; we refuse it),
            `UNSTARTABLE` (the job is created but no pod of it can be) or `NOTE` (said, not refused).
        path: where in the job (`spec.trainer.env`), for `render --check`.
        setting: the user's setting that wrote it (`environment`, `Worker.pod_template labels`).
        message: what is wrong and what to do, starting with the setting.
    """

    verdict: str
    path: str
    setting: str
    message: str

    @property
    def refuses(self) -> bool:
        """Whether the backend refuses the job for it."""
        return self.verdict in _REFUSING

    def __str__(self) -> str:
        return self.message


class JobNotAdmitted(TemplateError):
    """The job would be rejected, pruned or unable to start: a permanent error (nothing was sent).

    Attributes:
        problems: the refusing problems, each naming the user's setting.
    """

    def __init__(self, kind: str, problems: Sequence[Problem]):
        """One line: the kind, then every problem's message.

        Args:
            kind: the job's kind.
            problems: the refusing problems.
        """
        self.problems = tuple(problems)
        lines = "; ".join(p.message for p in self.problems)
        super().__init__(f"the {kind} would not be admitted by the cluster: {lines}")


def job_size(job: Mapping[str, Any]) -> int:
    """The job's size as the API server receives and stores it: compact JSON, in bytes.

    Args:
        job: the job.

    Returns:
        Its size in bytes.
    """
    return len(json.dumps(job, separators=(",", ":"), ensure_ascii=False).encode())


def admit(
    job: Mapping[str, Any], crd: Optional[InstalledCrd] = None, advice: Optional[Mapping[str, str]] = None
) -> list[Problem]:
    """Every problem the cluster would have with creating `job`.

    Args:
        job: a job of a registered kind, as its writer wrote it.
        crd: the cluster's installed CRD of its kind, to judge the job by instead of the vendored one (None: the
            vendored CRD).
        advice: for a field `crd` does not declare (formatted path), what to do, in the kind's words
            (`installed.Fitted.advice`).

    Returns:
        Problems in a stable order (schema, CEL, the kind's own rules, metadata, pod rules, size); empty when it is
        admitted intact.

    Raises:
        KeyError: no vendored CRD serves the job's apiVersion and kind.
    """
    api_version, kind = str(job.get("apiVersion")), str(job.get("kind"))
    declaration = declaration_for(job)
    schema: Mapping[str, Any]
    if crd is None:
        schema = crds.schema_for(api_version, kind)
    elif crd.schema is None:
        return [_unserved(crd)]
    else:
        schema = crd.schema
    out = [_schema_problem(job, f, declaration, crd, advice or {}) for f in structural.check(job, schema)]
    try:
        rules = cel.rules_of(schema)
        out += [_cel_problem(job, f) for f in cel.check(job, rules)]
    except ModuleNotFoundError as e:
        if e.name != "celpy":
            raise
        out.append(Problem(NOTE, "", CEL_UNAVAILABLE, f"the CRD's CEL rules were not evaluated: {CEL_UNAVAILABLE}"))
    kind_problems = _kind_problems(job, declaration)
    out += kind_problems
    out += _metadata_problems(job, declaration)
    if not any(p.path == "metadata.name" for p in kind_problems):  # a kind's webhook that judges them said it
        out += _generated_name_problems(job, declaration)
    out += _pod_problems(job, declaration)
    out += _env_list_problems(job, declaration)
    out += _size_problems(job, declaration)
    return _dedup(out)


def check_admission(job: Mapping[str, Any], crd: Optional[InstalledCrd] = None) -> list[Problem]:
    """`admit`, raising when anything refuses the job.

    Args:
        job: the job.
        crd: the cluster's installed CRD to judge it by (None: the vendored one).

    Returns:
        The notes (problems that do not refuse).

    Raises:
        JobNotAdmitted: with every refusing problem.
    """
    problems = admit(job, crd)
    refusing = [p for p in problems if p.refuses]
    if refusing:
        raise JobNotAdmitted(str(job.get("kind")), refusing)
    return problems


def prepare() -> None:
    """Read every vendored CRD and compile its CEL rules now (once per process), so that the first `admit` costs
    milliseconds: the connector calls it before a create's deadline starts, as it builds the API client.
    """
    for declaration in DECLARED:
        schema = crds.schema_for(declaration.api_version, declaration.kind)
        try:
            cel.prepare(cel.rules_of(schema))
        except ModuleNotFoundError as e:
            if e.name != "celpy":
                raise


def _dedup(problems: list[Problem]) -> list[Problem]:
    """Each message once; and no second verdict on a value the create already rejects (a quantity the CRD's pattern
    refuses, a container list whose names the CRD's list-map keys refuse, need no pod-validation verdict too)."""
    rejected = [p.path for p in problems if p.verdict == REJECTED and p.path]
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.verdict == UNSTARTABLE and any(_overlap(p.path, r) for r in rejected):
            continue
        if p.message not in seen:
            seen.add(p.message)
            out.append(p)
    return out


def _overlap(a: str, b: str) -> bool:
    """Whether one formatted path is the other or lies inside it."""
    short, long = sorted((a, b), key=len)
    return bool(short) and (long == short or long.startswith((f"{short}.", f"{short}[")))


_UNDECLARED_ADVICE = (
    "{source} does not declare it (its embedded pod schema is older than the kubernetes client), so the API "
    "server would drop it silently; remove it from the pod template, or install a CRD that declares it"
)


def _schema_problem(
    job: Mapping[str, Any],
    f: structural.Finding,
    declaration: Declaration,
    crd: Optional[InstalledCrd] = None,
    advice: Optional[Mapping[str, str]] = None,
) -> Problem:
    where = setting_for(job, f.path)
    path = format_path(f.path)
    limit = declaration.limits.env_max_items
    if f.path in declaration.limits.env_paths and "maxItems" in f.detail and limit is not None:
        return Problem(REJECTED, path, where, _env_over_limit(job, f.path, limit, declaration))
    if f.verdict == PRUNED and "not declared" in f.detail:
        vendored = crds.schema_for(declaration.api_version, declaration.kind)
        if crd is None or not schema_declares(vendored, f.path):
            source = f"the {declaration.crd.release} CRD" if crd is None else crd.describe()
            return Problem(PRUNED, path, where, f"{where}: field {path!r}: " + _UNDECLARED_ADVICE.format(source=source))
        # The connector creates with fieldValidation=Strict, and kubectl's default is Strict too: the API server
        # refuses the create (the verdict says so); the path is named once, by the setting when only the backend
        # writes it.
        what = (advice or {}).get(path) or _installed_advice(where, declaration)
        named = where if where.startswith(path) else f"{where}: field {path!r}"
        return Problem(REJECTED, path, where, f"{named}: {crd.describe()} does not declare it: {what}")
    return Problem(f.verdict, path, where, f"{where}: {path} {f.detail}")


def _installed_advice(where: str, declaration: Declaration) -> str:
    """What to do about a field the installed CRD lacks and the vendored one declares, when the kind said nothing of
    its own."""
    newer = f"upgrade {declaration.controller} to a release whose CRD declares it ({declaration.crd.release}'s does)"
    return newer if where.endswith(_BACKEND_WRITES) else f"{newer}, or remove it from {where}"


_BACKEND_WRITES = "(written by the backend)"


def _unserved(crd: InstalledCrd) -> Problem:
    """The problem of a job whose version the installed CRD does not serve (the create would find no resource)."""
    declaration = crd.declaration
    served = ", ".join(crd.served) or "no version"
    message = (
        f"job: {crd.describe()} serves {served}, not {declaration.version}, the version the backend writes "
        f"({declaration.api_version}): upgrade {declaration.controller} (the backend is built against "
        f"{declaration.crd.release})"
    )
    return Problem(REJECTED, "apiVersion", "job", message)


def _cel_problem(job: Mapping[str, Any], f: structural.Finding) -> Problem:
    where = setting_for(job, f.path) if f.path else "job"
    verdict = REJECTED if f.verdict == REJECTED else NOTE
    return Problem(verdict, format_path(f.path), where, f"{where}: {f.detail}")


_KIND_VERDICTS = {REJECTED: REJECTED, UNSTARTABLE: UNSTARTABLE, NOTE: NOTE}


def _kind_problems(job: Mapping[str, Any], declaration: Declaration) -> list[Problem]:
    """The kind's own rules (`Declaration.checks`), each named by the user's setting."""
    out = []
    for check in declaration.checks(job):
        where = setting_for(job, check.path) if check.path else "job"
        out.append(Problem(_KIND_VERDICTS[check.verdict], format_path(check.path), where, f"{where}: {check.message}"))
    return out


_METADATA_RULES = (("labels", label_problems), ("annotations", annotation_problems))


def _metadata_problems(job: Mapping[str, Any], declaration: Declaration) -> list[Problem]:
    """The job's labels and annotations (the create fails), then every pod template's (every pod create fails)."""
    out = []
    for key, check in _METADATA_RULES:
        mapping = get_path(job, ("metadata", key))
        if isinstance(mapping, Mapping):
            where = setting_for(job, ("metadata", key))
            out += [Problem(REJECTED, f"metadata.{key}", where, m) for m in check(mapping, where)]
    for prefix, _ in declaration.pod_template_paths(job):
        for key, check in _METADATA_RULES:
            mapping = get_path(job, (*prefix, "metadata", key))
            if isinstance(mapping, Mapping):
                out += _unstartable(job, (*prefix, "metadata", key), check, mapping)
    return out


def _generated_name_problems(job: Mapping[str, Any], declaration: Declaration) -> list[Problem]:
    """The names the kind's controllers give the job's pods and Services (`Declaration.generated_names`): each a
    DNS-1035 label of at most 63 characters (`validation.IsDNS1035Label`, as `ValidateServiceName` and JobSet's
    webhook apply it). The job is admitted, and its controller cannot create what it names: unstartable."""
    name = (job.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not DNS1035_LABEL.match(name):
        return []  # the job's own name: the API server's and the webhook's business
    out = []
    where = setting_for(job, ("metadata", "name"))
    for generated, what in declaration.generated_names(job):
        if len(generated) > 63 or not DNS1035_LABEL.match(generated):
            room = 63 - (len(generated) - len(name))
            message = (
                f"{where}: {name!r} ({len(name)} characters) makes the {what} name {generated!r} "
                f"{len(generated)} characters, over the 63 of a DNS-1035 label: use a job name of at most {room} "
                "characters"
            )
            out.append(Problem(UNSTARTABLE, "metadata.name", where, _pods_fail(message)))
    return out


def _pods_fail(message: str) -> str:
    return f"{message} (the job would be created, but every pod create would fail)"


def _containers(pod_spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    out = []
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(pod_spec.get(kind) or []):
            if isinstance(c, Mapping):
                out.append((kind, i, c))
    return out


def _pod_problems(job: Mapping[str, Any], declaration: Declaration) -> list[Problem]:
    out = []
    for prefix, _ in declaration.pod_template_paths(job):
        pod_spec = get_path(job, (*prefix, "spec"))
        if isinstance(pod_spec, Mapping):
            out += _pod_spec_problems(job, prefix, pod_spec)
    return out


def _pod_spec_problems(job: Mapping[str, Any], prefix: Path, pod_spec: Mapping[str, Any]) -> list[Problem]:
    """The pod-spec rules of one embedded pod template (`ValidatePodSpec`'s, which the API server applies to every pod
    the controller creates from it): tolerations (`ValidateTolerations`; operators only a feature gate admits are
    notes), node selector (`ValidateLabels`), container names (`validateContainers`, `validateInitContainers`),
    environment names (`IsRelaxedEnvVarName`; names clusters before 1.32 refuse are notes), resource quantities
    (`ParseQuantity`, `ValidateResourceQuantityValue`)."""
    out = []
    tolerations = pod_spec.get("tolerations")
    if isinstance(tolerations, list):
        items = [t for t in tolerations if isinstance(t, Mapping)]
        out += _unstartable(job, (*prefix, "spec", "tolerations"), toleration_problems, items)
        out += _notes(job, (*prefix, "spec", "tolerations"), toleration_warnings, items)
    selector = pod_spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        out += _unstartable(job, (*prefix, "spec", "nodeSelector"), node_selector_problems, selector)
    names = {kind: [c.get("name") for c in pod_spec.get(kind) or [] if isinstance(c, Mapping)] for kind in _KINDS}
    where = setting_for(job, prefix)
    out += [
        Problem(UNSTARTABLE, format_path((*prefix, "spec", "containers")), where, _pods_fail(m))
        for m in container_name_problems(names["containers"], names["initContainers"], where)
    ]
    for kind, i, container in _containers(pod_spec):
        env = container.get("env")
        if isinstance(env, list):
            env_names = [e.get("name") for e in env if isinstance(e, Mapping)]
            out += _unstartable(job, (*prefix, "spec", kind, i, "env"), env_name_problems, env_names)
            out += _notes(job, (*prefix, "spec", kind, i, "env"), env_name_warnings, env_names)
        out += _resource_problems(job, (*prefix, "spec", kind, i, "resources"), container.get("resources"))
    return out


_KINDS = ("containers", "initContainers")


def _unstartable(
    job: Mapping[str, Any], path: Path, rule: Callable[[Any, str], list[str]], value: Any
) -> list[Problem]:
    """One `UNSTARTABLE` problem per message a pod rule has for the value at `path`, named by its setting."""
    where = setting_for(job, path)
    return [Problem(UNSTARTABLE, format_path(path), where, _pods_fail(m)) for m in rule(value, where)]


def _notes(job: Mapping[str, Any], path: Path, rule: Callable[[Any, str], list[str]], value: Any) -> list[Problem]:
    """One `NOTE` per message a pod rule's warnings (what some versions or feature gates refuse) have for the value."""
    where = setting_for(job, path)
    return [Problem(NOTE, format_path(path), where, m) for m in rule(value, where)]


def is_integer_resource(name: str) -> bool:
    """Whether a container resource counts whole units: `helper.IsIntegerResourceName`, which for a container's
    resources is `IsExtendedResourceName` (a name with a domain outside `kubernetes.io`, not `requests.`-prefixed,
    that makes a qualified name under `requests.`), e.g. `nvidia.com/gpu`; `cpu`, `memory`, `ephemeral-storage` and
    `hugepages-*` take fractions.

    Args:
        name: the resource name.

    Returns:
        True for an extended resource.
    """
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return QUALIFIED_NAME.match(f"requests.{name}") is not None


def _resource_problems(
    job: Mapping[str, Any], path: Path, resources: Any, where: str = "", declaration: Optional[Declaration] = None
) -> list[Problem]:
    """A container's requests and limits, as the API server validates a pod's (`ValidateResourceRequirements`): each a
    quantity `ParseQuantity` reads, never negative (`ValidateNonnegativeQuantity`), whole for an extended resource
    (`ValidateResourceQuantityValue`), a whole number of pages for `hugepages-<size>`
    (`validateResourceQuantityHugePageValue`).

    A value the CRD's pattern takes and `ParseQuantity` cannot read (`1e1.5`, an exponent over int64) never reaches a
    pod: the kind's admission webhook decodes the job into its Go types and refuses the create (training-operator's
    `mpytorchjob.kb.io`, Trainer's `defaulter.trainjob.trainer.kubeflow.org`, JobSet's `mjobset.kb.io`), so that is
    `rejected`; a value the pattern refuses is the schema's verdict already."""
    if not isinstance(resources, Mapping):
        return []
    declaration = declaration or declaration_for(job)
    out = []
    for section in ("requests", "limits"):
        amounts = resources.get(section)
        if not isinstance(amounts, Mapping):
            continue
        for name, value in amounts.items():
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                continue  # not a quantity's type: the CRD's schema refuses it
            at = (*path, section, str(name))
            setting = where or setting_for(job, at)
            said = f"{setting}: {section}[{name!r}]={value!r} is"
            if isinstance(value, str) and not is_quantity(value):
                if not pattern_matches(_CRD_QUANTITY, value):
                    continue  # the CRD's pattern refuses it: the schema's problem names it
                message = (
                    f"{said} not a Kubernetes quantity (ParseQuantity cannot read it, though the CRD's pattern takes "
                    f"it): {declaration.controller}'s admission webhook cannot decode it and refuses the create; "
                    f"{_QUANTITY_ADVICE}"
                )
                out.append(Problem(REJECTED, format_path(at), setting, message))
                continue
            problem = quantity_problem(value, whole=is_integer_resource(str(name))) or _hugepage_problem(
                str(name), value
            )
            if problem is not None:
                out.append(Problem(UNSTARTABLE, format_path(at), setting, _pods_fail(f"{said} {problem}")))
    return out


_CRD_QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""The quantity pattern of every vendored CRD (`int-or-string` quantities, from the Kubernetes OpenAPI)."""

_QUANTITY_ADVICE = "write it as a number with an optional suffix, e.g. '500m', '4Gi', '1e3'"


def _hugepage_problem(name: str, value: Any) -> Optional[str]:
    """`validateResourceQuantityHugePageValue`: a `hugepages-<size>` amount is a whole number of pages
    (`IsHugePageResourceValueDivisible`: the page size parses to a whole positive number of bytes, and the amount's
    `Value()`, rounded up to a whole byte, is a multiple of it). On a create the API server allows no exception."""
    if not name.startswith("hugepages-"):
        return None
    size = name[len("hugepages-") :]
    try:
        page = parse_quantity(size)
        amount = parse_quantity(value)
    except QuantityError:
        page = amount = Decimal(0)
    if page <= 0 or (page * 1000) % 1 != 0:
        return f"not a valid amount: {name!r} names no page size Kubernetes reads (e.g. 'hugepages-2Mi')"
    if math.ceil(amount) % math.ceil(page) == 0:
        return None
    return f"not a whole number of {size} pages: use a multiple of {size}"


def _env_list_problems(job: Mapping[str, Any], declaration: Declaration) -> list[Problem]:
    """The env lists and resources a kind writes outside its pod templates: the env names and the quantities as in a
    pod template, and a note when an env list fits the kind's `maxItems` (the CRD's schema judges the list as it is)
    but the same task's job in a Flyte execution, which holds all of the writer's entries, would not."""
    out = []
    for path in declaration.limits.env_paths:
        env = get_path(job, path)
        if not isinstance(env, list):
            continue
        names = [e.get("name") for e in env if isinstance(e, Mapping)]
        where = format_path(path)
        out += [
            Problem(UNSTARTABLE, where, "environment", _pods_fail(m)) for m in env_name_problems(names, "environment")
        ]
        out += [Problem(NOTE, where, "environment", m) for m in env_name_warnings(names, "environment")]
        limit = declaration.limits.env_max_items
        if limit is not None and len(env) <= limit:
            message = _env_execution_note(job, path, limit, declaration)
            if message:
                out.append(Problem(NOTE, where, "environment", message))
    for path in declaration.limits.resource_paths:
        out += _resource_problems(job, path, get_path(job, path), where="resources", declaration=declaration)
    return out


def _env_entries(job: Mapping[str, Any], path: Path) -> tuple[int, int]:
    """(entries of the task's own, entries the writer wrote) in the env list at `path`."""
    env = [e for e in get_path(job, path) or [] if isinstance(e, Mapping)]
    writer = sum(1 for e in env if e.get("name") in WRITER_ENV_NAMES)
    return len(env) - writer, writer


def _env_over_limit(job: Mapping[str, Any], path: Path, limit: int, declaration: Declaration) -> str:
    """The message for an env list over the kind's `maxItems` (the create is rejected)."""
    own, writer = _env_entries(job, path)
    return (
        f"environment: the {declaration.kind} holds {own + writer} environment entries ({own} of the task's, {writer} "
        f"the backend wrote), more than the {limit} {format_path(path)} admits (maxItems); keep at most "
        f"{limit - WRITER_ENV_ENTRIES} of your own (the backend writes up to {WRITER_ENV_ENTRIES} in a Flyte "
        f"execution): {_ENV_ADVICE}"
    )


def _env_execution_note(job: Mapping[str, Any], path: Path, limit: int, declaration: Declaration) -> str | None:
    """A note when the task's own entries leave no room for the writer's in a Flyte execution, or None."""
    own, writer = _env_entries(job, path)
    if own + WRITER_ENV_ENTRIES <= limit:
        return None
    return (
        f"environment: this {declaration.kind} holds {own + writer} of the {limit} entries {format_path(path)} "
        f"admits (maxItems) and is admitted as it is; in a Flyte execution the backend writes up to "
        f"{WRITER_ENV_ENTRIES} of its own ({writer} here), so the job of an execution would hold up to "
        f"{own + WRITER_ENV_ENTRIES}, {own + WRITER_ENV_ENTRIES - limit} over the limit, and be rejected: keep at most "
        f"{limit - WRITER_ENV_ENTRIES} entries of your own ({own} now): {_ENV_ADVICE}"
    )


_UNLIMITED = [d.config_name for d in DECLARED if d.limits.env_max_items is None]
_ENV_ADVICE = (
    "group settings into one JSON value, mount a ConfigMap or Secret (envFrom in the pod template does not count)"
    + (f", or use target {' or '.join(repr(n) for n in _UNLIMITED)}, whose env has no such limit" if _UNLIMITED else "")
)


def _largest_values(job: Any, path: Path = ()) -> list[tuple[int, Path]]:
    if isinstance(job, Mapping):
        return [x for k, v in job.items() for x in _largest_values(v, (*path, str(k)))]
    if isinstance(job, list):
        return [x for i, v in enumerate(job) for x in _largest_values(v, (*path, i))]
    return [(len(str(job).encode()), path)] if isinstance(job, str) else []


def _size_problems(job: Mapping[str, Any], declaration: Declaration) -> list[Problem]:
    size = job_size(job)
    if size + _SIZE_MARGIN <= STORED_MAX_BYTES:
        return []
    values = sorted(_largest_values(job), reverse=True)[:3]
    named = ", ".join(f"{setting_for(job, p)} ({n:,} bytes)" for n, p in values if n >= 1024)
    where = setting_for(job, values[0][1]) if values else "job"
    kind = str(job.get("kind"))
    copies = ""
    if declaration.limits.copies_note and len(declaration.pod_template_paths(job)) > 1:
        copies = f" ({declaration.limits.copies_note})"
    if size > REQUEST_MAX_BYTES:
        limit = f"the API server's {REQUEST_MAX_BYTES:,}-byte (3 MiB) request limit"
    elif size > STORED_MAX_BYTES:
        limit = f"the {STORED_MAX_BYTES:,} bytes (1.5 MiB) etcd stores"
    else:
        message = (
            f"{where}: the {kind} is {size:,} bytes and is admitted as it is, with {STORED_MAX_BYTES - size:,} bytes "
            f"of headroom under the {STORED_MAX_BYTES:,} etcd stores: what a Flyte execution adds (its identity in up "
            f"to {WRITER_ENV_ENTRIES} environment entries per pod template{copies}, longer paths) and what the API "
            f"server adds when it stores the job (uid, managedFields, status) take from it; largest values: {named}"
        )
        return [Problem(NOTE, "", where, message)]
    message = (
        f"{where}: the {kind} is {size:,} bytes{copies}, over {limit}; largest values: {named}; {LARGE_VALUE_ADVICE}"
    )
    return [Problem(REJECTED, "", where, message)]
