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
        self.reverse = {
            "10.77.1.5": "job-master-0.job.ns1.svc.cluster.local",
            "10.96.3.4": "web.default.svc.cluster.local",
        }


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


def _ptr(reply: bytes) -> tuple[int, str | None]:
    _ident, flags, _qd, an, _ns, _ar = struct.unpack(">HHHHHH", reply[:12])
    if not an:
        return flags & 0xF, None
    i = 12
    while reply[i]:
        i += 1 + reply[i]
    i += 5 + 12
    labels = []
    while reply[i]:
        labels.append(reply[i + 1 : i + 1 + reply[i]].decode())
        i += 1 + reply[i]
    return flags & 0xF, ".".join(labels)


@pytest.mark.parametrize(
    ("address", "rcode", "name"),
    [
        ("10.77.1.5", dns.NOERROR, "job-master-0.job.ns1.svc.cluster.local"),
        ("10.96.3.4", dns.NOERROR, "web.default.svc.cluster.local"),
        # unknown: NXDOMAIN (a fast "no name"), not REFUSED, which resolvers retry
        ("10.77.9.9", dns.NXDOMAIN, None),
    ],
)
def test_reverse_lookups(address: str, rcode: int, name: str | None) -> None:
    qname = ".".join(reversed(address.split("."))) + ".in-addr.arpa"
    assert _ptr(dns.answer(_Records(RECORDS), _query(qname, dns.PTR))) == (rcode, name)
