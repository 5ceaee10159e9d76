"""What every section of the backend config shares: the `Section` base and the checks of its values.

`BackendConfig` (`backend_plugin.config`) is a few sections, in the manner of kopf's `OperatorSettings`: job
defaults, run-policy defaults, shared memory, GPU and interruptible placement, the API, the watch cache, reading
jobs back, and one section per job kind (each owned by its kind's package under `backend_plugin/targets/`). A section
is a dataclass that checks its own values when built (`__post_init__`) and names each value by its *key*: the
top-level YAML key and `PYTORCHJOB_<KEY>` variable users set (`namespace`, `api_get_budget_s`,
`trainjob_runtime_name`), which is the field's name unless the section's `KEYS` says otherwise. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Optional, TypeVar

from backend_plugin.errors import ConfigError
from pytorch_contract.k8s_names import EXTENDED_RESOURCE_NAME, QUALIFIED_NAME, is_label_value
from pytorch_contract.quantity import is_quantity
from pytorch_contract.suggest import did_you_mean

__all__ = [
    "Section",
    "check_label_key",
    "check_label_value",
    "check_resource_name",
    "check_quantity",
    "check_toleration",
    "check_tolerations",
    "check_label_map",
    "check_seconds",
    "check_bool",
    "check_int",
    "check_choice",
]

S = TypeVar("S", bound="Section")

_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclasses.dataclass
class Section:
    """One section of the backend config: a dataclass whose `__post_init__` checks its values.

    Class attributes:
        KEYS: field name -> its key (top-level YAML key and `PYTORCHJOB_<KEY>`), where the two differ.
        VERBATIM: fields read from the environment as the text given (`"010"` stays a string, not 8).
    """

    KEYS: ClassVar[Mapping[str, str]] = {}
    VERBATIM: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Every key of this section.

        Returns:
            key -> field name, in field order.
        """
        return {cls.KEYS.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}

    @classmethod
    def key(cls, name: str) -> str:
        """The key of one field, the name messages use.

        Args:
            name: the field's name.

        Returns:
            Its key.
        """
        return cls.KEYS.get(name, name)

    @classmethod
    def from_mapping(cls: type[S], data: Mapping[str, Any], where: str) -> S:
        """Build from a mapping of field names or keys (`-` may stand for `_`).

        Args:
            data: field name (or key) -> value.
            where: the section's name, for messages.

        Returns:
            The checked section.

        Raises:
            ConfigError: not a mapping, an unknown name (with the nearest ones), or a value out of range.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a mapping of field -> value, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        by_key = cls.keys()
        kwargs = {}
        for raw, value in data.items():
            name = str(raw).replace("-", "_")
            name = by_key.get(name, name)
            if name not in names:
                raise ConfigError(f"unknown key {raw!r} in {where}; {did_you_mean(name, names)}")
            kwargs[name] = value
        return cls(**kwargs)

    def is_scalar(self, name: str) -> bool:
        """Whether a field may be set from the environment (not a mapping or a list).

        Args:
            name: the field's name.

        Returns:
            True for strings, numbers, booleans and None.
        """
        return not isinstance(getattr(self, name), (dict, list, tuple))


def check_label_key(what: str, key: Any) -> None:
    """A Kubernetes label (or annotation) key.

    Args:
        what: the setting, for the message.
        key: the key.

    Raises:
        ConfigError: not an optional `prefix/` and a name of at most 63 of [A-Za-z0-9-_.].
    """
    if not isinstance(key, str) or not QUALIFIED_NAME.match(key):
        raise ConfigError(f"{what} is not a Kubernetes label key (optional 'prefix/' and name of <=63 [A-Za-z0-9-_.])")


def check_label_value(what: str, value: Any) -> None:
    """A Kubernetes label value.

    Args:
        what: the setting, for the message.
        value: the value (a string or an integer).

    Raises:
        ConfigError: not at most 63 of [A-Za-z0-9-_.].
    """
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not is_label_value(str(value)):
        raise ConfigError(f"{what}={value!r} is not a Kubernetes label value (<=63 of [A-Za-z0-9-_.])")


def check_label_map(what: str, value: Any, *, values_are_labels: bool) -> dict[str, str]:
    """A mapping of label keys to strings (labels, annotations, a node selector).

    Args:
        what: the setting, for messages.
        value: the mapping.
        values_are_labels: whether each value must be a label value (labels, node selectors) or any string.

    Returns:
        A fresh dict of strings.

    Raises:
        ConfigError: not a mapping, or a key or value that is not allowed.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what}={value!r} must be a mapping of string keys to string values")
    out = {}
    for k, v in value.items():
        check_label_key(f"{what} key {k!r}", k)
        if values_are_labels:
            check_label_value(f"{what}[{k!r}]", v)
        out[str(k)] = str(v)
    return out


def check_resource_name(what: str, name: Any) -> None:
    """An extended resource name.

    Args:
        what: the setting, for the message.
        name: the name.

    Raises:
        ConfigError: not a domain-prefixed resource name such as `nvidia.com/gpu`.
    """
    if not isinstance(name, str) or not EXTENDED_RESOURCE_NAME.match(name):
        raise ConfigError(f"{what}={name!r} is not an extended resource name like 'nvidia.com/gpu' or 'amd.com/gpu'")


def check_quantity(what: str, value: str) -> None:
    """A Kubernetes quantity.

    Args:
        what: the setting, for the message.
        value: the quantity's text.

    Raises:
        ConfigError: not a quantity.
    """
    if not is_quantity(value):
        raise ConfigError(f"{what}={value!r} is not a Kubernetes quantity; use e.g. '16Gi' or '512Mi'")


def check_toleration(what: str, toleration: Any) -> dict[str, Any]:
    """One core/v1 toleration.

    Args:
        what: the setting, for messages.
        toleration: the toleration mapping.

    Returns:
        The toleration with its keys in the order Kubernetes writes them.

    Raises:
        ConfigError: not a mapping, an unknown key, an operator or effect not allowed, a value with `Exists`.
    """
    if not isinstance(toleration, Mapping):
        raise ConfigError(f"{what}: {toleration!r} is not a toleration mapping")
    unknown = set(toleration) - set(_TOLERATION_KEYS)
    if unknown:
        raise ConfigError(f"{what}: unknown toleration keys {sorted(unknown)}; allowed: {sorted(_TOLERATION_KEYS)}")
    op = toleration.get("operator", "Equal")
    if op not in _TOLERATION_OPERATORS:
        raise ConfigError(f"{what}: operator={op!r} is not one of {list(_TOLERATION_OPERATORS)}")
    if op == "Exists" and toleration.get("value"):
        raise ConfigError(f"{what}: operator Exists must not have a value (got {toleration['value']!r})")
    if toleration.get("effect", "") not in _TOLERATION_EFFECTS:
        raise ConfigError(f"{what}: effect={toleration.get('effect')!r} is not one of {list(_TOLERATION_EFFECTS)}")
    return {k: toleration[k] for k in _TOLERATION_KEYS if k in toleration}


def check_tolerations(what: str, tolerations: Any) -> list[dict[str, Any]]:
    """A list of tolerations.

    Args:
        what: the setting, for messages.
        tolerations: the list.

    Returns:
        The checked tolerations.

    Raises:
        ConfigError: not a list, or a toleration that is not allowed (named by its index).
    """
    if not isinstance(tolerations, (list, tuple)):
        raise ConfigError(f"{what}={tolerations!r} must be a list of tolerations")
    return [check_toleration(f"{what}[{i}]", t) for i, t in enumerate(tolerations)]


def check_seconds(what: str, value: Any, *, positive: bool, optional: bool = False) -> None:
    """A number of seconds.

    Args:
        what: the setting, for the message.
        value: the value.
        positive: whether 0 is refused (a timeout or budget) or allowed (a grace period, a threshold).
        optional: whether None (the check turned off) is allowed.

    Raises:
        ConfigError: not a number, negative, 0 where it must be positive, or None where it is not allowed.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and not value > 0):
        rule = "a positive number of seconds" if positive else "a non-negative number of seconds"
        off = " or None to turn the check off" if optional else ""
        raise ConfigError(f"{what}={value!r} must be {rule}{off}")


def check_bool(what: str, value: Any) -> None:
    """A boolean (not a string such as "yes").

    Args:
        what: the setting, for the message.
        value: the value.

    Raises:
        ConfigError: not True or False.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{what}={value!r} must be true or false")


def check_int(what: str, value: Any, *, low: int, high: Optional[int] = None, optional: bool = False) -> None:
    """An integer in a range.

    Args:
        what: the setting, for the message.
        value: the value.
        low: the smallest allowed.
        high: the largest allowed; None for no bound.
        optional: whether None is allowed.

    Raises:
        ConfigError: not an integer, or out of range.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ConfigError(f"{what}={value!r} must be {_int_rule(low, high, optional)}")


def _int_rule(low: int, high: Optional[int], optional: bool) -> str:
    if high is not None:
        return f"an integer from {low} to {high}"
    if low == 0:
        return "a non-negative integer" + (" or None" if optional else "")
    return f"an integer >= {low}"


def check_choice(what: str, value: Any, allowed: tuple[Any, ...], *, optional: bool = False) -> None:
    """One of a set of values.

    Args:
        what: the setting, for the message.
        value: the value.
        allowed: the values allowed.
        optional: whether None is allowed too.

    Raises:
        ConfigError: not one of them.
    """
    if value is None and optional:
        return
    if value not in allowed:
        raise ConfigError(f"{what}={value!r} is not one of {list(allowed)}" + (" or null" if optional else ""))
