"""The vendored CRDs (`backend_plugin/crds/`, provenance in its `PROVENANCE.md`): each job kind's
`openAPIV3Schema`, read once per process."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

__all__ = ["CRD_DIR", "CRD_FILES", "schema_for", "crd_source"]

CRD_DIR = Path(__file__).resolve().parent.parent / "crds"
"""Where the package keeps the upstream CRDs, unchanged."""

CRD_FILES: dict[tuple[str, str], str] = {
    ("kubeflow.org/v1", "PyTorchJob"): "kubeflow.org_pytorchjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml",
}
"""(apiVersion, kind) -> the CRD file that serves it."""

_SOURCES = {
    "kubeflow.org_pytorchjobs.yaml": "kubeflow/trainer v1.9.4 (training operator)",
    "trainer.kubeflow.org_trainjobs.yaml": "kubeflow/trainer v2.3.0",
}


def crd_source(api_version: str, kind: str) -> str:
    """The upstream release a kind's vendored CRD comes from, for messages.

    Args:
        api_version: `<group>/<version>`.
        kind: the object's kind.

    Returns:
        E.g. `kubeflow/trainer v2.3.0`.
    """
    return _SOURCES[CRD_FILES[(api_version, kind)]]


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
    file = CRD_FILES[(api_version, kind)]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRD_DIR / file).read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (a safe loader)
    version = api_version.rpartition("/")[2]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
    return schema
