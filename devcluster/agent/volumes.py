"""A pod's volumes as folders of the node, made as the kubelet's volume plugins make them.

- emptyDir: a folder; with `medium: Memory` a tmpfs (its `sizeLimit` as the size), mounted on the node and recorded,
  so that `down` unmounts it even after a crash.
- configMap, secret, downwardAPI, projected (service-account token, the root CA ConfigMap, downward API, ConfigMaps
  and Secrets): files written with their `items` and modes, and written again on every sync (a rotated Secret
  reaches the container as the kubelet's periodic sync brings it). A token is asked of the TokenRequest API,
  bound to the pod, and asked again once 80% of its life has passed, as the kubelet's token manager does.
- hostPath: the node's path itself.

Anything else (persistentVolumeClaim, CSI, ...) makes the pod fail to start with the kubelet's words.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster.agent.envvars import field_value, resource_value
from devcluster.kube import UNREACHABLE, ApiError


class VolumeError(Exception):
    """A volume cannot be made; the pod waits in ContainerCreating with this message, as with the kubelet."""


@dataclass
class TokenCache:
    """Projected service-account tokens of one pod, by (audience, expirationSeconds)."""

    tokens: dict[tuple[str, int], tuple[str, float, float]] = field(default_factory=dict)  # token, issued, expires

    def get(self, key: tuple[str, int], request: Callable[[str, int], tuple[str, float]]) -> str:
        now = time.time()
        held = self.tokens.get(key)
        if held is not None:
            token, issued, expires = held
            if now < issued + 0.8 * (expires - issued):
                return token
        token, expires = request(*key)
        self.tokens[key] = (token, now, expires)
        return token


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)


def _items(data: dict[str, bytes], items: list[dict] | None, default_mode: int) -> list[tuple[str, bytes, int]]:
    if not items:
        return [(k, v, default_mode) for k, v in sorted(data.items())]
    out = []
    for item in items:
        if item["key"] in data:
            out.append((item["path"], data[item["key"]], int(item.get("mode", default_mode))))
    return out


def _keys_of(obj: dict, kind: str) -> dict[str, bytes]:
    if kind == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    out = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


class PodVolumes:
    """The volumes of one pod under `root` (`<state>/pods/<uid>/volumes`)."""

    def __init__(
        self,
        pod: dict,
        root: Path,
        *,
        read: Callable[[str, str, str], dict[str, Any] | None],
        token: Callable[[str, str, int], tuple[str, float]],
        node_allocatable: dict[str, str],
        mounts_record: Path,
    ) -> None:
        self.pod = pod
        self.root = root
        self._read = read
        self._token = token
        self._allocatable = node_allocatable
        self._record = mounts_record
        self._tokens = TokenCache()
        self.paths: dict[str, Path] = {}
        self._tmpfs: list[Path] = []

    def setup(self) -> None:
        """Make every volume; raises VolumeError for one that cannot be made yet (or ever)."""
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "hostPath" in volume:
                path = Path(volume["hostPath"]["path"])
                if volume["hostPath"].get("type") in ("DirectoryOrCreate",):
                    path.mkdir(parents=True, exist_ok=True)
                self.paths[name] = path
                continue
            path = self.root / name
            if name not in self.paths:
                path.mkdir(parents=True, exist_ok=True)
                if "emptyDir" in volume and (volume["emptyDir"] or {}).get("medium") == "Memory":
                    self._mount_tmpfs(path, (volume["emptyDir"] or {}).get("sizeLimit"))
                self.paths[name] = path
            self._fill(volume, path)

    def refresh(self) -> None:
        """Write the ConfigMap, Secret, token and downward API files again (the kubelet's periodic sync)."""
        for volume in self.pod["spec"].get("volumes") or []:
            if volume["name"] in self.paths and "hostPath" not in volume:
                try:
                    self._fill(volume, self.paths[volume["name"]])
                except (VolumeError, ApiError, *UNREACHABLE):
                    # keep the files last written, as the kubelet does when a source goes away or the API server
                    # cannot be reached (a restart): the next sync writes them again
                    pass

    def teardown(self) -> None:
        for path in self._tmpfs:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
        self._tmpfs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def _mount_tmpfs(self, path: Path, size: str | None) -> None:
        options = "mode=1777" + (f",size={_bytes(size)}" if size else "")
        with self._record.open("a") as f:
            f.write(f"{path}\n")
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise VolumeError(f"emptyDir {path.name} (medium Memory): mount tmpfs: {proc.stderr.strip()}")
        self._tmpfs.append(path)

    def _fill(self, volume: dict, path: Path) -> None:
        ns = self.pod["metadata"]["namespace"]
        if "configMap" in volume or "secret" in volume:
            kind = "ConfigMap" if "configMap" in volume else "Secret"
            src = volume["configMap"] if kind == "ConfigMap" else volume["secret"]
            name = src["name"] if kind == "ConfigMap" else src["secretName"]
            obj = self._read(kind, ns, name)
            if obj is None:
                if src.get("optional"):
                    return
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{volume["name"]}" : {kind.lower()} "{name}" not found'
                )
            mode = int(src.get("defaultMode", 0o644))
            for rel, data, m in _items(_keys_of(obj, kind), src.get("items"), mode):
                _write(path / rel, data, m)
        elif "downwardAPI" in volume:
            src = volume["downwardAPI"]
            for rel, data, m in self._downward(src.get("items") or [], int(src.get("defaultMode", 0o644))):
                _write(path / rel, data, m)
        elif "projected" in volume:
            src = volume["projected"]
            mode = int(src.get("defaultMode", 0o644))
            for source in src.get("sources") or []:
                self._projected(source, path, mode, ns)
        elif "emptyDir" in volume:
            return
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise VolumeError(f'volume "{volume["name"]}": {", ".join(kinds)} volumes are not supported by this node')

    def _projected(self, source: dict, path: Path, mode: int, ns: str) -> None:
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            audience = sat.get("audience", "")
            seconds = int(sat.get("expirationSeconds", 3600))
            token = self._tokens.get((audience, seconds), lambda a, s: self._token(a, self.pod["metadata"]["name"], s))
            _write(path / sat["path"], token.encode(), mode)
        elif "configMap" in source or "secret" in source:
            kind = "ConfigMap" if "configMap" in source else "Secret"
            ref = source["configMap" if kind == "ConfigMap" else "secret"]
            obj = self._read(kind, ns, ref["name"])
            if obj is None:
                if ref.get("optional"):
                    return
                raise VolumeError(f'{kind.lower()} "{ref["name"]}" not found')
            for rel, data, m in _items(_keys_of(obj, kind), ref.get("items"), mode):
                _write(path / rel, data, m)
        elif "downwardAPI" in source:
            for rel, data, m in self._downward(source["downwardAPI"].get("items") or [], mode):
                _write(path / rel, data, m)

    def _downward(self, items: list[dict], mode: int) -> list[tuple[str, bytes, int]]:
        out = []
        for item in items:
            if "fieldRef" in item:
                value = field_value(self.pod, item["fieldRef"]["fieldPath"])
            else:
                ref = item["resourceFieldRef"]
                container = next(
                    (c for c in self.pod["spec"]["containers"] if c["name"] == ref.get("containerName")),
                    self.pod["spec"]["containers"][0],
                )
                value = resource_value(container, ref["resource"], ref.get("divisor"), self._allocatable)
            out.append((item["path"], value.encode(), int(item.get("mode", mode))))
        return out


def _bytes(quantity: str) -> int:
    from pytorch_contract.quantity import parse_quantity

    return int(parse_quantity(quantity))


def mount_targets(pod: dict, container: dict, paths: dict[str, Path]) -> list[tuple[str, str, bool, bool]]:
    """The container's volume mounts as (source on the node, target in the container, read-only, is a file)."""
    out = []
    for vm in container.get("volumeMounts") or []:
        source = paths.get(vm["name"])
        if source is None:
            raise VolumeError(f'volumeMount "{vm["name"]}" names no volume of the pod')
        if vm.get("subPath"):
            source = source / vm["subPath"]
            if not source.exists():
                source.mkdir(parents=True, exist_ok=True)
        out.append((str(source), vm["mountPath"], bool(vm.get("readOnly")), source.is_file()))
    return out


def ensure_mount_point(target: str, is_file: bool, record: Path) -> None:
    """Make a mount point the node lacks (recorded, so that `down` removes what it made)."""
    if os.path.lexists(target):
        return
    missing = []
    p = Path(target)
    while not p.exists():
        missing.append(p)
        p = p.parent
    with record.open("a") as f:
        for m in reversed(missing):
            f.write(f"{m}\n")
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    if is_file:
        Path(target).touch()
    else:
        Path(target).mkdir(exist_ok=True)
