"""Configuration of distributed PyTorch tasks: dataclasses that check themselves when built.

Every check runs in ``__post_init__``, so a bad setting fails when the task is decorated (at import of the user's
module), not minutes later when the PyTorchJob is rejected by the cluster. Errors follow one shape::

    <Class>.<field>=<value!r> is <problem>; <what is allowed>

The classes here are the front-end-neutral core: a front-end (``flytekitplugins_pytorch``, ``flyte2_pytorch``)
subclasses each with its own `ConfigTypes` (which classes a role's ``requests``/``limits`` and ``pod_template``
are, and the package its messages name); the checks and their messages are these, for every front-end.

This module imports neither torch nor a Flyte SDK: defining, serializing and registering a task works on a machine
without torch.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from decimal import Decimal
from enum import Enum
from typing import Any, ClassVar, Optional, TypeVar, Union

from pytorch_contract.job_limits import env_count_problem, job_size_problem
from pytorch_contract.k8s_metadata import annotation_problems, label_problems
from pytorch_contract.k8s_names import (
    DNS1123_SUBDOMAIN,
    EXTENDED_RESOURCE_NAME,
    JOB_NAME_MAX_LENGTH,
    LABEL_VALUE,
    MAX_REPLICAS_PER_ROLE,
    image_reference_problem,
    queue_name_problem,
)
from pytorch_contract.pod_rules import (
    container_name_problems,
    env_name_problems,
    env_name_warnings,
    node_selector_problems,
    toleration_problems,
    toleration_warnings,
)
from pytorch_contract.quantity import MAX_WHOLE_QUANTITY, QuantityError, is_whole_quantity, parse_quantity
from pytorch_contract.suggest import did_you_mean
from pytorch_contract.template_keys import (
    NPROC_PER_NODE_WORDS,
    CleanPodPolicy,
    RestartPolicy,
    nproc_per_node_message,
)

__all__ = [
    "ConfigTypes",
    "Resources",
    "PodTemplate",
    "CORE_TYPES",
    "ConfigError",
    "UnknownOptionError",
    "PodTemplateOverrideWarning",
    "JobLimitWarning",
    "ProcessesGpusWarning",
    "KubernetesVersionWarning",
    "RestartPolicy",
    "CleanPodPolicy",
    "RunPolicy",
    "Master",
    "Worker",
    "PyTorch",
    "Elastic",
    "START_METHODS",
    "NPROC_PER_NODE_WORDS",
]

INT32_MAX = 2**31 - 1  # the proto fields (replicas, backoff limit, deadlines) are int32
START_METHODS = ("spawn", "fork", "forkserver")
"""Process start methods of `torch.multiprocessing` / torchrun, in the order of preference."""

QUANTITY_EXAMPLES = "a Kubernetes quantity such as '500m', '2', '4Gi', '512Mi', '1e3'"
RESOURCE_FIELDS = ("cpu", "mem", "gpu", "ephemeral_storage")

_NNODES = re.compile(r" *([0-9]+) *(?:: *([0-9]+) *)?")
_MODULE_NAME = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z"
)  # ASCII digits: int() would also read "١:٢"


@dataclass(frozen=True)
class Resources:
    """A role's resources in the core's own terms (a front-end uses its SDK's class instead; see `ConfigTypes`)."""

    cpu: Any = None
    mem: Any = None
    gpu: Any = None
    ephemeral_storage: Any = None


@dataclass(frozen=True)
class PodTemplate:
    """A role's pod template in the core's own terms: the four attributes flytekit's and Flyte 2's share."""

    pod_spec: Any = None
    primary_container_name: str = "primary"
    labels: Optional[dict[str, str]] = None
    annotations: Optional[dict[str, str]] = None


@dataclass(frozen=True)
class ConfigTypes:
    """What differs between front-ends in a config: the SDK's classes of a role's resources and pod template, and
    the package the messages tell the user to build a config from. The checks and their wording are the core's.

    Attributes:
        package: the front-end's package (``"flytekitplugins_pytorch"``), named in "use <package>.Master(...)".
        resources_type: returns the class of a role's ``requests``/``limits`` (imported when first needed).
        resources_name: that class as the messages name it (``"flytekit.Resources"``).
        resources_hint: what to write instead of a value of another class.
        resource_fields: the class's attributes, in the order they are checked: cpu, memory, GPUs, disk.
        pod_template_type: returns the class of a role's ``pod_template``.
        pod_template_name: that class as the messages name it (``"flytekit PodTemplate"``).
        pod_template_hint: what to write instead.
        extra_resource_check: ``(name, resources) -> None``, the SDK's own refusals (Flyte 2's ``shm`` on a role).
        sdk_modules: top-level modules whose frames a warning skips to point at the user's line.
        gpu_count: ``value -> count`` of a role's ``gpu`` attribute where the SDK spells a GPU request other than as
            a count (Flyte 2's ``"A100:1"`` and ``flyte.GPU("A100", 1)``); None: the value is the count.
        accelerator_object: ``value -> bool``, whether an ``accelerator`` that is not a string is the SDK's own
            accelerator object (flytekit's ``A100``), accepted as the SDK accepts it; None: only strings.
    """

    package: str
    resources_type: Callable[[], type]
    resources_name: str
    resources_hint: str
    resource_fields: tuple[str, str, str, str]
    pod_template_type: Callable[[], type]
    pod_template_name: str
    pod_template_hint: str
    extra_resource_check: Optional[Callable[[str, Any], None]] = None
    sdk_modules: tuple[str, ...] = ()
    gpu_count: Optional[Callable[[Any], Any]] = None
    accelerator_object: Optional[Callable[[Any], bool]] = None

    @property
    def memory_field(self) -> str:
        """The attribute of the memory quantity (``"mem"`` in flytekit, ``"memory"`` in Flyte 2)."""
        return self.resource_fields[1]

    @property
    def gpu_field(self) -> str:
        """The attribute of the GPU count."""
        return self.resource_fields[2]


CORE_TYPES = ConfigTypes(
    package="pytorch_core.config",
    resources_type=lambda: Resources,
    resources_name="pytorch_core.config.Resources",
    resources_hint="use pytorch_core.config.Resources(cpu=..., mem=..., gpu=..., ephemeral_storage=...) or None",
    resource_fields=("cpu", "mem", "gpu", "ephemeral_storage"),
    pod_template_type=lambda: PodTemplate,
    pod_template_name="pytorch_core.config.PodTemplate",
    pod_template_hint="use pytorch_core.config.PodTemplate(pod_spec=kubernetes.client.V1PodSpec(...), labels=...)",
)
"""The core's own types, for a config built without a front-end."""


class ConfigError(ValueError):
    """A setting of a PyTorch task that cannot work.

    The message names the setting, the bad value and what is allowed:
    ``"Worker.replicas=-1 is negative; use a whole number >= 0"``.

    Args:
        message: the full message.
        field: the dotted name of the setting (``"Worker.replicas"``), when there is one.
        value: the rejected value.
    """

    def __init__(self, message: str, *, field: Optional[str] = None, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class UnknownOptionError(ConfigError, TypeError):
    """A keyword argument that no option has; a `TypeError` too, like any unexpected keyword in Python."""


def _fail(name: str, value: Any, problem: str, allowed: str) -> ConfigError:
    """Build the one-shape error: ``<name>=<value!r> is <problem>; <allowed>``."""
    return ConfigError(f"{name}={value!r} is {problem}; {allowed}", field=name, value=value)


def unknown_option(owner: str, name: str, valid: Iterable[str]) -> UnknownOptionError:
    """The error for an unknown keyword, suggesting the closest valid names.

    Args:
        owner: what was called (``"pytorch_task"``).
        name: the unknown keyword.
        valid: every keyword that would have been accepted.

    Returns:
        The error to raise.
    """
    hint = did_you_mean(name, valid)
    return UnknownOptionError(f"{owner}.{name} is not an option; {hint}", field=f"{owner}.{name}", value=name)


KFPYTORCH_NAMES: dict[tuple[str, str], Union[str, dict[Any, str]]] = {
    ("PyTorch", "num_workers"): "PyTorch(worker=Worker(replicas={value!r}))",
    ("PyTorch", "increase_shared_mem"): {True: "PyTorch()", False: 'PyTorch(shm_size="0")'},
    ("Elastic", "increase_shared_mem"): {True: "Elastic()", False: 'Elastic(shm_size="0")'},
    ("Elastic", "rdzv_configs"): {
        "join_timeout": "rdzv_join_timeout",
        "last_call_timeout": "rdzv_last_call_timeout",
        "close_timeout": "rdzv_close_timeout",
        "timeout": "rdzv_join_timeout",
    },
    ("pytorch_task", "num_workers"): "pytorch_task(workers_count={value!r})",
}
"""The keywords of flytekitplugins-kfpytorch 1.16 that are spelled differently here (docs/migration.md has the
full table), keyed by (what was called, keyword): a replacement with ``{value!r}`` for the value given, a value ->
replacement map (``increase_shared_mem``), or for ``rdzv_configs`` a map of its dict keys to our fields."""


def kfpytorch_replacement(owner: str, name: str, value: Any) -> Optional[str]:
    """The exact replacement for a kfpytorch 1.16 keyword, or None when `name` is not one of them.

    Args:
        owner: what was called (``"PyTorch"``, ``"pytorch_task"``).
        name: the keyword.
        value: the value given.

    Returns:
        Code that says the same here, e.g. ``'PyTorch(shm_size="0")'``, or None.
    """
    rule = KFPYTORCH_NAMES.get((owner, name))
    if rule is None:
        return None
    if isinstance(rule, str):
        return rule.format(value=value)
    if name == "rdzv_configs":
        if not isinstance(value, dict) or not value or any(k not in rule for k in value):
            keys = ", ".join(f"{k!r} -> {v}" for k, v in rule.items())
            return f"{owner}(rdzv_join_timeout=..., rdzv_last_call_timeout=..., rdzv_close_timeout=...) ({keys})"
        merged = {rule[k]: v for k, v in value.items()}
        return f"{owner}({', '.join(f'{k}={v!r}' for k, v in merged.items())})"
    if isinstance(value, bool) and value in rule:
        return rule[value]
    return " or ".join(rule.values())


def reject_unknown_options(owner: str, given: Iterable[str], valid: Iterable[str], values: dict[str, Any]) -> None:
    """Raise for the first keyword in `given` that is not in `valid`: kfpytorch's names get their exact
    replacement, others the nearest valid names.

    Args:
        owner: what was called (``"Elastic"``).
        given: the keywords passed.
        valid: every keyword accepted.
        values: keyword -> value, for the replacement.

    Raises:
        UnknownOptionError: a keyword is not an option.
    """
    valid = list(dict.fromkeys(valid))
    for name in given:
        if name in valid:
            continue
        replacement = kfpytorch_replacement(owner, name, values.get(name))
        if replacement is not None:
            raise UnknownOptionError(
                f"{owner}.{name} is flytekitplugins-kfpytorch's name, not an option here; write {replacement} "
                "(docs/migration.md lists every kfpytorch name)",
                field=f"{owner}.{name}",
                value=name,
            )
        raise unknown_option(owner, name, valid)


_Config = TypeVar("_Config", bound=type)


def suggesting(cls: _Config) -> _Config:
    """Wrap a config dataclass's ``__init__`` so that an unknown keyword raises `UnknownOptionError` with a
    suggestion (or kfpytorch's replacement) instead of Python's bare ``TypeError``."""
    init = cls.__init__  # type: ignore[misc]
    valid = [f.name for f in fields(cls) if f.init]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        reject_unknown_options(cls.__name__, kwargs, valid, kwargs)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


# ---------------------------------------------------------------------------------------------------------------
# Field checks. Each takes the dotted name used in the message and returns the (possibly normalized) value.


def check_int(name: str, value: Any, *, minimum: int, optional: bool = False, maximum: int = INT32_MAX) -> Any:
    """A whole number in ``[minimum, maximum]`` (bool is not a number here); None passes when `optional`.

    Args:
        name: dotted field name for the message.
        value: the value to check.
        minimum: smallest allowed value.
        optional: whether None is allowed.
        maximum: largest allowed value (int32 by default, the width of the proto fields).

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: `value` is not an int in range.
    """
    if value is None and optional:
        return None
    allowed = f"use a whole number >= {minimum}" + (" or None" if optional else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, value, f"not a whole number ({type(value).__name__})", allowed)
    if value < minimum:
        raise _fail(name, value, "negative" if value < 0 else f"below {minimum}", allowed)
    if value > maximum:
        raise _fail(name, value, f"above {maximum}", f"use a whole number <= {maximum}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """True or False, nothing truthy.

    Args:
        name: dotted field name for the message.
        value: the value to check.

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: `value` is not a bool.
    """
    if not isinstance(value, bool):
        raise _fail(name, value, f"not a bool ({type(value).__name__})", "use True or False")
    return value


def check_quantity(name: str, value: Any, *, optional: bool = True) -> Optional[Decimal]:
    """A non-negative Kubernetes quantity.

    Args:
        name: dotted field name for the message.
        value: str, int or float quantity, or None when `optional`.
        optional: whether None is allowed.

    Returns:
        The parsed value, or None.

    Raises:
        ConfigError: `value` is not a quantity, or is negative.
    """
    if value is None and optional:
        return None
    try:
        amount = parse_quantity(value)
    except QuantityError:
        raise _fail(name, value, "not a Kubernetes quantity", f"use {QUANTITY_EXAMPLES}") from None
    if amount < 0:
        raise _fail(name, value, "negative", f"use {QUANTITY_EXAMPLES}")
    return amount


def check_gpu(name: str, value: Any) -> Optional[int]:
    """A GPU count: a whole, non-negative quantity, as Kubernetes counts an extended resource
    (`ValidateResourceQuantityValue`: ``MilliValue() % 1000 == 0``): ``1``, ``"1"``, ``2.0``, ``"2.0"``, ``"2000m"``,
    ``"1e1"`` and ``"+2"`` are whole; ``"500m"`` and ``"1.5"`` are not.

    Args:
        name: dotted field name for the message.
        value: the value to check, or None.

    Returns:
        The count, or None.

    Raises:
        ConfigError: `value` is not a whole non-negative number.
    """
    if value is None:
        return None
    allowed = "GPUs are whole devices: use a whole number >= 0 such as 1 or '2'"
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise _fail(name, value, "not a GPU count", allowed)
    try:
        amount = parse_quantity(value)
    except QuantityError:
        raise _fail(name, value, "not a GPU count", allowed) from None
    if amount < 0:
        raise _fail(name, value, "negative", allowed)
    if amount > MAX_WHOLE_QUANTITY:
        raise _fail(name, value, f"above {MAX_WHOLE_QUANTITY:,}, more than Kubernetes counts", allowed)
    if not is_whole_quantity(value):
        raise _fail(name, value, "not a whole number of GPUs", allowed)
    return int(amount)


def check_resources(
    requests: Any,
    limits: Any,
    name_of: Callable[[str, Optional[str]], str],
    *,
    types: ConfigTypes = CORE_TYPES,
) -> None:
    """Check a requests/limits pair: quantities, GPU counts, and that no limit is below its request.

    Args:
        requests: the front-end's resources object used as requests, or None.
        limits: the front-end's resources object used as limits, or None.
        name_of: ``(kind, attr) -> dotted name`` for messages, kind being ``"requests"`` or ``"limits"`` and attr a
            resources field (``"mem"``) or None for the whole object.
        types: the front-end's classes (`ConfigTypes`).

    Raises:
        ConfigError: any value is malformed, or a limit is below its request.
    """
    parsed: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for kind, res in (("requests", requests), ("limits", limits)):
        if res is None:
            continue
        if not isinstance(res, types.resources_type()):
            problem = f"not {types.resources_name} ({type(res).__name__})"
            raise _fail(name_of(kind, None), res, problem, types.resources_hint)
        if types.extra_resource_check is not None:
            types.extra_resource_check(name_of(kind, None), res)
        for attr in types.resource_fields:
            value = getattr(res, attr)
            if value is None:
                continue
            name = name_of(kind, attr)
            if isinstance(value, (list, tuple)):
                raise _fail(name, value, "a (request, limit) pair", "give requests and limits separately")
            amount: Optional[Union[int, Decimal]]
            if attr == types.gpu_field:
                count = types.gpu_count(value) if types.gpu_count is not None else value
                amount = check_gpu(name, count)
            else:
                amount = check_quantity(name, value, optional=False)
            if amount is not None:  # never None here: value is not None
                parsed[kind][attr] = Decimal(amount)
    for attr, request in parsed["requests"].items():
        limit = parsed["limits"].get(attr)
        if limit is None:
            continue
        limit_name, request_name = name_of("limits", attr), name_of("requests", attr)
        limit_value, request_value = getattr(limits, attr), getattr(requests, attr)
        if limit < request:
            raise _fail(
                limit_name, limit_value, f"below {request_name}={request_value!r}", "a limit must be >= its request"
            )
        if attr == types.gpu_field and limit != request:
            raise _fail(
                limit_name,
                limit_value,
                f"different from {request_name}={request_value!r}",
                "Kubernetes requires GPU requests and limits to be equal (or give only the limit)",
            )


def coerce_enum(name: str, value: Any, enum: type[Enum]) -> Any:
    """Accept an Enum member, or a string naming one case-insensitively (``"OnFailure"``, ``"on_failure"``).

    Args:
        name: dotted field name for the message.
        value: member or string.
        enum: the Enum class.

    Returns:
        The Enum member.

    Raises:
        ConfigError: `value` names no member.
    """
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        key = value.replace("_", "").replace("-", "").lower()
        for member in enum:
            if key in (str(member.value).lower(), member.name.replace("_", "").lower()):
                return member
    allowed = ", ".join(repr(m.value) for m in enum)
    raise _fail(name, value, f"not a {enum.__name__}", f"use one of {allowed} (or {enum.__name__}.<NAME>)")


def check_name(name: str, value: Any, pattern: re.Pattern, max_len: int, what: str) -> Optional[str]:
    """A Kubernetes name (label value, DNS subdomain, resource name) or None.

    Args:
        name: dotted field name for the message.
        value: the value to check.
        pattern: the full-match pattern.
        max_len: the longest allowed length.
        what: the allowed form, for the message.

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: `value` is not a matching string.
    """
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_len or not pattern.fullmatch(value):
        raise _fail(name, value, "not a valid name", f"use {what}, or None")
    return value


def check_queue(name: str, value: Any) -> Optional[str]:
    """A Kueue / Volcano queue name (``pytorch_contract.k8s_names.QUEUE_NAME``: the rule, and whose it is), or None.

    Args:
        name: dotted field name for the message.
        value: the value to check.

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: `value` is not a queue name Kueue's webhook admits.
    """
    if value is None:
        return None
    problem = queue_name_problem(value)
    if problem is not None:
        raise _fail(name, value, "not a queue name Kueue admits", f"{problem}; or None")
    return value


def check_nproc_per_node(name: str, value: Any) -> Union[int, str]:
    """Processes per node: a positive int, or ``"auto"``, ``"cpu"``, ``"gpu"`` (torchrun's words, any case).

    The rule and its message are the contract's (`pytorch_contract.template_keys.nproc_per_node_message`), so the
    backend reports a bad `pytorch.nproc_per_node` in a template the same way.

    Args:
        name: dotted field name for the message.
        value: the value to check.

    Returns:
        The int, or the word in lower case.

    Raises:
        ConfigError: anything else (bool, 0, negative, above int32, other strings).
    """
    if isinstance(value, str) and value.lower() in NPROC_PER_NODE_WORDS:
        return value.lower()
    message = nproc_per_node_message(name, value, digits_as_text=False)
    if message is not None:
        raise ConfigError(message, field=name, value=value)
    return value


def check_start_method(name: str, value: Any) -> str:
    """One of ``"spawn"``, ``"fork"``, ``"forkserver"``.

    Args:
        name: dotted field name for the message.
        value: the value to check.

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: anything else.
    """
    if value not in START_METHODS:
        raise _fail(name, value, "not a start method", f"use one of {', '.join(map(repr, START_METHODS))}")
    return value


def check_preload_modules(name: str, value: Any) -> tuple[str, ...]:
    """A list or tuple of dotted module names (``["torch._dynamo"]``); returned as a tuple.

    Only the names are checked here: importing a module to see whether it exists would import its package (torch,
    for ``torch._dynamo``) at decoration time. The launcher imports them before it starts the ranks and fails with
    the name and the import's error.

    Args:
        name: dotted field name for the message.
        value: the value to check.

    Returns:
        tuple[str, ...]: the names, in order, without repeats.

    Raises:
        ConfigError: a single string, anything but a list or tuple, or an entry that is not a module name.
    """
    allowed = 'use a list of module names, e.g. ["torch._dynamo"]'
    if isinstance(value, str):
        raise _fail(name, value, "one string, not a list of module names", allowed)
    if not isinstance(value, (list, tuple)):
        raise _fail(name, value, f"not a list of module names ({type(value).__name__})", allowed)
    for entry in value:
        if not isinstance(entry, str) or not _MODULE_NAME.match(entry):
            raise _fail(name, value, f"{entry!r} is not a dotted module name", allowed)
    return tuple(dict.fromkeys(value))


DEFAULT_START_METHOD = "forkserver"
"""The default of ``PyTorch.start_method`` and ``Elastic.start_method``: as safe as ``"spawn"`` with CUDA and with
threads in the launching process, but the server imports torch and flytekit once, so a rank starts in a fraction of a
second instead of re-importing them."""


def check_timeout(name: str, value: Any) -> Optional[datetime.timedelta]:
    """A positive duration: a ``timedelta``, or seconds as int/float. None passes.

    Args:
        name: dotted field name for the message.
        value: the value to check.

    Returns:
        A ``timedelta`` or None.

    Raises:
        ConfigError: not a duration, or not positive.
    """
    if value is None:
        return None
    allowed = "use a positive datetime.timedelta (or seconds), or None for the backend's default"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:  # nan, inf and more than ~2.7 million years do not fit a timedelta
            value = datetime.timedelta(seconds=value)
        except (OverflowError, ValueError):
            raise _fail(name, value, "not a finite duration", allowed) from None
    if not isinstance(value, datetime.timedelta):
        raise _fail(name, value, "not a duration", allowed)
    if value <= datetime.timedelta(0):
        raise _fail(name, value, "not positive", allowed)
    return value


def check_image(name: str, value: Any) -> Optional[str]:
    """An image reference the kubelet accepts, or None (None = the task's image).

    The grammar is the one container runtimes parse (`[registry[:port]/]path[:tag][@digest]`, the repository path
    lower case); a reference outside it makes every replica fail with `InvalidImageName` on the cluster.

    Args:
        name: dotted field name for the message.
        value: the value to check.

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: not a string, or not a valid image reference (the message says which part is wrong).
    """
    if value is None:
        return None
    allowed = "use e.g. 'ghcr.io/org/train:1.0' (repository path in lower case), or None for the task's image"
    problem = image_reference_problem(value)
    if problem is not None:
        raise _fail(name, value, f"not an image reference the kubelet accepts ({problem})", allowed)
    return value


def check_replicas(name: str, value: Any, *, minimum: int) -> int:
    """A replica count of one role: a whole number in ``[minimum, MAX_REPLICAS_PER_ROLE]``.

    The operator names each replica's pod and Service `<job>-worker-<index>`, a DNS label of at most 63 characters;
    with job names of up to 50 characters that leaves 5 digits for the index, so at most 100000 replicas.

    Args:
        name: dotted field name for the message.
        value: the value to check.
        minimum: the smallest allowed count.

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: not a whole number, or out of range.
    """
    check_int(name, value, minimum=minimum)
    if value > MAX_REPLICAS_PER_ROLE:
        raise _fail(
            name,
            value,
            f"above {MAX_REPLICAS_PER_ROLE}",
            f"use at most {MAX_REPLICAS_PER_ROLE}: pod and Service names <job>-worker-<index> must fit 63 characters "
            f"and the job name takes up to {JOB_NAME_MAX_LENGTH}, leaving 5 digits for the index",
        )
    return value


class KubernetesVersionWarning(UserWarning):
    """A setting that some supported Kubernetes versions accept and others refuse: an environment variable name
    only clusters from 1.32 on take, a toleration operator behind an alpha feature gate. The SDK does not know the
    cluster, so it warns (naming the version or gate) instead of refusing."""


def check_environment(name: str, environment: Any) -> None:
    """Environment variable names (the keys of flytekit's ``environment=``, Flyte 2's ``env_vars=``) and values.

    One rule for every path a name reaches a container by (`pytorch_contract.pod_rules`): a name no Kubernetes
    version accepts (`IsRelaxedEnvVarName`: empty, not printable ASCII, or holding '=') is refused; a name only
    Kubernetes 1.32 and later accept (``1ABC``, ``MY VAR``, ``a:b``: `IsEnvVarName` refuses it) gets a
    `KubernetesVersionWarning` naming the version.

    Args:
        name: dotted field name for the message (``"environment"``).
        environment: a mapping of variable name -> value, or None.

    Raises:
        ConfigError: a name no Kubernetes version accepts, or a value that is not a string.
    """
    if environment is None:
        return
    if not isinstance(environment, dict):
        raise _fail(name, environment, f"not a dict ({type(environment).__name__})", "use {'NAME': 'value', ...}")
    for key, value in environment.items():
        problems = env_name_problems([key], f"{name}[{key!r}]")
        if problems:
            raise ConfigError(_env_message(problems[0], f"{name}[{key!r}]", key), field=name, value=key)
        if not isinstance(value, str):
            raise _fail(f"{name}[{key!r}]", value, f"not a string ({type(value).__name__})", "use a string value")
    warn_env_names(name, list(environment))


def _env_message(problem: str, where: str, key: Any) -> str:
    """The contract's refusal of an environment variable name, worded as ``<where> is not ...``."""
    return f"{where} is{problem.split(f'{key!r} is', 1)[1]}" if f"{key!r} is" in problem else problem


def warn_env_names(where: str, names: list[Any]) -> None:
    """Warn (`KubernetesVersionWarning`) about names only Kubernetes 1.32 and later accept.

    Args:
        where: the setting, for the message (``"environment"``, ``"Worker.pod_template container 'primary' env"``).
        names: the variable names.
    """
    for message in env_name_warnings(names, where):
        warnings.warn(message, KubernetesVersionWarning, stacklevel=_user_stacklevel())


def check_shm_size(name: str, value: Any) -> Optional[str]:
    """Size of the in-memory ``/dev/shm``: a non-negative quantity (``"0"`` disables the volume), or None.

    Args:
        name: dotted field name for the message.
        value: quantity string or int.

    Returns:
        The quantity as a string, or None.

    Raises:
        ConfigError: not a non-negative quantity.
    """
    if value is None:
        return None
    check_quantity(name, value, optional=False)
    return value if isinstance(value, str) else str(value)


def check_shm_within_memory(
    shm_name: str, shm_size: Optional[str], limit_name: str, limits: Any, *, types: ConfigTypes = CORE_TYPES
) -> None:
    """Refuse an in-memory ``/dev/shm`` larger than the replica's memory limit.

    A memory-backed emptyDir is mounted at no more than the pod's memory limit, so such a pod gets a smaller
    ``/dev/shm`` than asked on every attempt, and its pages count against the same limit.

    Args:
        shm_name: dotted name of the ``shm_size`` field, for the message.
        shm_size: the quantity (already checked), or None.
        limit_name: dotted name of the memory limit, for the message.
        limits: the front-end's resources object used as limits, or None.
        types: the front-end's classes (`ConfigTypes`).

    Raises:
        ConfigError: ``shm_size`` is above the memory limit.
    """
    if limits is None or not shm_size:
        return
    mem = getattr(limits, types.memory_field, None) if isinstance(limits, types.resources_type()) else None
    if not shm_size or mem is None:
        return
    if parse_quantity(shm_size) > parse_quantity(mem):
        raise _fail(
            shm_name,
            shm_size,
            f"above the memory limit {limit_name}={mem!r}: /dev/shm is a memory-backed volume, which Kubernetes "
            "sizes to at most the pod's memory limit, and its pages count against that limit",
            f"use shm_size of at most {mem!r}, or raise {limit_name}",
        )


def check_pod_template(name: str, value: Any, *, types: ConfigTypes = CORE_TYPES) -> Any:
    """The front-end's pod template (or None); warns when its primary container has a command or args.

    Args:
        name: dotted field name for the message.
        value: the value to check.
        types: the front-end's classes (`ConfigTypes`).

    Returns:
        `value` unchanged.

    Raises:
        ConfigError: not a ``PodTemplate``, or a ``pod_spec`` that is not a ``kubernetes`` ``V1PodSpec``.
    """
    if value is None:
        return None
    if not isinstance(value, types.pod_template_type()):
        raise _fail(name, value, f"not a {types.pod_template_name} ({type(value).__name__})", types.pod_template_hint)
    spec = getattr(value, "pod_spec", None)
    if spec is not None and type(spec).__name__ != "V1PodSpec":
        raise _fail(
            f"{name}.pod_spec", spec, f"not a V1PodSpec ({type(spec).__name__})", "use kubernetes.client.V1PodSpec(...)"
        )
    warn_replaced_command(name, value)
    check_pod_template_rules(name, value)
    return value


def check_pod_template_rules(name: str, pod_template: Any) -> None:
    """Refuse a pod template the job would be admitted with but whose every pod create fails: bad label keys or
    values, bad annotation keys or over 256 KiB of annotations, bad tolerations (`ValidateTolerations`), bad
    nodeSelector keys or values, container names that are not DNS-1123 labels or repeat (`validateContainers`),
    environment variable names no version accepts (`pytorch_contract`'s rules, the ones the backend checks again
    before create). What only some Kubernetes versions refuse (names older API servers refuse, gated toleration
    operators) is a `KubernetesVersionWarning`.

    Args:
        name: where the pod template was given, as the user wrote it (``"Worker.pod_template"``,
            ``"TaskEnvironment.pod_template"``).
        pod_template: a pod template (flytekit's and Flyte 2's have the same attributes).

    Raises:
        ConfigError: the first problem; the message names the setting, the value and what is allowed.
    """
    problems = label_problems(pod_template.labels or {}, f"{name} labels")
    problems += annotation_problems(pod_template.annotations or {}, f"{name} annotations")
    spec = pod_template.pod_spec
    tolerations = [_api_dict(t) for t in (getattr(spec, "tolerations", None) or [])]
    problems += toleration_problems(tolerations, f"{name} tolerations")
    problems += node_selector_problems(getattr(spec, "node_selector", None) or {}, f"{name} nodeSelector")
    containers = list(getattr(spec, "containers", None) or [])
    init_containers = list(getattr(spec, "init_containers", None) or [])
    problems += container_name_problems(
        [getattr(c, "name", None) for c in containers], [getattr(c, "name", None) for c in init_containers], name
    )
    notes = toleration_warnings(tolerations, f"{name} tolerations")
    for container in containers + init_containers:
        env_names = [getattr(e, "name", None) for e in getattr(container, "env", None) or []]
        where = f"{name} container {getattr(container, 'name', None)!r} env"
        problems += env_name_problems(env_names, where)
        notes += env_name_warnings(env_names, where)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(
            f"{problems[0]}{more}; the job would be admitted but Kubernetes would refuse every pod",
            field=name,
            value=pod_template,
        )
    for message in notes:
        warnings.warn(message, KubernetesVersionWarning, stacklevel=_user_stacklevel())


class JobLimitWarning(UserWarning):
    """A task the PyTorchJob or the TrainJob kind would refuse, but not both: the SDK does not know which kind the
    backend will create, so it warns instead of refusing."""


def _primary_env(pod_template: Any) -> list[Any]:
    """The env entries of a pod template's primary container."""
    spec = getattr(pod_template, "pod_spec", None)
    primary = getattr(pod_template, "primary_container_name", None)
    for container in getattr(spec, "containers", None) or []:
        if getattr(container, "name", None) == primary:
            return list(getattr(container, "env", None) or [])
    return []


def check_job_limits(
    environment: Optional[dict[str, str]], pod_templates: dict[str, Any], *, pytorchjob_roles: int = 2
) -> None:
    """Environment entries and payload size against what the API server stores (`pytorch_contract.job_limits`).

    The backend's kind is not known here. A limit every kind has (a payload over 1.5 MiB even written once) is a
    `ConfigError`; a limit of one kind (a TrainJob's 128 env entries, a PyTorchJob writing the pod template once
    per role) is a `JobLimitWarning` naming the kind, because the same task is admitted as the other kind.

    Args:
        environment: the task's ``environment=``, or None.
        pod_templates: where -> pod template (``"pod_template"``, ``"Worker.pod_template"``) or None.
        pytorchjob_roles: the roles a PyTorchJob of this task has (Master and Worker: 2; master-only or elastic: 1),
            each holding its own copy of the pod template.

    Raises:
        ConfigError: the payload alone is over the stored-object limit.
    """
    environment = environment or {}
    templates = {where: t for where, t in pod_templates.items() if t is not None}
    own_env = max([len(_primary_env(t)) for t in templates.values()] or [0])
    problem = env_count_problem(len(environment) + own_env, "trainjob", "environment (with the pod template's env)")
    if problem is not None:
        warnings.warn(f"{problem} (as a PyTorchJob it is admitted)", JobLimitWarning, stacklevel=_user_stacklevel())
    values = {f"environment[{k!r}]": v for k, v in environment.items()}
    for where, template in templates.items():
        for entry in _primary_env(template):
            values[f"{where} env {getattr(entry, 'name', '')!r}"] = getattr(entry, "value", None) or ""
    sizes = {k: len(json.dumps({"name": k, "value": v})) for k, v in values.items()}
    for where, template in templates.items():
        sizes[f"{where} annotations"] = len(json.dumps(template.annotations or {}))
    total = sum(sizes.values())
    if not total:
        return
    largest = max(sizes, key=lambda k: sizes[k])
    shown = f"{largest}={_abbreviate(values[largest])}" if largest in values else largest
    where = shown if sizes[largest] * 2 > total else f"{shown} with {len(sizes) - 1} other entries"
    certain = job_size_problem(total, "trainjob", where, copies=1)
    if certain is not None:
        raise ConfigError(certain.replace(" the trainjob ", " the job "), field=largest, value=values.get(largest))
    per_role = job_size_problem(total, "pytorchjob", where, copies=pytorchjob_roles)
    if per_role is not None:
        warnings.warn(
            f"{per_role} (as a TrainJob, written once, it fits)", JobLimitWarning, stacklevel=_user_stacklevel()
        )


def _abbreviate(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 4]}...{text[-1]} ({len(str(value)):,} characters)"


#: Packages whose frames a warning at decoration skips (the core, the front-ends and their SDKs), when imported.
_NOT_USER_PACKAGES = ("pytorch_core", "flytekitplugins_pytorch", "flytekit", "flyte2_pytorch", "flyte")


def _user_stacklevel() -> int:
    """The `stacklevel` of the caller's caller outside the SDKs and this project's packages (the user's decorated
    function), so that a warning at decoration points at the user's line, not into an SDK's decorator."""
    dirs = []
    for name in _NOT_USER_PACKAGES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(os.path.dirname(module.__file__ or "") + os.sep)
    skipped = tuple(dirs)
    frame, level = sys._getframe(1), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(skipped) or frame.f_code.co_filename.endswith("contextlib.py")
    ):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


class ProcessesGpusWarning(UserWarning):
    """``nproc_per_node`` differs from the GPUs a replica requests."""


def check_processes_against_gpus(owner: str, nproc_per_node: Any, replica_gpus: dict[str, Optional[int]]) -> None:
    """Warn when a whole-number ``nproc_per_node`` differs from a replica's GPU count.

    One rank per GPU is the norm. More ranks than GPUs is usually a mistake (NCCL refuses two ranks on one device,
    and ``cuda.set_device(LOCAL_RANK)`` fails for the extra ones) but runs under gloo or with GPU sharing; fewer can
    be deliberate (model parallelism inside a rank). torchrun starts either, so this warns and never refuses.

    Args:
        owner: the config class, for the message (``"PyTorch"``).
        nproc_per_node: the checked value (an int, or a word such as ``"gpu"``, which always matches).
        replica_gpus: where the GPU count was given (``"Worker.limits.gpu"``) -> GPUs of one replica, or None.
    """
    if not isinstance(nproc_per_node, int):
        return
    for where, gpus in replica_gpus.items():
        if not gpus or gpus == nproc_per_node:
            continue
        if nproc_per_node > gpus:
            why = (
                "more ranks than GPUs: with NCCL two ranks cannot share a device, and code that calls "
                "torch.cuda.set_device(LOCAL_RANK) fails on the extra ranks"
            )
        else:
            why = f"{gpus - nproc_per_node} GPU(s) per replica unused unless each rank uses several (model parallel)"
        warnings.warn(
            f"{owner}.nproc_per_node={nproc_per_node} but {where}={gpus}: {why}; use nproc_per_node={gpus} or "
            "'gpu' (one rank per GPU), or request as many GPUs as ranks",
            ProcessesGpusWarning,
            stacklevel=_user_stacklevel(),
        )
        return


def _api_dict(model: Any) -> dict[str, Any]:
    """A kubernetes client model (or a dict) in the API's camelCase keys."""
    if isinstance(model, dict):
        return model
    attribute_map = getattr(model, "attribute_map", {})
    return {attribute_map.get(k, k): getattr(model, k) for k in attribute_map}


class PodTemplateOverrideWarning(UserWarning):
    """A pod template setting the plugin replaces (the primary container's command and args)."""


def warn_replaced_command(name: str, pod_template: Any) -> None:
    """Warn that a pod template's primary container command/args will not run: pyflyte-execute replaces them.

    Args:
        name: where the pod template was given (``"Master.pod_template"``, ``"pod_template"``).
        pod_template: a pod template (flytekit's or Flyte 2's).
    """
    spec = getattr(pod_template, "pod_spec", None)
    primary = getattr(pod_template, "primary_container_name", None)
    for container in getattr(spec, "containers", None) or []:
        if getattr(container, "name", None) != primary:
            continue
        given = [f for f in ("command", "args") if getattr(container, f, None)]
        if given:
            warnings.warn(
                f"{name}: the primary container {primary!r} sets {' and '.join(given)}, which the task replaces with "
                "pyflyte-execute (the command that runs your function); put setup in an init container, or in the "
                "function",
                PodTemplateOverrideWarning,
                stacklevel=4,
            )


def _field_type(obj: Any, name: str) -> type:
    """The class a config's nested field must be: the front-end's own, the one its default is built from."""
    factory = obj.__dataclass_fields__[name].default_factory
    return factory if isinstance(factory, type) else object


def _check_fields_common(owner: str, obj: Any) -> None:
    """Checks shared by `PyTorch` and `Elastic`: run policy, shm, accelerator, GPU resource, start method, timeout,
    preloads."""
    if not isinstance(obj.run_policy, _field_type(obj, "run_policy")):
        raise _fail(
            f"{owner}.run_policy",
            obj.run_policy,
            f"not a RunPolicy ({type(obj.run_policy).__name__})",
            f"use {obj._types.package}.RunPolicy(...)",
        )
    obj.shm_size = check_shm_size(f"{owner}.shm_size", obj.shm_size)
    # The backend puts the accelerator type into a node-selector label value, so it must be one; the SDK's own
    # accelerator object (flytekit's `A100`) is taken as the SDK takes it (the front-end passes it on).
    accelerator_object = obj._types.accelerator_object
    if accelerator_object is None or not accelerator_object(obj.accelerator):
        check_name(
            f"{owner}.accelerator",
            obj.accelerator,
            LABEL_VALUE,
            63,
            "an accelerator name such as 'nvidia-tesla-a100' or 'A100' (a Kubernetes label value: letters, digits, "
            "'-', '_', '.'; at most 63 characters)",
        )
    check_name(
        f"{owner}.gpu_resource",
        obj.gpu_resource,
        EXTENDED_RESOURCE_NAME,
        253,
        "an extended resource name such as 'nvidia.com/gpu', 'amd.com/gpu' or 'nvidia.com/mig-1g.5gb'",
    )
    obj.nproc_per_node = check_nproc_per_node(f"{owner}.nproc_per_node", obj.nproc_per_node)
    check_start_method(f"{owner}.start_method", obj.start_method)
    obj.collective_timeout = check_timeout(f"{owner}.collective_timeout", obj.collective_timeout)
    obj.preload_modules = check_preload_modules(f"{owner}.preload_modules", obj.preload_modules)
    obj.retry_hangs = check_bool(f"{owner}.retry_hangs", obj.retry_hangs)
    obj.preflight = check_bool(f"{owner}.preflight", obj.preflight)
    obj.progress_timeout = check_timeout(f"{owner}.progress_timeout", obj.progress_timeout)


def _check_min_available(owner: str, run_policy: RunPolicy, total: int, total_text: str) -> None:
    if run_policy.min_available is not None and run_policy.min_available > total:
        raise _fail(
            f"{owner}.run_policy.min_available",
            run_policy.min_available,
            f"more than the job's {total_text}",
            f"use 1..{total}",
        )


# ---------------------------------------------------------------------------------------------------------------
# The public configuration.


@suggesting
@dataclass
class RunPolicy:
    """Job-level policy (``spec.runPolicy`` of the PyTorchJob).

    Args:
        clean_pod_policy: pods to delete when the job finishes. Default ``RUNNING``: finished pods keep their logs
            for debugging, while stragglers (ranks still blocked in a collective after rank 0 failed) are removed
            so they stop holding GPUs.
        backoff_limit: pod restarts before the job is marked failed (``spec.runPolicy.backoffLimit``); None = the
            operator's default.
        active_deadline_seconds: wall-clock limit of the whole job, > 0 (``spec.runPolicy.activeDeadlineSeconds``).
        ttl_seconds_after_finished: delete the job this long after it finished, >= 0
            (``spec.runPolicy.ttlSecondsAfterFinished``); None = keep it.
        queue: Kueue / Volcano queue (``spec.runPolicy.schedulingPolicy.queue`` and the
            ``kueue.x-k8s.io/queue-name`` label): a DNS-1123 subdomain of at most 63 characters, the name of a
            Kueue ``LocalQueue`` (Kueue's webhook refuses anything else) or of a Volcano ``Queue``.
        priority_class: PriorityClass name (``spec.runPolicy.schedulingPolicy.priorityClass``).
        gang_scheduling: start all replicas together or none (``schedulingPolicy.minAvailable`` = all replicas).
            Default False: it needs a gang scheduler (Volcano, scheduler-plugins) on the cluster.
        min_available: replicas that must be schedulable together, 1..total (overrides the gang default).
        suspend: create the job suspended (``spec.runPolicy.suspend``), e.g. for Kueue admission.

    Raises:
        ConfigError: a value out of range or of the wrong type.
    """

    _types: ClassVar[ConfigTypes] = CORE_TYPES

    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.RUNNING
    backoff_limit: Optional[int] = None
    active_deadline_seconds: Optional[int] = None
    ttl_seconds_after_finished: Optional[int] = None
    queue: Optional[str] = None
    priority_class: Optional[str] = None
    gang_scheduling: bool = False
    min_available: Optional[int] = None
    suspend: bool = False

    def __post_init__(self) -> None:
        self.clean_pod_policy = coerce_enum("RunPolicy.clean_pod_policy", self.clean_pod_policy, CleanPodPolicy)
        check_int("RunPolicy.backoff_limit", self.backoff_limit, minimum=0, optional=True)
        check_int("RunPolicy.active_deadline_seconds", self.active_deadline_seconds, minimum=1, optional=True)
        check_int("RunPolicy.ttl_seconds_after_finished", self.ttl_seconds_after_finished, minimum=0, optional=True)
        check_queue("RunPolicy.queue", self.queue)
        check_name(
            "RunPolicy.priority_class",
            self.priority_class,
            DNS1123_SUBDOMAIN,
            253,
            "a PriorityClass name (lower-case DNS subdomain)",
        )
        check_bool("RunPolicy.gang_scheduling", self.gang_scheduling)
        check_int("RunPolicy.min_available", self.min_available, minimum=1, optional=True)
        check_bool("RunPolicy.suspend", self.suspend)


@suggesting
@dataclass
class Master:
    """The master replica group: always exactly one pod (global rank 0 lives there).

    Args:
        image: image of the master; None = the task's image.
        requests: resource requests (the front-end's resources class: ``flytekit.Resources``,
            ``flyte.Resources``); None = the task container's.
        limits: resource limits; None = the task container's.
        restart_policy: what the operator does when the pod fails; a `RestartPolicy` or its value as a string.
            Default ``NEVER``: Flyte's own retries restart the whole job consistently.
        pod_template: a pod template (the front-end's class) for the master pod only, merged over the task's
            ``pod_template`` (the master's values win): ``spec.pytorchReplicaSpecs.Master.template``. None = the
            task's pod. Serialized as the ``pytorch.master.pod_template`` config key (see docs/pod-templates.md).

    Raises:
        ConfigError: a malformed quantity, a limit below its request, an unknown policy, or a pod template that is
            not the front-end's pod template class.
    """

    _types: ClassVar[ConfigTypes] = CORE_TYPES

    image: Optional[str] = None
    requests: Optional[Any] = None
    limits: Optional[Any] = None
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    pod_template: Optional[Any] = None

    def __post_init__(self) -> None:
        _check_replica(type(self).__name__, self)


@suggesting
@dataclass
class Worker:
    """The worker replica group.

    Args:
        replicas: number of worker pods, >= 0 (0 = a master-only job).
        image: image of the workers; None = the task's image.
        requests: resource requests (the front-end's resources class: ``flytekit.Resources``,
            ``flyte.Resources``); None = the task container's.
        limits: resource limits; None = the task container's.
        restart_policy: as `Master.restart_policy`.
        pod_template: a pod template (the front-end's class) for the worker pods only, merged over the task's (the
            worker's values win): ``spec.pytorchReplicaSpecs.Worker.template``; the ``pytorch.worker.pod_template`` key.

    Raises:
        ConfigError: a negative or non-integer replica count, a malformed quantity, a limit below its request,
            an unknown policy, or a pod template that is not the front-end's pod template class.
    """

    _types: ClassVar[ConfigTypes] = CORE_TYPES

    replicas: int = 1
    image: Optional[str] = None
    requests: Optional[Any] = None
    limits: Optional[Any] = None
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    pod_template: Optional[Any] = None

    def __post_init__(self) -> None:
        check_replicas("Worker.replicas", self.replicas, minimum=0)
        _check_replica(type(self).__name__, self)


def _check_replica(owner: str, replica: Union[Master, Worker]) -> None:
    replica.restart_policy = coerce_enum(f"{owner}.restart_policy", replica.restart_policy, RestartPolicy)
    check_image(f"{owner}.image", replica.image)
    check_pod_template(f"{owner}.pod_template", replica.pod_template, types=replica._types)

    def name_of(kind: str, attr: Optional[str]) -> str:
        return f"{owner}.{kind}.{attr}" if attr else f"{owner}.{kind}"

    check_resources(replica.requests, replica.limits, name_of, types=replica._types)


@suggesting
@dataclass
class PyTorch:
    """A non-elastic PyTorchJob: one master and ``worker.replicas`` workers, each running ``nproc_per_node`` ranks.

    Use as ``@task(task_config=PyTorch(...))``, or through the flat `pytorch_task` decorator.

    Args:
        master: the master replica group.
        worker: the worker replica group.
        run_policy: job-level policy.
        nproc_per_node: ranks per pod: a positive int, ``"auto"`` (one per GPU, else per CPU), ``"cpu"``, ``"gpu"``.
        shm_size: size of the in-memory ``/dev/shm`` on every replica (a quantity); None = the backend's default;
            ``"0"`` disables the volume. DataLoader workers exchange batches through it, and the container
            runtime's 64Mi default is too small for most image pipelines.
        accelerator: accelerator type for node selection, e.g. ``"nvidia-tesla-a100"``; mapped by the backend.
        gpu_resource: the extended resource GPUs are requested under, e.g. ``"amd.com/gpu"``; None =
            the backend's default (``nvidia.com/gpu``).
        start_method: how ranks are started inside a pod or locally: ``"forkserver"`` (default: safe with CUDA
            and with threads in the parent like ``"spawn"``, but each rank starts in a fraction of a second instead
            of re-importing torch and flytekit: the server is a fork of the launching process when that is safe,
            else a fresh interpreter that preloads them once), ``"spawn"`` or ``"fork"``.
        collective_timeout: timeout of ``init_process_group`` and collectives; None lets the launcher choose per
            backend (gloo / nccl).
        preload_modules: modules the launcher imports once before it starts the ranks, so that with
            ``"forkserver"`` or ``"fork"`` every rank shares that one copy instead of importing its own (ignored
            with ``"spawn"``). For example ``["torch._dynamo"]`` when the task wraps its model in
            DistributedDataParallel or FSDP, which import it on construction (about 70 MB and, on a laptop core,
            1.5 s per rank). Default ``[]``: nothing beyond torch, flytekit and the task's module.
        retry_hangs: a hang (a rank that did not arrive at a collective within ``collective_timeout``) fails the
            task with a recoverable error, so Flyte retries it while the task has ``retries`` left. Default True:
            on a cluster the common cause is a bad node, GPU or link, and a retry runs on fresh pods; False makes
            a hang a permanent failure (for code that can hang by itself, e.g. a data-dependent deadlock). Either
            way the error names the rank that did not arrive.
        preflight: before the task's code runs, every rank resolves the master's address, checks ``/dev/shm``
            against ``shm_size`` (on a cluster) and runs one all-reduce with the others. Default True: a node that
            cannot reach its peers then fails in a fraction of a second with a retryable infrastructure error
            naming the node and what failed, instead of inside the task after data loading and model set-up;
            False skips it (its cost: a few milliseconds per rank, plus the wait for the slowest rank to start).
        progress_timeout: a rank that has not called ``flytekitplugins_pytorch.report_progress()`` for this long
            while outside ``torch.distributed`` stops itself with a ``HangError`` naming it and where it is (its
            peers, waiting in a collective, are told through the group's store). Default None: off, because only
            code that reports progress (once per step, say) can use it; the collective timeout bounds the rest.

    Raises:
        ConfigError: any invalid setting, including ``run_policy.min_available`` above the number of replicas.
    """

    _types: ClassVar[ConfigTypes] = CORE_TYPES

    master: Master = field(default_factory=Master)
    worker: Worker = field(default_factory=Worker)
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    nproc_per_node: Union[int, str] = 1
    shm_size: Optional[str] = None
    accelerator: Optional[str] = None
    gpu_resource: Optional[str] = None
    start_method: str = DEFAULT_START_METHOD
    collective_timeout: Optional[datetime.timedelta] = None
    preload_modules: tuple[str, ...] = ()
    retry_hangs: bool = True
    preflight: bool = True
    progress_timeout: Optional[datetime.timedelta] = None

    def __post_init__(self) -> None:
        package = self._types.package
        if not isinstance(self.master, _field_type(self, "master")):
            raise _fail(
                "PyTorch.master",
                self.master,
                f"not a Master ({type(self.master).__name__})",
                f"use {package}.Master(...)",
            )
        if not isinstance(self.worker, _field_type(self, "worker")):
            raise _fail(
                "PyTorch.worker",
                self.worker,
                f"not a Worker ({type(self.worker).__name__})",
                f"use {package}.Worker(replicas=...)",
            )
        _check_fields_common("PyTorch", self)
        if self.worker.replicas == 0 and self.worker.pod_template is not None:
            raise ConfigError(
                "PyTorch.worker.pod_template=PodTemplate(...) is given for a master-only job (worker.replicas=0); "
                "set Worker(replicas=...) >= 1, or put the settings on Master(pod_template=...)",
                field="PyTorch.worker.pod_template",
                value=self.worker.pod_template,
            )
        mem = self._types.memory_field
        check_shm_within_memory(
            "PyTorch.shm_size", self.shm_size, f"Master.limits.{mem}", self.master.limits, types=self._types
        )
        if self.worker.replicas:
            check_shm_within_memory(
                "PyTorch.shm_size", self.shm_size, f"Worker.limits.{mem}", self.worker.limits, types=self._types
            )
        total = 1 + self.worker.replicas
        _check_min_available(
            "PyTorch", self.run_policy, total, f"{total} replicas (1 master + {self.worker.replicas} workers)"
        )

    @property
    def replicas(self) -> int:
        """Pods in the job: the master plus the workers."""
        return 1 + self.worker.replicas


@suggesting
@dataclass
class Elastic:
    """A torchrun-style elastic job: no master; between ``min_nodes`` and ``max_nodes`` worker pods rendezvous.

    Use as ``@task(task_config=Elastic(...))``.

    Args:
        nnodes: number of pods, an int or ``"min:max"`` (1 <= min <= max).
        nproc_per_node: ranks per pod, as `PyTorch.nproc_per_node`.
        start_method: as `PyTorch.start_method`.
        monitor_interval: seconds between health checks of the local ranks, > 0.
        max_restarts: times the whole rank group is restarted after a failure, >= 0.
        rdzv_join_timeout: seconds to wait for ``min_nodes`` to join the rendezvous, > 0. Default 900: pods on
            freshly scaled nodes pull the image first.
        rdzv_last_call_timeout: seconds to wait for more nodes after ``min_nodes`` joined, > 0.
        rdzv_close_timeout: seconds to wait for the rendezvous to close, > 0.
        run_policy: job-level policy.
        shm_size: as `PyTorch.shm_size`.
        accelerator: as `PyTorch.accelerator`.
        gpu_resource: as `PyTorch.gpu_resource`.
        collective_timeout: as `PyTorch.collective_timeout`.
        preload_modules: as `PyTorch.preload_modules`.
        retry_hangs: as `PyTorch.retry_hangs`.
        preflight: as `PyTorch.preflight`.
        progress_timeout: as `PyTorch.progress_timeout`.

    Raises:
        ConfigError: any invalid setting.
    """

    _types: ClassVar[ConfigTypes] = CORE_TYPES

    nnodes: Union[int, str] = 1
    nproc_per_node: Union[int, str] = 1
    start_method: str = DEFAULT_START_METHOD
    monitor_interval: float = 1.0
    max_restarts: int = 0
    rdzv_join_timeout: int = 900
    rdzv_last_call_timeout: int = 30
    rdzv_close_timeout: int = 30
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    shm_size: Optional[str] = None
    accelerator: Optional[str] = None
    gpu_resource: Optional[str] = None
    collective_timeout: Optional[datetime.timedelta] = None
    preload_modules: tuple[str, ...] = ()
    retry_hangs: bool = True
    preflight: bool = True
    progress_timeout: Optional[datetime.timedelta] = None

    def __post_init__(self) -> None:
        self._min_nodes, self._max_nodes = _parse_nnodes(self.nnodes)
        _check_fields_common("Elastic", self)
        if (
            isinstance(self.monitor_interval, bool)
            or not isinstance(self.monitor_interval, (int, float))
            or not (self.monitor_interval > 0)
        ):
            raise _fail(
                "Elastic.monitor_interval", self.monitor_interval, "not a positive number of seconds", "use e.g. 1.0"
            )
        check_int("Elastic.max_restarts", self.max_restarts, minimum=0)
        for name in ("rdzv_join_timeout", "rdzv_last_call_timeout", "rdzv_close_timeout"):
            check_int(f"Elastic.{name}", getattr(self, name), minimum=1)
        _check_min_available("Elastic", self.run_policy, self._max_nodes, f"{self._max_nodes} nodes at most")

    @property
    def min_nodes(self) -> int:
        """The fewest pods the job runs with (the ``min`` of ``nnodes``)."""
        return self._min_nodes

    @property
    def max_nodes(self) -> int:
        """The most pods the job runs with (the ``max`` of ``nnodes``; the PyTorchJob's worker replicas)."""
        return self._max_nodes


def _parse_nnodes(value: Any) -> tuple[int, int]:
    allowed = "use a positive int or 'min:max' with 1 <= min <= max, e.g. 2 or '1:4'"
    if isinstance(value, bool):
        raise _fail("Elastic.nnodes", value, "not a node count", allowed)
    if isinstance(value, int):
        low = high = value
    elif isinstance(value, str) and (match := _NNODES.fullmatch(value)):
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
    else:
        raise _fail("Elastic.nnodes", value, "not a node count", allowed)
    if low < 1:
        raise _fail("Elastic.nnodes", value, "below 1 node", allowed)
    if low > high:
        raise _fail("Elastic.nnodes", value, "a range with min > max", allowed)
    if high > MAX_REPLICAS_PER_ROLE:
        raise _fail(
            "Elastic.nnodes",
            value,
            f"above {MAX_REPLICAS_PER_ROLE} nodes",
            f"use at most {MAX_REPLICAS_PER_ROLE}: pod and Service names <job>-worker-<index> must fit 63 characters",
        )
    return low, high


def option_names(cls: type) -> list[str]:
    """The constructor keywords of a config dataclass (for suggestions in errors).

    Args:
        cls: a dataclass.

    Returns:
        Its field names.
    """
    return [f.name for f in fields(cls)]
