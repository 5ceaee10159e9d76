"""The node agent: several Nodes on this machine, whose pods run as local processes, and the Service proxy.

Written in Python with the `kubernetes` client rather than in Go on the virtual-kubelet library: what a pod needs
here is Linux plumbing (network and mount namespaces, process groups, signals), which is as direct from Python's
standard library, and the agent then lives beside the tests that drive it, with no second toolchain for its
contributors. The virtual-kubelet library would bring the node and pod controllers but none of that plumbing.

`python -m devcluster.agent <config.json>`: the configuration is written by `devcluster up` (nodes, identities,
images, addresses). SIGTERM stops every container (their grace period cut to a few seconds) and removes every
pod's namespace.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from devcluster import network
from devcluster.agent.containers import all_at_once
from devcluster.agent.node import NodeAgent
from devcluster.agent.proxy import ServiceProxy
from devcluster.kube import Kube

log = logging.getLogger("devcluster.agent")


@dataclass(frozen=True)
class ImageBinary:
    """An image whose entrypoint is a binary devcluster built (a controller's release image)."""

    repository: str
    path: Path
    aliases: tuple[str, ...]
    args: tuple[str, ...]


class Agent:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.state = Path(config["state"])
        self.plan = network.Plan(network.ipaddress.IPv4Network(config["subnet"]))
        self.node_ip = self.plan.gateway
        self.cluster_dns = config["cluster_dns"]
        self.cluster_domain = config.get("cluster_domain", network.CLUSTER_DOMAIN)
        self.kubernetes_version = config["kubernetes_version"]
        self.backoff_base_s = float(config.get("backoff_base_s", 10))
        self.mountpoints_record = self.state / "mountpoints.txt"
        self.images = [
            ImageBinary(i["repository"], Path(i["binary"]), tuple(i.get("aliases", [])), tuple(i.get("args", [])))
            for i in config.get("images", [])
        ]
        self._image_env = dict(config.get("image_env", {}))
        self._ip_lock = threading.Lock()
        self._ips_used: set[int] = set()
        self._next_ip = 0
        self.proxy = ServiceProxy(Kube(Path(config["proxy_kubeconfig"])))
        self.nodes = [NodeAgent(self, n, Kube(Path(n["kubeconfig"]))) for n in config["nodes"]]

    def allocate_ip(self) -> tuple[int, str]:
        """The next free pod address (addresses are not reused at once: a name that pointed at one must not point
        at a new pod while a cache still holds it)."""
        with self._ip_lock:
            while self._next_ip in self._ips_used:
                self._next_ip += 1
            index = self._next_ip
            self._next_ip += 1
            self._ips_used.add(index)
        return index, self.plan.pod_address(index)

    def release_ip(self, index: int) -> None:
        with self._ip_lock:
            self._ips_used.discard(index)

    def image_binary(self, image: str) -> tuple[ImageBinary, tuple[str, ...]] | None:
        repository = image.split("@")[0]
        if ":" in repository.rsplit("/", 1)[-1]:
            repository = repository.rsplit(":", 1)[0]
        for entry in self.images:
            if repository == entry.repository:
                return entry, entry.args
        return None

    def image_env(self, image: str, home: Path) -> dict[str, str]:
        """What every image sets before the container's env: this machine's environment (the `up` command's
        interpreter first on PATH), a HOME private to the pod."""
        env = dict(self._image_env)
        env["HOME"] = str(home)
        return env

    def run(self) -> None:
        self.proxy.start()
        if not self.proxy.wait_synced(60):
            log.warning("service proxy: Services and EndpointSlices not listed within 60 s")
        self.proxy.install(network.CONTROL_NS)
        self.proxy.install("")  # the host's own namespace, as on a node
        for node in self.nodes:
            node.start()
        log.info("node agent: %d nodes up", len(self.nodes))

    def stop(self) -> None:
        all_at_once([functools.partial(n.stop, 2.0) for n in self.nodes])


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    config = json.loads(Path(argv[0]).read_text())
    agent = Agent(config)
    stop = threading.Event()

    def on_term(_sig: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    agent.run()
    Path(config["state"], "agent.ready").write_text(str(os.getpid()))
    stop.wait()
    log.info("node agent: stopping every pod")
    agent.stop()
