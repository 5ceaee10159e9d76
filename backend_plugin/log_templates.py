"""Log-link templates: the variables they may use, their validation and their rendering.

Kept apart from `logs` (which needs the job and its pods) so that `config` can validate `BackendConfig.log_links`
when a config is built without importing the status and log machinery. Templates use the variable syntax of Flyte's
own task log links (`{{ .podName }}`), so a site can reuse the templates it has in propeller's config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from backend_plugin.errors import ConfigError

__all__ = ["VARIABLES", "check_templates", "render_template"]

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


def check_templates(templates: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Validate `BackendConfig.log_links` entries.

    Args:
        templates: `{name, template}` mappings.

    Returns:
        (name, template) pairs.

    Raises:
        ConfigError: an entry is not a mapping with non-empty `name` and `template`, or uses an unknown variable.
    """
    out = []
    for i, entry in enumerate(templates or ()):
        if not isinstance(entry, Mapping) or not entry.get("name") or not entry.get("template"):
            raise ConfigError(f"log_links[{i}]={entry!r} must be a mapping with non-empty 'name' and 'template'")
        unknown = sorted({v for v in _VAR.findall(str(entry["template"])) if v not in VARIABLES})
        if unknown:
            raise ConfigError(
                f"log_links[{i}] ({entry['name']!r}) uses unknown variables {unknown}; allowed: {sorted(VARIABLES)}"
            )
        out.append((str(entry["name"]), str(entry["template"])))
    return out


def render_template(template: str, values: Mapping[str, str]) -> str:
    """Fill a checked template's variables.

    Args:
        template: a template that passed `check_templates`.
        values: a value for every name in `VARIABLES`.

    Returns:
        The URI.
    """
    return _VAR.sub(lambda m: values[m.group(1)], template)
