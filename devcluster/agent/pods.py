"""One pod on a node: its sandbox, volumes, containers and status, from binding to deletion.

The order is the kubelet's (`pkg/kubelet/kuberuntime/kuberuntime_manager.go` SyncPod): the sandbox (a network
namespace with the pod's address, DNS and hosts files), the volumes, the init containers one at a time (a native
sidecar, an init container with `restartPolicy: Always`, is started and left running), then every regular
container. Each container's exit is judged by the pod's restart policy, with the kubelet's crash-loop back-off
(10 s doubling to 300 s, reset after 10 minutes of running). A deletion (or an eviction, which is a deletion)
stops every container with the grace period the deletion carries — SIGTERM to the main process, SIGKILL after —
reports the final status, and deletes the pod for good with grace 0, as the kubelet's status manager does.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import shlex
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcluster import network
from devcluster.agent.containers import Container, all_at_once, now_rfc3339
from devcluster.agent.envvars import EnvError, make_env
from devcluster.agent.probes import Prober
from devcluster.agent.volumes import PodVolumes, VolumeError, ensure_mount_point, mount_targets
from devcluster.kube import UNREACHABLE, ApiError
from devcluster.paths import pod_log_folder

if TYPE_CHECKING:
    from devcluster.agent.node import NodeAgent

log = logging.getLogger("devcluster.agent")

BACKOFF_MAX_S = 300.0
BACKOFF_RESET_S = 600.0
TERMINATION_MESSAGE_PATH = "/dev/termination-log"


def _rfc3339_age(stamp: str) -> float:
    t = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return (datetime.datetime.now(datetime.timezone.utc) - t).total_seconds()


def _nulled(state: dict) -> dict:
    """A container state for a strategic merge patch: the two kinds it is not are set to null (removed)."""
    out: dict[str, Any] = {"waiting": None, "running": None, "terminated": None}
    out.update(state)
    return out


class PodRuntime:
    """The agent's copy of one pod and the thread that runs it."""

    def __init__(self, node: NodeAgent, pod: dict) -> None:
        self.node = node
        self.agent = node.agent
        self.pod = pod
        self.uid = pod["metadata"]["uid"]
        self.ns = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.wake = threading.Event()
        self.gone = threading.Event()  # the API object is gone (deleted for good)
        self.done = threading.Event()  # this runtime has nothing left to do
        self.dir = self.agent.state / "pods" / self.uid
        self.log_dir = pod_log_folder(self.agent.state, self.ns, self.name, self.uid)
        self.netns = ""
        self.ip = ""
        self.ip_index: int | None = None
        self.volumes: PodVolumes | None = None
        self.containers: dict[str, Container] = {}
        self.conditions: dict[str, dict] = {}
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.start_time = ""
        self.initialized = False
        self.terminal = False
        self._last_report = ""
        self._thread = threading.Thread(target=self._run, name=f"pod {self.ns}/{self.name}", daemon=True)

    # --- the informer's side

    def start(self) -> None:
        self._thread.start()

    def update(self, pod: dict) -> None:
        self.pod = pod
        self.wake.set()

    def deleted(self) -> None:
        self.gone.set()
        self.wake.set()

    # --- helpers

    @property
    def spec(self) -> dict:
        return self.pod["spec"]

    def _deleting(self) -> bool:
        return self.gone.is_set() or bool(self.pod["metadata"].get("deletionTimestamp"))

    def _grace(self) -> float:
        meta = self.pod["metadata"]
        if meta.get("deletionGracePeriodSeconds") is not None:
            return float(meta["deletionGracePeriodSeconds"])
        return float(self.spec.get("terminationGracePeriodSeconds", 30))

    def _hostname(self) -> str:
        return str(self.spec.get("hostname") or self.name)[:63]

    def _event(self, reason: str, message: str, kind: str = "Normal", container: str | None = None) -> None:
        self.node.event(self.pod, reason, message, kind, container)

    # --- the sandbox

    def _sandbox(self) -> None:
        self.ip_index, self.ip = self.agent.allocate_ip()
        self.netns = f"{network.POD_NS_PREFIX}{self.ip_index}"
        network.make_namespace(self.netns, self.ip, self.agent.plan, veth=f"{network.VETH_PREFIX}{self.ip_index}")
        self._write_etc()
        self.agent.proxy.install(self.netns)
        self.conditions["PodReadyToStartContainers"] = self._cond("PodReadyToStartContainers", True)

    def _write_etc(self) -> None:
        hostname = self._hostname()
        domain = self.agent.cluster_domain
        fqdn = ""
        if self.spec.get("subdomain"):
            fqdn = f"{hostname}.{self.spec['subdomain']}.{self.ns}.svc.{domain}"
        hosts = [
            "# Kubernetes-managed hosts file (devcluster).",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost",
        ]
        hosts.append(f"{self.ip}\t{fqdn + chr(9) if fqdn else ''}{hostname}")
        for alias in self.spec.get("hostAliases") or []:
            hosts.append(f"{alias['ip']}\t{chr(9).join(alias.get('hostnames') or [])}")
        network.set_etc(self.netns, "hosts", "\n".join(hosts) + "\n")
        network.set_etc(self.netns, "hostname", hostname + "\n")
        policy = self.spec.get("dnsPolicy", "ClusterFirst")
        config = self.spec.get("dnsConfig") or {}
        if policy == "Default":
            resolv = Path("/etc/resolv.conf").read_text()
        else:
            servers = [] if policy == "None" else [self.agent.cluster_dns]
            search = [] if policy == "None" else [f"{self.ns}.svc.{domain}", f"svc.{domain}", domain]
            options = {} if policy == "None" else {"ndots": "5"}
            servers += config.get("nameservers") or []
            search += config.get("searches") or []
            for opt in config.get("options") or []:
                options[opt["name"]] = opt.get("value")
            lines = [f"nameserver {s}" for s in servers]
            if search:
                lines.append("search " + " ".join(search))
            if options:
                lines.append("options " + " ".join(k if v is None else f"{k}:{v}" for k, v in options.items()))
            resolv = "\n".join(lines) + "\n"
        network.set_etc(self.netns, "resolv.conf", resolv)

    def _teardown_sandbox(self) -> None:
        for c in self.containers.values():
            c.stop_probes()
            c.kill_leftovers()
        if self.netns:
            # what is left in the pod's network namespace is what a cgroup kill would take
            for pid in network.pids_in(self.netns):
                try:
                    import os
                    import signal

                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            network.delete_namespace(self.netns)
            self.netns = ""
        if self.volumes is not None:
            self.volumes.teardown()
        if self.ip_index is not None:
            self.agent.release_ip(self.ip_index)
            self.ip_index = None
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- status

    def _cond(self, ctype: str, status: bool, reason: str = "", message: str = "") -> dict:
        old = self.conditions.get(ctype)
        value = "True" if status else "False"
        if old is not None and old["status"] == value and old.get("reason", "") == reason:
            return old
        cond = {"type": ctype, "status": value, "lastTransitionTime": now_rfc3339(), "lastProbeTime": None}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        return cond

    def _set_conditions(self) -> None:
        regular = [c for c in self.containers.values() if c.kind == "regular"]
        sidecars = [c for c in self.containers.values() if c.kind == "sidecar"]
        if self.initialized:
            self.conditions["Initialized"] = self._cond("Initialized", True)
        else:
            waiting = [c.name for c in self.containers.values() if c.kind in ("init", "sidecar") and c.exit_code != 0]
            self.conditions["Initialized"] = self._cond(
                "Initialized",
                False,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(waiting)}]",
            )
        unready = [c.name for c in regular + sidecars if not c.ready]
        if self.terminal and self.phase == "Succeeded":
            unready = []
            ready = False
            reason = "PodCompleted"
        else:
            ready = bool(regular) and not unready and self.initialized
            reason = "" if ready else "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(unready)}]" if unready else ""
        self.conditions["ContainersReady"] = self._cond("ContainersReady", ready, reason, message)
        gates = [g["conditionType"] for g in self.spec.get("readinessGates") or []]
        current = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        gates_ok = all(current.get(g, {}).get("status") == "True" for g in gates)
        self.conditions["Ready"] = self._cond("Ready", ready and gates_ok, reason, message)
        if self.terminal:
            self.conditions["PodReadyToStartContainers"] = self._cond("PodReadyToStartContainers", False)

    def _phase(self) -> str:
        if self.terminal:
            return self.phase
        if not self.initialized:
            return "Pending"
        regular = [c for c in self.containers.values() if c.kind == "regular"]
        if any(c.running() for c in regular):
            return "Running"
        if any(c.process is None for c in regular):
            return "Pending"
        return "Running"  # between a container's exit and its restart

    def report(self, force: bool = False) -> None:
        """Send the pod's status when it changed since the last report."""
        self.phase = self._phase()
        self._set_conditions()
        spec_by = {c["name"]: c for c in (self.spec.get("initContainers") or []) + self.spec["containers"]}

        def statuses(kinds: tuple[str, ...]) -> list[dict]:
            out = []
            for c in self.containers.values():
                if c.kind in kinds:
                    s = c.status(spec_by[c.name].get("image", ""))
                    s["state"] = _nulled(s["state"])
                    s["lastState"] = _nulled(s["lastState"]) if s["lastState"] else {}
                    out.append(s)
            return out

        status: dict[str, Any] = {
            "phase": self.phase,
            # a strategic merge patch keeps what it leaves out: a condition that lost its reason or message (False,
            # then True) says so with nulls, as the kubelet's full status update would
            "conditions": [{"reason": None, "message": None, **c} for c in self.conditions.values()],
            "hostIP": self.agent.node_ip,
            "hostIPs": [{"ip": self.agent.node_ip}],
            "initContainerStatuses": statuses(("init", "sidecar")),
            "containerStatuses": statuses(("regular",)),
        }
        if self.ip:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        if self.start_time:
            status["startTime"] = self.start_time
        status["reason"] = self.reason or None
        status["message"] = self.message or None
        text = json.dumps(status, sort_keys=True)
        if text == self._last_report and not force:
            return
        try:
            self.node.kube.strategic_patch(f"/api/v1/namespaces/{self.ns}/pods/{self.name}/status", {"status": status})
            self._last_report = text
        except ApiError as e:
            if e.status == 404:
                self.gone.set()
            else:
                log.warning("pod %s/%s: status update: %s", self.ns, self.name, e)
        except UNREACHABLE as e:  # the API server is away (a restart): the next report sends this state again
            log.warning("pod %s/%s: status update: the API server cannot be reached: %s", self.ns, self.name, e)

    # --- containers

    def _container_objects(self) -> None:
        for spec in self.spec.get("initContainers") or []:
            kind = "sidecar" if spec.get("restartPolicy") == "Always" else "init"
            self._new_container(spec, kind)
        for spec in self.spec["containers"]:
            self._new_container(spec, "regular")

    def _new_container(self, spec: dict, kind: str) -> None:
        c = Container(
            spec=spec,
            kind=kind,
            log_dir=self.log_dir / spec["name"],
            termination_file=self.dir / "termination" / spec["name"],
        )
        self.containers[c.name] = c

    def _argv(self, c: Container) -> list[str]:
        image = c.spec.get("image", "")
        command = list(c.spec.get("command") or [])
        args = list(c.spec.get("args") or [])
        mapped = self.agent.image_binary(image)
        if mapped is not None:
            entry, default_args = mapped
            # the image's entrypoint is the built binary; a command that names the image's own entrypoint path
            # (`/manager`) is that binary too
            if not command or command[0] in entry.aliases:
                command = [str(entry.path)] + command[1:]
            if not args and not c.spec.get("command"):
                args = list(default_args)
        # any other image is this machine's environment, with no ENTRYPOINT (as flytekit's images have none): a
        # container without a command runs its args, as a runtime runs an image's CMD
        if not command and not args:
            raise EnvError(f"image {image!r}: the container has neither command nor args, and the image no entrypoint")
        return command + args

    def _start_container(self, c: Container) -> bool:
        """Start `c`; on a failure that the kubelet reports as a waiting reason, record it and return False."""
        try:
            env = make_env(
                self.pod,
                c.spec,
                image_env=self.agent.image_env(c.spec.get("image", ""), self.dir / "home"),
                service_env=self.agent.proxy.service_env(self.ns),
                read=self.node.read,
                node_allocatable=self.node.allocatable,
            )
            argv = [self._expand(a, env) for a in self._argv(c)]
            assert self.volumes is not None
            mounts = mount_targets(self.pod, c.spec, self.volumes.paths)
            path = c.spec.get("terminationMessagePath", TERMINATION_MESSAGE_PATH)
            mounts.append((str(c.termination_file), path, False, True))
        except (EnvError, VolumeError) as e:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
            self._event("Failed", f"Error: {e}", "Warning", c.name)
            return False
        for _, target, _, is_file in mounts:
            ensure_mount_point(target, is_file, self.agent.mountpoints_record)
        c.termination_file.parent.mkdir(parents=True, exist_ok=True)
        c.termination_file.touch()
        (self.dir / "home").mkdir(parents=True, exist_ok=True)
        c.start(argv, env, mounts, self.netns, self._hostname(), self.dir / f"{c.name}.spec.json")
        self._event("Started", f"Started container {c.name}", container=c.name)
        if c.spec.get("readinessProbe"):
            c.ready = False
        startup = c.spec.get("startupProbe")
        if startup:
            prober = Prober(startup, lambda: self.ip, c.spec, self.netns, initial=False, startup=True)
            c.startup = prober

            def on_started(ok: bool, c: Container = c) -> None:
                if ok:
                    c.started_ok = True
                    self._start_probes(c)
                else:
                    self._event(
                        "Unhealthy", f"Startup probe failed; container {c.name} will be restarted", "Warning", c.name
                    )
                    threading.Thread(target=c.stop, args=(self._grace(),), daemon=True).start()
                self.wake.set()

            prober.on_change = on_started
            prober.start()
        else:
            c.started_ok = True
            self._start_probes(c)
        return True

    def _start_probes(self, c: Container) -> None:
        """The readiness and liveness probes, once the container has started (its startup probe succeeded)."""
        for probe_key in ("readinessProbe", "livenessProbe"):
            probe = c.spec.get(probe_key)
            if not probe or not c.running():
                continue
            prober = Prober(probe, lambda: self.ip, c.spec, self.netns, initial=probe_key == "livenessProbe")
            if probe_key == "readinessProbe":
                c.probe = prober

                def on_ready(ok: bool, c: Container = c) -> None:
                    c.ready = ok and c.running()
                    self.wake.set()

                prober.on_change = on_ready
            else:
                c.liveness = prober

                def on_live(ok: bool, c: Container = c) -> None:
                    if not ok:
                        self._event(
                            "Unhealthy",
                            f"Liveness probe failed; container {c.name} will be restarted",
                            "Warning",
                            c.name,
                        )
                        threading.Thread(target=c.stop, args=(self._grace(),), daemon=True).start()

                prober.on_change = on_live
            prober.start()

    @staticmethod
    def _expand(arg: str, env: dict[str, str]) -> str:
        from devcluster.agent.envvars import expand

        return expand(arg, env)

    def _restarts(self, c: Container, code: int) -> bool:
        if c.kind == "sidecar":
            return True
        policy = self.spec.get("restartPolicy", "Always")
        if c.kind == "init":
            return code != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    def _schedule_restart(self, c: Container) -> None:
        ran = time.monotonic() - c.running_since
        if ran > BACKOFF_RESET_S:
            c.backoff_s = 0.0
        c.backoff_s = self.agent.backoff_base_s if c.backoff_s == 0 else min(c.backoff_s * 2, BACKOFF_MAX_S)
        c.next_start = time.monotonic() + c.backoff_s
        c.last_state = c.state
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {c.backoff_s:.0f}s restarting failed container={c.name} "
                f"pod={self.name}_{self.ns}({self.uid})",
            }
        }
        self._event(
            "BackOff",
            f"Back-off restarting failed container {c.name} in pod {self.name}_{self.ns}({self.uid})",
            "Warning",
            c.name,
        )

    def _restart_due(self, c: Container) -> bool:
        if time.monotonic() < c.next_start:
            return False
        c.stop_probes()
        c.restart_count += 1
        return self._start_container(c)

    # --- the pod's life

    def _wait(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    def _run(self) -> None:
        try:
            self._live()
        except Exception:  # noqa: BLE001 - a bug here must not take the node down; say it and fail the pod
            log.exception("pod %s/%s: the agent failed", self.ns, self.name)
            self.message = "devcluster's node agent failed running this pod; see the agent's log"
            self.terminal, self.phase, self.reason = True, "Failed", "NodeAgentError"
            self._stop_all(0)
            self.report(force=True)
            self._finish_deletion()
        finally:
            self._teardown_sandbox()
            self.done.set()
            self.node.forget(self.uid)

    def _live(self) -> None:
        status = self.pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            self.terminal = True  # already ended (an agent restart): only its deletion is left to confirm
            self._finish_deletion()
            return
        self.start_time = now_rfc3339()
        self._sandbox()
        self._container_objects()
        self.report()
        self.volumes = PodVolumes(
            self.pod,
            self.dir / "volumes",
            read=self.node.read,
            token=self.node.token_for,
            node_allocatable=self.node.allocatable,
            mounts_record=self.agent.mountpoints_record,
        )
        while True:
            if self._deleting():
                self._finish_deletion()
                return
            try:
                self.volumes.setup()
                break
            except (VolumeError, ApiError, *UNREACHABLE) as e:
                self._event("FailedMount", str(e), "Warning")
                for c in self.containers.values():
                    c.state = {"waiting": {"reason": "ContainerCreating"}}
                self.report()
                self._wait(2.0)
        if not self._init_phase():
            if self._deleting():
                self._finish_deletion()
            else:
                self._terminal_phase()
            return
        self.initialized = True
        for c in self.containers.values():
            if c.kind == "regular":
                self._start_container(c)
        self.report()
        self._main_phase()

    def _init_phase(self) -> bool:
        """Run the init containers in order; False when the pod failed (or is deleted) before they all completed."""
        for c in [c for c in self.containers.values() if c.kind in ("init", "sidecar")]:
            if not self._start_container(c):
                while not self._deleting():
                    self.report()
                    self._wait(2.0)
                    if self._start_container(c):
                        break
                else:
                    return False
            self.report()
            if c.kind == "sidecar":
                continue
            while True:
                if self._deleting():
                    return False
                code = c.finished()
                if code is None:
                    self._refresh_and_sidecars()
                    self.report()
                    self._wait(0.5)
                    continue
                c.judged = True
                c.kill_leftovers()
                if code == 0:
                    c.final = True
                    break
                if not self._restarts(c, code):
                    self.terminal, self.phase = True, "Failed"
                    return False
                self._schedule_restart(c)
                self.report()
                while not self._deleting() and not self._restart_due(c):
                    self.report()
                    self._wait(min(1.0, max(0.05, c.next_start - time.monotonic())))
        return True

    def _refresh_and_sidecars(self) -> None:
        if self.volumes is not None and time.monotonic() - getattr(self, "_refreshed", 0.0) > 10:
            self.volumes.refresh()
            self._refreshed = time.monotonic()
        for c in self.containers.values():
            if c.kind != "sidecar" or c.process is None:
                continue
            if c.finished() is not None and not c.judged:
                c.judged = True
                c.kill_leftovers()
                self._schedule_restart(c)
            elif c.judged and "waiting" in c.state:
                self._restart_due(c)

    def _main_phase(self) -> None:
        deadline = self.spec.get("activeDeadlineSeconds")
        while True:
            if self._deleting():
                self._finish_deletion()
                return
            if deadline is not None and _rfc3339_age(self.start_time) > float(deadline):
                self.reason, self.message = (
                    "DeadlineExceeded",
                    "Pod was active on the node longer than the specified deadline",
                )
                self._event("DeadlineExceeded", self.message, "Warning")
                self._stop_all(self._grace())
                self.terminal, self.phase = True, "Failed"
                self._terminal_phase()
                return
            self._refresh_and_sidecars()
            regular = [c for c in self.containers.values() if c.kind == "regular"]
            for c in regular:
                if c.process is None:
                    if "waiting" in c.state and c.state["waiting"]["reason"] == "CreateContainerConfigError":
                        self._start_container(c)
                    continue
                if c.judged and not c.final:
                    self._restart_due(c)
                    continue
                code = c.finished()
                if code is not None and not c.judged:
                    c.judged = True
                    c.kill_leftovers()
                    if self._restarts(c, code):
                        self._schedule_restart(c)
                    else:
                        c.final = True
            if regular and all(c.final for c in regular):
                failed = any(c.exit_code != 0 for c in regular)
                self.terminal, self.phase = True, "Failed" if failed else "Succeeded"
                self._stop_sidecars(self._grace())
                self._terminal_phase()
                return
            self.report()
            self._wait(0.5)

    def _stop_sidecars(self, grace: float) -> None:
        for c in reversed([c for c in self.containers.values() if c.kind == "sidecar"]):
            c.stop(grace)
            c.finished()

    def _stop_all(self, grace: float) -> None:
        """Stop every running container: the regular ones together, then the sidecars in reverse order."""
        regular = [c for c in self.containers.values() if c.kind in ("regular", "init") and c.running()]
        all_at_once([functools.partial(c.stop, grace) for c in regular])
        for c in regular:
            c.finished()
        self._stop_sidecars(grace)

    def _terminal_phase(self) -> None:
        """The pod ended on its own: report it, free its sandbox, and wait for its deletion."""
        for c in self.containers.values():
            c.stop_probes()
            c.ready = False
        self.report(force=True)
        self._teardown_sandbox()
        while not self._deleting():
            self._wait(5.0)
        self._finish_deletion()

    def _finish_deletion(self) -> None:
        """The pod is being deleted: stop what runs within its grace period, report, then delete it for good."""
        if self.gone.is_set():
            self._stop_all(0)
            return
        if any(c.running() for c in self.containers.values()):
            grace = self._grace()
            self._event("Killing", f"Stopping containers (grace period {grace:.0f} s)")
            self._stop_all(grace)
            if not self.terminal:
                regular = [c for c in self.containers.values() if c.kind == "regular"]
                ok = bool(regular) and all(c.exit_code == 0 for c in regular)
                self.terminal, self.phase = True, "Succeeded" if ok else "Failed"
            self.report(force=True)
        try:
            self.node.kube.request(
                "DELETE",
                f"/api/v1/namespaces/{self.ns}/pods/{self.name}",
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
            )
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("pod %s/%s: final delete: %s", self.ns, self.name, e)


def describe(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
