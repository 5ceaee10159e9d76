"""A pod's volumes as the kubelet's volume plugins make them: ConfigMap and Secret files with their items and modes,
the projected service-account token (asked for once, again at 80% of its life), the downward API, and a refresh
that brings a changed Secret to the files."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
import urllib3

from devcluster.agent import volumes as vol
from devcluster.agent.volumes import PodVolumes, VolumeError, mount_targets
from devcluster.kube import ApiError

POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x"}},
    "spec": {
        "containers": [{"name": "c", "resources": {"limits": {"memory": "1Gi"}}}],
        "volumes": [
            {"name": "cfg", "configMap": {"name": "cm", "items": [{"key": "a", "path": "sub/a.txt", "mode": 0o600}]}},
            {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0o400}},
            {"name": "scratch", "emptyDir": {}},
            {
                "name": "token",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600, "audience": "api"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
                        ]}},
                    ]
                },
            },
            {"name": "info", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "mem",
                 "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
            ]}},
        ],
    },
}  # fmt: skip


class Store:
    def __init__(self) -> None:
        self.objects = {
            ("ConfigMap", "ns", "cm"): {"data": {"a": "alpha", "b": "beta"}},
            ("ConfigMap", "ns", "kube-root-ca.crt"): {"data": {"ca.crt": "CA"}},
            ("Secret", "ns", "s"): {"data": {"key": base64.b64encode(b"v1").decode()}},
        }
        self.tokens: list[tuple[str, str, int]] = []

    def read(self, kind: str, ns: str, name: str) -> dict | None:
        return self.objects.get((kind, ns, name))

    def token(self, audience: str, pod: str, seconds: int) -> tuple[str, float]:
        self.tokens.append((audience, pod, seconds))
        return f"token-{len(self.tokens)}", 1e12


def _volumes(tmp_path: Path, store: Store) -> PodVolumes:
    return PodVolumes(POD, tmp_path / "v", read=store.read, token=store.token, node_allocatable={"memory": "64Gi"},
                      mounts_record=tmp_path / "mounts.txt")  # fmt: skip


def test_every_kind_of_volume_is_made_as_the_kubelet_makes_it(tmp_path: Path) -> None:
    store = Store()
    v = _volumes(tmp_path, store)
    v.setup()
    cfg = v.paths["cfg"] / "sub" / "a.txt"
    assert cfg.read_text() == "alpha" and stat.S_IMODE(cfg.stat().st_mode) == 0o600
    assert not (v.paths["cfg"] / "b").exists()  # items pick keys
    sec = v.paths["sec"] / "key"
    assert sec.read_bytes() == b"v1" and stat.S_IMODE(sec.stat().st_mode) == 0o400
    assert (v.paths["token"] / "token").read_text() == "token-1" and store.tokens == [("api", "p", 3600)]
    assert (v.paths["token"] / "ca.crt").read_text() == "CA"
    assert (v.paths["token"] / "namespace").read_text() == "ns"
    assert (v.paths["info"] / "labels").read_text() == 'app="x"'
    assert (v.paths["info"] / "mem").read_text() == "1024"
    assert v.paths["scratch"].is_dir()


def test_a_refresh_brings_a_changed_secret_and_keeps_a_fresh_token(tmp_path: Path) -> None:
    store = Store()
    v = _volumes(tmp_path, store)
    v.setup()
    store.objects[("Secret", "ns", "s")] = {"data": {"key": base64.b64encode(b"v2").decode()}}
    v.refresh()
    assert (v.paths["sec"] / "key").read_bytes() == b"v2"
    assert len(store.tokens) == 1  # far from 80% of its life: not asked again


@pytest.mark.parametrize(
    "away",
    [
        urllib3.exceptions.MaxRetryError(None, "/api/v1/namespaces/ns/secrets/s", "connection refused"),  # type: ignore[arg-type]
        ApiError(503, "Service Unavailable", '{"message": "the server is starting"}'),
    ],
    ids=["unreachable", "503"],
)
def test_a_refresh_while_the_api_server_is_away_keeps_the_files_and_the_next_one_writes_them(
    tmp_path: Path, away: Exception
) -> None:
    """An API server restart must not fail a running pod (the kubelet keeps the files it wrote and syncs again)."""
    store = Store()
    v = _volumes(tmp_path, store)
    v.setup()
    reachable = store.read

    def read(kind: str, ns: str, name: str) -> dict | None:
        raise away

    v._read = read
    v.refresh()
    assert (v.paths["sec"] / "key").read_bytes() == b"v1" and (v.paths["cfg"] / "sub" / "a.txt").read_text() == "alpha"
    store.objects[("Secret", "ns", "s")] = {"data": {"key": base64.b64encode(b"v2").decode()}}
    v._read = reachable
    v.refresh()
    assert (v.paths["sec"] / "key").read_bytes() == b"v2"


def test_a_token_is_asked_again_at_80_percent_of_its_life(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(vol.time, "time", lambda: now[0])
    cache = vol.TokenCache()
    asked = []

    def request(audience: str, seconds: int) -> tuple[str, float]:
        asked.append(now[0])
        return f"t{len(asked)}", now[0] + 100

    assert cache.get(("a", 100), request) == "t1"
    now[0] = 1079.0
    assert cache.get(("a", 100), request) == "t1"
    now[0] = 1081.0
    assert cache.get(("a", 100), request) == "t2"


def test_a_missing_configmap_waits_unless_optional(tmp_path: Path) -> None:
    store = Store()
    del store.objects[("ConfigMap", "ns", "cm")]
    with pytest.raises(VolumeError, match='configmap "cm" not found'):
        _volumes(tmp_path, store).setup()


def test_an_unsupported_volume_is_said_as_the_kubelet_would(tmp_path: Path) -> None:
    pod = {**POD, "spec": {**POD["spec"], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}]}}
    v = PodVolumes(pod, tmp_path / "v", read=Store().read, token=Store().token, node_allocatable={},
                   mounts_record=tmp_path / "m.txt")  # fmt: skip
    with pytest.raises(VolumeError, match="persistentVolumeClaim volumes are not supported"):
        v.setup()


def test_mounts_name_their_volumes_and_sub_paths(tmp_path: Path) -> None:
    store = Store()
    v = _volumes(tmp_path, store)
    v.setup()
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    container = {"name": "c", "volumeMounts": [{"name": "scratch", "mountPath": "/work", "subPath": "x"},
                                               {"name": "token", "mountPath": account, "readOnly": True}]}  # fmt: skip
    mounts = mount_targets(POD, container, v.paths)
    assert mounts[0] == (str(v.paths["scratch"] / "x"), "/work", False, False)
    assert mounts[1][1:] == ("/var/run/secrets/kubernetes.io/serviceaccount", True, False)
    with pytest.raises(VolumeError, match="names no volume"):
        mount_targets(POD, {"name": "c", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}, v.paths)
