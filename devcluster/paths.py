"""Where devcluster keeps things: binaries in a cache outside the repository, a running cluster's state in one folder.

- The binary cache (`DEVCLUSTER_CACHE`, default `~/.cache/flytekitplugins-pytorch/devcluster`) holds one folder per
  component and cache key (`components.Component.key`); Go's own module and build caches (`go env GOMODCACHE
  GOCACHE`) are Go's defaults, kept between runs.
- The state folder (`DEVCLUSTER_STATE`, default `/tmp/devcluster`, or `/tmp/devcluster-<name>` for a cluster named by
  `DEVCLUSTER_NAME`) holds a running cluster: certificates,
  kubeconfigs, etcd's data, logs, and the record of every process, network namespace and mount `up` made, which
  `down` reads. One cluster per state folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The binary cache's folder."""
    env = os.environ.get("DEVCLUSTER_CACHE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "flytekitplugins-pytorch" / "devcluster"


def state_root() -> Path:
    """The running cluster's state folder."""
    name = os.environ.get("DEVCLUSTER_NAME", "dc")
    default = "/tmp/devcluster" if name == "dc" else f"/tmp/devcluster-{name}"
    return Path(os.environ.get("DEVCLUSTER_STATE", default))


def pod_log_folder(state: Path, namespace: str, name: str, uid: str) -> Path:
    """Where the node agent keeps a pod's container output: one folder per container, one `<restart>.log` per run,
    as the kubelet keeps them under `/var/log/pods/<namespace>_<name>_<uid>/`."""
    return state / "logs" / "pods" / f"{namespace}_{name}_{uid}"


def container_log(state: Path, pod: dict, container: str | None = None) -> str:
    """A container's output, every run of it in order (the pod's first container by default)."""
    meta = pod["metadata"]
    name = container or pod["spec"]["containers"][0]["name"]
    folder = pod_log_folder(state, meta["namespace"], meta["name"], meta["uid"]) / name
    files = sorted(folder.glob("*.log"), key=lambda f: int(f.stem))
    return "".join(f.read_text(errors="replace") for f in files)
