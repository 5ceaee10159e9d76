"""The cluster's DNS server, answering as CoreDNS's `kubernetes` plugin does (the Kubernetes DNS specification,
`cluster-dns-spec`), for the names pods look up:

- `<service>.<ns>.svc.<domain>`: the ClusterIP; for a headless Service, the addresses of its ready endpoints (and
  of the not-ready ones when it publishes them);
- `<hostname>.<service>.<ns>.svc.<domain>`: the endpoint of a headless Service whose `hostname` it is (a pod with
  `hostname` and `subdomain`, as JobSet and the Job controller's Indexed pods have them);
- anything else in the cluster's domain: NXDOMAIN; a name outside it: REFUSED (this cluster reaches no other DNS).

- `<d>.<c>.<b>.<a>.in-addr.arpa` (PTR): the name of a ClusterIP, or of an endpoint (its hostname name, else its
  address's dashed form under its Service), as CoreDNS's `kubernetes ... in-addr.arpa` answers it; NXDOMAIN for an
  address it does not know (a fast "no name": gloo and c10d look their peers up, and a REFUSED would make the
  resolver retry).

A records otherwise; an AAAA question about a name that exists gets an empty answer (NOERROR), so a resolver asking for
both does not wait. TTL 5 s, CoreDNS's default. It runs as a pod (`devcluster up` deploys it as `kube-dns` in
kube-system, with the ClusterRole CoreDNS's manifests give it) and reads Services and EndpointSlices with its
service account's token.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import struct
import sys
import threading

from devcluster.kube import Kube, Reflector

log = logging.getLogger("devcluster.dns")
TTL = 5
A, PTR, AAAA = 1, 12, 28
NOERROR, NXDOMAIN, REFUSED, FORMERR = 0, 3, 5, 1


class Records:
    def __init__(self, kube: Kube, domain: str) -> None:
        self.domain = domain.strip(".")
        self.lock = threading.Lock()
        self.names: dict[str, list[str]] = {}
        self.reverse: dict[str, str] = {}
        self.services = Reflector(kube, "/api/v1/services", self._changed, name="services")
        self.slices = Reflector(kube, "/apis/discovery.k8s.io/v1/endpointslices", self._changed, name="endpointslices")

    def start(self) -> None:
        self.services.start()
        self.slices.start()

    def _changed(self, _kind: str, _obj: dict) -> None:
        names: dict[str, list[str]] = {}
        reverse: dict[str, str] = {}
        by_service: dict[tuple[str, str], list[dict]] = {}
        for s in self.slices.snapshot():
            owner = (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
            if owner:
                by_service.setdefault((s["metadata"]["namespace"], owner), []).append(s)
        for svc in self.services.snapshot():
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            spec = svc["spec"]
            base = f"{name}.{ns}.svc.{self.domain}"
            if spec.get("type") == "ExternalName":
                continue
            ip = spec.get("clusterIP")
            if ip and ip != "None":
                names[base] = [ip]
                reverse[ip] = base
                continue
            publish = bool(spec.get("publishNotReadyAddresses"))
            addresses: list[str] = []
            for sl in by_service.get((ns, name), []):
                for ep in sl.get("endpoints") or []:
                    cond = ep.get("conditions") or {}
                    if not (cond.get("ready", True) or publish):
                        continue
                    addresses += ep.get("addresses") or []
                    for a in ep.get("addresses") or []:
                        reverse.setdefault(a, f"{ep['hostname'] if ep.get('hostname') else a.replace('.', '-')}.{base}")
                    if ep.get("hostname"):
                        names.setdefault(f"{ep['hostname']}.{base}", []).extend(ep.get("addresses") or [])
            names[base] = sorted(set(addresses))
        with self.lock:
            self.names = names
            self.reverse = reverse

    def pointer(self, qname: str) -> tuple[int, str | None]:
        """A PTR question: (NOERROR, name) for a known address, (NXDOMAIN, None) otherwise."""
        parts = qname.lower().rstrip(".").split(".")
        if len(parts) != 6 or parts[4:] != ["in-addr", "arpa"]:
            return NXDOMAIN, None
        address = ".".join(reversed(parts[:4]))
        with self.lock:
            name = self.reverse.get(address)
        return (NOERROR, name) if name else (NXDOMAIN, None)

    def lookup(self, qname: str) -> tuple[int, list[str]]:
        name = qname.lower().rstrip(".")
        if not (name == self.domain or name.endswith("." + self.domain)):
            return REFUSED, []
        with self.lock:
            if name in self.names:
                return NOERROR, self.names[name]
            # a name under an existing one (an empty non-terminal such as `<ns>.svc.<domain>`) exists too
            if any(n.endswith("." + name) for n in self.names) or name in (self.domain, f"svc.{self.domain}"):
                return NOERROR, []
        return NXDOMAIN, []


def _parse(query: bytes) -> tuple[int, int, bytes, str, int, int]:
    ident, flags, qd = struct.unpack(">HHH", query[:6])
    if qd != 1:
        raise ValueError("one question expected")
    labels, i = [], 12
    while True:
        n = query[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0:
            raise ValueError("compressed question")
        labels.append(query[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, qclass = struct.unpack(">HH", query[i : i + 4])
    return ident, flags, query[12 : i + 4], ".".join(labels), qtype, qclass


def answer(records: Records, query: bytes) -> bytes:
    try:
        ident, flags, question, qname, qtype, _qclass = _parse(query)
    except (ValueError, IndexError, struct.error):
        ident = struct.unpack(">H", query[:2])[0] if len(query) >= 2 else 0
        return struct.pack(">HHHHHH", ident, 0x8000 | FORMERR, 0, 0, 0, 0)
    rd = flags & 0x0100
    answers = b""
    count = 0
    if qname.lower().rstrip(".").endswith(".in-addr.arpa"):
        rcode, target = records.pointer(qname)
        if target and qtype == PTR:
            rdata = b"".join(bytes([len(p)]) + p.encode() for p in target.split(".")) + b"\x00"
            answers = struct.pack(">HHHIH", 0xC00C, PTR, 1, TTL, len(rdata)) + rdata
            count = 1
        addresses: list[str] = []
    else:
        rcode, addresses = records.lookup(qname)
    if rcode == NOERROR and qtype == A:
        for addr in addresses:
            answers += struct.pack(">HHHIH", 0xC00C, A, 1, TTL, 4) + socket.inet_aton(addr)
            count += 1
    aa = 0x0400 if rcode != REFUSED else 0
    header = struct.pack(">HHHHHH", ident, 0x8000 | aa | rd | 0x0080 | rcode, 1, count, 0, 0)
    return header + question + answers


def serve(records: Records, host: str = "0.0.0.0", port: int = 53) -> None:
    class Udp(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            data, sock = self.request
            sock.sendto(answer(records, data), self.client_address)

    class Tcp(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            size = self.rfile.read(2)
            if len(size) < 2:
                return
            data = self.rfile.read(struct.unpack(">H", size)[0])
            out = answer(records, data)
            self.wfile.write(struct.pack(">H", len(out)) + out)

    socketserver.ThreadingUDPServer.allow_reuse_address = True
    udp = socketserver.ThreadingUDPServer((host, port), Udp)
    tcp = socketserver.ThreadingTCPServer((host, port), Tcp)
    threading.Thread(target=tcp.serve_forever, daemon=True).start()
    log.info("serving DNS for %s on %s:%d", records.domain, host, port)
    udp.serve_forever()


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    domain = argv[0] if argv else "cluster.local"
    records = Records(Kube(None), domain)
    records.start()
    serve(records)


if __name__ == "__main__":
    main(sys.argv[1:])
