"""Backend configuration: what a cluster operator decides once for every job the connector creates.

`BackendConfig` is a few sections, each a dataclass that checks itself when built (`backend_plugin.settings`), in
the manner of kopf's `OperatorSettings`: `job` (namespace, name prefix, labels, annotations, service account),
`run_policy` (defaults of the job's run policy), `shm` (the `/dev/shm` volume), `gpu` (GPU resource names,
tolerations, accelerator placement, MIG), `interruptible` (spot placement), `api` (budgets, backoff, threads),
`watch` (the watch cache: the one settings class `backend_plugin.kube.watch` runs on), `status` (reading jobs back:
image-pull grace, error documents, log links, live progress), and one section per job kind in `kinds`, owned by the
kind's declaration (`backend_plugin.kinds.<kind>`). `target` picks the kind.

It comes from code defaults, then an optional YAML file, then scalar environment overrides
(`BackendConfig.from_env`), so a Helm chart can mount a ConfigMap and still flip a single value with an env var.
Every value has a *key*, the top-level YAML key and `PYTORCHJOB_<KEY>` variable users set (`namespace`,
`api_get_budget_s`, `trainjob_runtime_name`); a YAML file may also name the sections (`api: {get_budget_s: 10}`).
`load_config()` is what the connector calls. Every field says which job field it sets and why its default is what
it is.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar, Union

import yaml

from backend_plugin.errors import ConfigError
from backend_plugin.kinds import DECLARED
from backend_plugin.settings import (
    DEFAULT_ACCELERATOR_LABEL,
    AcceleratorPlacement,
    ApiSettings,
    GpuPlacement,
    InterruptiblePlacement,
    JobDefaults,
    RunPolicyDefaults,
    Section,
    SharedMemoryDefaults,
    StatusSettings,
    WatchSettings,
    check_choice,
)
from pytorch_contract.suggest import did_you_mean

__all__ = [
    "KEYS",
    "AcceleratorPlacement",
    "BackendConfig",
    "JobDefaults",
    "RunPolicyDefaults",
    "SharedMemoryDefaults",
    "GpuPlacement",
    "InterruptiblePlacement",
    "ApiSettings",
    "WatchSettings",
    "StatusSettings",
    "ConfigError",
    "load_config",
    "DEFAULT_ACCELERATOR_LABEL",
    "TARGETS",
    "SECTIONS",
    "ENV_PREFIX",
    "PROGRAM",
]
# ConfigError is defined with the other errors in `backend_plugin.errors` and re-exported here, where it is raised.

S = TypeVar("S", bound=Section)

TARGETS = (*(d.config_name for d in DECLARED), "auto")
"""`BackendConfig.target` values: the job kind the connector creates (`auto` asks the API server once)."""

PROGRAM = "pytorchjob"
"""The name of the program (`pytorchjob render`), of the environment variables the config is read from, and of a job
the execution names none for: the product's name, which the first job kind it supported gave it."""

ENV_PREFIX = f"{PROGRAM.upper()}_"
"""The prefix of the environment variables `load_config` reads (`PYTORCHJOB_CONFIG`, `PYTORCHJOB_<KEY>`)."""

# --------------------------------------------------------------------------------------------------------------
# The config


def _kind_sections() -> dict[str, Section]:
    return {d.config_name: d.settings() for d in DECLARED}


@dataclass
class BackendConfig:
    """Cluster-wide settings for the jobs the backend builds, in sections that each check themselves.

    Args: see each field's comment. A section may be given as a mapping of its field names (or keys).

    Raises:
        ConfigError: any value out of range; the message names the key, the value and what is allowed.
    """

    target: str = DECLARED[0].config_name
    """Which job the connector creates for a `pytorch` task: `pytorchjob` (Kubeflow training operator v1,
    `kubeflow.org/v1` PyTorchJob), `trainjob` (Kubeflow Trainer v2, `trainer.kubeflow.org/v1alpha1` TrainJob) or
    `auto` (ask the API server once which of the two CRDs it serves, PyTorchJob first; the choice is logged).
    `pytorchjob` by default: it expresses everything a task can ask for and is what existing clusters run; a
    cluster with current Kubeflow (Trainer v2 only) sets `trainjob`. The same template runs on either
    (docs/trainer-v2.md lists what a TrainJob cannot express). Env: `PYTORCHJOB_TARGET`."""

    job: JobDefaults = field(default_factory=JobDefaults)
    """The job's namespace, name prefix, labels and annotations, and its pods' service account."""

    run_policy: RunPolicyDefaults = field(default_factory=RunPolicyDefaults)
    """The job's run policy where the task does not set it."""

    shm: SharedMemoryDefaults = field(default_factory=SharedMemoryDefaults)
    """The memory-backed `/dev/shm` volume of every replica."""

    gpu: GpuPlacement = field(default_factory=GpuPlacement)
    """GPU resource names, tolerations, accelerator placement and MIG slices."""

    interruptible: InterruptiblePlacement = field(default_factory=InterruptiblePlacement)
    """Where replicas of an interruptible (spot) attempt run."""

    api: ApiSettings = field(default_factory=ApiSettings)
    """The connector's budgets, backoff and `get` threads."""

    watch: WatchSettings = field(default_factory=WatchSettings)
    """The watch cache `get` is answered from."""

    status: StatusSettings = field(default_factory=StatusSettings)
    """Reading a job back: image-pull grace, error documents, log links, live progress."""

    kinds: dict[str, Section] = field(default_factory=_kind_sections)
    """One section per job kind, keyed by its `target` value, each the kind's own class (`Declaration.settings`):
    e.g. `trainjob: {runtime_name: torch-distributed}`. A kind the mapping leaves out gets its defaults."""

    def __post_init__(self) -> None:
        check_choice("target", self.target, TARGETS)
        for name, cls in _SECTION_TYPES.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                setattr(self, name, cls.from_mapping(value, name))
        self.kinds = _kinds(self.kinds)

    def value(self, key: str) -> Any:
        """The value of a key as users set it (`api_get_budget_s`, `trainjob_runtime_name`): the name the YAML file
        and `PYTORCHJOB_<KEY>` give it, read from its section.

        Args:
            key: a key of `KEYS`.

        Returns:
            Its value.

        Raises:
            KeyError: not a key (the message names the nearest ones).
        """
        where = _KEYS.get(key)
        if where is None:
            raise KeyError(f"{key!r} is not a backend config key; {did_you_mean(key, _KEYS)}")
        section, name = where
        parent, _, kind = section.partition(".")
        holder = self.kinds[kind] if kind else getattr(self, parent)
        return getattr(holder, name)

    def kind(self, cls: type[S]) -> S:
        """A kind's section, by its class (what a kind's own code asks for).

        Args:
            cls: the kind's section class (`Declaration.settings`).

        Returns:
            The section.

        Raises:
            KeyError: no registered kind has that section.
        """
        for section in self.kinds.values():
            if isinstance(section, cls):
                return section
        raise KeyError(f"no job kind has the config section {cls.__name__}")

    # -- loading --------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackendConfig:
        """Build from a mapping: keys (`namespace`, `api_get_budget_s`; YAML keys may use '-' or '_'), or sections
        (`api: {get_budget_s: 10}`, `trainjob: {runtime_name: my-runtime}`, `kinds: {trainjob: {...}}`).

        Args:
            data: key or section name -> value.

        Returns:
            The validated config.

        Raises:
            ConfigError: unknown keys (with the nearest allowed ones), a value given twice, or invalid values.
        """
        return cls._build(_sectioned(data))

    @classmethod
    def _build(cls, sections: Mapping[str, Any]) -> BackendConfig:
        """The config from `_sectioned` data: each section built (and checked) from its fields."""
        kwargs: dict[str, Any] = {
            name: section.from_mapping(sections[name], name)
            for name, section in _SECTION_TYPES.items()
            if name in sections
        }
        if "target" in sections:
            kwargs["target"] = sections["target"]
        kwargs["kinds"] = sections.get("kinds", {})
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, path_or_str: Union[str, os.PathLike]) -> BackendConfig:
        """Load from a YAML file path or a YAML document string.

        Args:
            path_or_str: a path to an existing file, or YAML text (anything that is not an existing path).

        Returns:
            The validated config; an empty document gives the defaults.

        Raises:
            ConfigError: the YAML does not parse, is not a mapping, or has bad keys/values.
        """
        source, data = _read_yaml(path_or_str)
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from e

    @classmethod
    def from_env(cls, prefix: str = ENV_PREFIX, environ: Optional[Mapping[str, str]] = None) -> BackendConfig:
        """Load `<prefix>CONFIG` (a YAML file path) if set, then apply scalar `<prefix><KEY>` overrides.

        Scalar values only (strings, numbers, booleans, `shm_size`); values are parsed as YAML scalars, so
        `PYTORCHJOB_SUSPEND=true` and `PYTORCHJOB_BACKOFF_LIMIT=3` work, and an empty value or `null` means None.
        Mappings and lists (labels, tolerations, accelerators, log links) come from the YAML file only.

        Args:
            prefix: environment variable prefix.
            environ: the environment to read; `os.environ` when None.

        Returns:
            The validated config.

        Raises:
            ConfigError: the file or any override is invalid, or an override names a mapping or a list.
        """
        env = os.environ if environ is None else environ
        sections: dict[str, Any] = {}
        path = env.get(f"{prefix}CONFIG")
        if path:
            if not Path(path).is_file():
                raise ConfigError(f"{prefix}CONFIG={path!r} is not a readable file")
            source, data = _read_yaml(Path(path))
            try:
                sections = _sectioned(data)
                cls._build(sections)  # the file alone is checked first, its errors named by the file
            except ConfigError as e:
                raise ConfigError(f"{source}: {e}") from e
        if f"{prefix}TARGET" in env:
            sections["target"] = env[f"{prefix}TARGET"]  # verbatim, like every string a kind is named by
        for key, (section, name) in _KEYS.items():
            if f"{prefix}{key.upper()}" in env:
                _put(sections, section, name, _env_value(env, prefix, key, section, name))
        return cls._build(sections)


def _kinds(kinds: Any) -> dict[str, Section]:
    """Every kind's section: the given ones (sections or mappings), the others with their defaults."""
    if not isinstance(kinds, Mapping):
        raise ConfigError(f"kinds={kinds!r} must map a job kind's target value -> its section")
    unknown = sorted(set(kinds) - set(_KIND_TYPES))
    if unknown:
        raise ConfigError(f"kinds: unknown job kind {unknown[0]!r}; {did_you_mean(str(unknown[0]), _KIND_TYPES)}")
    out: dict[str, Section] = {}
    for name, cls in _KIND_TYPES.items():
        value = kinds.get(name, {})
        out[name] = value if isinstance(value, cls) else cls.from_mapping(value, name)
    return out


_SECTION_TYPES: dict[str, type[Section]] = {
    f.name: f.default_factory  # type: ignore[misc]
    for f in dataclasses.fields(BackendConfig)
    if f.name not in ("target", "kinds")
}
"""Section name -> its class, in field order."""

_KIND_TYPES: dict[str, type[Section]] = {d.config_name: d.settings for d in DECLARED}
"""A kind's `target` value -> its section class."""

SECTIONS: tuple[str, ...] = (*_SECTION_TYPES, *_KIND_TYPES)
"""Every section a YAML file may name: the neutral ones, then one per job kind."""


def _all_keys() -> dict[str, tuple[str, str]]:
    """key -> (section, field) of every value; a kind's section is `kinds.<name>`."""
    out: dict[str, tuple[str, str]] = {}
    owners = [*_SECTION_TYPES.items(), *((f"kinds.{k}", c) for k, c in _KIND_TYPES.items())]
    for section, cls in owners:
        for key, name in cls.keys().items():
            if key in out or key in (*SECTIONS, "target", "kinds"):
                raise TypeError(f"config key {key!r} of {section} is taken by {out.get(key, key)}")
            out[key] = (section, name)
    return out


_KEYS = _all_keys()
"""Every key users set (top-level YAML key, `PYTORCHJOB_<KEY>`) -> (section, field)."""

KEYS: tuple[str, ...] = tuple(_KEYS)
"""Every key users set: the top-level YAML keys and `PYTORCHJOB_<KEY>` variables, one per value of every section."""


def _sectioned(data: Any) -> dict[str, Any]:
    """A YAML mapping of keys and sections as `{target, <section>: {field: value}, kinds: {<kind>: {...}}}`."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"backend config must be a mapping of field -> value, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for raw, value in data.items():
        key = str(raw).replace("-", "_")
        if key == "target":
            out["target"] = value
        elif key in _KEYS:
            _put(out, *_KEYS[key], value, raw)
        elif key in SECTIONS or key == "kinds":
            _put_section(out, key, value)
        else:
            raise ConfigError(f"unknown backend config key {raw!r}; {did_you_mean(key, _top_level_names())}")
    return out


def _top_level_names() -> list[str]:
    return [*_KEYS, *SECTIONS, "target", "kinds"]


def _put_section(out: dict[str, Any], key: str, value: Any) -> None:
    """A whole section (or `kinds`, a mapping of kind sections) given by name."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}={value!r} must be a mapping (a section of the backend config)")
    if key == "kinds":
        for kind, section in value.items():
            _put_section(out, str(kind), section)
        return
    section = f"kinds.{key}" if key in _KIND_TYPES else key
    for name, item in value.items():
        _put(out, section, str(name).replace("-", "_"), item, f"{key}.{name}")


def _put(out: dict[str, Any], section: str, name: str, value: Any, given_as: Any = None) -> None:
    """Set one field of `out`'s section (`kinds.<kind>` for a kind's); a field given twice in one file is refused."""
    parent, _, kind = section.partition(".")
    holder = out.setdefault(parent, {})
    if kind:
        holder = holder.setdefault(kind, {})
    if given_as is not None and name in holder:
        raise ConfigError(f"{given_as!r} sets {section}.{name}, which this config already sets")
    holder[name] = value


def _read_yaml(path_or_str: Union[str, os.PathLike]) -> tuple[str, Any]:
    """(where it came from, the parsed document: {} when empty)."""
    text = str(path_or_str)
    source = "YAML string"
    if isinstance(path_or_str, os.PathLike) or ("\n" not in text and Path(text).is_file()):
        source = str(path_or_str)
        text = Path(path_or_str).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"backend config {source} is not valid YAML: {e}") from e
    return source, {} if data is None else data


def _env_value(env: Mapping[str, str], prefix: str, key: str, section: str, name: str) -> Any:
    """One `<prefix><KEY>` variable's value: a YAML scalar (the text itself for a verbatim string)."""
    variable = f"{prefix}{key.upper()}"
    cls = _section_type(section)
    if not cls().is_scalar(name):
        raise ConfigError(f"{variable} cannot be set from the environment; put {key} in the {prefix}CONFIG file")
    raw = env[variable]
    value = yaml.safe_load(raw) if raw.strip() else None
    if name in cls.VERBATIM and value is not None:
        value = raw  # keep strings such as "010" or "1e3" verbatim
    return value


def _section_type(section: str) -> type[Section]:
    parent, _, kind = section.partition(".")
    return _KIND_TYPES[kind] if kind else _SECTION_TYPES[parent]


def load_config(environ: Optional[Mapping[str, str]] = None) -> BackendConfig:
    """The config the connector uses: defaults, then `PYTORCHJOB_CONFIG` YAML, then `PYTORCHJOB_*` overrides.

    Args:
        environ: the environment to read; `os.environ` when None.

    Returns:
        The validated config.

    Raises:
        ConfigError: when the file or an override is invalid.
    """
    return BackendConfig.from_env(environ=environ)
