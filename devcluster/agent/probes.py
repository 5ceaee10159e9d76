"""Readiness and liveness probes, run from the node as the kubelet's prober runs them (`pkg/kubelet/prober`):
httpGet (2xx and 3xx succeed; HTTPS not verified), tcpSocket (a connection), exec (exit 0, in the container's
namespaces), grpc (the gRPC health protocol's SERVING), each with its initial delay, period, timeout and thresholds.
A startup probe holds the other two back until it succeeds, and restarts the container when it fails for good.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable


def _grpc_serving(host: str, port: int, service: str, timeout: float) -> bool:
    """The gRPC health protocol's Check, as the kubelet's gRPC probe calls it: SERVING succeeds."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return answer.status == health_pb2.HealthCheckResponse.SERVING


class Prober:
    """One probe of one container; `ok` is its current result."""

    def __init__(
        self, probe: dict, pod_ip: Callable[[], str], container: dict, netns: str, initial: bool, startup: bool = False
    ) -> None:
        self.probe = probe
        self.startup = startup
        self.pod_ip = pod_ip
        self.container = container
        self.netns = netns
        self.ok = initial
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_change: Callable[[bool], None] = lambda ok: None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"probe {self.container['name']}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _port(self, port: object) -> int:
        if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            return int(port)
        for p in self.container.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"probe port {port!r} names no port of container {self.container['name']}")

    def check(self) -> bool:
        timeout = float(self.probe.get("timeoutSeconds", 1))
        try:
            if "httpGet" in self.probe:
                get = self.probe["httpGet"]
                host = get.get("host") or self.pod_ip()
                port = self._port(get["port"])
                if get.get("scheme", "HTTP").upper() == "HTTPS":
                    ctx = ssl.create_default_context()
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                    conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                        host, port, timeout=timeout, context=ctx
                    )
                else:
                    conn = http.client.HTTPConnection(host, port, timeout=timeout)
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
                conn.request("GET", get.get("path", "/"), headers=headers)
                status = conn.getresponse().status
                conn.close()
                return 200 <= status < 400
            if "tcpSocket" in self.probe:
                tcp = self.probe["tcpSocket"]
                with socket.create_connection((tcp.get("host") or self.pod_ip(), self._port(tcp["port"])), timeout):
                    return True
            if "exec" in self.probe:
                proc = subprocess.run(
                    ["ip", "netns", "exec", self.netns, *self.probe["exec"]["command"]],
                    capture_output=True,
                    timeout=timeout,
                )
                return proc.returncode == 0
            if "grpc" in self.probe:
                return _grpc_serving(
                    self.pod_ip(), int(self.probe["grpc"]["port"]), self.probe["grpc"].get("service", ""), timeout
                )
        except (OSError, ValueError, subprocess.TimeoutExpired, http.client.HTTPException):
            return False
        return False

    def _run(self) -> None:
        if self._stop.wait(float(self.probe.get("initialDelaySeconds", 0))):
            return
        period = float(self.probe.get("periodSeconds", 10))
        need_fail = int(self.probe.get("failureThreshold", 3))
        need_ok = int(self.probe.get("successThreshold", 1))
        fails = oks = 0
        while not self._stop.is_set():
            if self.check():
                oks, fails = oks + 1, 0
                if not self.ok and oks >= need_ok:
                    self.ok = True
                    self.on_change(True)
                    if self.startup:
                        return  # it has done its work
            else:
                fails, oks = fails + 1, 0
                # a startup probe fails for good from its first result on; the others on a change from ok
                if (self.ok or self.startup) and fails >= need_fail:
                    self.ok = False
                    self.on_change(False)
                    if self.startup:
                        return
            start = time.monotonic()
            self._stop.wait(max(0.0, period - (time.monotonic() - start)))
