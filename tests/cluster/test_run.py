"""A task runs on every kind, on the real controllers: the connector creates the job, training-operator (PyTorchJob),
Trainer v2 and its JobSet (TrainJob), or the JobSet controller (JobSet) create the pods, the scheduler places them,
the node agent runs them, and the outputs are read back from the blob store.

Ported from the players (`tests/e2e/test_e2e.py`): each case checks at least what the player's did, read from what
the real controllers write (pod statuses, the job's conditions and status, events), and where reality differs from
what a player did, the check follows reality (docs/testing.md lists every difference).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import (
    CPU_NODES,
    GPU_NODES,
    GPU_TAINT_KEYS,
    TASK_NS,
    TERMINAL,
    THROUGH_PROPELLER,
    Execution,
    Propeller,
    RealCluster,
    blob_keys,
    execute,
    gpu_request,
    gpu_tolerations,
    job_collection,
    kind_params,
    read_outputs,
)

JOB_TIMEOUT_S = 300.0
TRAINJOB_PET_ENV = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}


def env_of(pod: dict, container: str = "") -> dict[str, Any]:
    """A container's env as its pod spec holds it: a value, or the `valueFrom` source."""
    c = next(c for c in pod["spec"]["containers"] if not container or c["name"] == container)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


def terminated(pod: dict) -> dict:
    """The main container's terminated state ({} while it runs or when the pod was deleted before it ended)."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (statuses[0].get("state") or {}).get("terminated") or {} if statuses else {}


def by_replica(run: Execution) -> dict[str, dict]:
    """The job's pods seen, by the kind's replica name: `master-0`, `worker-1` (PyTorchJob: the operator's labels),
    `node-2` (TrainJob: its completion index), `master-0`, `worker-0-1` (JobSet: replicated job, Job index,
    completion index)."""
    out = {}
    for pod in run.seen_pods.values():
        labels = pod["metadata"]["labels"]
        if run.kind == "pytorchjob":
            key = f"{labels['training.kubeflow.org/replica-type']}-{labels['training.kubeflow.org/replica-index']}"
        elif run.kind == "trainjob":
            key = f"node-{labels['batch.kubernetes.io/job-completion-index']}"
        else:
            rjob, job_index = labels["jobset.sigs.k8s.io/replicatedjob-name"], labels["jobset.sigs.k8s.io/job-index"]
            index = labels["batch.kubernetes.io/job-completion-index"]
            key = f"{rjob}-{job_index}" if rjob == "master" else f"{rjob}-{job_index}-{index}"
        out[key] = pod
    return out


def assert_ended_well(run: Execution, timeout_s: float = 60.0) -> None:
    """Every replica either exited 0, or was deleted by its controller once the job had succeeded (cleanPodPolicy
    Running, a JobSet's finished Jobs: a replica still shutting down): none failed. A pod last seen running is
    followed until it did one or the other."""
    from devcluster.kube import wait_for

    def outcome(name: str) -> dict | None:
        pod = run.real.kube.get_or_none(f"/api/v1/namespaces/{TASK_NS}/pods/{name}")
        if pod is None:
            return {"deleted": True}
        code = terminated(pod).get("exitCode")
        return None if code is None else {"exitCode": code}

    for replica, pod in by_replica(run).items():
        code = terminated(pod).get("exitCode")
        if code is None:
            ended = wait_for(
                f"{replica} ended or deleted", lambda p=pod: outcome(p["metadata"]["name"]), timeout_s, 1.0
            )
            code = ended.get("exitCode", 0)
        assert code == 0, (replica, pod["status"], run.logs())


def _kubeflow_ranks_succeeded(run: Execution) -> None:
    """A PyTorchJob succeeds when its master does; cleanPodPolicy Running then deletes a worker still shutting down.
    The operator's variables are in each pod's spec: worker-1 is rank 2 of 3, node 2 of 3."""
    pods = by_replica(run)
    assert sorted(pods) == ["master-0", "worker-0", "worker-1"]
    assert terminated(pods["master-0"]).get("exitCode") == 0, run.logs()
    assert_ended_well(run)
    assert run.answers[-1].message.endswith("successfully completed."), run.answers[-1].message
    env = env_of(pods["worker-1"], "pytorch")
    assert (env["RANK"], env["WORLD_SIZE"], env["PET_NODE_RANK"], env["PET_NNODES"]) == ("2", "3", "2", "3")
    # the real operator's rendezvous: the master's Service name and the operator's default port
    master = f"{run.job.job_name}-master-0"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (master, "23456")
    assert run.real.kube.get_or_none(f"/api/v1/namespaces/{TASK_NS}/services/{master}") is not None


def _trainer_nodes_succeeded(run: Execution) -> None:
    """Every node of a TrainJob exits 0, named as its JobSet names it, with only the torch runtime's `PET_*`
    variables (the node rank a downward-API reference to the completion index)."""
    pods = by_replica(run)
    assert sorted(pods) == ["node-0", "node-1", "node-2"]
    assert all(terminated(p).get("exitCode") == 0 for p in pods.values()), run.logs()
    for i, pod in enumerate(pods[f"node-{i}"] for i in range(3)):
        assert pod["metadata"]["name"].startswith(f"{run.job.job_name}-node-0-{i}-")
        env = env_of(pod)
        assert {k for k in env if k.startswith("PET_")} == TRAINJOB_PET_ENV
        assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"} & set(env)
        path = env["PET_NODE_RANK"]["fieldRef"]["fieldPath"]
        assert path == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    job = run.job_object()
    assert job is not None and job["spec"]["trainer"]["numNodes"] == 3 and job["spec"]["trainer"]["numProcPerNode"] == 1


def _jobset_pods_succeeded(run: Execution) -> None:
    """A JobSet succeeds when its master's Job does (its success policy), then deletes the Jobs still active: a worker
    still shutting down is deleted, never failed. Each pod had the operator's variables from its pod template and its
    completion index from the Job controller, no RANK."""
    pods = by_replica(run)
    assert sorted(pods) == ["master-0", "worker-0-0", "worker-0-1"]
    job = run.job_object()
    assert job is not None and job["status"].get("restarts", 0) == 0
    assert terminated(pods["master-0"]).get("exitCode") == 0, run.logs()
    assert_ended_well(run)
    assert run.answers[-1].message == "jobset completed successfully", run.answers[-1].message
    worker = pods["worker-0-1"]
    env = env_of(worker, "pytorch")
    assert "RANK" not in env and "PET_NODE_RANK" not in env
    assert env["FLYTE_PYTORCH_NODE_RANK_OFFSET"] == "1"
    assert (
        env["JOB_COMPLETION_INDEX"]["fieldRef"]["fieldPath"]
        == "metadata.labels['batch.kubernetes.io/job-completion-index']"
    )
    assert worker["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
    master = f"{run.job.job_name}-master-0-0.{run.job.job_name}"  # the master pod's hostname in the JobSet's subdomain
    assert (env["WORLD_SIZE"], env["PET_NNODES"], env["MASTER_ADDR"]) == ("3", "3", master)
    assert worker["metadata"]["name"].startswith(f"{run.job.job_name}-worker-0-1-")


SUCCEEDED_WITH_THREE_RANKS: dict[str, Callable[[Execution], None]] = {
    "pytorchjob": _kubeflow_ranks_succeeded,
    "trainjob": _trainer_nodes_succeeded,
    "jobset": _jobset_pods_succeeded,
}


def assert_gpu_placement(run: Execution) -> None:
    """A GPU task's pods request the GPU, tolerate the GPU pools' taints, and the scheduler put each on a GPU node."""
    for name, pod in by_replica(run).items():
        assert gpu_request(pod) == "1", (name, pod["spec"]["containers"])
        assert {t["key"] for t in gpu_tolerations(pod)} == {"nvidia.com/gpu", "flyte/gpu"}, name
        assert pod["spec"]["nodeName"] in GPU_NODES, (name, pod["spec"]["nodeName"])


def assert_cpu_only(run: Execution) -> None:
    """A CPU-only task's pods carry no GPU toleration (in the job the connector wrote, nor in the pods its controller
    made) and request no GPU; the scheduler put each on a CPU node (the GPU nodes' taints keep it off them)."""
    job = run.job_object()
    assert job is not None and not [t for t in _every(job, "tolerations") if t.get("key") in GPU_TAINT_KEYS], job[
        "spec"
    ]
    for name, pod in by_replica(run).items():
        assert not gpu_tolerations(pod) and gpu_request(pod) == "0", (name, pod["spec"])
        assert pod["spec"]["nodeName"] in CPU_NODES, (name, pod["spec"]["nodeName"])


def _every(obj: Any, key: str) -> list[Any]:
    """Every item of every list held under `key` anywhere in `obj` (a job's pod templates, wherever its kind keeps
    them)."""
    found: list[Any] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, list):
                found += v
            found += _every(v, key)
    elif isinstance(obj, list):
        for v in obj:
            found += _every(v, key)
    return found


@pytest.mark.parametrize("kind", kind_params(ci=(), elsewhere=THROUGH_PROPELLER.format("the README example")),
                         indirect=True)  # fmt: skip
def test_seed_decorator_allreduce_over_three_ranks(real: RealCluster, propeller: Propeller, kind: str,
                                                    templates: dict) -> None:  # fmt: skip
    from tests.cluster.workflows import seed_allreduce

    iface = seed_allreduce.python_interface
    run = execute(real, propeller, kind, templates["seed_allreduce"], {"x": 10}, iface.inputs, "seed")
    try:
        run.poll(JOB_TIMEOUT_S)
        assert run.phases()[-1] == "SUCCEEDED", f"{run.answers[-1].message}\n{run.logs()}"
        SUCCEEDED_WITH_THREE_RANKS[kind](run)
        assert_gpu_placement(run)  # seed_allreduce asks 1 GPU per replica
        # rank 0 wrote the outputs: world 3, sum of (10 + rank) over ranks 0..2
        assert read_outputs(real.info, run.job.prefix, iface.outputs) == {"o0": [0, 3, 33]}
        keys = blob_keys(real.info, run.job.prefix)
        assert keys.count("outputs.pb") == 1 and "inputs.pb" in keys and not [k for k in keys if k.startswith("error")]
        run.clock("seed allreduce, 3 ranks")
    finally:
        run.finish()


MNIST_SLICE = {"epochs": 1, "batch_size": 64, "test_batch_size": 500, "train_limit": 1536, "test_limit": 500}
"""The player's slice: 24 steps of 64 images over 3 ranks, 500 test images (chance is 10%)."""


def local_mnist_accuracies(inputs: dict[str, Any], data_dir: str) -> list[float]:
    """The local run's accuracies on the same inputs: `train_mnist` called in a fresh interpreter, as a user's
    `pyflyte run` runs it (the launcher starts 3 ranks on this machine), under a process-count guard and a timeout."""
    import json
    import os
    import sys

    from tests.cluster.harness import REPO_ROOT
    from tests.sdk.guarded_run import run_guarded

    code = (
        "import json, sys\n"
        "from examples.mnist.workflow import train_mnist\n"
        "result = train_mnist(**json.loads(sys.argv[1]))\n"
        "print('ACCURACIES=' + json.dumps(result.accuracies))\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "MNIST_DATA_DIR": data_dir,
           "PYTHONPATH": str(REPO_ROOT), "LANG": "C.UTF-8"}  # fmt: skip
    done = run_guarded([sys.executable, "-c", code, json.dumps(inputs)], max_procs=16, timeout_s=240,
                       cwd=str(REPO_ROOT), env=env)  # fmt: skip
    assert done.returncode == 0 and not done.leftover, f"{done.killed_for} {done.leftover}\n{done.output[-3000:]}"
    line = next(x for x in done.output.splitlines() if x.startswith("ACCURACIES="))
    return [float(a) for a in json.loads(line.removeprefix("ACCURACIES="))]


@pytest.mark.parametrize("kind", kind_params(ci=(), elsewhere=THROUGH_PROPELLER.format("the MNIST workflow")),
                         indirect=True)  # fmt: skip
def test_mnist_example_reaches_the_local_runs_accuracy(real: RealCluster, propeller: Propeller, kind: str,
                                                        templates: dict, tmp_path: Path) -> None:  # fmt: skip
    """The seed MNIST task on a slice of real data: 3 ranks, each in its own pod, reach at least the accuracy the same
    task reaches locally (3 ranks on this machine) with the same inputs; Flyte's outputs (accuracies, weights file,
    summary) are read back."""
    from examples.mnist.workflow import train_mnist
    from tests.mnist_data import require_mnist

    iface = train_mnist.python_interface
    inputs = {name: MNIST_SLICE.get(name, default) for name, (_, default) in iface.inputs_with_defaults.items()}
    data_dir = str(require_mnist())  # fails with how to provide the data when there is none
    local = local_mnist_accuracies(MNIST_SLICE, data_dir)
    run = execute(real, propeller, kind, templates["train_mnist"], inputs, iface.inputs, "mnist",
                  env={"MNIST_DATA_DIR": data_dir})  # fmt: skip
    try:
        run.poll(JOB_TIMEOUT_S)
        assert run.phases()[-1] == "SUCCEEDED", f"{run.answers[-1].message}\n{run.logs()}"
        assert_ended_well(run)
        outputs = read_outputs(real.info, run.job.prefix, iface.outputs, download_to=tmp_path)
        accuracies, weights, summary = outputs["accuracies"], outputs["weights"], outputs["summary"]
        print(f"\n[cluster] mnist on {kind}: accuracies {accuracies}, local run {local}")
        assert len(accuracies) == 1 and accuracies[0] >= local[0], (accuracies, local)
        assert summary.world_size == 3 and summary.backend == "gloo" and summary.test_examples == 500
        import torch

        state = torch.load(weights.path, map_location="cpu", weights_only=True)
        assert state and all(isinstance(v, torch.Tensor) for v in state.values())
        assert blob_keys(real.info, run.job.prefix).count("outputs.pb") == 1
        run.clock("MNIST slice, 3 ranks")
    finally:
        run.finish()


# --- the PyTorchJob kind ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pytorchjob"], indirect=True)
def test_elastic_one_to_two_nodes(real: RealCluster, propeller: Propeller, kind: str, templates: dict) -> None:
    """An elastic task (1 to 2 nodes): the operator gives both worker pods the elastic rendezvous (`PET_RDZV_*`,
    `PET_NNODES=1:2`) and no RANK; torch's agent in each pod forms the group."""
    from tests.cluster.workflows import elastic_allreduce

    iface = elastic_allreduce.python_interface
    run = execute(real, propeller, kind, templates["elastic_allreduce"], {"x": 1}, iface.inputs, "elastic")
    try:
        run.poll(JOB_TIMEOUT_S)
        assert run.phases()[-1] == "SUCCEEDED", f"{run.answers[-1].message}\n{run.logs()}"
        pods = by_replica(run)
        assert sorted(pods) == ["worker-0", "worker-1"]
        env = env_of(pods["worker-1"], "pytorch")
        print(f"\n[cluster] elastic env of worker-1: { {k: v for k, v in env.items() if k.startswith('PET_')} }")
        assert env["PET_NNODES"] == "1:2" and env["PET_RDZV_BACKEND"] == "c10d" and "RANK" not in env
        assert env["PET_RDZV_ENDPOINT"].startswith(f"{run.job.job_name}-worker-0:")
        assert_ended_well(run)
        rank, world, total = read_outputs(real.info, run.job.prefix, iface.outputs)["o0"]
        # both pods joined the rendezvous (max 2 nodes), or only one did (min 1); either way rank 0 answered
        assert rank == 0 and world in (1, 2) and total == sum(1 + r for r in range(world))
        assert blob_keys(real.info, run.job.prefix).count("outputs.pb") == 1
        run.clock("elastic 1->2 nodes")
    finally:
        run.finish()


@pytest.mark.parametrize("kind", ["pytorchjob"], indirect=True)
@pytest.mark.filterwarnings("ignore:Configuring shared memory:UserWarning")
def test_task_from_flytekits_official_kfpytorch_plugin(real: RealCluster, propeller: Propeller, kind: str,
                                                       templates: dict) -> None:  # fmt: skip
    """A task written with flytekit's own `kfpytorch` plugin runs through our backend (its dialect): master and one
    worker, a CPU-only task on the CPU nodes."""
    from tests.cluster.workflows_official import official_allreduce

    iface = official_allreduce.python_interface
    run = execute(real, propeller, kind, templates["official_allreduce"], {"x": 5}, iface.inputs, "official")
    try:
        run.poll(JOB_TIMEOUT_S)
        assert run.phases()[-1] == "SUCCEEDED", f"{run.answers[-1].message}\n{run.logs()}"
        assert sorted(by_replica(run)) == ["master-0", "worker-0"]
        assert_ended_well(run)
        assert_cpu_only(run)
        assert read_outputs(real.info, run.job.prefix, iface.outputs) == {"o0": [2, 11]}
        run.clock("official kfpytorch task")
    finally:
        run.finish()


@pytest.mark.parametrize("kind", kind_params(ci=("pytorchjob",)), indirect=True)
def test_each_mapped_item_is_one_job_reading_its_own_item(real: RealCluster, propeller: Propeller, kind: str,
                                                          templates: dict) -> None:  # fmt: skip
    """`map_task` over a pytorch task: Flyte runs it as an ArrayNode, each item its own task execution of the mapped
    task, with the item's index in the execution's environment (`BATCH_JOB_ARRAY_INDEX_VAR_NAME`,
    `FLYTE_K8S_ARRAY_INDEX`, set by flytepropeller's array node); the connector is called once per item, all at once
    as propeller calls it. Each item's job asks 3 GPUs: the dev cluster's 8 fit two items, so the third waits for the
    scheduler until one ends."""
    (name,) = [n for n in templates if n.startswith("map_seed_allreduce")]
    template = templates[name]
    assert template.type == "pytorch" and template.container.args[0] == "pyflyte-map-execute"
    xs = [10, 20, 30]
    runs = []
    try:
        for index in range(len(xs)):
            env = {"BATCH_JOB_ARRAY_INDEX_VAR_NAME": "FLYTE_K8S_ARRAY_INDEX", "FLYTE_K8S_ARRAY_INDEX": str(index)}
            runs.append(execute(real, propeller, kind, template, {"x": xs}, {"x": list[int]}, f"map{index}", env))
        assert len({r.job.job_name for r in runs}) == len(xs)  # three jobs, one per item
        # every item's pods seen while it runs: the items run at once, and a PyTorchJob's operator deletes the workers
        # still running when its master ends (cleanPodPolicy Running), so an item polled only after another ended
        # may be gone with two of its pods unseen (seen in CI)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        pending = list(runs)
        while pending:
            for run in list(pending):
                run.snapshot()
                if run.get().phase in TERMINAL:
                    pending.remove(run)
            assert time.monotonic() < deadline, [(r.job.job_name, r.answers[-1].message) for r in pending]
            time.sleep(1.0)
        for index, run in enumerate(runs):
            run.poll(JOB_TIMEOUT_S)  # ended already: checks that its phase never went back
            assert run.phases()[-1] == "SUCCEEDED", f"{run.answers[-1].message}\n{run.logs()}"
            assert len(by_replica(run)) == 3
            assert_gpu_placement(run)
            # rank 0 of item `index` saw its own x: [rank, world, sum of (x + rank) over ranks 0..2]
            x = xs[index]
            assert read_outputs(real.info, run.job.prefix, {"o0": list[int]}) == {"o0": [0, 3, 3 * x + 3]}
        runs[-1].clock("map task, 3 items at once")
    finally:
        for run in runs:
            run.finish()


# --- the TrainJob kind -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["trainjob"], indirect=True)
@pytest.mark.parametrize(
    "task, setting",
    [
        ("elastic_allreduce", "Elastic(nnodes="),
        ("per_role", "Worker(requests/limits=...) differs from Master(requests/limits=...)"),
    ],
    ids=["elastic", "per-role"],
)
def test_refused_tasks_name_the_setting_and_the_alternative(
    real: RealCluster, propeller: Propeller, kind: str, templates: dict, task: str, setting: str
) -> None:
    """The contract's rule: a task that can never run as a TrainJob is recorded at CreateTask (no job is created,
    no error for propeller to retry) and reported as a permanent FAILED by the first GetTask, naming the setting and
    the kind that can run it."""
    run = execute(real, propeller, kind, templates[task], {"x": 1}, {"x": int}, f"refused-{task[:8]}")
    try:
        answer = run.get()
        assert answer.name == "FAILED", answer
        assert setting in answer.message and "target: pytorchjob" in answer.message, answer.message
        jobs = real.kube.get(job_collection(kind))["items"]
        assert not [j for j in jobs if j["metadata"]["name"] == run.job.job_name] and run.pods() == []
        run.clock(f"refused at create: {task}")
    finally:
        run.finish()
