"""Where a value in a job came from, in the user's terms: a job path -> the setting that wrote it
(`Worker.pod_template labels`, `environment`, `RunPolicy.backoff_limit`), so that a refusal names what to change
rather than the job's internal layout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backend_plugin.admission.structural import Path, format_path
from backend_plugin.kinds import declaration_for

__all__ = ["setting_for", "pod_template_paths", "get_path"]


def pod_template_paths(obj: Mapping[str, Any]) -> list[tuple[Path, str]]:
    """Every embedded pod template of a job, with the setting it comes from (the kind's `Declaration` says where).

    Args:
        obj: a job of a registered kind.

    Returns:
        (path of the template, i.e. the object holding `metadata` and `spec`; its setting's prefix).

    Raises:
        KeyError: the job is of no registered kind.
    """
    return declaration_for(obj).pod_template_paths(obj)


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
    kind = declaration_for(obj)
    for prefix, setting in kind.pod_template_paths(obj):
        if path[: len(prefix)] == prefix:
            return _in_pod_template(obj, prefix, path[len(prefix) :], setting, kind.primary_containers)
    if any(path[: len(env)] == env for env in kind.limits.env_paths):
        return "environment"
    return kind.setting_names(path) or f"{format_path(path)} (written by the backend)"


def _in_pod_template(obj: Mapping[str, Any], prefix: Path, rest: Path, setting: str, primary: tuple[str, ...]) -> str:
    """The setting behind a path inside one pod template (`rest`, below the template at `prefix`)."""
    if rest[:1] == ("metadata",) and len(rest) >= 2:
        return f"{setting} {rest[1]}"
    if _primary_env(obj, prefix, rest, primary):
        return "environment"
    if rest[:1] == ("spec",) and len(rest) >= 2 and rest[1] in ("tolerations", "nodeSelector", "affinity"):
        return f"{setting} {rest[1]}"
    return f"{setting} {format_path(rest)}" if rest else setting


def _primary_env(obj: Mapping[str, Any], prefix: Path, rest: Path, primary: tuple[str, ...]) -> bool:
    """Whether `rest` is in the env of the template's training container (the task's `environment`)."""
    if rest[:2] != ("spec", "containers") or len(rest) < 4 or rest[3] != "env":
        return False
    return get_path(obj, (*prefix, "spec", "containers", rest[2], "name")) in primary
