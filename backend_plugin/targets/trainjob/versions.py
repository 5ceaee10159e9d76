"""A TrainJob on a cluster whose TrainJob CRD is older than the vendored one (Trainer v2.3): `fit`.

What the writer writes that an older Trainer's CRD lacks, and what each field becomes (the releases' fields are in
`declaration.HISTORY`; docs/admission.md has the table):

- `spec.runtimePatches` (Trainer v2.2+): the node pod's labels, annotations, volumes (`/dev/shm`), placement and the
  training container's mounts. Trainer v2.1 merges `spec.podTemplateOverrides[].metadata` and `.spec` into the
  targeted runtime job's pod template with the same strategic merge patch (`mergePodTemplateOverrides`), and v2.0
  merges `spec.podSpecOverrides[]` into its pod spec (`mergePodSpecOverrides`; no pod metadata): the patch is written
  there when the installed CRD declares everything it holds, which keeps its meaning. Otherwise nothing is dropped
  (pod labels carry Flyte's secret injection, annotations a sidecar injector's or the autoscaler's opt-out, volumes
  and placement what the pod needs): the job is refused, naming what the older field cannot carry.
- `spec.activeDeadlineSeconds` (Trainer v2.2+): from the task's timeout, or the backend's default, it is dropped
  and said (Flyte ends an execution at its task's timeout itself); set by `RunPolicy(active_deadline_seconds=...)`,
  which Flyte does not enforce, it is refused.

Pure: a job in, a `Fitted` out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from backend_plugin.admission.installed import Fitted, InstalledCrd, undeclared
from backend_plugin.admission.structural import Path, format_path
from backend_plugin.kinds.trainjob import (
    ACTIVE_DEADLINE,
    NODE,
    POD_SPEC_OVERRIDES,
    POD_TEMPLATE_OVERRIDES,
    RUNTIME_PATCHES,
)
from backend_plugin.pods import SHM_VOLUME, PodPlan

__all__ = ["fit", "deadline_source"]

_NEWER = "Trainer v2.2"
_UPGRADE = f"upgrade Kubeflow Trainer to v2.2 or later (whose CRD declares {format_path(RUNTIME_PATCHES)})"


def fit(job: dict[str, Any], plan: PodPlan, crd: InstalledCrd) -> Fitted:
    """The TrainJob as `crd` accepts it with the same meaning (see the module's docstring).

    Args:
        job: the TrainJob as written (not changed).
        plan: its plan (where the deadline came from).
        crd: the cluster's installed TrainJob CRD.

    Returns:
        The fitted TrainJob, what was written otherwise or dropped, and advice for what stays undeclared.
    """
    out = copy.deepcopy(job)
    spec = out["spec"]
    notes: list[str] = []
    dropped: list[str] = []
    advice: dict[str, str] = {}
    if "runtimePatches" in spec and not crd.declares(RUNTIME_PATCHES):
        out, note, problem = _older_patches(out, crd)
        if note:
            notes.append(note)
        if problem:
            advice[format_path(RUNTIME_PATCHES)] = problem
    deadline = out["spec"].get("activeDeadlineSeconds")
    if deadline is not None and not crd.declares(ACTIVE_DEADLINE):
        source = deadline_source(plan)
        if source == "run_policy":
            advice[format_path(ACTIVE_DEADLINE)] = (
                f"RunPolicy(active_deadline_seconds={deadline}) sets it, and a TrainJob without it would run "
                f"past that deadline: upgrade Kubeflow Trainer to v2.2 or later, or give the task a timeout= "
                "instead, at which Flyte ends the execution itself"
            )
        else:
            del out["spec"]["activeDeadlineSeconds"]
            what = (
                f"the task's timeout ({deadline}s)"
                if source == "timeout"
                else f"the backend's active_deadline_seconds ({deadline}s)"
            )
            note = (
                f"spec.activeDeadlineSeconds, {what}, is not written: {crd.describe()} does not declare it "
                f"({_NEWER} added it); Flyte ends an execution at its task's timeout and then deletes the TrainJob, "
                "so only a TrainJob created from this object by hand runs without the deadline"
            )
            notes.append(note)
            dropped.append(f"spec.activeDeadlineSeconds ({what}) dropped: {crd.describe()} does not declare it")
    return Fitted(out, tuple(notes), tuple(dropped), advice)


def deadline_source(plan: PodPlan) -> str:
    """Where the TrainJob's `spec.activeDeadlineSeconds` came from (as `writer.active_deadline_seconds` picks it).

    Args:
        plan: the job's plan.

    Returns:
        `run_policy` (the task's `RunPolicy(active_deadline_seconds=...)`), `timeout` (the task's Flyte timeout) or
        `backend` (the backend config's `active_deadline_seconds`).
    """
    spec = plan.spec
    if spec.run_policy.active_deadline_seconds:
        return "run_policy"
    return "timeout" if spec.timeout_seconds is not None else "backend"


def _older_patches(job: dict[str, Any], crd: InstalledCrd) -> tuple[dict[str, Any], str, str]:
    """The runtime patch written as the older field the CRD declares: (job, note, "") when it carries everything,
    else (the job unchanged, "", the advice naming what it cannot carry)."""
    pod = _patched_pod(job)
    alternatives: tuple[tuple[Path, str, Callable[[Mapping[str, Any]], tuple[dict[str, Any], list[str]]]], ...] = (
        (POD_TEMPLATE_OVERRIDES, "Trainer v2.1", _template_override),
        (POD_SPEC_OVERRIDES, "Trainer v2.0", _spec_override),
    )
    for path, release, build in alternatives:
        if not crd.declares(path):
            continue
        override, metadata = build(pod)
        candidate = copy.deepcopy(job)
        del candidate["spec"]["runtimePatches"]
        candidate["spec"][str(path[-1])] = [override]
        lacking = [_in_task_terms(p[len(path) + 1 :], path) for p in undeclared(candidate, crd, under=path)]
        lacking = list(dict.fromkeys(lacking))
        if not lacking and not metadata:
            note = (
                f"spec.runtimePatches is written as {format_path(path)} ({release}'s field, merged into the node "
                f"pod as the patch is): {crd.describe()} does not declare spec.runtimePatches ({_NEWER} added it)"
            )
            return candidate, note, ""
        problem = f"its {format_path(path)} ({release}'s field for the node pod) cannot carry " + ", ".join(
            [*metadata, *lacking]
        )
        if metadata:  # every task's pods carry some: Flyte's execution labels, the backend's defaults
            problem += (
                ", which every task's node pods carry (Flyte's execution labels, the backend's default labels and "
                "annotations, a secret's injection): upgrade Kubeflow Trainer to v2.1 or later, whose "
                f"{format_path(POD_TEMPLATE_OVERRIDES)} carry them (v2.2 and later take {format_path(RUNTIME_PATCHES)})"
            )
            return job, "", problem + (f", and remove {', '.join(lacking)} from the task" if lacking else "")
        return job, "", f"{problem}: {_UPGRADE}, or remove those settings from the task"
    problem = (
        f"the TrainJob patches the runtime's node pod with {_patch_contents(pod)}, and this CRD has no field for "
        f"them: {_UPGRADE}"
    )
    if not crd.exact:
        problem += (
            "; or let the connector read the CRD (get on customresourcedefinitions, see deploy/rbac.yaml), so that it "
            "writes the patch as an older Trainer's field where that keeps its meaning"
        )
    return job, "", problem


def _patched_pod(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """The node pod template of the writer's one runtime patch (`writer.runtime_patch`)."""
    (patch,) = job["spec"]["runtimePatches"]
    replicated = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    (node,) = [r for r in replicated if r.get("name") == NODE]
    pod: Mapping[str, Any] = node["template"]["spec"]["template"]
    return pod


def _template_override(pod: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Trainer v2.1's `podTemplateOverrides` entry for the node job: the pod template's metadata and spec (nothing
    of the pod's metadata it cannot carry)."""
    override: dict[str, Any] = {"targetJobs": [{"name": NODE}]}
    for key in ("metadata", "spec"):
        if pod.get(key):
            override[key] = copy.deepcopy(dict(pod[key]))
    return override, []


def _spec_override(pod: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Trainer v2.0's `podSpecOverrides` entry for the node job: the pod spec; it has no pod metadata (what the pod's
    metadata holds is returned as what it cannot carry)."""
    override: dict[str, Any] = {"targetJobs": [{"name": NODE}], **copy.deepcopy(dict(pod.get("spec") or {}))}
    metadata = pod.get("metadata") or {}
    lacking = [f"the node pods' {key} ({', '.join(sorted(metadata[key]))})" for key in ("labels", "annotations")
               if metadata.get(key)]  # fmt: skip
    return override, lacking


def _in_task_terms(rest: Path, field: Path) -> str:
    """A field inside an override (below its list index) as the task's setting: `pod_template spec.securityContext`,
    `the training container's securityContext`."""
    if field == POD_SPEC_OVERRIDES:
        rest = ("spec", *rest)
    if rest[:2] == ("spec", "containers") and len(rest) >= 4:
        return f"the training container's {format_path(rest[3:])}"
    if rest[:1] == ("metadata",) and len(rest) >= 2:
        return f"the node pods' {format_path(rest[1:])}"
    return f"pod_template {format_path(rest)}"


def _patch_contents(pod: Mapping[str, Any]) -> str:
    """What the runtime patch holds, in the task's terms (`pod labels, the /dev/shm volume (shm_size), ...`)."""
    out = [f"pod {key}" for key in ("labels", "annotations") if (pod.get("metadata") or {}).get(key)]
    for key, value in (pod.get("spec") or {}).items():
        if key == "volumes" and any(str(v.get("name", "")).startswith(SHM_VOLUME) for v in value):
            out.append("the /dev/shm volume (shm_size)")
            if len(value) > 1:
                out.append("pod_template volumes")
        elif key == "containers":
            out += [f"the training container's {k}" for c in value for k in c if k != "name"]
        else:
            out.append(f"pod_template {key}")
    return ", ".join(dict.fromkeys(out)) or "nothing"
