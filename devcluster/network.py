"""The cluster's network: one bridge, and a network namespace per party, so that nothing listens on the host.

- The bridge `<name>0` (address `.0.1` of the subnet) joins every namespace; it is the host's only way in.
- The control plane's namespace `<name>-cp` (address `.0.2`) holds etcd, the API server, the controllers, the cluster's
  DNS server and, with `--flyte`, Flyte: they listen on its loopback or on its address, which the host and every
  pod reach through the bridge. Webhooks are called on that loopback, as the API server's `ExternalName` service
  resolution gives it (see `controllers.py`).
- Each pod gets a namespace `<name>-p-<n>` with an address of its own from `.1.0` upward (the node agent allocates
  them), so every pod has its own ports, as on a real node.

Every name starts with the cluster's name (`DEVCLUSTER_NAME`, default `dc`), and `teardown` removes whatever carries
it, recorded or not.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

NAME = os.environ.get("DEVCLUSTER_NAME", "dc")
"""The cluster's name, the prefix of everything it makes on the machine (`DEVCLUSTER_NAME`, default `dc`; two
clusters on one machine need two names, two subnets and two state folders)."""
BRIDGE = f"{NAME}0"
CONTROL_NS = f"{NAME}-cp"
POD_NS_PREFIX = f"{NAME}-p-"
VETH_PREFIX = f"v{NAME}-"
PROXY_TABLE = NAME.replace("-", "_") + "_services"
"""The nftables table of the cluster's Service rules (in every namespace it made, and the host's)."""
DEFAULT_SUBNET = "10.77.0.0/16"
DEFAULT_SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DOMAIN = "cluster.local"


class NetworkError(RuntimeError):
    """A network step failed."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


@dataclass(frozen=True)
class Plan:
    """The addresses of one cluster."""

    subnet: ipaddress.IPv4Network
    services: ipaddress.IPv4Network = ipaddress.IPv4Network(DEFAULT_SERVICE_CIDR)

    @classmethod
    def from_env(cls) -> Plan:
        return cls(
            ipaddress.IPv4Network(os.environ.get("DEVCLUSTER_SUBNET", DEFAULT_SUBNET)),
            ipaddress.IPv4Network(os.environ.get("DEVCLUSTER_SERVICE_CIDR", DEFAULT_SERVICE_CIDR)),
        )

    @property
    def api_service(self) -> str:
        """The `kubernetes` Service's ClusterIP (the range's first address, as the API server allocates it)."""
        return str(self.services.network_address + 1)

    @property
    def blobs_service(self) -> str:
        """The blob store's ClusterIP (the range's twentieth address)."""
        return str(self.services.network_address + 20)

    @property
    def dns_service(self) -> str:
        """The cluster DNS Service's ClusterIP (the range's tenth address, as kubeadm picks it)."""
        return str(self.services.network_address + 10)

    @property
    def prefix(self) -> int:
        return self.subnet.prefixlen

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def control(self) -> str:
        """The control plane namespace's address: the API server's, the DNS server's."""
        return str(self.subnet.network_address + 2)

    def pod_address(self, index: int) -> str:
        """The `index`-th pod address (from .1.0 on a /16)."""
        address = self.subnet.network_address + 256 + index
        if address not in self.subnet or address == self.subnet.broadcast_address:
            raise NetworkError(f"the subnet {self.subnet} has no room for pod address #{index}")
        return str(address)


def check_free(plan: Plan) -> None:
    """Refuse a subnet that overlaps a route the host already has, or a bridge that already exists."""
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        raise NetworkError(f"the bridge {BRIDGE} exists: a cluster is up, or a crashed one left it; run `down`")
    for line in ip("-4", "route", "show").stdout.splitlines():
        dest = line.split()[0]
        if dest == "default":
            continue
        try:
            net = ipaddress.ip_network(dest, strict=False)
        except ValueError:
            continue
        if net.overlaps(plan.subnet):
            raise NetworkError(
                f"the subnet {plan.subnet} overlaps the host's route {line.strip()!r}: "
                "choose another with DEVCLUSTER_SUBNET (a /16 or larger)"
            )


def make_bridge(plan: Plan) -> None:
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{plan.gateway}/{plan.prefix}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")


def make_namespace(name: str, address: str, plan: Plan, veth: str) -> None:
    """A namespace `name` with loopback up and `address` on a veth pair (`veth` on the bridge's side) whose default
    route is the bridge."""
    peer = f"{veth}p"
    ip("netns", "add", name)
    ip("link", "add", veth, "type", "veth", "peer", "name", peer)
    ip("link", "set", peer, "netns", name)
    ip("link", "set", veth, "master", BRIDGE, "up")
    ip("-n", name, "link", "set", "lo", "up")
    ip("-n", name, "addr", "add", f"{address}/{plan.prefix}", "dev", peer)
    ip("-n", name, "link", "set", peer, "name", "eth0")
    ip("-n", name, "link", "set", "eth0", "up")
    ip("-n", name, "route", "add", "default", "via", plan.gateway)


def delete_namespace(name: str) -> None:
    ip("netns", "delete", name, check=False)
    etc = Path("/etc/netns") / name
    if etc.is_dir():
        for f in etc.iterdir():
            f.unlink(missing_ok=True)
        etc.rmdir()


def namespaces() -> list[str]:
    """Every network namespace whose name is ours."""
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{NAME}-")]


def pids_in(name: str) -> list[int]:
    """The processes that live in namespace `name`."""
    out = ip("netns", "pids", name, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def set_etc(name: str, filename: str, text: str) -> None:
    """Write `/etc/netns/<name>/<filename>`, which `ip netns exec` mounts over `/etc/<filename>` for the processes it
    starts (the pod's own resolv.conf, hosts, hostname)."""
    folder = Path("/etc/netns") / name
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{filename}.tmp"
    tmp.write_text(text)
    tmp.replace(folder / filename)


def teardown() -> list[str]:
    """Remove every namespace and the bridge devcluster made; returns what was removed."""
    removed = []
    for name in namespaces():
        delete_namespace(name)
        removed.append(name)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        ip("link", "delete", BRIDGE, check=False)
        removed.append(BRIDGE)
    # the Service rules the node agent wrote into the host's namespace
    if subprocess.run(["nft", "list", "table", "ip", PROXY_TABLE], capture_output=True).returncode == 0:
        subprocess.run(["nft", "delete", "table", "ip", PROXY_TABLE], capture_output=True)
        removed.append(f"nftables table {PROXY_TABLE}")
    # veths die with their namespace; one left over by a crash mid-setup is still ours
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        dev = line.split(":")[1].strip().split("@")[0]
        if dev.startswith(VETH_PREFIX):
            ip("link", "delete", dev, check=False)
            removed.append(dev)
    return removed
