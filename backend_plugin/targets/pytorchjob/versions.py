"""A PyTorchJob on a cluster whose PyTorchJob CRD is older than the vendored one (training operator v1.9.4): `fit`.

Every field the writer itself writes is declared by the CRDs of v1.7.0, v1.8.1 and v1.9.4; only the embedded pod
schema grows from release to release (111 pod fields of the `kubernetes` client are missing in v1.7.0's, 76 in
v1.8.1's). Those come from the task's pod templates, and none of them can be dropped without changing the pods, so
nothing is fitted: the admission model refuses each, naming the field, the setting and the release. A native sidecar
gets its own words, since pruning its `restartPolicy` would turn it into an init container that blocks the pod for
ever.

Pure: a job in, a `Fitted` out.
"""

from __future__ import annotations

from typing import Any

from backend_plugin.admission.installed import Fitted, InstalledCrd, undeclared
from backend_plugin.admission.structural import format_path
from backend_plugin.kinds.declaration import ANY
from backend_plugin.kinds.pytorchjob import NATIVE_SIDECAR

__all__ = ["fit"]

_SIDECAR_ADVICE = (
    "it makes this init container a native sidecar (restartPolicy: Always, Kubernetes 1.28+), and without it the "
    "container would run as an ordinary init container that never ends and blocks the pod: upgrade the training "
    "operator to v1.8 or later, or run the sidecar as a regular container of the pod template"
)


def fit(job: dict[str, Any], crd: InstalledCrd) -> Fitted:
    """The PyTorchJob as written, with advice for the fields of its pod templates `crd` lacks.

    Args:
        job: the PyTorchJob.
        crd: the cluster's installed PyTorchJob CRD.

    Returns:
        The job unchanged, and the native sidecar's advice where its `restartPolicy` is undeclared.
    """
    advice = {
        format_path(path): _SIDECAR_ADVICE
        for path in undeclared(job, crd)
        if len(path) == len(NATIVE_SIDECAR)
        and all(p == ANY or p == q for p, q in zip(NATIVE_SIDECAR, path, strict=True))
    }
    return Fitted(job, advice=advice)
