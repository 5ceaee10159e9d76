"""The JobSet kind's own admission rules, beyond its CRD's schema: `webhook_checks(job) -> [KindCheck]`.

Two sources, each rule with the verdict the cluster gives it:

- JobSet's validating webhook (`pkg/webhooks/jobset_webhook.go`, v0.12.0), run on every create: the names of the
  child Jobs and pods the controller generates (`<jobset>-<replicated job>-<job index>` and
  `<job>-<pod index>-<5 random>`) must be DNS-1035 labels of at most 63 characters, a `network.subdomain` a DNS-1123
  subdomain and a DNS-1035 label, `managedBy` a domain-prefixed path of at most 63 characters, a `groupName` a DNS-1035
  label; replicas x parallelism within int32; `dependsOn` only on an earlier replicated job; the success and
  failure policies name existing replicated jobs, failure-policy rule names match `^[A-Za-z]([A-Za-z0-9_,:]*
  [A-Za-z0-9_])?$`, at most 128 characters, unique, and their job failure reasons are ones a Job has. Refused
  (`rejected`). The actions and the restart strategy behind alpha feature gates (off by default) are `note`s: the
  cluster decides.
- Kubernetes' validation of the batch/v1 Jobs the controller creates from each replicated job's template
  (`pkg/apis/batch/validation`): a pod failure policy needs `restartPolicy: Never` and at most 20 rules, an exit-code
  rule names a container of the pod and at most 255 distinct values in ascending order (no 0 for `In`), an Indexed Job
  with `parallelism` needs `completions` (with neither, both are 1), `FailIndex` needs `backoffLimitPerIndex`. The
  JobSet is created, but the controller's every create of the Job fails (an event `JobCreationFailed`) and no pod ever
  runs (`unstartable`).

The rules read the job as JobSet's mutating webhook leaves it, which runs first: an unnamed failure-policy rule is
`failurePolicyRule<index>`, a replicated job without `completionMode` is Indexed, a pod without `restartPolicy` has
`OnFailure`. Pure: a job in, findings out; the writer never writes a job these refuse, and `render --check` shows them
for a job built any other way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Optional

from backend_plugin.kinds.declaration import KindCheck, Path
from pytorch_contract.k8s_names import DNS1035_LABEL, DNS1123_SUBDOMAIN, is_label_value

__all__ = [
    "webhook_checks",
    "generated_names",
    "domain_prefixed_path_problem",
    "dns1035_problem",
    "child_job_name",
    "pod_name_prefix",
    "POD_SUFFIX",
    "FAILURE_REASONS",
    "RULE_NAME",
]

MAX_NAME = 63
MAX_INT32 = 2**31 - 1
POD_SUFFIX = "-abcde"
"""The webhook measures a pod name with a 5-character random suffix (as the Job controller adds one)."""

FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                   "PodFailurePolicy")  # fmt: skip
"""The reasons of a failed Job (batch/v1 `JobReason*`) a failure-policy rule may name."""

RULE_NAME = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z")
"""A failure-policy rule's name (the webhook's `ruleNameFmt`), 1 to 128 characters."""

_RESTART_JOB_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+\Z")
_MAX_RULES = 20
_MAX_EXIT_CODES = 255
_MAX_CONDITIONS = 20
_MAX_REPLICAS_WITH_RESTART_JOB = 1024


def child_job_name(jobset: str, replicated_job: str, job_index: int) -> str:
    """The name the JobSet controller gives a child Job: `<jobset>-<replicated job>-<job index>`.

    Args:
        jobset: the JobSet's name.
        replicated_job: the replicated job's name.
        job_index: the Job's index within it.

    Returns:
        The name.
    """
    return f"{jobset}-{replicated_job}-{job_index}"


def pod_name_prefix(jobset: str, replicated_job: str, job_index: int, pod_index: int) -> str:
    """A pod's name without its random suffix, and its hostname: `<jobset>-<replicated job>-<job>-<pod index>`.

    Args:
        jobset: the JobSet's name.
        replicated_job: the replicated job's name.
        job_index: the Job's index.
        pod_index: the pod's completion index.

    Returns:
        The name.
    """
    return f"{child_job_name(jobset, replicated_job, job_index)}-{pod_index}"


def generated_names(job: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The longest names the JobSet and Job controllers derive from a JobSet's name: per replicated job, its last
    child Job (`<jobset>-<replicated job>-<job index>`) and, for an Indexed Job, its last pod with the 5-character
    suffix the Job controller adds (the webhook measures both against 63 characters, `IsDNS1035Label`).

    Args:
        job: a JobSet.

    Returns:
        (name, what it names) pairs.
    """
    jobset = str((job.get("metadata") or {}).get("name") or "")
    out: list[tuple[str, str]] = []
    for rjob in (job.get("spec") or {}).get("replicatedJobs") or []:
        if not isinstance(rjob, Mapping):
            continue
        rname = str(rjob.get("name"))
        replicas = _int(rjob.get("replicas"), 1)
        out.append((child_job_name(jobset, rname, max(0, replicas - 1)), f"{rname} Job"))
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        completions = job_spec.get("completions")
        if job_spec.get("completionMode", "Indexed") == "Indexed" and isinstance(completions, int):
            last = pod_name_prefix(jobset, rname, max(0, replicas - 1), max(0, completions - 1)) + POD_SUFFIX
            out.append((last, f"{rname} pod"))
    return tuple(out)


def dns1035_problem(value: Any) -> Optional[str]:
    """What `validation.IsDNS1035Label` finds wrong with a name.

    Args:
        value: the candidate.

    Returns:
        A short description, or None for a DNS-1035 label.
    """
    if not isinstance(value, str):
        return "not a string"
    if len(value) > MAX_NAME:
        return f"{len(value)} characters, over the {MAX_NAME} of a DNS-1035 label"
    if not DNS1035_LABEL.match(value):
        return (
            "not a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, ending with a letter "
            "or digit)"
        )
    return None


def domain_prefixed_path_problem(value: Any) -> Optional[str]:
    """What JobSet's webhook finds wrong with a `managedBy` value: `validation.IsDomainPrefixedPath` (a DNS-1123
    subdomain, `/`, then HTTP path characters) and at most 63 characters.

    Args:
        value: the candidate.

    Returns:
        A short description, or None when the webhook accepts it.
    """
    if not isinstance(value, str) or not value:
        return "not a non-empty string"
    host, slash, path = value.partition("/")
    if not slash or not host or not path:
        return "not a domain-prefixed path (such as 'acme.io/foo')"
    if not DNS1123_SUBDOMAIN.match(host):
        return f"{host!r} is not a DNS-1123 subdomain"
    if not _HTTP_PATH.match(path):
        return f"{path!r} is not an HTTP path"
    if len(value) > MAX_NAME:
        return f"{len(value)} characters, over the {MAX_NAME} JobSet allows"
    return None


def webhook_checks(job: Mapping[str, Any]) -> list[KindCheck]:
    """Every finding of JobSet's webhook and of the child Jobs' validation for a JobSet.

    Args:
        job: a JobSet.

    Returns:
        Findings, in the order of the job's fields.
    """
    raw = job.get("spec")
    spec: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    name = str((job.get("metadata") or {}).get("name") or "")
    jobs = [j for j in spec.get("replicatedJobs") or [] if isinstance(j, Mapping)]
    names = [str(j.get("name")) for j in jobs]
    out = [*_network(spec), *_managed_by(spec)]
    for i, rjob in enumerate(jobs):
        out += _replicated_job(name, i, rjob, names[:i])
        out += _child_job(i, rjob)
    out += _targets(("spec", "successPolicy", "targetReplicatedJobs"), (spec.get("successPolicy") or {}), names)
    out += _failure_policy(spec.get("failurePolicy"), jobs, names)
    out += _coordinator(name, spec, jobs)
    return out


def _network(spec: Mapping[str, Any]) -> Iterator[KindCheck]:
    subdomain = (spec.get("network") or {}).get("subdomain")
    if not subdomain:
        return
    where: Path = ("spec", "network", "subdomain")
    if not DNS1123_SUBDOMAIN.match(str(subdomain)):
        yield KindCheck(where, f"{subdomain!r} is not a DNS-1123 subdomain; JobSet's webhook refuses it")
    problem = dns1035_problem(subdomain)
    if problem is not None:
        yield KindCheck(where, f"{subdomain!r} is {problem}: it names the JobSet's headless Service")


def _managed_by(spec: Mapping[str, Any]) -> Iterator[KindCheck]:
    if "managedBy" not in spec or spec["managedBy"] is None:
        return
    problem = domain_prefixed_path_problem(spec["managedBy"])
    if problem is not None:
        yield KindCheck(("spec", "managedBy"), f"{spec['managedBy']!r} is {problem}; JobSet's webhook refuses it")


def _replicated_job(jobset: str, i: int, rjob: Mapping[str, Any], earlier: list[str]) -> Iterator[KindCheck]:
    where: Path = ("spec", "replicatedJobs", i)
    rname = str(rjob.get("name"))
    group = rjob.get("groupName", "default")  # the CRD's default
    problem = dns1035_problem(group)
    if problem is not None:
        yield KindCheck((*where, "groupName"), f"{group!r} is {problem}; JobSet's webhook refuses it")
    replicas = _int(rjob.get("replicas"), 1)
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    parallelism = _int(job_spec.get("parallelism"), 1)
    if replicas * parallelism > MAX_INT32:
        yield KindCheck((*where, "replicas"), f"replicas x parallelism of {rname!r} exceeds {MAX_INT32}")
    longest_job = child_job_name(jobset, rname, max(0, replicas - 1))
    problem = dns1035_problem(longest_job)
    if problem is not None:
        yield KindCheck(
            ("metadata", "name"),
            f"the Jobs the JobSet controller names after it, e.g. {longest_job!r}, would be {problem}; JobSet's "
            "webhook refuses it: use a shorter name",
        )
    completions = job_spec.get("completions")
    if job_spec.get("completionMode", "Indexed") == "Indexed" and isinstance(completions, int):
        longest_pod = pod_name_prefix(jobset, rname, max(0, replicas - 1), max(0, completions - 1)) + POD_SUFFIX
        problem = dns1035_problem(longest_pod)
        if problem is not None:
            yield KindCheck(
                ("metadata", "name"),
                f"the pods the Jobs create, e.g. {longest_pod!r} (with its 5-character suffix), would be {problem}; "
                "JobSet's webhook refuses it: use a shorter name",
            )
    depends = [d for d in rjob.get("dependsOn") or [] if isinstance(d, Mapping)]
    if depends and not earlier:
        yield KindCheck((*where, "dependsOn"), "the first replicated job cannot depend on another")
    for d in depends:
        if earlier and d.get("name") not in earlier:
            yield KindCheck((*where, "dependsOn"), f"{rname!r} cannot depend on {d.get('name')!r}, not an earlier one")


def _child_job(i: int, rjob: Mapping[str, Any]) -> Iterator[KindCheck]:
    """Kubernetes' validation of the batch/v1 Job the controller creates from one replicated job's template."""
    where: Path = ("spec", "replicatedJobs", i, "template", "spec")
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    pod_spec = (job_spec.get("template") or {}).get("spec") or {}
    why = "the JobSet would be created, but its controller's every create of this Job would fail and no pod would run"
    # Kubernetes defaults both completions and parallelism to 1 when neither is set, and only then
    if (
        job_spec.get("completionMode", "Indexed") == "Indexed"
        and job_spec.get("completions") is None
        and job_spec.get("parallelism") is not None
    ):
        yield KindCheck((*where, "completions"), f"an Indexed Job with parallelism needs completions ({why})",
                        "unstartable")  # fmt: skip
    policy = job_spec.get("podFailurePolicy")
    if not isinstance(policy, Mapping):
        return
    if pod_spec.get("restartPolicy") != "Never":
        yield KindCheck(
            (*where, "template", "spec", "restartPolicy"),
            f"a Job with a podFailurePolicy needs restartPolicy Never, not {pod_spec.get('restartPolicy')!r} ({why})",
            "unstartable",
        )
    rules = [r for r in policy.get("rules") or [] if isinstance(r, Mapping)]
    if len(rules) > _MAX_RULES:
        yield KindCheck((*where, "podFailurePolicy", "rules"), f"{len(rules)} rules, over {_MAX_RULES} ({why})",
                        "unstartable")  # fmt: skip
    containers = {c.get("name") for kind in ("containers", "initContainers") for c in pod_spec.get(kind) or []}
    for j, rule in enumerate(rules):
        at = (*where, "podFailurePolicy", "rules", j)
        for problem in _pod_failure_rule(rule, containers, job_spec):
            yield KindCheck(at, f"{problem} ({why})", "unstartable")


def _pod_failure_rule(rule: Mapping[str, Any], containers: set[Any], job_spec: Mapping[str, Any]) -> Iterator[str]:
    codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
    if (codes is None) == (not conditions):  # an empty onPodConditions is as good as none
        yield "a pod failure rule needs exactly one of onExitCodes and onPodConditions"
    if rule.get("action") == "FailIndex" and job_spec.get("backoffLimitPerIndex") is None:
        yield "the action FailIndex needs backoffLimitPerIndex"
    if isinstance(conditions, list) and len(conditions) > _MAX_CONDITIONS:
        yield f"{len(conditions)} pod conditions, over {_MAX_CONDITIONS}"
    if not isinstance(codes, Mapping):
        return
    container = codes.get("containerName")
    if container is not None and container not in containers:
        yield f"onExitCodes.containerName {container!r} is not a container of the pod"
    values = list(codes.get("values") or [])
    if not 0 < len(values) <= _MAX_EXIT_CODES:
        yield f"onExitCodes needs 1 to {_MAX_EXIT_CODES} values, not {len(values)}"
    if values != sorted(set(values)):
        yield "onExitCodes.values must be distinct and in ascending order"
    if codes.get("operator") == "In" and 0 in values:
        yield "onExitCodes.values may not hold 0 with the operator In"


def _targets(where: Path, policy: Mapping[str, Any], names: list[str]) -> Iterator[KindCheck]:
    for target in policy.get("targetReplicatedJobs") or []:
        if target not in names:
            yield KindCheck(
                where, f"{target!r} is not a replicated job of the JobSet ({names}); its webhook refuses it"
            )


def _failure_policy(policy: Any, jobs: list[Mapping[str, Any]], names: list[str]) -> Iterator[KindCheck]:
    if not isinstance(policy, Mapping):
        return
    where: Path = ("spec", "failurePolicy")
    if policy.get("restartStrategy") == "InPlaceRestart":
        yield KindCheck((*where, "restartStrategy"), "InPlaceRestart needs JobSet's alpha feature gate InPlaceRestart "
                        "(off by default): the webhook refuses it where the gate is off", "note")  # fmt: skip
    rules = [r for r in policy.get("rules") or [] if isinstance(r, Mapping)]
    if any(r.get("action") in _RESTART_JOB_ACTIONS for r in rules):
        gated = f"the actions {list(_RESTART_JOB_ACTIONS)} need JobSet's alpha feature gate RestartJob"
        yield KindCheck((*where, "rules"), f"{gated} (off by default): the webhook refuses them where the gate is off",
                        "note")  # fmt: skip
        if any(_int(j.get("replicas"), 1) > _MAX_REPLICAS_WITH_RESTART_JOB for j in jobs):
            yield KindCheck((*where, "rules"), f"RestartJob rules allow at most {_MAX_REPLICAS_WITH_RESTART_JOB} "
                            "replicas per replicated job")  # fmt: skip
    seen: dict[str, int] = {}
    for i, rule in enumerate(rules):
        at = (*where, "rules", i)
        rule_name = str(rule.get("name") or f"failurePolicyRule{i}")  # JobSet's mutating webhook names it
        if not 1 <= len(rule_name) <= 128 or not RULE_NAME.match(rule_name):
            yield KindCheck((*at, "name"), f"rule name {rule_name!r} is not 1 to 128 characters matching "
                            f"{RULE_NAME.pattern}; JobSet's webhook refuses it")  # fmt: skip
        if rule_name in seen:
            yield KindCheck(
                (*at, "name"), f"rule name {rule_name!r} is also rule {seen[rule_name]}'s; names are unique"
            )
        seen.setdefault(rule_name, i)
        yield from _targets(at, rule, names)
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in FAILURE_REASONS:
                yield KindCheck((*at, "onJobFailureReasons"), f"{reason!r} is not a Job failure reason "
                                f"({', '.join(FAILURE_REASONS)}); JobSet's webhook refuses it")  # fmt: skip


def _coordinator(jobset: str, spec: Mapping[str, Any], jobs: list[Mapping[str, Any]]) -> Iterator[KindCheck]:
    coordinator = spec.get("coordinator")
    if not isinstance(coordinator, Mapping):
        return
    where: Path = ("spec", "coordinator")
    rname = coordinator.get("replicatedJob")
    rjob = next((j for j in jobs if j.get("name") == rname), None)
    if rjob is None:
        yield KindCheck(where, f"coordinator replicatedJob {rname!r} does not exist")
        return
    job_index, pod_index = _int(coordinator.get("jobIndex"), 0), _int(coordinator.get("podIndex"), 0)
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    if not 0 <= job_index < _int(rjob.get("replicas"), 1):
        yield KindCheck(where, f"coordinator jobIndex {job_index} is not a Job of {rname!r}")
    completions = job_spec.get("completions")
    if job_spec.get("completionMode", "Indexed") != "Indexed" or not isinstance(completions, int):
        yield KindCheck(where, "the coordinator's Job must be Indexed with completions set")
    elif not 0 <= pod_index < completions:
        yield KindCheck(where, f"coordinator podIndex {pod_index} is not a pod of {rname!r}")
    subdomain = (spec.get("network") or {}).get("subdomain") or jobset
    endpoint = f"{pod_name_prefix(jobset, str(rname), job_index, pod_index)}.{subdomain}"
    if not is_label_value(endpoint):
        yield KindCheck(where, f"the coordinator label value {endpoint!r} is not a label value (at most 63 characters)")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
