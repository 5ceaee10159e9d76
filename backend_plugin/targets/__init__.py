"""The job kinds a `pytorch` task can become: the registry.

Each kind is a package here (`pytorchjob/`, `trainjob/`, `jobset/`) holding everything about it: its declaration (API
coordinates, vendored CRD, where its pod templates are, its limits, its section of the backend config:
`declaration.py`), and its `JobTarget` (writer, status table, log links: `target.py`). `DECLARED` is the registry: a
new kind is its package, one entry here, its vendored CRD under `backend_plugin/crds/` and its test folder under
`tests/targets/`. The neutral rooms (config, admission, connector, CLI) read the declarations and ask the targets
(`backend_plugin.targets.registry`); none of them names a kind. Importing this package loads the declarations only,
so the backend config can read them while it is built. Pure: nothing here talks to the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backend_plugin.targets import jobset, pytorchjob, trainjob
from backend_plugin.targets.declaration import Declaration

__all__ = ["DECLARED", "Declaration", "declaration_for", "declaration_of"]

DECLARED: tuple[Declaration, ...] = (pytorchjob.DECLARATION, trainjob.DECLARATION, jobset.DECLARATION)
"""Every kind, in the order `target: auto` tries them: PyTorchJob first, so a cluster that still runs the training
operator keeps what it runs today; JobSet last, since Kubeflow Trainer v2 installs JobSet too and a cluster that has
it keeps its TrainJobs. The first is the kind of resource metadata that names none."""

_BY_API = {(d.api_version, d.kind): d for d in DECLARED}


def declaration_of(api_version: str, kind: str) -> Declaration:
    """The declaration of the kind a job's `apiVersion` and `kind` name.

    Args:
        api_version: `<group>/<version>`.
        kind: the object's kind.

    Returns:
        The declaration.

    Raises:
        KeyError: no registered kind serves this apiVersion and kind.
    """
    return _BY_API[(api_version, kind)]


def declaration_for(job: Mapping[str, Any]) -> Declaration:
    """The declaration of a job's kind (its `apiVersion` and `kind`).

    Args:
        job: a job dict.

    Returns:
        The declaration.

    Raises:
        KeyError: no registered kind serves the job's apiVersion and kind.
    """
    return declaration_of(str(job.get("apiVersion")), str(job.get("kind")))
