"""The `JobTarget` of every registered kind, in registry order, and how the connector and the CLI pick one.

Built from `backend_plugin.targets.DECLARED`: each declaration names its package, whose `target` module holds its
`JobTarget` as `TARGET` (a target imports the writer machinery, which imports the config, which reads the
declarations: so the declarations cannot import their targets, and the registry loads each by its package's name).
The connector picks a kind from `BackendConfig.target` (`auto`: the first kind whose CRD the API server serves, asked
once) and otherwise never names one. Pure: nothing here talks to the API.
"""

from __future__ import annotations

import importlib
from typing import Optional

from backend_plugin.targets import DECLARED
from backend_plugin.targets.base import JobTarget, Observed, Reads
from backend_plugin.targets.declaration import Declaration

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


def _target(declaration: Declaration) -> JobTarget:
    target = importlib.import_module(f"{declaration.package}.target").TARGET
    if not isinstance(target, JobTarget) or target.declaration is not declaration:
        raise TypeError(f"{declaration.package}.target.TARGET is not the JobTarget of {declaration.kind}")
    return target


KINDS: tuple[JobTarget, ...] = tuple(_target(d) for d in DECLARED)
"""Every kind's target, in the order `target: auto` tries them (`DECLARED`'s)."""

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
