"""The cluster tier's Flyte side: Flyte's propeller v1.16.8 on the real control plane (`devcluster.flyte`), and what
a Flyte user does and sees, without flyteadmin (which cannot be built here: docs/cluster.md says why).

- `FlyteStack.package`: `pyflyte package` of a module, as `pyflyte register` serializes it (no fast registration:
  the pods' "image" is this checkout's environment).
- `FlyteStack.launch`: `flyte-create-execution`, the stand-in for admin's CreateExecution, creates the FlyteWorkflow;
  propeller runs it from there, as on any Flyte cluster.
- `Execution`: what the user sees: the workflow's and each node's phase, attempts and error (the FlyteWorkflow's
  status, which admin would copy into its execution record), the task events propeller sent (phase, reason, log
  links: the event stand-in's log), the outputs (from the blob store, as FlyteRemote reads them), abort (deleting the
  FlyteWorkflow, which is what admin's TerminateExecution does).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster import flyte as dcflyte
from devcluster.kube import ApiError, wait_for
from tests.cluster.harness import ClusterInfo, RealCluster
from tests.e2e import harness as e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
FLYTEWORKFLOWS = "/apis/flyte.lyft.com/v1alpha1/namespaces/{ns}/flyteworkflows"
WORKFLOW_PHASES = ("Ready", "Running", "Succeeding", "Succeeded", "Failing", "Failed", "Aborted", "TimingOut",
                   "TimedOut", "HandlingFailureNode")  # fmt: skip
"""flytepropeller v1alpha1.WorkflowPhase, by value."""
NODE_PHASES = ("NotYetStarted", "Queued", "Running", "Failing", "Succeeding", "Succeeded", "Failed", "Skipped",
               "RetryableFailure", "TimingOut", "TimedOut", "DynamicRunning", "Recovered")  # fmt: skip
"""flytepropeller v1alpha1.NodePhase, by value."""
TERMINAL_WORKFLOW = {"Succeeded", "Failed", "Aborted", "TimedOut"}


def readme_example_source() -> str:
    """The README's example, as the page shows it."""
    from tests.test_readme import _block

    return _block("snippet:example")


@dataclass
class Execution:
    """One FlyteWorkflow that `flyte-create-execution` created."""

    stack: FlyteStack
    name: str
    created_at: float
    """time.time() just before the FlyteWorkflow was created (the clock the pods' progress records use)."""

    @property
    def path(self) -> str:
        return FLYTEWORKFLOWS.format(ns=dcflyte.EXECUTION_NAMESPACE) + f"/{self.name}"

    def workflow(self) -> dict | None:
        return self.stack.real.kube.get_or_none(self.path)

    def status(self) -> dict:
        wf = self.workflow()
        return (wf or {}).get("status") or {}

    def phase(self) -> str:
        return WORKFLOW_PHASES[int(self.status().get("phase", 0))]

    def node(self, node_id: str) -> dict:
        return (self.status().get("nodeStatus") or {}).get(node_id) or {}

    def node_phase(self, node_id: str) -> str:
        return NODE_PHASES[int(self.node(node_id).get("phase", 0))]

    def wait(self, timeout_s: float, until: set[str] = TERMINAL_WORKFLOW) -> str:
        """Wait for one of the workflow phases `until` (terminal by default); returns it."""

        def reached() -> str | None:
            phase = self.phase()
            return phase if phase in until else None

        try:
            return str(wait_for(f"execution {self.name} {'/'.join(sorted(until))}", reached, timeout_s, 2.0))
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.describe()}") from None

    def events(self, kind: str = "task") -> list[dict]:
        """The events propeller sent about this execution (`kind`: workflow, node or task), oldest first."""
        return [e for e in self.stack.events(kind) if _execution_of(e, kind) == self.name]

    def task_events(self, node_id: str) -> list[dict]:
        return [e for e in self.events("task") if e.get("parentNodeExecutionId", {}).get("nodeId") == node_id]

    def outputs(self, types: dict[str, type]) -> dict[str, Any]:
        """The workflow's outputs (`status.outputRef`), read from the blob store as FlyteRemote reads them."""
        ref = self.status().get("outputRef") or ""
        assert ref, f"execution {self.name} has no outputRef: {self.describe()}"
        from tests.cluster.harness import read_outputs

        return read_outputs(self.stack.real.info, ref.rsplit("/", 1)[0], types)

    def node_output_prefix(self, node_id: str, attempt: int = 0) -> str:
        """Where propeller puts a node attempt's outputs (metadata-prefix/<project>-<domain>-<name>/<node>/data/<n>):
        the prefix the task writes outputs.pb, error documents and the progress record under."""
        wf_dir = (self.status().get("dataDir") or "").rstrip("/")
        assert wf_dir, self.describe()
        return f"{wf_dir}/{node_id}/data/{attempt}"

    def abort(self) -> None:
        """What admin's TerminateExecution does: delete the FlyteWorkflow (background propagation); propeller's
        finalizer aborts the running nodes first."""
        try:
            self.stack.real.kube.delete(self.path, {"propagationPolicy": "Background"})
        except ApiError as e:
            if e.status != 404:
                raise

    def describe(self) -> str:
        status = self.status()
        nodes = {
            n: {
                "phase": NODE_PHASES[int(s.get("phase", 0))],
                "attempts": s.get("attempts", 0),
                "systemFailures": s.get("systemFailures", 0),
                "message": (s.get("message") or "")[:400],
                "error": s.get("error"),
            }
            for n, s in (status.get("nodeStatus") or {}).items()
        }
        return json.dumps(
            {"phase": self.phase(), "message": status.get("message"), "error": status.get("error"), "nodes": nodes},
            indent=1,
            default=str,
        )


def _execution_of(event: dict, kind: str) -> str:
    if kind == "workflow":
        return str(event.get("executionId", {}).get("name", ""))
    if kind == "node":
        return str(event.get("id", {}).get("executionId", {}).get("name", ""))
    return str(event.get("parentNodeExecutionId", {}).get("executionId", {}).get("name", ""))


@dataclass
class FlyteStack:
    """Propeller on a devcluster, set up one way (`devcluster.flyte.FlyteSetup`)."""

    real: RealCluster
    setup: dcflyte.FlyteSetup
    work: Path
    record: dict = field(default_factory=dict)

    @property
    def info(self) -> ClusterInfo:
        return self.real.info

    def deploy(self) -> None:
        self.record = dcflyte.deploy(self.real.kube, self.setup, self.info.blob_endpoint, self.info.state)

    def package(self, modules: list[str], source_root: Path = REPO_ROOT) -> Path:
        """`pyflyte --pkgs M ... package` (no fast registration; the image name is not used by the node agent)."""
        key = uuid.uuid5(uuid.NAMESPACE_URL, f"{source_root}:{','.join(modules)}").hex[:8]
        tgz = self.work / f"package-{key}.tgz"
        if tgz.exists():
            return tgz
        cmd = [str(e2e.VENV_BIN / "pyflyte")]
        for module in modules:
            cmd += ["--pkgs", module]
        cmd += ["package", "--image", e2e.IMAGE, "--copy", "none", "--output", str(tgz), "--force"]
        subprocess.run(cmd, cwd=source_root, check=True, capture_output=True, text=True, timeout=180)
        return tgz

    def launch(
        self,
        package: Path,
        workflow: str,
        inputs: dict[str, Any],
        types: dict[str, type],
        prefix: str,
        env: dict[str, str] | None = None,
    ) -> Execution:
        """Create an execution of `workflow` from `package`, with `inputs` (launch plan defaults fill the rest)."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        literal_map = e2e.to_literal_map(inputs, types)
        inputs_pb = self.work / f"{name}-inputs.pb"
        inputs_pb.write_bytes(literal_map.to_flyte_idl().SerializeToString())
        # The blob store's variables: propeller's `plugins.k8s.default-env-vars` give them to every pod and job it
        # makes itself (plain tasks, Flyte's PyTorch plugin), but a connector gets only the execution's variables
        # (TaskExecutionMetadata.environment_variables), so path a passes them as a user passes `--envvars`. Not on
        # path b: Flyte's plugin appends both lists unmerged, and the PyTorchJob CRD (env a list-map keyed by name)
        # refuses the repeated names ("Duplicate value"), where a plain pod accepts them.
        blob = dcflyte.blob_env(self.info.blob_endpoint) if self.setup.plugin == "connector" else {}
        envs = {**blob, **(env or {})}
        cmd = [self.record["create_execution"], "--package", str(package), "--workflow", workflow, "--name", name,
               "--inputs", str(inputs_pb), "--raw-output-prefix", f"s3://{dcflyte.BUCKET}/raw/{name}",
               "--kubeconfig", str(self.info.kubeconfig)]  # fmt: skip
        for key, value in sorted(envs.items()):
            cmd += ["--env", f"{key}={value}"]
        created_at = time.time()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"flyte-create-execution failed:\n{out.stdout}\n{out.stderr}"
        return Execution(self, name, created_at)

    def events(self, kind: str) -> list[dict]:
        """Every event of `kind` the event stand-in received, oldest first (its pod's log)."""
        out: list[dict] = []
        for pod in self.real.pods(dcflyte.NAMESPACE, f"app.kubernetes.io/name={dcflyte.EVENTS}"):
            for line in self.real.pod_log(pod).splitlines():
                if not line.startswith("{"):
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("kind") == kind:
                    out.append(record["event"])
        return out

    def propeller_log(self) -> str:
        """The log of propeller's running pods (after `rolled_out`, the one of its current configuration alone)."""
        return "\n".join(dcflyte.propeller_logs(self.real.kube, self.info.state).values())


def unpack(tgz: Path, into: Path) -> Path:
    with tarfile.open(tgz) as archive:
        archive.extractall(into, filter="data")
    return into


def env_with(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k.startswith("MNIST")}, **extra}
