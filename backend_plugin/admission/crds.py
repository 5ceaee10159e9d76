"""The vendored CRDs (`backend_plugin/crds/`, provenance in its `PROVENANCE.md`): each job kind's
`openAPIV3Schema`, read once per process. Which file serves a kind, and the release it comes from, is the kind's own
declaration (`Declaration.crd`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from backend_plugin.kinds import DECLARED, declaration_of

__all__ = ["CRD_DIR", "CRD_FILES", "schema_for", "crd_source"]

CRD_DIR = Path(__file__).resolve().parent.parent / "crds"
"""Where the package keeps the upstream CRDs, unchanged."""

CRD_FILES: dict[tuple[str, str], str] = {(d.api_version, d.kind): d.crd.file for d in DECLARED}
"""(apiVersion, kind) -> the CRD file that serves it, for every registered kind."""


def crd_source(api_version: str, kind: str) -> str:
    """The upstream release a kind's vendored CRD comes from, for messages.

    Args:
        api_version: `<group>/<version>`.
        kind: the object's kind.

    Returns:
        E.g. `kubeflow/trainer v2.3.0`.

    Raises:
        KeyError: no registered kind serves this kind and version.
    """
    return declaration_of(api_version, kind).crd.release


@functools.cache
def schema_for(api_version: str, kind: str) -> dict[str, Any]:
    """The `openAPIV3Schema` of `kind` at `api_version` in its vendored CRD.

    Args:
        api_version: `<group>/<version>`.
        kind: the object's kind.

    Returns:
        The schema (shared: do not modify it).

    Raises:
        KeyError: no vendored CRD serves this kind and version.
    """
    file = declaration_of(api_version, kind).crd.file
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRD_DIR / file).read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (a safe loader)
    version = api_version.rpartition("/")[2]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
    return schema
