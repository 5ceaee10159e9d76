"""The cluster DNS server's answers, on the wire format a resolver sends (RFC 1035), without a cluster."""

from __future__ import annotations

import socket
import struct

import pytest

from devcluster import dns


class _Records(dns.Records):
    def __init__(self, names: dict[str, list[str]]) -> None:  # no API server: the table is given
        self.domain = "cluster.local"
        import threading

        self.lock = threading.Lock()
        self.names = names


def _query(name: str, qtype: int = dns.A, ident: int = 0x1234) -> bytes:
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
    return struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + q + struct.pack(">HH", qtype, 1)


def _decode(reply: bytes) -> tuple[int, int, list[str]]:
    ident, flags, _qd, an, _ns, _ar = struct.unpack(">HHHHHH", reply[:12])
    i = 12
    while reply[i]:
        i += 1 + reply[i]
    i += 5
    addresses = []
    for _ in range(an):
        _ptr, rtype, _cls, _ttl, size = struct.unpack(">HHHIH", reply[i : i + 12])
        assert rtype == dns.A
        addresses.append(socket.inet_ntoa(reply[i + 12 : i + 12 + size]))
        i += 12 + size
    return ident, flags & 0xF, addresses


RECORDS = {
    "web.default.svc.cluster.local": ["10.96.3.4"],
    "job.ns1.svc.cluster.local": ["10.77.1.5", "10.77.1.6"],
    "job-master-0.job.ns1.svc.cluster.local": ["10.77.1.5"],
}


@pytest.mark.parametrize(
    ("name", "qtype", "rcode", "addresses"),
    [
        ("web.default.svc.cluster.local", dns.A, dns.NOERROR, ["10.96.3.4"]),
        ("WEB.Default.svc.cluster.local", dns.A, dns.NOERROR, ["10.96.3.4"]),
        ("job.ns1.svc.cluster.local", dns.A, dns.NOERROR, ["10.77.1.5", "10.77.1.6"]),
        ("job-master-0.job.ns1.svc.cluster.local", dns.A, dns.NOERROR, ["10.77.1.5"]),
        # a name that exists asked for AAAA: an empty answer, never NXDOMAIN (a resolver asking both must not fail)
        ("web.default.svc.cluster.local", dns.AAAA, dns.NOERROR, []),
        # an empty non-terminal exists
        ("ns1.svc.cluster.local", dns.A, dns.NOERROR, []),
        ("nope.default.svc.cluster.local", dns.A, dns.NXDOMAIN, []),
        ("pypi.org", dns.A, dns.REFUSED, []),
    ],
)
def test_answers(name: str, qtype: int, rcode: int, addresses: list[str]) -> None:
    ident, got_rcode, got = _decode(dns.answer(_Records(RECORDS), _query(name, qtype)))
    assert ident == 0x1234
    assert got_rcode == rcode
    assert got == addresses


def test_a_malformed_query_gets_formerr_not_a_crash() -> None:
    reply = dns.answer(_Records(RECORDS), b"\x00\x07\x01")
    assert struct.unpack(">H", reply[:2])[0] == 7
    assert struct.unpack(">H", reply[2:4])[0] & 0xF == dns.FORMERR
