"""The job kinds a `pytorch` task can become: the registry.

Each kind is a package here (`pytorchjob/`, `trainjob/`) with its writer, status table and log links, and one
`JobTarget` (`backend_plugin.targets.base`) that the connector and `pytorchjob render` call. `KINDS` is the
registry: a third kind is its own package plus one entry here (and its name in `config.TARGETS`). The connector picks
a kind from `BackendConfig.target` (`auto`: the first kind in `KINDS` whose CRD the API server serves, asked once)
and otherwise never names one. Pure: nothing here talks to the API.
"""

from __future__ import annotations

from typing import Optional

from backend_plugin.targets import pytorchjob, trainjob
from backend_plugin.targets.base import JobTarget, Observed, Reads

__all__ = [
    "JobTarget",
    "Reads",
    "Observed",
    "KINDS",
    "DEFAULT",
    "BY_KIND",
    "BY_CONFIG",
    "target_for_config",
    "target_for_kind",
]

KINDS: tuple[JobTarget, ...] = (pytorchjob.TARGET, trainjob.TARGET)
"""Every kind, in the order `target: auto` tries them: PyTorchJob first, so a cluster that still runs the training
operator keeps what it runs today."""

DEFAULT = KINDS[0]
"""The kind of resource metadata that names none (stored before the metadata recorded a kind)."""

BY_KIND = {t.kind: t for t in KINDS}
BY_CONFIG = {t.config_name: t for t in KINDS}


def target_for_config(value: str) -> Optional[JobTarget]:
    """The target of `BackendConfig.target`; None for `auto` (the connector asks the API server).

    Args:
        value: a kind's `config_name`, or `auto`.

    Returns:
        The target, or None for `auto`.
    """
    return BY_CONFIG.get(value)


def target_for_kind(kind: str) -> JobTarget:
    """The target of a job kind (what the connector stored at create time); `DEFAULT` for "".

    Args:
        kind: a kind's `kind`, or "" for metadata that names none.

    Returns:
        The target.

    Raises:
        ValueError: an unknown kind.
    """
    if not kind:
        return DEFAULT
    try:
        return BY_KIND[kind]
    except KeyError:
        raise ValueError(f"kind={kind!r} is not one of {sorted(BY_KIND)}") from None
