"""Service addresses, as kube-proxy makes them work: a ClusterIP and its ports lead to the ready endpoints of the
Service's EndpointSlices (chosen at random per connection), a ClusterIP without one refuses the connection.

kube-proxy writes its rules in the node's own network namespace, which every pod's traffic crosses. Here each pod
has a namespace of its own on a bridge, so the same rules (an nftables table `<name>_services`: DNAT in the output hook)
are written into every namespace devcluster made: the control plane's (the API server calls webhooks through their
Services) and each pod's (the `kubernetes` Service, cluster DNS, a webhook's Service), and into the host's own, as
on a node, so that the host's processes (the tests, a contributor's tools) reach a Service by its ClusterIP too. The
table holds rules for the Service range only; `down` deletes it. It reads Services and
EndpointSlices as `system:kube-proxy`, with the `system:node-proxier` role kube-proxy has.

Also the Service environment variables (`<NAME>_SERVICE_HOST`, ...), which the kubelet computes from the same list.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading

from devcluster import network
from devcluster.kube import Kube, Reflector

log = logging.getLogger("devcluster.agent")


class ServiceProxy:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.lock = threading.RLock()
        self.rules = ""
        self._dirty = threading.Event()
        self.services = Reflector(kube, "/api/v1/services", self._changed, name="services")
        self.slices = Reflector(kube, "/apis/discovery.k8s.io/v1/endpointslices", self._changed, name="endpointslices")

    def start(self) -> None:
        self.services.start()
        self.slices.start()
        threading.Thread(target=self._loop, name="service proxy", daemon=True).start()

    def wait_synced(self, timeout_s: float) -> bool:
        return self.services.synced.wait(timeout_s) and self.slices.synced.wait(timeout_s)

    def _changed(self, _kind: str, _obj: dict) -> None:
        self._dirty.set()

    def _loop(self) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - the next change tries again
                log.warning("service proxy: %s", e)

    def _backends(self) -> list[tuple[str, str, int, list[tuple[str, int]]]]:
        """(clusterIP, protocol, port, [(endpoint address, target port)]) for every ClusterIP Service port."""
        by_service: dict[tuple[str, str], list[dict]] = {}
        for s in self.slices.snapshot():
            owner = (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
            if owner:
                by_service.setdefault((s["metadata"]["namespace"], owner), []).append(s)
        out = []
        for svc in self.services.snapshot():
            spec = svc["spec"]
            ip = spec.get("clusterIP")
            if not ip or ip == "None" or spec.get("type") == "ExternalName":
                continue
            publish = bool(spec.get("publishNotReadyAddresses"))
            for port in spec.get("ports") or []:
                proto = port.get("protocol", "TCP").lower()
                backends: list[tuple[str, int]] = []
                for sl in by_service.get((svc["metadata"]["namespace"], svc["metadata"]["name"]), []):
                    target = next(
                        (
                            p.get("port")
                            for p in sl.get("ports") or []
                            if p.get("name", "") == port.get("name", "") and p.get("protocol", "TCP").lower() == proto
                        ),
                        None,
                    )
                    if target is None:
                        continue
                    for ep in sl.get("endpoints") or []:
                        cond = ep.get("conditions") or {}
                        if cond.get("ready", True) or (publish and cond.get("serving", True)):
                            backends += [(a, int(target)) for a in ep.get("addresses") or []]
                out.append((ip, proto, int(port["port"]), sorted(set(backends))))
        return out

    def render(self) -> str:
        nat, refuse = [], []
        for ip, proto, port, backends in self._backends():
            if backends:
                targets = ", ".join(f"{i} : {a} . {p}" for i, (a, p) in enumerate(backends))
                pick = f"numgen random mod {len(backends)} map {{ {targets} }}"
                nat.append(f"    ip daddr {ip} {proto} dport {port} dnat ip to {pick}")
            else:
                action = "reject with tcp reset" if proto == "tcp" else "reject"
                refuse.append(f"    ip daddr {ip} {proto} dport {port} {action}")
        return "\n".join(
            [
                f"table ip {network.PROXY_TABLE}",
                f"delete table ip {network.PROXY_TABLE}",
                f"table ip {network.PROXY_TABLE} {{",
                "  chain services {",
                "    type nat hook output priority -100; policy accept;",
                *nat,
                "  }",
                "  chain refuse {",
                "    type filter hook output priority 0; policy accept;",
                *refuse,
                "  }",
                "}",
                "",
            ]
        )

    def _apply(self, netns: str, rules: str) -> None:
        """Write the table into `netns` ("" for the host's own namespace)."""
        argv = ["ip", "netns", "exec", netns, "nft", "-f", "-"] if netns else ["nft", "-f", "-"]
        proc = subprocess.run(argv, input=rules, capture_output=True, text=True)
        if proc.returncode != 0 and (not netns or netns in network.namespaces()):
            log.warning("service proxy: nft in %s: %s", netns, proc.stderr.strip())

    def sync(self) -> None:
        with self.lock:
            rules = self.render()
            if rules == self.rules:
                return
            self.rules = rules
            for ns in ["", *network.namespaces()]:
                self._apply(ns, rules)

    def install(self, netns: str) -> None:
        """Write the current rules into a namespace just made (under the lock, so no change is missed)."""
        with self.lock:
            if not self.rules:
                self.rules = self.render()
            self._apply(netns, self.rules)

    def service_env(self, namespace: str) -> dict[str, str]:
        """The kubelet's service links (`pkg/kubelet/envvars`): the master Service's from `default`, then those of
        the pod's namespace, for Services with a ClusterIP."""
        env: dict[str, str] = {}
        for svc in self.services.snapshot():
            meta, spec = svc["metadata"], svc["spec"]
            ip = spec.get("clusterIP")
            if not ip or ip == "None":
                continue
            is_master = meta["namespace"] == "default" and meta["name"] == "kubernetes"
            if meta["namespace"] != namespace and not is_master:
                continue
            prefix = re.sub(r"[^A-Z0-9_]", "_", meta["name"].upper())
            ports = spec.get("ports") or []
            if not ports:
                continue
            first = ports[0]
            env[f"{prefix}_SERVICE_HOST"] = ip
            env[f"{prefix}_SERVICE_PORT"] = str(first["port"])
            for p in ports:
                if p.get("name"):
                    env[f"{prefix}_SERVICE_PORT_{re.sub(r'[^A-Z0-9_]', '_', p['name'].upper())}"] = str(p["port"])
            env[f"{prefix}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{ip}:{first['port']}"
            for p in ports:
                proto = p.get("protocol", "TCP")
                base = f"{prefix}_PORT_{p['port']}_{proto}"
                env[base] = f"{proto.lower()}://{ip}:{p['port']}"
                env[f"{base}_PROTO"] = proto.lower()
                env[f"{base}_PORT"] = str(p["port"])
                env[f"{base}_ADDR"] = ip
        return env
