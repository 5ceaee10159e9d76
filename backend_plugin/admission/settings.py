"""Where a value in a job came from, in the user's terms: a job path -> the setting that wrote it
(`Worker.pod_template labels`, `environment`, `RunPolicy.backoff_limit`), so that a refusal names what to change
rather than the job's internal layout."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from backend_plugin.admission.structural import Path, format_path
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = ["setting_for", "pod_template_paths", "get_path", "TRAINJOB_POD", "TRAINJOB_NODE_CONTAINER"]

TRAINJOB_POD: Path = ("trainingRuntimeSpec", "template", "spec", "replicatedJobs")
"""Under `spec.runtimePatches[i]`: the replicated jobs whose `template.spec.template` is a pod template patch."""

TRAINJOB_NODE_CONTAINER = "node"
"""The training container of the default runtime (`spec.trainer` overrides it)."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def pod_template_paths(obj: Mapping[str, Any]) -> list[tuple[Path, str]]:
    """Every embedded pod template of a job, with the setting it comes from.

    Args:
        obj: a PyTorchJob or TrainJob.

    Returns:
        (path of the template, i.e. the object holding `metadata` and `spec`; its setting's prefix).
    """
    spec = obj.get("spec") or {}
    out: list[tuple[Path, str]] = []
    if obj.get("kind") == "PyTorchJob":
        for role in spec.get("pytorchReplicaSpecs") or {}:
            out.append((("spec", "pytorchReplicaSpecs", role, "template"), f"{role}.pod_template"))
    else:
        for i, patch in enumerate(spec.get("runtimePatches") or []):
            jobs = (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get(
                "replicatedJobs"
            ) or []
            for j, _ in enumerate(jobs):
                out.append(
                    (("spec", "runtimePatches", i, *TRAINJOB_POD, j, "template", "spec", "template"), "pod_template")
                )
    return out


def get_path(obj: Any, path: Path) -> Any:
    """The value at `path` in `obj`, or None where the path does not lead anywhere.

    Args:
        obj: a JSON-like object.
        path: keys and indexes.

    Returns:
        The value, or None.
    """
    for part in path:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def setting_for(obj: Mapping[str, Any], path: Path) -> str:
    """The user's setting that wrote the value at `path` of `obj`.

    Args:
        obj: the job.
        path: a path into it.

    Returns:
        A short name: `environment`, `Worker.pod_template labels`, `pod_template spec.containers[1].resizePolicy`,
        `RunPolicy.backoff_limit`, `job labels`; for what only the backend writes, the path itself.
    """
    if path[:2] in (("metadata", "labels"), ("metadata", "annotations")):
        return f"job {path[1]} (the backend config's or the execution's)"
    if path[:2] == ("metadata", "name"):
        return "job name (render --name, or the backend config's job_name_prefix)"
    for prefix, setting in pod_template_paths(obj):
        n = len(prefix)
        if path[:n] != prefix:
            continue
        rest = path[n:]
        if rest[:1] == ("metadata",) and len(rest) >= 2:
            return f"{setting} {rest[1]}"
        if rest[:2] == ("spec", "containers") and len(rest) >= 4 and rest[3] == "env":
            container = get_path(obj, (*prefix, "spec", "containers", rest[2], "name"))
            if container in (PRIMARY_CONTAINER, TRAINJOB_NODE_CONTAINER):
                return "environment"
        if rest[:1] == ("spec",) and len(rest) >= 2 and rest[1] in ("tolerations", "nodeSelector", "affinity"):
            return f"{setting} {rest[1]}"
        return f"{setting} {format_path(rest)}" if rest else setting
    if path[:3] == ("spec", "trainer", "env"):
        return "environment"
    if path[:2] == ("spec", "pytorchReplicaSpecs") and len(path) >= 4:
        return f"{path[2]}.{_snake(str(path[3]))}"
    if path[:2] == ("spec", "runPolicy") and len(path) >= 3:
        return f"RunPolicy.{_snake(str(path[-1] if path[2] == 'schedulingPolicy' else path[2]))}"
    return f"{format_path(path)} (written by the backend)"
