"""The job kinds a `pytorch` task can become, as the facts each declares: the registry of declarations.

Each kind declares itself in one module here (`pytorchjob.py`, `trainjob.py`, `jobset.py`, with `jobset_webhook.py`
holding the JobSet webhook's rules its declaration names): its API coordinates, vendored CRD and upstream release,
where its pod templates are, its limits, its section of the backend config, how its own paths are named. `DECLARED`
is the registry. What the kind does with a task (plan, writer, status, log links) is its `JobTarget`, in
`backend_plugin.targets.<kind>`: the declarations import none of it, so that the config and the admission model,
which read the facts, sit below the targets, which read the config and fit jobs to installed CRDs. No module here
talks to the API; none but the registry and the kinds' own modules names a kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backend_plugin.kinds import jobset, pytorchjob, trainjob
from backend_plugin.kinds.declaration import Declaration

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
