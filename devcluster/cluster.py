"""`up` and `down`: one cluster per state folder.

`up` makes the network, starts the control plane in its namespace, renders every chosen controller's release
manifests, starts the node agent (which registers the nodes and runs every pod), deploys the cluster DNS and the
controllers, and waits until each is available and its webhooks are served. Its last line is `KUBECONFIG=<path>`.

`down` stops every process `up` recorded and every process left in a namespace devcluster made, removes the
namespaces, the bridge, the mounts and mount points it made, and the state folder. It reads only what is on the
machine, so it also cleans up after an `up` that crashed half-way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from devcluster import addons, controlplane, kubeconfig, network
from devcluster import flyte as flyte_setup
from devcluster.build import binaries, cached
from devcluster.components import BY_NAME, CONTROLLERS, KUBERNETES_VERSION
from devcluster.flyte import FlyteSetup
from devcluster.kube import Kube, wait_for
from devcluster.paths import state_root
from devcluster.procs import Processes

NEEDS = {"trainer": ("jobset",)}  # Trainer v2 runs TrainJobs as JobSets

GPU_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
CPU_ALLOCATABLE = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
NODES: tuple[dict[str, Any], ...] = (
    {"name": "cpu-1", "labels": {"devcluster.flyte.org/pool": "cpu"}, "taints": [], "allocatable": CPU_ALLOCATABLE},
    {"name": "cpu-2", "labels": {"devcluster.flyte.org/pool": "cpu"}, "taints": [], "allocatable": CPU_ALLOCATABLE},
    {
        # a GPU pool's node, as the NVIDIA GPU operator and the cloud providers taint it
        "name": "gpu-1",
        "labels": {"devcluster.flyte.org/pool": "gpu", **GPU_LABELS},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "allocatable": {**CPU_ALLOCATABLE, "nvidia.com/gpu": "4"},
    },
    {
        # a dedicated GPU pool as Flyte's docs taint it (flyte/gpu=dedicated:NoSchedule)
        "name": "gpu-dedicated-1",
        "labels": {"devcluster.flyte.org/pool": "gpu-dedicated", **GPU_LABELS},
        "taints": [{"key": "flyte/gpu", "value": "dedicated", "effect": "NoSchedule"}],
        "allocatable": {**CPU_ALLOCATABLE, "nvidia.com/gpu": "4"},
    },
)


class UpError(RuntimeError):
    """The cluster did not come up; what was started stays recorded for `down`."""


def _say(out: TextIO, text: str, start: float) -> None:
    print(f"[{time.monotonic() - start:6.1f} s] {text}", file=out, flush=True)


def _python_env() -> dict[str, str]:
    """What the pods' image provides: this interpreter's environment first on PATH, the repository importable."""
    repo = Path(__file__).resolve().parents[1]
    venv_bin = Path(sys.executable).parent
    return {
        "PATH": os.pathsep.join([str(venv_bin), "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]),
        "PYTHONPATH": str(repo),
        "LANG": "C.UTF-8",
    }


def up(
    controllers: tuple[str, ...] = CONTROLLERS,
    out: TextIO = sys.stdout,
    backoff_base_s: float = 10.0,
    flyte: FlyteSetup | None = None,
) -> Path:
    """Start a cluster; returns the admin kubeconfig's path (also printed last as `KUBECONFIG=<path>`). With `flyte`,
    Flyte's propeller runs on it too, set up as `flyte` says (`devcluster.flyte`)."""
    start = time.monotonic()
    state = state_root()
    procs = Processes(state)
    if any(p.alive() for p in procs.recorded()) or network.namespaces():
        raise UpError(f"a cluster is up (state {state}); run `python -m devcluster down` first")
    for name in controllers:
        if name not in CONTROLLERS:
            raise UpError(f"unknown controller {name!r}: choose among {', '.join(CONTROLLERS)}")
    chosen = list(controllers)
    for name in list(chosen):
        for need in NEEDS.get(name, ()):
            if need not in chosen:
                chosen.append(need)
    chosen = [c for c in addons.ORDER if c in chosen]
    if flyte is not None and flyte.controller not in chosen:
        raise UpError(f"--flyte --target {flyte.target} needs the controller {flyte.controller} (--controllers)")
    bins = binaries(["etcd", "kubernetes", *chosen, *(["flytepropeller"] if flyte is not None else [])])
    plan = network.Plan.from_env()
    network.check_free(plan)
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    (state / "bin").mkdir()
    os.symlink(bins["kubectl"], state / "bin" / "kubectl")

    # the releases render (kubectl kustomize) while the control plane starts
    renderer = ThreadPoolExecutor(max_workers=max(1, len(chosen)))
    renders = {name: renderer.submit(addons.RELEASES[name].render, bins["kubectl"], state) for name in chosen}

    network.make_bridge(plan)
    network.make_namespace(network.CONTROL_NS, plan.control, plan, veth=f"{network.VETH_PREFIX}cp")
    _say(out, f"network: bridge {network.BRIDGE} {plan.gateway}/{plan.prefix}, control plane at {plan.control}", start)
    cp = controlplane.start(state, plan, procs, bins)
    admin = Kube(cp.admin_kubeconfig)
    version = wait_for("the API server's version", lambda: admin.get("/version"), 30)
    _say(
        out,
        f"control plane: etcd, kube-apiserver {version['gitVersion']}, kube-controller-manager, kube-scheduler",
        start,
    )
    wait_for(
        "the default ServiceAccount (kube-controller-manager)",
        lambda: admin.get_or_none("/api/v1/namespaces/default/serviceaccounts/default"),
        90,
    )

    rendered = {name: f.result() for name, f in renders.items()}
    renderer.shutdown()
    if "kueue" in rendered:
        addons.enable_kueue_frameworks(rendered["kueue"])
    images = []
    for name, objects in rendered.items():
        binary = bins[BY_NAME[name].binaries[0][0]]
        for image in addons.images_of(objects):
            images.append({"repository": addons.repository(image), "binary": str(binary), "aliases": ["/manager"]})
    # propeller's release image, when it is built: `up --flyte` deploys it, and so may a later `deploy` on this cluster
    propeller = cached(BY_NAME["flytepropeller"])
    if propeller is not None:
        images.append(flyte_setup.propeller_image_binary(propeller))

    node_configs = []
    for spec in NODES:
        pair = cp.ca.issue(
            f"node-{spec['name']}", f"system:node:{spec['name']}", organizations=("system:nodes",), client=True
        )
        path = kubeconfig.write(
            state / "kubeconfig" / f"node-{spec['name']}.yaml",
            cp.server,
            cp.ca.cert_file,
            user=f"system:node:{spec['name']}",
            cert_file=pair.cert_file,
            key_file=pair.key_file,
        )
        node_configs.append({**spec, "kubeconfig": str(path)})
    proxy_pair = cp.ca.issue("kube-proxy", "system:kube-proxy", client=True)
    proxy_config = kubeconfig.write(
        state / "kubeconfig" / "kube-proxy.yaml",
        cp.server,
        cp.ca.cert_file,
        user="system:kube-proxy",
        cert_file=proxy_pair.cert_file,
        key_file=proxy_pair.key_file,
    )
    agent_config = {
        "state": str(state),
        "subnet": str(plan.subnet),
        "cluster_dns": plan.dns_service,
        "cluster_domain": network.CLUSTER_DOMAIN,
        "kubernetes_version": KUBERNETES_VERSION,
        "backoff_base_s": backoff_base_s,
        "nodes": node_configs,
        "proxy_kubeconfig": str(proxy_config),
        "images": images,
        "image_env": _python_env(),
    }
    (state / "agent.json").write_text(json.dumps(agent_config, indent=2))
    agent = procs.start(
        "node-agent",
        [sys.executable, "-m", "devcluster.agent", str(state / "agent.json")],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )

    def nodes_ready() -> bool:
        if procs.exited(agent) is not None:
            raise UpError(f"the node agent exited: see {agent.log}")
        items = admin.get("/api/v1/nodes")["items"]
        ready = [
            n
            for n in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
        ]
        untainted = [
            n
            for n in ready
            if not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints") or [])
        ]
        return len(untainted) == len(NODES)

    wait_for("the nodes Ready", nodes_ready, 90)
    _say(out, f"node agent: {len(NODES)} nodes Ready ({', '.join(n['name'] for n in NODES)})", start)

    dns = addons.dns_objects(network.CLUSTER_DOMAIN, plan.dns_service)
    addons.apply_all(admin, dns)
    addons.wait_deployments(admin, dns, 120)
    _say(out, f"cluster DNS: kube-dns {plan.dns_service}", start)
    blobs = addons.blobstore_objects(plan.blobs_service)
    addons.apply_all(admin, blobs)
    addons.wait_deployments(admin, blobs, 120)
    blob_endpoint = f"http://{plan.blobs_service}:{addons.BLOBS_PORT}"
    _say(out, f"blob store: an S3 stand-in at {blob_endpoint}", start)

    # every release's own objects first, then the controllers start together; the custom resources a release
    # ships (Trainer's runtime) go in once its webhooks serve
    for name in chosen:
        addons.apply_all(admin, [o for o in rendered[name] if addons.is_builtin(o)])

    def available(name: str) -> None:
        addons.wait_deployments(admin, rendered[name], 300)
        _say(out, f"{name} {BY_NAME[name].version}: available", start)

    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
        for f in [pool.submit(available, name) for name in chosen]:
            f.result()
    if chosen:
        addons.webhook_ready(admin, 180)
    for name in chosen:
        addons.apply_all(admin, [o for o in rendered[name] if not addons.is_builtin(o)])
    if "kueue" in chosen:
        addons.apply_all(admin, addons.kueue_objects(GPU_LABELS))
        _say(
            out, "kueue: ResourceFlavors cpu and gpu, ClusterQueue cluster-queue, LocalQueue default/user-queue", start
        )
    flyte_record = None
    if flyte is not None:
        ensure_bucket(blob_endpoint)
        flyte_record = flyte_setup.deploy(admin, flyte, blob_endpoint, state)
        _say(
            out,
            f"flyte: flytepropeller {flyte_record['version']}, `pytorch` tasks through "
            + ("our connector, target " + flyte.target if flyte.plugin == "connector" else "Flyte's PyTorch plugin"),
            start,
        )
    info = {
        "server": cp.server,
        "kubeconfig": str(cp.admin_kubeconfig),
        "version": version["gitVersion"],
        "blob_endpoint": blob_endpoint,
        "controllers": {name: BY_NAME[name].version for name in chosen},
        "nodes": [n["name"] for n in NODES],
        **({"flyte": {"plugin": flyte.plugin, "target": flyte.target}} if flyte is not None else {}),
    }
    (state / "cluster.json").write_text(json.dumps(info, indent=2))
    _say(out, f"up in {time.monotonic() - start:.1f} s; kubectl: {state / 'bin' / 'kubectl'}", start)
    print(f"KUBECONFIG={cp.admin_kubeconfig}", file=out, flush=True)
    return cp.admin_kubeconfig


def ensure_bucket(blob_endpoint: str, bucket: str = flyte_setup.BUCKET) -> None:
    """The bucket propeller and the tasks write to, in the cluster's S3 stand-in (boto3: the `cluster` extra)."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=blob_endpoint,
        aws_access_key_id=flyte_setup.ACCESS_KEY,
        aws_secret_access_key=flyte_setup.ACCESS_KEY,
        region_name=flyte_setup.REGION,
    )
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass


def _kill_namespace_processes() -> int:
    killed = 0
    for ns in network.namespaces():
        for pid in network.pids_in(ns):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def mount_points_in_use() -> set[str]:
    """Every mount point of any process's mount namespace (`/proc/<pid>/mountinfo`, field 5). A mount point the
    agent made on this machine (`/var/run/secrets/kubernetes.io/serviceaccount`) serves every cluster on it: removing
    it while another cluster's container has a volume there would detach that volume (since Linux 3.18 an rmdir of a
    mount point in another namespace unmounts it there), leaving the container's token folder empty."""
    out: set[str] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "mountinfo").read_text()
        except OSError:
            continue  # gone, or not ours to read
        for line in text.splitlines():
            fields = line.split()
            if len(fields) > 4:
                out.add(fields[4].replace("\\040", " "))
    return out


def _unmount_and_unmake(state: Path) -> int:
    """Unmount the tmpfs volumes and remove the mount points the agent made (newest first)."""
    record = state / "mountpoints.txt"
    if not record.exists():
        return 0
    paths = [Path(p) for p in record.read_text().splitlines() if p.strip()]
    for p in reversed(paths):
        if os.path.ismount(p):
            subprocess.run(["umount", "-l", str(p)], capture_output=True)
    removed = 0
    in_use = mount_points_in_use()
    for p in reversed(paths):
        if state in p.parents or str(p) in in_use:
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            elif p.is_file() and p.stat().st_size == 0:
                p.unlink()
            removed += 1
        except OSError:
            pass  # not empty (something else put files there) or already gone
    return removed


def down(out: TextIO = sys.stdout) -> None:
    """Stop everything `up` started and remove what it made."""
    state = state_root()
    procs = Processes(state)
    recorded = procs.recorded()
    killed = procs.stop_all(grace_s=20.0)
    left = _kill_namespace_processes()
    # the pods' tmpfs volumes live under the state folder
    if state.exists():
        for line in Path("/proc/mounts").read_text().splitlines():
            target = line.split()[1]
            if target.startswith(str(state) + "/"):
                subprocess.run(["umount", "-l", target], capture_output=True)
    removed = network.teardown()
    points = _unmount_and_unmake(state)
    shutil.rmtree(state, ignore_errors=True)
    alive = [p.name for p in recorded if p.alive()]
    print(
        f"devcluster down: {len(recorded)} processes stopped"
        + (f" ({', '.join(killed)} killed after the grace period)" if killed else "")
        + (f", {left} left in its namespaces killed" if left else "")
        + f", {len(removed)} network devices and namespaces removed, {points} mount points removed",
        file=out,
        flush=True,
    )
    if alive:
        raise RuntimeError(f"still running after down: {', '.join(alive)}")
