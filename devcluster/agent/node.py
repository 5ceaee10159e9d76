"""One Node: its registration, status and Lease, and the pods the scheduler binds to it.

Each node talks to the API server as itself (a client certificate `system:node:<name>` in group `system:nodes`), so
the Node authorizer judges what it reads and writes as it judges a kubelet: its own Node and Lease, its pods' status,
and the Secrets, ConfigMaps and tokens of the pods bound to it, nothing else.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from devcluster.agent.containers import all_at_once, now_rfc3339
from devcluster.kube import ApiError, Kube, Reflector

if TYPE_CHECKING:
    from devcluster.agent.main import Agent
    from devcluster.agent.pods import PodRuntime

log = logging.getLogger("devcluster.agent")

LEASE_DURATION_S = 40
RENEW_S = 10.0
STATUS_S = 10.0


def _micro_now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    def __init__(self, agent: Agent, spec: dict, kube: Kube) -> None:
        self.agent = agent
        self.spec = spec
        self.name = spec["name"]
        self.kube = kube
        self.allocatable: dict[str, str] = dict(spec["allocatable"])
        self.pods: dict[str, PodRuntime] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.reflector = Reflector(
            kube,
            "/api/v1/pods",
            self._on_pod,
            query={"fieldSelector": f"spec.nodeName={self.name}"},
            name=f"pods of {self.name}",
        )

    # --- the Node and its Lease

    def _node_status(self) -> dict:
        now = now_rfc3339()

        def cond(ctype: str, status: str, reason: str, message: str) -> dict:
            return {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._since,
            }

        return {
            "capacity": self.allocatable,
            "allocatable": self.allocatable,
            "addresses": [
                {"type": "InternalIP", "address": self.agent.node_ip},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": self._machine_id,
                "systemUUID": self._machine_id,
                "bootID": self._machine_id,
                "kernelVersion": _kernel(),
                "osImage": "devcluster node agent",
                "containerRuntimeVersion": "devcluster://1",
                "kubeletVersion": self.agent.kubernetes_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "conditions": [
                cond(
                    "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
                ),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
        }

    def register(self) -> None:
        self._since = now_rfc3339()
        self._machine_id = uuid.uuid5(uuid.NAMESPACE_DNS, self.name).hex
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            **self.spec.get("labels", {}),
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {"taints": self.spec.get("taints", [])},
        }
        try:
            self.kube.create("/api/v1/nodes", body)
        except ApiError as e:
            if e.status != 409:
                raise
        self.kube.merge_patch(f"/api/v1/nodes/{self.name}/status", {"status": self._node_status()})

    def _lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": _micro_now()}
        try:
            self.kube.merge_patch(path, {"spec": spec})
        except ApiError as e:
            if e.status != 404:
                raise
            self.kube.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                    "spec": spec,
                },
            )

    def heartbeat(self) -> None:
        """Renew the Lease and post the node's status, every 10 s, as the kubelet does."""
        last_status = 0.0
        while not self.stopping.is_set():
            try:
                self._lease()
                if time.monotonic() - last_status >= STATUS_S:
                    self.kube.merge_patch(f"/api/v1/nodes/{self.name}/status", {"status": self._node_status()})
                    last_status = time.monotonic()
            except Exception as e:  # noqa: BLE001 - the next beat tries again, as the kubelet's does
                log.warning("node %s: heartbeat: %s", self.name, e)
            self.stopping.wait(RENEW_S)

    # --- pods

    def _on_pod(self, kind: str, pod: dict) -> None:
        from devcluster.agent.pods import PodRuntime

        uid = pod["metadata"]["uid"]
        with self.lock:
            runtime = self.pods.get(uid)
            if kind == "DELETED":
                if runtime is not None:
                    runtime.deleted()
                return
            if runtime is None:
                if pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") in (
                    None,
                    "Pending",
                ):
                    pass  # deleted before it ever ran here: it still needs the final delete below
                runtime = PodRuntime(self, pod)
                self.pods[uid] = runtime
                runtime.start()
            else:
                runtime.update(pod)

    def forget(self, uid: str) -> None:
        with self.lock:
            self.pods.pop(uid, None)

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        plural = {"ConfigMap": "configmaps", "Secret": "secrets"}[kind]
        return self.kube.get_or_none(f"/api/v1/namespaces/{namespace}/{plural}/{name}")

    def token_for(self, audience: str, pod_name: str, seconds: int) -> tuple[str, float]:
        """A service-account token bound to the pod (TokenRequest), as the kubelet's token manager asks for it."""
        runtime = next((r for r in self.pods.values() if r.name == pod_name), None)
        pod = runtime.pod if runtime is not None else None
        if pod is None:
            raise ApiError(404, "NotFound", f"pod {pod_name} is not on node {self.name}")
        ns = pod["metadata"]["namespace"]
        sa = pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod["metadata"]["uid"]},
        }
        if audience:
            spec["audiences"] = [audience]
        answer = self.kube.create(
            f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        import datetime

        expires = datetime.datetime.strptime(answer["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        return answer["status"]["token"], expires.replace(tzinfo=datetime.timezone.utc).timestamp()

    def event(self, pod: dict, reason: str, message: str, kind: str = "Normal", container: str | None = None) -> None:
        meta = pod["metadata"]
        involved: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        }
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        now = now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": self.name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": self.name,
        }
        try:
            self.kube.create(f"/api/v1/namespaces/{meta['namespace']}/events", body)
        except Exception as e:  # noqa: BLE001 - events are best effort, as the kubelet's recorder's are
            log.debug("event %s for %s: %s", reason, meta["name"], e)

    def start(self) -> None:
        self.register()
        threading.Thread(target=self.heartbeat, name=f"heartbeat {self.name}", daemon=True).start()
        self.reflector.start()

    def stop(self, grace_s: float) -> None:
        """Stop every pod's containers (the agent is going away: `down`)."""
        self.stopping.set()
        self.reflector.stop()
        with self.lock:
            runtimes = list(self.pods.values())
        all_at_once([functools.partial(r._stop_all, grace_s) for r in runtimes])
        for r in runtimes:
            r._teardown_sandbox()


def _kernel() -> str:
    import platform

    return platform.release()
