"""Kubernetes name grammars, written once for the SDK's decoration-time checks and the backend's template checks.

Each pattern is anchored with `^` and `\\Z` (not `$`, which also matches before a final newline and so let
values such as ``"flyte\\n"`` through), so `pattern.match(s)` and `pattern.fullmatch(s)` agree. Character classes
are spelled out as ASCII: Kubernetes rejects the Unicode letters and digits that `\\w` and `\\d` accept.
Lengths are part of each pattern, as in `k8s.io/apimachinery/pkg/util/validation`.
"""

from __future__ import annotations

import re

__all__ = [
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "DNS1035_LABEL",
    "LABEL_VALUE",
    "QUALIFIED_NAME",
    "EXTENDED_RESOURCE_NAME",
    "is_label_value",
    "QUEUE_NAME",
    "QUEUE_NAME_MAX_LENGTH",
    "queue_name_problem",
    "NVIDIA_GPU",
    "ENV_VAR_NAME",
    "RELAXED_ENV_VAR_NAME",
    "RELAXED_ENV_NAMES_SINCE",
    "env_var_name_problem",
    "relaxed_env_var_name_problem",
    "container_name_problem",
    "image_reference_problem",
    "JOB_NAME_MAX_LENGTH",
    "REPLICA_INDEX_DIGITS",
    "MAX_REPLICAS_PER_ROLE",
    "REPLICA_TYPE_LABEL",
    "REPLICA_INDEX_LABEL",
    "JOB_NAME_LABEL",
    "COMPLETION_INDEX_LABEL",
    "JOBSET_NAME_LABEL",
    "JOBSET_REPLICATED_JOB_LABEL",
    "JOBSET_RESTART_ATTEMPT_LABEL",
    "TRAINJOB_NODE_ENV",
    "COMPLETION_INDEX_ENV",
    "NODE_RANK_OFFSET_ENV",
]

NVIDIA_GPU = "nvidia.com/gpu"
"""The extended resource NVIDIA's device plugin advertises, and the one flytekit writes for `Resources(gpu=...)`."""

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"  # one DNS-1123 label, at most 63 characters
_PART = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"  # one part of a subdomain (Kubernetes bounds only the whole)
_SUBDOMAIN = rf"(?=[-a-z0-9.]{{1,253}}(?:/|\Z)){_PART}(?:\.{_PART})*"  # dot-separated parts, at most 253
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"  # the name part of a qualified name, at most 63

DNS1123_LABEL = re.compile(rf"^{_LABEL}\Z")
"""A DNS-1123 label: namespaces, container names, pod and Service name parts (lower case, digits, '-'; <= 63)."""

DNS1035_LABEL = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")
"""A DNS-1035 label: a DNS-1123 label that starts with a letter (job names; Services are named after them)."""

DNS1123_SUBDOMAIN = re.compile(rf"^{_SUBDOMAIN}\Z")
"""A DNS-1123 subdomain: PriorityClass, ServiceAccount and most object names (dot-separated labels; <= 253)."""

LABEL_VALUE = re.compile(rf"^{_NAME}\Z")
"""A non-empty label value (letters, digits, '-', '_', '.'; alphanumeric at both ends; <= 63). Kubernetes also
accepts the empty value: see `is_label_value`."""

QUALIFIED_NAME = re.compile(rf"^(?:{_SUBDOMAIN}/)?{_NAME}\Z")
"""A qualified name: label and annotation keys, resource names (`cpu`, `nvidia.com/gpu`): an optional
DNS-subdomain prefix and `/`, then a name of at most 63 characters."""

EXTENDED_RESOURCE_NAME = re.compile(rf"^{_SUBDOMAIN}/{_NAME}\Z")
"""An extended resource name: a qualified name whose prefix is mandatory (`nvidia.com/gpu`, `amd.com/gpu`,
`nvidia.com/mig-1g.5gb`), as device plugins advertise them."""


def is_label_value(value: object, *, allow_empty: bool = True) -> bool:
    """Whether `value` is a Kubernetes label value.

    Args:
        value: anything.
        allow_empty: whether the empty string counts (Kubernetes accepts it on objects; a queue name needs text).

    Returns:
        True for a string of at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends.
    """
    if not isinstance(value, str):
        return False
    return (allow_empty and value == "") or LABEL_VALUE.match(value) is not None


QUEUE_NAME_MAX_LENGTH = 63
"""The longest queue name: the name is also the value of the ``kueue.x-k8s.io/queue-name`` label (a label value holds
at most 63 characters)."""

QUEUE_NAME = re.compile(rf"^(?=.{{1,{QUEUE_NAME_MAX_LENGTH}}}\Z){_SUBDOMAIN}\Z")
"""A queue name (``RunPolicy.queue``, ``pytorch.queue``): a DNS-1123 subdomain of at most 63 characters.

The one value sets two fields, and each has its own reader:

- the job's ``kueue.x-k8s.io/queue-name`` label. The API server takes any label value, but Kueue's job webhook
  refuses the create unless the label is a DNS-1123 subdomain (kubernetes-sigs/kueue,
  ``pkg/controller/jobframework/validation.go``: ``ValidateQueueName`` -> ``ValidateLabelAsCRDName`` ->
  ``validation.IsDNS1123Subdomain``), since it names a ``LocalQueue``, an object whose name is one; and a label value
  is at most 63 characters (``validation.IsValidLabelValue``). So ``Team_A`` (upper case, ``_``) is refused, and so is
  ``a..b``.
- a PyTorchJob's ``spec.runPolicy.schedulingPolicy.queue``, which Volcano copies into the job's PodGroup
  (``spec.queue``) and schedules from the ``Queue`` object of that name. A ``Queue`` is a custom resource, whose name
  the API server checks as a DNS-1123 subdomain (apiextensions-apiserver's custom resource strategy,
  ``NameIsDNSSubdomain``; Volcano's queue webhook adds no rule of its own on the name), so every name Volcano can
  schedule into is a subdomain too; only its length (up to 253) is wider, and the label bounds that to 63 for every
  job that names a queue.
"""


def queue_name_problem(value: object) -> str | None:
    """Why ``value`` cannot name a Kueue ``LocalQueue`` or a Volcano ``Queue`` (:data:`QUEUE_NAME`), or ``None``.

    Args:
        value: the queue name given.

    Returns:
        str | None: what is wrong, in words that name what is allowed; ``None`` for a valid name.
    """
    allowed = (
        "a queue name is a DNS-1123 subdomain of at most 63 characters (lower-case letters, digits, '-' and '.', "
        "a letter or digit at each end of every dot-separated part): Kueue's webhook requires it of the "
        "kueue.x-k8s.io/queue-name label value (ValidateQueueName)"
    )
    if not isinstance(value, str):
        return f"{allowed}; got {type(value).__name__}"
    if QUEUE_NAME.match(value):
        return None
    if len(value) > QUEUE_NAME_MAX_LENGTH:
        return f"{allowed}; this one has {len(value)} characters"
    near = value.lower().replace("_", "-")
    if QUEUE_NAME.match(near):
        return f"{allowed} (did you mean {near!r}?)"
    return allowed


ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
"""The strict environment variable name (`k8s.io/apimachinery/pkg/util/validation.IsEnvVarName`): letters, digits,
'_', '-', '.', not starting with a digit. Every API server applies it where `RelaxedEnvironmentVariableValidation`
is off: by default before 1.32 (alpha in 1.30, beta and on by default in 1.32, GA in 1.34)."""

RELAXED_ENV_VAR_NAME = re.compile(r"^[ -<>-~]+\Z")
"""The relaxed environment variable name (`validation.IsRelaxedEnvVarName`): one or more printable ASCII characters
(space to '~', as Go's `unicode.IsPrint` reads ASCII) other than '='. Kubernetes accepts it by default from 1.32."""

RELAXED_ENV_NAMES_SINCE = "1.32"
"""The first Kubernetes release whose API server accepts relaxed environment variable names by default
(`RelaxedEnvironmentVariableValidation`: beta and on by default in 1.32, GA in 1.34)."""


def env_var_name_problem(name: object) -> str | None:
    """What the strict rule (`IsEnvVarName`, the one API servers before 1.32 apply) finds wrong with `name`.

    A name with a problem here is still accepted from Kubernetes 1.32 on: `relaxed_env_var_name_problem` is that
    rule, and `pytorch_contract.pod_rules.env_name_problems` (refuse) and `env_name_warnings` (warn) are the
    verdicts callers give; the wording here ("Kubernetes rejects") is the strict rule's own.

    Args:
        name: the candidate name.

    Returns:
        A short description of the problem (for a message), or None when every Kubernetes version accepts it.
    """
    if not isinstance(name, str) or not name:
        return "not a non-empty string"
    if not ENV_VAR_NAME.match(name):
        return "not an environment variable name Kubernetes accepts"
    if name in (".", "..") or name.startswith(".."):  # validation.hasChDirPrefix
        return "'.', '..' or a name starting with '..', which Kubernetes rejects"
    return None


def relaxed_env_var_name_problem(name: object) -> str | None:
    """What `validation.IsRelaxedEnvVarName` finds wrong with `name`: the rule of Kubernetes 1.32 and later, and
    the most any version accepts (a name it refuses, no API server takes).

    Args:
        name: the candidate name.

    Returns:
        A short description of the problem, or None when Kubernetes 1.32 and later accept it.
    """
    if not isinstance(name, str) or not name:
        return "not a non-empty string"
    if not RELAXED_ENV_VAR_NAME.match(name):
        if "=" in name:
            return "it holds '='"
        if not name.isascii():
            return "it is not ASCII"
        return "it holds a character that is not printable"
    return None


def container_name_problem(name: object) -> str | None:
    """What the API server finds wrong with a container name (`validateContainers`: required, then
    `validation.IsDNS1123Label`): at most 63 lower-case letters, digits and '-', starting and ending with a letter
    or digit.

    Args:
        name: the candidate name.

    Returns:
        A short description of the problem, or None when Kubernetes accepts it.
    """
    if not isinstance(name, str) or not name:
        return "empty or not a string (a container needs a name)"
    if len(name) > 63:
        return f"{len(name)} characters, over the 63 of a DNS-1123 label"
    if not DNS1123_LABEL.match(name):
        return "not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)"
    return None


# Image references as the kubelet parses them before it pulls (`applyDefaultImageTag` calls distribution/reference's
# `ParseNormalizedNamed`; an error is `InvalidImageName` and the container never starts). The grammar is
# distribution/reference's: [domain[:port]/]path[:tag][@digest], then go-digest's `Parse` for the digest.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"  # Go's \w is ASCII
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?\Z"
)
_NAME_PARTS = re.compile(rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)\Z")
_IDENTIFIER = re.compile(r"^[a-f0-9]{64}\Z")
_IMAGE_TAG = re.compile(rf"^{_TAG}\Z")
_DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
"""go-digest's registered algorithms (`algorithm.go`) and their lower-case hex lengths."""
_IMAGE_PATH_MAX = 255  # reference.RepositoryNameTotalLengthMax, counted on the path without the domain


def _docker_domain(name: str) -> tuple[str, str]:
    """distribution/reference's `splitDockerDomain`: (registry, the rest), Docker Hub's defaults filled in."""
    first, slash, rest = name.partition("/")
    if not slash:
        return "docker.io", "library/" + name
    if first == "localhost":
        domain, remainder = first, rest
    elif first == "index.docker.io":
        domain, remainder = "docker.io", rest
    elif "." in first or ":" in first or first.lower() != first:
        domain, remainder = first, rest
    else:
        domain, remainder = "docker.io", name
    if domain == "docker.io" and "/" not in remainder:
        remainder = "library/" + remainder
    return domain, remainder


def image_reference_problem(image: object) -> str | None:
    """What the kubelet would refuse in an image reference (`InvalidImageName`), or None when it pulls it.

    The rule is distribution/reference's `ParseNormalizedNamed` (which the kubelet calls before every pull), with
    go-digest's `Parse` for a digest:

    - a bare 64-hex-digit string is refused (it reads as an image ID, not a name);
    - the first path component is a registry when it is `localhost` or contains '.', ':' or an upper-case letter,
      and a name without one is Docker Hub's (`ubuntu` is `docker.io/library/ubuntu`);
    - the repository path is lower-case components joined by '.', '_', '__' or dashes, at most 255 characters;
    - a tag is up to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'; no tag means `:latest`;
    - a digest is `sha256:` and 64, `sha384:` and 96 or `sha512:` and 128 lower-case hex digits.

    Args:
        image: the candidate reference, e.g. `ghcr.io/org/train:1.0`.

    Returns:
        A short description of the problem naming the offending part, or None.
    """
    if not isinstance(image, str) or not image:
        return "not a non-empty string"
    if _IDENTIFIER.match(image):
        return "a 64-hex-digit string, which reads as an image ID, not a repository name"
    domain, remainder = _docker_domain(image)
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        shown = remote if remote in image else remote.removeprefix("library/")
        return f"repository path {shown!r} has upper-case letters; it must be lower case"
    match = _REFERENCE.match(f"{domain}/{remainder}")
    if match is None:
        return _reference_format_problem(image)
    parts = _NAME_PARTS.match(match["name"])
    path = parts["path"] if parts is not None else match["name"]
    if len(path) > _IMAGE_PATH_MAX:
        return f"repository path is {len(path)} characters; at most {_IMAGE_PATH_MAX}"
    digest = match["digest"]
    if digest is not None:
        algorithm, _, encoded = digest.partition(":")
        length = _DIGEST_HEX_LENGTHS.get(algorithm)
        if length is None:
            return f"digest algorithm {algorithm!r} is not one the kubelet verifies (sha256, sha384 or sha512)"
        if len(encoded) != length or not re.fullmatch(r"[a-f0-9]+", encoded):
            return f"digest {digest!r} is not '{algorithm}:' and {length} lower-case hex digits"
    return None


def _reference_format_problem(image: str) -> str:
    """Which part of a reference that does not parse is wrong, for the message."""
    if not image.isascii() or any(c.isspace() for c in image):
        return "not ASCII without spaces"
    name, at, digest = image.partition("@")
    if at and not re.fullmatch(_DIGEST, digest):
        return f"digest {digest!r} is not '<algorithm>:<hex>' (e.g. 'sha256:' and 64 lower-case hex digits)"
    last, colon = name.rfind("/"), name.rfind(":")
    if colon > last:
        name, tag = name[:colon], name[colon + 1 :]
        if not _IMAGE_TAG.match(tag):
            return f"tag {tag!r} is not up to 128 of [A-Za-z0-9_.-] starting with a letter, digit or '_'"
    domain, remainder = _docker_domain(name)
    if not re.fullmatch(_DOMAIN, domain):
        return f"registry {domain!r} is not a host name or IP with an optional port"
    shown = remainder if remainder in image else remainder.removeprefix("library/")
    return (
        f"repository path {shown!r} is not lower-case letters and digits in '/'-separated parts joined by "
        "'.', '_', '__' or '-'"
    )


JOB_NAME_MAX_LENGTH = 50
"""The longest job name the backend gives a job (`backend_plugin.execution.job_name`): 63 (a DNS label) minus
`-worker-` minus 5 index digits, so that the operator's pod and Service names `<job>-worker-<index>` stay valid."""

REPLICA_INDEX_DIGITS = 63 - JOB_NAME_MAX_LENGTH - len("-worker-")
"""Digits left for the replica index in the operator's pod and Service names `<job>-worker-<index>`, which are
DNS labels of at most 63 characters: 5."""

MAX_REPLICAS_PER_ROLE = 10**REPLICA_INDEX_DIGITS
"""The most replicas of one role (indices 0..99999) whose pod and Service names fit 63 characters."""

# Labels and variables the cluster puts on a job's pods: the backend reads the labels to name replicas and find a
# job's pods; the launcher in a pod reads the variables (and the SDK's docs name both).

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
"""The training operator's label on every pod of a PyTorchJob: the job's name."""

REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
"""The training operator's label on a PyTorchJob pod: its replica type (`master`, `worker`)."""

REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
"""The training operator's label on a PyTorchJob pod: its index within the replica type."""

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""JobSet's label on every pod of a JobSet: the JobSet's name (a TrainJob's JobSet is named after the TrainJob)."""

JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
"""JobSet's label on every pod of a JobSet: the replicated job it belongs to (`master`, `worker`, a TrainJob's
`node`)."""

JOBSET_RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
"""JobSet's label on every child Job and pod: the JobSet restart it was created for (`status.restarts` then)."""

COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""An Indexed Job's label (and annotation) on a pod: its completion index, the TrainJob node's index."""

TRAINJOB_NODE_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
"""Set by Kubeflow Trainer's torch runtime in every node of a TrainJob: the launcher in a pod plans from them, and the
Trainer webhook rejects a TrainJob whose `trainer.env` names one."""

COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
"""Set by Kubernetes' Job controller in every container of an Indexed Job's pod: the pod's completion index."""

NODE_RANK_OFFSET_ENV = "FLYTE_PYTORCH_NODE_RANK_OFFSET"
"""Written by the backend into the training container of every JobSet pod: the node rank of its role's first pod (0
for the master, 1 for the workers). One pod template serves every pod of a role, so the pod's own rank cannot be
written into it; the launcher in the pod adds `COMPLETION_INDEX_ENV` to this offset and gives the task `RANK` and
`PET_NODE_RANK` as the training operator gives them to a PyTorchJob replica."""
