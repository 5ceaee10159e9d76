"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler, run as the upstream binaries, in the control
plane's network namespace.

The flags are those of a kubeadm control plane, cut to one machine: the API server with RBAC and the Node authorizer
and its default admission plugins, service-account tokens signed by a key of the cluster's, and client certificates
for every identity; the controller manager with each controller on its own service account
(`--use-service-account-credentials`, as kubeadm runs it) and only the controllers a cluster of Jobs needs.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devcluster import kubeconfig, network, pki
from devcluster.procs import Proc, Processes

API_PORT = 6443
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# The controllers a cluster of Jobs needs (`kube-controller-manager --help`, 1.37 names): Jobs and their pods, the
# garbage collector (a deleted job's pods), namespaces (deleting one deletes its objects), service accounts and their
# tokens, the root CA ConfigMap every pod's token volume reads, EndpointSlices (the DNS names of headless Services),
# the node lifecycle (a node whose Lease is not renewed is tainted and its pods evicted, as on a real cluster), TTL
# after a Job finishes, pod GC, the disruption controller (PodDisruptionBudgets, which the Eviction API honours), and
# Deployments with their ReplicaSets (the controllers and the cluster DNS run as the Deployments their releases ship).
CONTROLLERS = (
    "job-controller",
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "disruption-controller",
    "clusterrole-aggregation-controller",
    "resourcequota-controller",  # a quota's status (its usage); without it, admission refuses every pod it covers
)


@dataclass(frozen=True)
class ControlPlane:
    """What `start` made: the API server's address and the admin's kubeconfig."""

    server: str
    admin_kubeconfig: Path
    ca: pki.Authority
    pki_dir: Path
    sa_key: Path
    sa_pub: Path


def _client_context(ca_file: Path, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def wait_ready(url: str, ctx: ssl.SSLContext | None, proc: Proc, procs: Processes, timeout_s: float, what: str) -> None:
    """Poll `url` until it answers 200 `ok`; fail at once, naming the log, when the process exits."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if procs.exited(proc) is not None:
            raise RuntimeError(f"{what} exited while starting: see {proc.log}")
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.3)
    raise RuntimeError(f"{what} was not ready after {timeout_s:.0f} s ({url}: {last}); see {proc.log}")


def start(state: Path, plan: network.Plan, procs: Processes, bins: dict[str, Path]) -> ControlPlane:
    """Start etcd, the API server, the controller manager and the scheduler in the control plane's namespace."""
    pki_dir = state / "pki"
    ca = pki.Authority(pki_dir)
    sa_key, sa_pub = pki.signing_key_pair(pki_dir)
    server_pair = ca.issue(
        "apiserver",
        "kube-apiserver",
        dns=(
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
        ),
        ips=(plan.control, "127.0.0.1", plan.api_service),
        server=True,
    )
    server = f"https://{plan.control}:{API_PORT}"
    configs = state / "kubeconfig"
    # API aggregation (Kueue's visibility API): the API server proxies as `front-proxy-client`, certified by a CA of
    # its own that aggregated servers trust for request headers, as kubeadm sets it up
    front_ca = pki.Authority(pki_dir / "front-proxy", name="front-proxy-ca")
    front_client = front_ca.issue("front-proxy-client", "front-proxy-client", client=True)

    def identity(name: str, cn: str, orgs: tuple[str, ...] = ()) -> Path:
        pair = ca.issue(name, cn, organizations=orgs, client=True)
        return kubeconfig.write(
            configs / f"{name}.yaml", server, ca.cert_file, user=name, cert_file=pair.cert_file, key_file=pair.key_file
        )

    admin = identity("admin", "devcluster-admin", ("system:masters",))
    kcm = identity("controller-manager", "system:kube-controller-manager")
    scheduler = identity("scheduler", "system:kube-scheduler")

    etcd_dir = state / "etcd"
    etcd = procs.start(
        "etcd",
        [
            str(bins["etcd"]),
            "--name=devcluster",
            f"--data-dir={etcd_dir}",
            # the test tier compacts etcd on purpose (a watch's 410 Gone), so the client port is on the namespace's
            # address as well as its loopback
            f"--listen-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT},http://{plan.control}:{ETCD_CLIENT_PORT}",
            f"--advertise-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT}",
            f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
            f"--initial-cluster=devcluster=http://127.0.0.1:{ETCD_PEER_PORT}",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            # a test cluster on one disk: an fsync per write would make every create wait on the disk
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
        netns=network.CONTROL_NS,
    )
    wait_ready(f"http://{plan.control}:{ETCD_CLIENT_PORT}/health", None, etcd, procs, 60, "etcd")

    apiserver = procs.start(
        "kube-apiserver",
        [
            str(bins["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
            "--bind-address=0.0.0.0",  # inside the control plane's namespace: its loopback and its address
            f"--advertise-address={plan.control}",
            f"--secure-port={API_PORT}",
            f"--tls-cert-file={server_pair.cert_file}",
            f"--tls-private-key-file={server_pair.key_file}",
            f"--client-ca-file={ca.cert_file}",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-cluster-ip-range={plan.services}",
            "--authorization-mode=Node,RBAC",
            # logs, exec and port-forward reach a node at its address: the default order asks DNS for the node's
            # name first, which no resolver of the control plane knows (and another cluster's nodes share the names)
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--requestheader-client-ca-file={front_ca.cert_file}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front_client.cert_file}",
            f"--proxy-client-key-file={front_client.key_file}",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        ],
        netns=network.CONTROL_NS,
    )
    admin_pair = (pki_dir / "admin.crt", pki_dir / "admin.key")
    ctx = _client_context(ca.cert_file, *admin_pair)
    wait_ready(f"{server}/readyz", ctx, apiserver, procs, 120, "kube-apiserver")

    procs.start(
        "kube-controller-manager",
        [
            str(bins["kube-controller-manager"]),
            f"--kubeconfig={kcm}",
            f"--authentication-kubeconfig={kcm}",
            f"--authorization-kubeconfig={kcm}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={sa_key}",
            f"--root-ca-file={ca.cert_file}",
            f"--service-cluster-ip-range={plan.services}",
            "--profiling=false",
            "--v=1",
        ],
        netns=network.CONTROL_NS,
    )
    procs.start(
        "kube-scheduler",
        [
            str(bins["kube-scheduler"]),
            f"--kubeconfig={scheduler}",
            f"--authentication-kubeconfig={scheduler}",
            f"--authorization-kubeconfig={scheduler}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ],
        netns=network.CONTROL_NS,
    )
    return ControlPlane(server, admin, ca, pki_dir, sa_key, sa_pub)


def server_version(cp: ControlPlane) -> dict:
    ctx = _client_context(cp.ca.cert_file, cp.pki_dir / "admin.crt", cp.pki_dir / "admin.key")
    with urllib.request.urlopen(f"{cp.server}/version", context=ctx, timeout=10) as r:
        return json.load(r)
