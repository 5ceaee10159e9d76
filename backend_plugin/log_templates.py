"""Log-link templates: the variables they may use, their validation and their rendering.

Kept apart from `logs` (which needs the job and its pods) so that `config` can validate `BackendConfig.log_links`
when a config is built without importing the status and log machinery. Templates use the variable syntax of Flyte's
own task log links (`{{ .podName }}`), so a site can reuse the templates it has in propeller's config.

Dynamic links (Flyte's `dynamic-log-links`, flyte PR 6284 for the Kubeflow plugins): an entry with a `link_type` is
shown only for tasks whose template config names that type in its `link_type` key (a comma-separated list, e.g.
`"vscode"`), and any template may use `{{ .taskConfig.<key> }}`, filled from the task template's config. One
deliberate difference from Flyte's Go plugin: a link whose `taskConfig` key the task does not set is left out
instead of being shown with the placeholder in its URL.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

from backend_plugin.errors import ConfigError

__all__ = [
    "VARIABLES",
    "TIME_VARIABLES",
    "LogTemplate",
    "check_templates",
    "render_template",
    "link_types",
    "uses_time",
    "LINK_TYPE_KEY",
]

LINK_TYPE_KEY = "link_type"
"""The task template config key that selects dynamic log links (set by flytekit plugins such as `@vscode`)."""

VARIABLES = frozenset(
    {
        "podName",
        "namespace",
        "containerName",
        "podUID",
        "jobName",
        "replicaName",
        "replicaType",
        "replicaIndex",
        "hostname",
        "podUnixStartTime",
        "podUnixFinishTime",
        "podRFC3339StartTime",
        "podRFC3339FinishTime",
    }
)
"""Every variable a log-link template may use (see `backend_plugin.logs` for what each one holds)."""

_VAR = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
# Flyte's tasklog syntax for config values: `{{ .taskConfig.<key> }}` ("taskConfig" in any case, '.' or '$').
_TASK_CONFIG_VAR = re.compile(r"\{\{\s*\.(?i:taskConfig)[.$]([A-Za-z_]+)\s*\}\}")
_LINK_TYPE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
_ENTRY_KEYS = frozenset({"name", "template", "link_type"})


class LogTemplate(NamedTuple):
    """One checked `BackendConfig.log_links` entry.

    Attributes:
        name: the link's display name (the replica is appended: "Logs master-0").
        template: the URL template.
        link_type: "" for a link shown for every task; else shown only for tasks whose `link_type` config names it.
    """

    name: str
    template: str
    link_type: str = ""


def check_templates(templates: Sequence[Mapping[str, Any]]) -> list[LogTemplate]:
    """Validate `BackendConfig.log_links` entries.

    Args:
        templates: `{name, template[, link_type]}` mappings.

    Returns:
        The checked entries.

    Raises:
        ConfigError: an entry is not a mapping with non-empty `name` and `template`, has another key, uses an
            unknown variable, or has a `link_type` that is not one word of [A-Za-z0-9_.-].
    """
    out = []
    for i, entry in enumerate(templates or ()):
        if not isinstance(entry, Mapping) or not entry.get("name") or not entry.get("template"):
            raise ConfigError(f"log_links[{i}]={entry!r} must be a mapping with non-empty 'name' and 'template'")
        extra = sorted(set(entry) - _ENTRY_KEYS)
        if extra:
            raise ConfigError(f"log_links[{i}] has unknown keys {extra}; allowed: {sorted(_ENTRY_KEYS)}")
        template = str(entry["template"])
        unknown = sorted({v for v in _VAR.findall(template) if v not in VARIABLES})
        if unknown:
            raise ConfigError(
                f"log_links[{i}] ({entry['name']!r}) uses unknown variables {unknown}; allowed: {sorted(VARIABLES)} "
                "and taskConfig.<key>"
            )
        link_type = entry.get("link_type", "")
        if link_type != "" and not (isinstance(link_type, str) and _LINK_TYPE.match(link_type)):
            raise ConfigError(
                f"log_links[{i}].link_type={link_type!r} must be one link type of [A-Za-z0-9_.-] (e.g. 'vscode'), "
                "or be left out for a link shown for every task"
            )
        out.append(LogTemplate(str(entry["name"]), template, link_type))
    return out


def link_types(task_config: Optional[Mapping[str, str]]) -> frozenset[str]:
    """The dynamic link types a task asks for: its config's `link_type`, comma-separated (as Flyte splits it).

    Args:
        task_config: the task template's config map (None or empty for none).

    Returns:
        The link types, blanks dropped.
    """
    raw = str((task_config or {}).get(LINK_TYPE_KEY) or "")
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


def render_template(
    template: str, values: Mapping[str, str], task_config: Optional[Mapping[str, str]] = None
) -> Optional[str]:
    """Fill a checked template's variables.

    Args:
        template: a template that passed `check_templates`.
        values: a value for every name in `VARIABLES`.
        task_config: the task template's config map, for `{{ .taskConfig.<key> }}`.

    Returns:
        The URI, or None when the template uses a `taskConfig` key the task does not set (a link with the
        placeholder left in it leads nowhere).
    """
    config = task_config or {}
    parts = _parts(template)
    if any(key not in config for kind, key in parts if kind == _CONFIG):
        return None
    # A value, the link's own or the config's, is inserted as it is, never read as a template itself.
    return "".join(
        text if kind == _TEXT else values[text] if kind == _OWN else str(config[text]) for kind, text in parts
    )


TIME_VARIABLES = frozenset({"podUnixStartTime", "podUnixFinishTime", "podRFC3339StartTime", "podRFC3339FinishTime"})
"""The variables whose value moves while a pod runs (its finish is then the time of the poll)."""


def uses_time(template: str) -> bool:
    """Whether a checked template reads a pod's start or finish time.

    Args:
        template: a template that passed `check_templates`.

    Returns:
        True when a link of it changes from one poll to the next while its pod runs.
    """
    return any(kind == _OWN and name in TIME_VARIABLES for kind, name in _parts(template))


_TEXT, _OWN, _CONFIG = 0, 1, 2


@functools.lru_cache(maxsize=256)
def _parts(template: str) -> tuple[tuple[int, str], ...]:
    """A template cut once into its text and its variables (`_OWN` link variables, `_CONFIG` taskConfig keys)."""
    out: list[tuple[int, str]] = []
    at = 0
    for m in re.finditer(f"{_VAR.pattern}|{_TASK_CONFIG_VAR.pattern}", template):
        out.append((_TEXT, template[at : m.start()]))
        out.append((_OWN, m.group(1)) if m.group(1) is not None else (_CONFIG, m.group(2)))
        at = m.end()
    out.append((_TEXT, template[at:]))
    return tuple(out)
