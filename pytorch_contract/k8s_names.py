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
    "NVIDIA_GPU",
    "ENV_VAR_NAME",
    "env_var_name_problem",
    "image_reference_problem",
    "JOB_NAME_MAX_LENGTH",
    "REPLICA_INDEX_DIGITS",
    "MAX_REPLICAS_PER_ROLE",
    "REPLICA_TYPE_LABEL",
    "REPLICA_INDEX_LABEL",
    "JOB_NAME_LABEL",
    "COMPLETION_INDEX_LABEL",
    "JOBSET_NAME_LABEL",
    "TRAINJOB_NODE_ENV",
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


ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
"""An environment variable name as the API server validates it without `RelaxedEnvironmentVariableValidation`
(`k8s.io/apimachinery/pkg/util/validation.IsEnvVarName`): letters, digits, '_', '-', '.', not starting with a digit.
That gate (alpha 1.30, on by default from 1.32, GA in 1.34) relaxes the rule to printable ASCII but '='; the
strict rule is the one every supported Kubernetes version accepts, so it is the one checked here."""


def env_var_name_problem(name: object) -> str | None:
    """What is wrong with `name` as a container environment variable name, or None when Kubernetes accepts it.

    Args:
        name: the candidate name.

    Returns:
        A short description of the problem (for a message), or None.
    """
    if not isinstance(name, str) or not name:
        return "not a non-empty string"
    if not ENV_VAR_NAME.match(name):
        return "not an environment variable name Kubernetes accepts"
    if name in (".", "..") or name.startswith(".."):
        return "'.', '..' or a name starting with '..', which Kubernetes rejects"
    return None


# Image references, as the kubelet parses them (the grammar of github.com/distribution/reference, which containerd
# and Docker use): [domain[:port]/]path[:tag][@digest], with a lower-case path.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_PATH = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*\Z")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_DOMAIN = re.compile(rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?\Z")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_IMAGE_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}\Z")
_IMAGE_NAME_MAX = 255


def image_reference_problem(image: object) -> str | None:
    """What the kubelet would reject in an image reference (`InvalidImageName`), or None when it is valid.

    The first path component is a registry when it contains '.' or ':', is `localhost`, or has an upper-case letter
    (Docker's rule); the rest, the repository path, must be lower case. Tags are up to 128 of [A-Za-z0-9_.-] (not
    starting with '.' or '-'); digests are `<algorithm>:<hex>`.

    Args:
        image: the candidate reference, e.g. `ghcr.io/org/train:1.0`.

    Returns:
        A short description of the problem naming the offending part, or None.
    """
    if not isinstance(image, str) or not image:
        return "not a non-empty string"
    if not image.isascii() or any(c.isspace() for c in image):
        return "not ASCII without spaces"
    name, _, digest = image.partition("@")
    if digest and not _IMAGE_DIGEST.match(digest):
        return f"digest {digest!r} is not '<algorithm>:<hex>' (e.g. 'sha256:' and 64 hex digits)"
    last = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > last:
        name, tag = name[:colon], name[colon + 1 :]
        if not _IMAGE_TAG.match(tag):
            return f"tag {tag!r} is not up to 128 of [A-Za-z0-9_.-] starting with a letter, digit or '_'"
    domain, slash, path = name.partition("/")
    if not slash or not ("." in domain or ":" in domain or domain == "localhost" or domain.lower() != domain):
        domain, path = "", name
    if domain and not _IMAGE_DOMAIN.match(domain):
        return f"registry {domain!r} is not a host name or IP with an optional port"
    if not _IMAGE_PATH.match(path):
        if path.lower() != path and _IMAGE_PATH.match(path.lower()):
            return f"repository path {path!r} has upper-case letters; it must be lower case"
        return (
            f"repository path {path!r} is not lower-case letters and digits in '/'-separated parts joined by "
            "'.', '_', '__' or '-'"
        )
    if len(name) > _IMAGE_NAME_MAX:
        return f"repository name is {len(name)} characters; at most {_IMAGE_NAME_MAX}"
    return None


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
"""JobSet's label on every pod of the JobSet a TrainJob creates (the JobSet is named after the TrainJob)."""

COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""An Indexed Job's label (and annotation) on a pod: its completion index, the TrainJob node's index."""

TRAINJOB_NODE_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
"""Set by Kubeflow Trainer's torch runtime in every node of a TrainJob: the launcher in a pod plans from them, and the
Trainer webhook rejects a TrainJob whose `trainer.env` names one."""
