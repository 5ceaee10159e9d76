"""Local equals cluster: each local rank sees what the rendered job gives that rank on the cluster.

The expected environment is derived here from the rendered job and from the rules of the code that runs on the
cluster, never from the launcher:

- what the Kubeflow training operator (v1.9, ``pkg/controller.v1/pytorch/envvar.go``, ``elastic.go``,
  ``master.go``) adds to a PyTorchJob replica's container, or what the Trainer's torch plugin adds to a TrainJob
  node's (``pkg/runtime/framework/plugins/torch/torch.go``), or what a JobSet's pod template holds plus its
  completion index (Kubernetes' Job controller) and the rank the contract derives from them (the role's offset plus
  the index, ``pytorch_contract.k8s_names.NODE_RANK_OFFSET_ENV``);
- what torchrun's agent then gives each rank it starts from those ``PET_*`` variables
  (``torch/distributed/elastic/agent/server/local_elastic_agent.py``): a static rendezvous at
  ``PET_MASTER_ADDR:PET_MASTER_PORT`` without ``PET_RDZV_ENDPOINT``, global rank = node rank x nproc + local rank.

Addresses and ports are the one thing a single machine cannot reproduce: a service name of the job is
``127.0.0.1`` locally, and a port the job fixes is a free port locally, the same one wherever the cluster has the same
one (a :class:`Port` binds to one local value). The elastic ``MASTER_PORT`` is a free port on the cluster too.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Union

import pytest
from flytekit import Resources, task
from flytekit.tools.translator import get_serializable
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.targets.jobset.writer import to_jobset
from backend_plugin.targets.trainjob.writer import to_trainjob
from backend_plugin.template import read_template
from flytekitplugins_pytorch import Master, PyTorch, Worker
from pytorch_contract.k8s_names import COMPLETION_INDEX_ENV, NODE_RANK_OFFSET_ENV
from pytorch_contract.quantity import parse_quantity
from pytorch_core._plan import indexed_pod_env
from tests.helpers.jobs import build_pytorchjob
from tests.helpers.serialization import SETTINGS
from tests.sdk import env_tasks

LOOPBACK = "127.0.0.1"
META = ExecutionMetadata(
    namespace="ns",
    job_name="a1b2c3-n0-0",
    labels={},
    annotations={},
    environment={},
    input_path="s3://bucket/inputs.pb",
    output_prefix="s3://bucket/out",
    raw_output_prefix="s3://bucket/raw",
    checkpoint_prefix="s3://bucket/ckpt",
    prev_checkpoint_prefix="",
    project="p",
    domain="d",
    execution_name="a1b2c3",
    node_id="n0",
    retry_attempt=0,
)


@dataclass(frozen=True)
class Addr:
    """A service address of the job (``127.0.0.1`` locally)."""

    cluster: str


@dataclass(frozen=True)
class Port:
    """A port: the job's fixed port (``cluster``), or any port (``None``); locally one free port per ``name``."""

    name: str
    cluster: Union[int, None]


@dataclass(frozen=True)
class Endpoint:
    """``host:port`` of the job (``127.0.0.1:<the port bound to port.name>`` locally)."""

    host: Addr
    port: Port


Expected = Union[str, Addr, Port, Endpoint]


def template_of(t: Any) -> dict[str, Any]:
    """The task's TaskTemplate as a backend receives it (flytekit's real serializer)."""
    entity = get_serializable(OrderedDict(), SETTINGS, t)
    return json_format.MessageToDict(entity.template.to_flyte_idl())


# -------------------------------------------------------------------------------------------------------------------
# The cluster side: rendered job -> each pod's env -> each rank's env.


def _worker_port(job: dict, rtype: str) -> int:
    for container in job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"]:
        if container["name"] == "pytorch":
            for port in container.get("ports") or []:
                if port.get("name") == "pytorchjob-port":
                    return int(port["containerPort"])
    return 23456  # the operator's defaulting webhook adds this port when the container lists none


def pytorchjob_pod_env(job: dict, rtype: str, index: int) -> dict[str, Expected]:
    """What the training operator v1.9 adds to replica ``rtype``-``index`` (``envvar.go``'s ``setPodEnv``)."""
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    name = job["metadata"]["name"]
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    nproc_text = spec.get("nprocPerNode", "auto")  # the operator's default when unset
    env: dict[str, Expected] = {"PYTHONUNBUFFERED": "1"}
    if "Master" in replicas:
        rank = index + (1 if rtype == "Worker" else 0)
        master = Addr(f"{name}-master-0")
        port = Port("master", _worker_port(job, "Master"))
        env.update(
            {
                "MASTER_PORT": port,
                "PET_MASTER_PORT": port,
                "MASTER_ADDR": master,
                "PET_MASTER_ADDR": master,
                "WORLD_SIZE": str(total * (int(nproc_text) if nproc_text.isdigit() else 1)),
                "RANK": str(rank),
                "PET_NODE_RANK": str(rank),
            }
        )
    env["PET_NPROC_PER_NODE"] = nproc_text  # every job, from spec.nprocPerNode
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        env["PET_RDZV_ENDPOINT"] = Endpoint(Addr(f"{name}-worker-0"), Port("rdzv", _worker_port(job, "Worker")))
        env["PET_RDZV_BACKEND"] = elastic.get("rdzvBackend", "c10d")
        if "minReplicas" in elastic or "maxReplicas" in elastic:
            env["PET_NNODES"] = f"{elastic['minReplicas']}:{elastic['maxReplicas']}"
        else:
            env["PET_NNODES"] = str(replicas["Worker"]["replicas"])
        if "maxRestarts" in elastic:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if "nProcPerNode" in elastic:
            env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
    else:
        env["PET_NNODES"] = str(total)
    return env


def pytorchjob_pods(job: dict) -> list[dict[str, Expected]]:
    """Every pod's env, master first."""
    replicas = job["spec"]["pytorchReplicaSpecs"]
    pods = []
    for rtype in ("Master", "Worker"):
        for index in range(int(replicas.get(rtype, {}).get("replicas", 0))):
            pods.append(pytorchjob_pod_env(job, rtype, index))
    return pods


def trainjob_pods(job: dict) -> list[dict[str, Expected]]:
    """Every node's env as the Trainer's torch plugin sets it (docs: trainer-v2 facts)."""
    name = job["metadata"]["name"]
    trainer = job["spec"]["trainer"]
    nodes = int(trainer["numNodes"])
    master, port = Addr(f"{name}-node-0-0.{name}"), Port("master", 29500)
    return [
        {
            "PET_NNODES": str(nodes),
            "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": port,
        }
        for index in range(nodes)
    ]


_JOBSET_WRITTEN = ("PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                   "PET_NNODES", "PET_NPROC_PER_NODE")  # fmt: skip


def _jobset_pod_templates(job: dict) -> list[tuple[dict[str, str], int]]:
    """(the training container's literal variables, pods) of each replicated job, in order."""
    out = []
    for rjob in job["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]
        (container,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
        out.append((env, int(spec["completions"])))
    return out


def _as_expected(env: dict[str, str], name: str) -> dict[str, Expected]:
    master = Addr(f"{name}-master-0-0.{name}")
    port = Port("master", int(env["MASTER_PORT"]))
    out: dict[str, Expected] = {k: env[k] for k in _JOBSET_WRITTEN if k in env}
    for key in ("MASTER_ADDR", "PET_MASTER_ADDR"):
        assert env[key] == master.cluster, env[key]
        out[key] = master
    out["MASTER_PORT"] = out["PET_MASTER_PORT"] = port
    return out


def jobset_pods(job: dict) -> list[dict[str, Expected]]:
    """Every pod's env, master first: its pod template's variables, and the rank the contract gives the pod from its
    role's offset and the completion index Kubernetes sets (`RANK` = `PET_NODE_RANK` = offset + index)."""
    pods = []
    for env, count in _jobset_pod_templates(job):
        for index in range(count):
            rank = str(int(env[NODE_RANK_OFFSET_ENV]) + index)
            pods.append({**_as_expected(env, job["metadata"]["name"]), "RANK": rank, "PET_NODE_RANK": rank})
    return pods


def torchrun_ranks(pods: list[dict[str, Expected]]) -> list[dict[str, Expected]]:
    """What torchrun's agent in each pod gives each of its ranks; in global rank order.

    Static rendezvous (no ``PET_RDZV_ENDPOINT``): node rank = ``PET_NODE_RANK``, master = ``PET_MASTER_*``.
    c10d rendezvous: every pod joins (the cases fix the node count), the rendezvous numbers the nodes (here in pod
    order: any order gives the same set of rank views), and the master is group rank 0's pod on a free port.
    """
    ranks: dict[int, dict[str, Expected]] = {}
    for index, pod in enumerate(pods):
        nproc = int(str(pod["PET_NPROC_PER_NODE"]))
        elastic = "PET_RDZV_ENDPOINT" in pod
        if elastic:
            nnodes, node = len(pods), index
            master_addr: Expected = Addr("group-rank-0 pod")
            master_port: Expected = Port("elastic-master", None)
        else:
            nnodes, node = int(str(pod["PET_NNODES"])), int(str(pod["PET_NODE_RANK"]))
            master_addr, master_port = pod["PET_MASTER_ADDR"], pod["PET_MASTER_PORT"]
        world = nnodes * nproc
        for local in range(nproc):
            rank = node * nproc + local
            ranks[rank] = {
                **{k: v for k, v in pod.items() if k.startswith("PET_")},  # inherited from the pod
                "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(nproc),
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "GROUP_RANK": str(node),
                "GROUP_WORLD_SIZE": str(nnodes),
                "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(world),
                "ROLE_NAME": "default",
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": master_port,
                "TORCHELASTIC_MAX_RESTARTS": str(pod.get("PET_MAX_RESTARTS", "0")),
            }
    return [ranks[r] for r in sorted(ranks)]


# -------------------------------------------------------------------------------------------------------------------
# The comparison.


def mismatches(expected: list[dict[str, Expected]], local: list[dict[str, str]]) -> list[str]:
    """Every difference between the cluster's rank views and the local ones ([] = the same)."""
    problems: list[str] = []
    if len(expected) != len(local):
        return [f"{len(local)} local ranks, {len(expected)} on the cluster"]
    ports: dict[str, str] = {}

    def port_ok(port: Port, value: str) -> bool:
        if not value.isdigit() or not 0 < int(value) < 65536:
            return False
        return ports.setdefault(port.name, value) == value

    for rank, (want, got) in enumerate(zip(expected, local, strict=True)):
        for name in sorted(set(want) | set(got)):
            if name not in got or name not in want:
                problems.append(f"rank {rank}: {name} is {got.get(name, 'unset')!r} locally, {want.get(name)!r} there")
                continue
            w, g = want[name], got[name]
            if isinstance(w, Addr):
                ok = g == LOOPBACK
            elif isinstance(w, Port):
                ok = port_ok(w, g)
            elif isinstance(w, Endpoint):
                host, _, port = g.rpartition(":")
                ok = host == LOOPBACK and port_ok(w.port, port)
            else:
                ok = g == w
            if not ok:
                problems.append(f"rank {rank}: {name}={g!r} locally, {w!r} on the cluster")
    return problems


def test_the_comparison_finds_a_wrong_local_rank() -> None:
    port = Port("m", 1)
    want: list[dict[str, Expected]] = [{"LOCAL_RANK": "1", "MASTER_PORT": port, "PET_MASTER_PORT": port}]
    assert mismatches(want, [{"LOCAL_RANK": "1", "MASTER_PORT": "5", "PET_MASTER_PORT": "5"}]) == []
    assert mismatches(want, [{"LOCAL_RANK": "3", "MASTER_PORT": "5", "PET_MASTER_PORT": "5"}]) != []
    assert mismatches(want, [{"LOCAL_RANK": "1", "MASTER_PORT": "5", "PET_MASTER_PORT": "6"}]) != []
    assert mismatches(want, [{"LOCAL_RANK": "1", "MASTER_PORT": "5"}]) != []


# -------------------------------------------------------------------------------------------------------------------
# Golden env tests: one per target and config form.

FORMS = {
    "flat-keywords": env_tasks.flat,
    "PyTorch": env_tasks.pytorch_form,
    "Elastic": env_tasks.elastic_form,
    "one-rank-per-pod": env_tasks.one_rank_per_pod,
}


@pytest.fixture(scope="module")
def local_views() -> dict[str, list[dict[str, str]]]:
    """Each form run locally once (real ranks)."""
    return {form: t() for form, t in FORMS.items()}


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(FORMS))
def test_local_ranks_see_what_a_pytorchjob_gives_them(form: str, local_views) -> None:
    job = build_pytorchjob(template_of(FORMS[form]), META)
    expected = torchrun_ranks(pytorchjob_pods(job))
    assert mismatches(expected, local_views[form]) == []


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(set(FORMS) - {"Elastic"}))
def test_local_ranks_see_what_a_trainjob_gives_them(form: str, local_views) -> None:
    job = to_trainjob(read_template(template_of(FORMS[form])), META, None)
    expected = torchrun_ranks(trainjob_pods(job))
    assert mismatches(expected, local_views[form]) == []


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(set(FORMS) - {"Elastic"}))
def test_local_ranks_see_what_a_jobset_gives_them(form: str, local_views) -> None:
    job = to_jobset(read_template(template_of(FORMS[form])), META, None)
    expected = torchrun_ranks(jobset_pods(job))
    assert mismatches(expected, local_views[form]) == []


@pytest.mark.parametrize("form", sorted(set(FORMS) - {"Elastic"}))
def test_a_jobset_pod_sees_what_the_operator_gives_a_pytorchjob_replica(form: str) -> None:
    """The pod side, through the launcher's own derivation (`_plan.indexed_pod_env`): every JobSet pod has exactly the
    variables the training operator gives the PyTorchJob replica of the same rank (addresses aside: each kind names
    its master its own way)."""
    template = template_of(FORMS[form])
    pytorchjob = pytorchjob_pods(build_pytorchjob(copy.deepcopy(template), META))
    job = to_jobset(read_template(template), META, None)
    pods = []
    for env, count in _jobset_pod_templates(job):
        for index in range(count):
            derived = indexed_pod_env({**env, COMPLETION_INDEX_ENV: str(index)})
            pods.append({**_as_expected(env, job["metadata"]["name"]), **derived})
    assert len(pods) == len(pytorchjob)
    for mine, theirs in zip(pods, pytorchjob, strict=True):
        assert set(mine) == set(theirs)
        for key, value in theirs.items():
            assert type(mine[key]) is type(value), key
            if not isinstance(value, (Addr, Port)):
                assert mine[key] == value, (key, mine[key], value)
            elif isinstance(value, Port):
                assert mine[key] == value, key  # the operator's port, 23456, on both


def test_an_elastic_task_is_refused_by_the_trainjob_target() -> None:
    """So there is no TrainJob env to compare for ``Elastic(...)``: the writer refuses it and says why."""
    with pytest.raises(TemplateError, match="elastic"):
        to_trainjob(read_template(template_of(env_tasks.elastic_form)), META, None)


# -------------------------------------------------------------------------------------------------------------------
# Property: every rendering of a task gives every rank the same world size, rank and resources.


def _resources(requirements: dict) -> dict[str, dict[str, Decimal]]:
    return {
        kind: {name: parse_quantity(str(value)) for name, value in (requirements.get(kind) or {}).items()}
        for kind in ("requests", "limits")
    }


def pytorchjob_rank_table(job: dict) -> list[tuple[str, str, dict]]:
    """(rank, world size, the rank's pod resources) per global rank of a PyTorchJob."""
    replicas = job["spec"]["pytorchReplicaSpecs"]
    resources = []
    for rtype in ("Master", "Worker"):
        spec = replicas.get(rtype)
        if spec is None:
            continue
        (container,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        resources += [_resources(container.get("resources") or {})] * int(spec.get("replicas", 1))
    ranks = torchrun_ranks(pytorchjob_pods(job))
    nproc = len(ranks) // len(resources)
    return [(r["RANK"], r["WORLD_SIZE"], resources[i // nproc]) for i, r in enumerate(ranks)]  # type: ignore[misc]


def trainjob_rank_table(job: dict) -> list[tuple[str, str, dict]]:
    """(rank, world size, the rank's node resources) per global rank of a TrainJob."""
    per_node = _resources(job["spec"]["trainer"].get("resourcesPerNode") or {})
    return [(r["RANK"], r["WORLD_SIZE"], per_node) for r in torchrun_ranks(trainjob_pods(job))]  # type: ignore[misc]


def jobset_rank_table(job: dict) -> list[tuple[str, str, dict]]:
    """(rank, world size, the rank's pod resources) per global rank of a JobSet."""
    resources = []
    for rjob in job["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]
        (container,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        resources += [_resources(container.get("resources") or {})] * int(spec["completions"])
    ranks = torchrun_ranks(jobset_pods(job))
    nproc = len(ranks) // len(resources)
    return [(r["RANK"], r["WORLD_SIZE"], resources[i // nproc]) for i, r in enumerate(ranks)]  # type: ignore[misc]


#: Requests below every limit (Kubernetes requires limits >= requests); a GPU only as a limit (requests must equal it).
REQUESTS = {"cpu": st.sampled_from(["250m", "1"]), "mem": st.sampled_from(["512Mi", "1Gi"])}
LIMITS = {"cpu": st.sampled_from(["2", "3500m"]), "mem": st.sampled_from(["4Gi"]), "gpu": st.sampled_from(["1", "2"])}


@st.composite
def resources(draw: st.DrawFn, choices: dict) -> Union[Resources, None]:
    picked = draw(st.lists(st.sampled_from(sorted(choices)), unique=True, max_size=len(choices)))
    if not picked:
        return None
    return Resources(**{name: draw(choices[name]) for name in picked})


# The generated mixes include more processes than GPUs, which the decorator warns about; the property is about what
# every rank gets, whatever the mix.
@pytest.mark.filterwarnings("ignore::flytekitplugins_pytorch.ProcessesGpusWarning")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workers=st.integers(min_value=0, max_value=4),
    nproc=st.integers(min_value=1, max_value=4),
    requests=resources(REQUESTS),
    limits=resources(LIMITS),
)
def test_every_kind_gives_every_rank_the_same_world_rank_and_resources(workers, nproc, requests, limits) -> None:
    config = PyTorch(
        master=Master(requests=requests, limits=limits),
        worker=Worker(replicas=workers, requests=requests, limits=limits),
        nproc_per_node=nproc,
    )

    @task(task_config=config)
    def shaped() -> None:
        return None

    template = template_of(shaped)
    pytorchjob = pytorchjob_rank_table(build_pytorchjob(copy.deepcopy(template), META))
    trainjob = trainjob_rank_table(to_trainjob(read_template(template), META, None))
    jobset = jobset_rank_table(to_jobset(read_template(template), META, None))
    assert len(pytorchjob) == (1 + workers) * nproc
    assert json.dumps(pytorchjob, default=str) == json.dumps(trainjob, default=str)
    assert json.dumps(pytorchjob, default=str) == json.dumps(jobset, default=str)
