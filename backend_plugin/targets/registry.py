"""The `JobTarget` of every registered kind, in the order of the declarations (`backend_plugin.kinds.DECLARED`), and
how the connector and the CLI pick one.

The one module outside the kinds' own packages that names each kind's target: a new kind is one import and one entry
here, beside its entry in `backend_plugin.kinds`. The declarations import no target (the config and the admission
model read them, and the targets read those), so each target is imported here by name. The connector picks a kind from
`BackendConfig.target` (`auto`: the first kind whose CRD the API server serves, asked once) and otherwise never names
one. Pure: nothing here talks to the API.
"""

from __future__ import annotations

from typing import Optional

from backend_plugin.kinds import DECLARED
from backend_plugin.targets.base import JobTarget, Observed, Reads
from backend_plugin.targets.jobset.target import TARGET as JOBSET
from backend_plugin.targets.pytorchjob.target import TARGET as PYTORCHJOB
from backend_plugin.targets.trainjob.target import TARGET as TRAINJOB

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

_TARGETS = {t.declaration.kind: t for t in (PYTORCHJOB, TRAINJOB, JOBSET)}

KINDS: tuple[JobTarget, ...] = tuple(_TARGETS[d.kind] for d in DECLARED)
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
