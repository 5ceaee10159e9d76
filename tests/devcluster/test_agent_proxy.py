"""The Service proxy's nftables rules and the kubelet's service links, from Services and EndpointSlices."""

from __future__ import annotations

from devcluster.agent.proxy import ServiceProxy


class _Reflected:
    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def snapshot(self) -> list[dict]:
        return list(self.items)


def _proxy(services: list[dict], slices: list[dict]) -> ServiceProxy:
    proxy = ServiceProxy.__new__(ServiceProxy)  # no API server: the reflected lists are given
    proxy.services = _Reflected(services)  # type: ignore[assignment]
    proxy.slices = _Reflected(slices)  # type: ignore[assignment]
    return proxy


def _svc(ns: str, name: str, ip: str, ports: list[dict], **spec: object) -> dict:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"clusterIP": ip, "ports": ports, **spec}}


def _slice(ns: str, svc: str, ports: list[dict], endpoints: list[dict]) -> dict:
    return {
        "metadata": {"namespace": ns, "name": f"{svc}-abc", "labels": {"kubernetes.io/service-name": svc}},
        "ports": ports,
        "endpoints": endpoints,
    }


def test_ready_endpoints_get_the_traffic_and_a_service_without_one_refuses() -> None:
    proxy = _proxy(
        [
            _svc("kube-system", "kube-dns", "10.96.0.10", [{"name": "dns", "port": 53, "protocol": "UDP"}]),
            _svc("kf", "webhook", "10.96.5.5", [{"port": 443, "targetPort": 9443}]),
            _svc("kf", "empty", "10.96.6.6", [{"port": 80}]),
            _svc("kf", "headless", "None", [{"port": 80}]),
        ],
        [
            _slice(
                "kube-system",
                "kube-dns",
                [{"name": "dns", "port": 53, "protocol": "UDP"}],
                [{"addresses": ["10.77.1.2"], "conditions": {"ready": True}}],
            ),
            _slice(
                "kf",
                "webhook",
                [{"name": "", "port": 9443, "protocol": "TCP"}],
                [
                    {"addresses": ["10.77.1.7"], "conditions": {"ready": True}},
                    {"addresses": ["10.77.1.8"], "conditions": {"ready": False}},
                ],
            ),
        ],
    )
    rules = proxy.render()
    assert "ip daddr 10.96.0.10 udp dport 53 dnat ip to numgen random mod 1 map { 0 : 10.77.1.2 . 53 }" in rules
    assert "ip daddr 10.96.5.5 tcp dport 443 dnat ip to numgen random mod 1 map { 0 : 10.77.1.7 . 9443 }" in rules
    assert "10.77.1.8" not in rules  # not ready
    assert "ip daddr 10.96.6.6 tcp dport 80 reject with tcp reset" in rules
    assert "None" not in rules


def test_service_links_name_the_namespaces_services_and_the_master() -> None:
    proxy = _proxy(
        [
            _svc("default", "kubernetes", "10.96.0.1", [{"name": "https", "port": 443, "protocol": "TCP"}]),
            _svc("ns1", "my-web", "10.96.3.4", [{"name": "http", "port": 80, "protocol": "TCP"}]),
            _svc("ns2", "other", "10.96.3.5", [{"port": 81}]),
        ],
        [],
    )
    env = proxy.service_env("ns1")
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["KUBERNETES_PORT_443_TCP_ADDR"] == "10.96.0.1"
    assert env["MY_WEB_SERVICE_HOST"] == "10.96.3.4" and env["MY_WEB_PORT"] == "tcp://10.96.3.4:80"
    assert env["MY_WEB_SERVICE_PORT_HTTP"] == "80"
    assert not any(k.startswith("OTHER_") for k in env)
