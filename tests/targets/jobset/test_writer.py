"""The JobSet writer: golden JobSets, the PyTorchJob contract's variables in every pod, the failure and success
policies, what a JobSet cannot express, names, and the validator itself.

Every JobSet built here passes `tests.targets.jobset.schema.assert_valid_jobset` (the JobSet v0.12.0 CRD, the typed
models of kubeflow-trainer-api, the webhook's rules and the child Jobs). Regenerate the golden files with
`python -m pytest --update-golden tests/targets/jobset/test_writer.py` and review the diff.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from backend_plugin.admission import admit
from backend_plugin.config import BackendConfig
from backend_plugin.errors import ConfigError, TemplateError
from backend_plugin.targets.jobset.writer import (
    PREEMPTED_MESSAGE,
    STOPPED_MESSAGE,
    TASK_ERROR_EXIT_CODES,
    dropped_defaults,
    jobset_name,
    max_name_length,
    overrides,
    to_jobset,
)
from backend_plugin.template import read_template
from pytorch_contract.preemption import PREEMPTED_EXIT_CODE
from tests import golden as golden_files
from tests.helpers.jobs import GKE, META, SPOT, load
from tests.kube_schema import DNS1035
from tests.targets.jobset.schema import assert_valid_jobset, child_job_errors, typed_model_errors, webhook_errors

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


def _with(name: str, **config: str) -> Callable[[], dict]:
    def make() -> dict:
        t = load(name)
        t.setdefault("config", {}).update(config)
        return t

    return make


# golden name -> (template, backend config)
GOLDEN: dict[str, tuple[Callable[[], dict], Optional[BackendConfig]]] = {
    "seed_gpu": (lambda: load("sdk_seed_gpu"), None),  # the seed decorator: a GPU master and 2 GPU workers
    "cpu_only": (lambda: load("hand_cpu"), None),
    "master_only": (lambda: load("sdk_master_only"), None),
    "per_role": (lambda: load("hand_per_role"), None),  # per-role image and resources, ExitCode workers, backoff 3
    "role_pod_templates": (lambda: load("sdk_role_pod_templates"), None),
    "queue_suspend_priority": (
        _with(
            "hand_cpu",
            **{"pytorch.queue": "team-a", "pytorch.suspend": "true", "pytorch.priority_class": "high-priority"},
        ),  # fmt: skip
        BackendConfig.from_dict({"jobset_managed_by": "kueue.x-k8s.io/multikueue"}),
    ),
    "on_failure": (_with("hand_cpu", **{"pytorch.worker.restart_policy": "OnFailure"}), None),
    "accelerator_mig": (lambda: load("hand_accel_mig"), GKE),
    "secrets_spot": (lambda: load("flytekit_secrets_spot"), SPOT),
}


def build(template: dict, config: Optional[BackendConfig] = None, **meta: Any) -> dict:
    """Write with META (fields overridden by `meta`) and validate the JobSet."""
    m = copy.deepcopy(META)
    for key, value in meta.items():
        setattr(m, key, value)
    job = to_jobset(read_template(template), m, config)
    assert_valid_jobset(job)
    return job


def roles(job: dict) -> dict[str, dict]:
    """Replicated job name -> its Job spec."""
    return {r["name"]: r["template"]["spec"] for r in job["spec"]["replicatedJobs"]}


def env_of(job_spec: dict) -> dict[str, Any]:
    (container,) = [c for c in job_spec["template"]["spec"]["containers"] if c["name"] == "pytorch"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_golden(golden: str):
    make, config = GOLDEN[golden]
    job = build(make(), config)
    path = GOLDEN_DIR / f"{golden}.yaml"
    rendered = yaml.safe_dump(job, sort_keys=False, width=120)
    committed = golden_files.text(path, rendered)
    assert yaml.safe_load(committed) == job
    assert committed == rendered, "key order changed; regenerate with --update-golden and review"
    assert [p.message for p in admit(job) if p.refuses] == []


# ---------------------------------------------------------------------------------------------------------------
# the shape: one Indexed Job per role, and the PyTorchJob contract's variables in every pod


def test_seed_decorator_becomes_a_master_and_an_indexed_job_of_two_workers():
    job = build(load("sdk_seed_gpu"))
    master, worker = roles(job)["master"], roles(job)["worker"]
    for spec, pods in ((master, 1), (worker, 2)):
        assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (
            "Indexed", pods, pods, 0
        )  # fmt: skip
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert [r["replicas"] for r in job["spec"]["replicatedJobs"]] == [1, 1]
    assert job["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert job["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["master"]}
    pod = worker["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]


def test_every_pod_gets_the_operators_variables_and_its_roles_first_rank():
    job = build(load("sdk_seed_gpu"))
    name = job["metadata"]["name"]
    master = f"{name}-master-0-0.{name}"
    port = "23456"
    expected = {"PYTHONUNBUFFERED": "1", "MASTER_ADDR": master, "MASTER_PORT": port, "WORLD_SIZE": "3",
                "PET_MASTER_ADDR": master, "PET_MASTER_PORT": port, "PET_NNODES": "3",
                "PET_NPROC_PER_NODE": "1"}  # fmt: skip
    for role, offset in (("master", "0"), ("worker", "1")):
        env = env_of(roles(job)[role])
        assert {k: env[k] for k in expected} == expected
        assert env["FLYTE_PYTORCH_NODE_RANK_OFFSET"] == offset
        assert "RANK" not in env and "PET_NODE_RANK" not in env  # the pod's own: the launcher derives them


@pytest.mark.parametrize("nproc, world", [("2", "6"), ("auto", "3"), (None, "3")], ids=["two", "auto", "unset"])
def test_world_size_is_the_operators_rule(nproc: Optional[str], world: str):
    t = load("hand_cpu")
    t["config"].pop("pytorch.nproc_per_node", None)
    if nproc is not None:
        t["config"]["pytorch.nproc_per_node"] = nproc
    env = env_of(roles(build(t))["worker"])
    assert (env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == (world, nproc or "auto")


def test_the_tasks_own_value_of_a_contract_variable_is_replaced_and_said():
    t = load("hand_cpu")
    t["container"]["env"] += [{"key": "WORLD_SIZE", "value": "99"}, {"key": "KEEP", "value": "me"}]
    job = build(t)
    env = env_of(roles(job)["worker"])
    assert env["WORLD_SIZE"] == "3" and env["KEEP"] == "me"
    names = [e["name"] for e in roles(job)["worker"]["template"]["spec"]["containers"][0]["env"]]
    assert names.count("WORLD_SIZE") == 1
    said = overrides(read_template(t))
    assert said == [
        "environment WORLD_SIZE is set by the backend on every JobSet pod, as the training operator sets it on a "
        "PyTorchJob replica: the task's value is not used"
    ]
    assert overrides(read_template(load("hand_cpu"))) == []


def test_a_pod_templates_restart_policy_is_replaced_and_said():
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["restartPolicy"] = "OnFailure"
    job = build(t)
    assert {spec["template"]["spec"]["restartPolicy"] for spec in roles(job).values()} == {"Never"}
    assert any("restartPolicy='OnFailure' is replaced by 'Never'" in w for w in overrides(read_template(t)))


def test_queue_priority_suspend_and_managed_by_on_the_jobset():
    make, config = GOLDEN["queue_suspend_priority"]
    job = build(make(), config)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True and job["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert {s["template"]["spec"]["priorityClassName"] for s in roles(job).values()} == {"high-priority"}


def test_deadline_and_ttl_follow_the_pytorchjob_run_policy():
    t = load("hand_cpu")
    t.setdefault("metadata", {})["timeout"] = "600s"
    job = build(t)
    assert {s["activeDeadlineSeconds"] for s in roles(job).values()} == {600}
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    job = build(load("hand_cpu"), BackendConfig.from_dict({"ttl_seconds_after_finished": None}))
    assert "ttlSecondsAfterFinished" not in job["spec"]
    assert all("activeDeadlineSeconds" not in s for s in roles(job).values())


# ---------------------------------------------------------------------------------------------------------------
# the failure policy: what a failure does, by the role's restart policy


def rules(job: dict) -> dict[str, dict]:
    return {r["name"]: r for r in job["spec"]["failurePolicy"]["rules"]}


def test_a_disrupted_pod_restarts_the_jobset_without_spending_the_budget():
    job = build(load("sdk_seed_gpu"))
    first = job["spec"]["failurePolicy"]["rules"][0]
    assert first == {
        "name": "Preempted",
        "action": "RestartJobSetAndIgnoreMaxRestarts",
        "onJobFailureReasons": ["PodFailurePolicy"],
        "onJobFailureMessagePatterns": [PREEMPTED_MESSAGE, STOPPED_MESSAGE],
    }
    for spec in roles(job).values():
        assert spec["podFailurePolicy"]["rules"][:2] == [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "pytorch", "operator": "In", "values": [200]}},
        ]  # fmt: skip
    # the messages the Job controller writes for those rules match the patterns (RE2 and Python agree on them)
    import re

    def preempted(message: str) -> bool:
        return any(re.search(p, message) for p in first["onJobFailureMessagePatterns"])

    assert preempted("Pod ns/x-worker-0-1-abcde has condition DisruptionTarget matching FailJob rule at index 0")
    assert preempted(
        "Container pytorch for pod ns/x-master-0-0-abcde failed with exit code 200 matching FailJob rule at index 1"
    )
    for code in (1, 20, 2, 137, 143):  # the task's own failure, a signal: never read as a preemption
        assert not preempted(
            f"Container pytorch for pod ns/x-worker-0-1-abcde failed with exit code {code} matching FailJob rule at "
            "index 2"
        )
    assert STOPPED_MESSAGE == f"failed with exit code {PREEMPTED_EXIT_CODE} matching FailJob rule"


@pytest.mark.parametrize(
    "master, worker, expected",
    [
        ("Never", "Never", {"NoRestart": ["master", "worker"]}),
        ("Never", "ExitCode", {"TaskError": ["worker"], "NoRestart": ["master"]}),
        ("Never", "OnFailure", {"NoRestart": ["master"]}),
        ("OnFailure", "Always", {}),
    ],
    ids=["never", "exit-code-workers", "on-failure-workers", "all-restart"],
)
def test_the_rules_follow_each_roles_restart_policy(master: str, worker: str, expected: dict):
    job = build(_with("hand_cpu", **{"pytorch.master.restart_policy": master,
                                     "pytorch.worker.restart_policy": worker})())  # fmt: skip
    found = rules(job)
    assert found["DeadlineExceeded"] == {
        "name": "DeadlineExceeded", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]
    }  # fmt: skip
    own = {n: r["targetReplicatedJobs"] for n, r in found.items() if n in ("TaskError", "NoRestart")}
    assert own == expected
    assert all(r["action"] == "FailJobSet" for n, r in found.items() if n in own)
    exit_codes = [r for r in roles(job)["worker"]["podFailurePolicy"]["rules"] if "onExitCodes" in r]
    stopped = {"action": "FailJob", "onExitCodes": {"containerName": "pytorch", "operator": "In", "values": [200]}}
    assert exit_codes[0] == stopped  # every role: a peer's agreed stop is read before any rule of the task's own
    exit_codes = exit_codes[1:]
    if worker == "ExitCode":
        assert exit_codes == [{"action": "FailJob", "onExitCodes": {
            "containerName": "pytorch", "operator": "In", "values": list(range(1, 128))}}]  # fmt: skip
        assert found["TaskError"]["onJobFailureReasons"] == ["PodFailurePolicy"]
    else:
        assert exit_codes == []
    assert TASK_ERROR_EXIT_CODES[0] == 1 and TASK_ERROR_EXIT_CODES[-1] == 127


@pytest.mark.parametrize(
    "keys, config, expected",
    [
        ({}, {}, 0),
        ({"pytorch.worker.restart_policy": "OnFailure"}, {}, 6),
        ({"pytorch.worker.restart_policy": "OnFailure"}, {"jobset_max_restarts": 2}, 2),
        ({"pytorch.worker.restart_policy": "ExitCode"}, {"backoff_limit": 4}, 4),
    ],
    ids=["never-no-budget", "restarting-role-default", "backend-jobset-max", "backend-backoff-limit"],
)
def test_max_restarts_from_the_tasks_restart_settings(keys: dict, config: dict, expected: int):
    job = build(_with("hand_cpu", **keys)(), BackendConfig.from_dict(config))
    assert job["spec"]["failurePolicy"]["maxRestarts"] == expected


def test_the_tasks_backoff_limit_is_the_budget():
    assert build(load("hand_per_role"))["spec"]["failurePolicy"]["maxRestarts"] == 3


# ---------------------------------------------------------------------------------------------------------------
# What a JobSet cannot express: refused by name, with the alternative


REFUSED = [
    pytest.param(lambda: load("sdk_elastic"), "Elastic(nnodes='1:2'", id="elastic"),
    pytest.param(lambda: load("hand_queue_gang"), "RunPolicy(gang_scheduling=True)", id="gang"),
    pytest.param(_with("hand_cpu", **{"pytorch.min_available": "2"}), "RunPolicy(min_available=2)", id="min-available"),
    pytest.param(lambda: load("hand_queue_gang"), "RunPolicy(clean_pod_policy='All')", id="clean-pod-policy"),
    pytest.param(lambda: load("hand_run_policy_zeros"), "RunPolicy(clean_pod_policy='None')", id="clean-none"),
]


@pytest.mark.parametrize("make, setting", REFUSED)
def test_refused_with_the_setting_and_the_alternative(make, setting: str):
    with pytest.raises(TemplateError) as err:
        to_jobset(read_template(make()), META)
    message = str(err.value)
    assert message.startswith("cannot run as a JobSet: ") and setting in message
    assert "target: pytorchjob" in message


def test_what_every_other_kind_accepts_here_is_not_refused():
    """No false refusal: per-role images, resources, pod templates, restart policies, a priority class, a queue."""
    for name in ("hand_per_role", "sdk_role_pod_templates", "hand_accel_amd", "legacy_v0", "official_container"):
        build(load(name))
    build(_with("hand_cpu", **{"pytorch.gang_scheduling": "false", "pytorch.clean_pod_policy": "Running"})())


def test_backend_defaults_without_an_equivalent_are_warnings_not_errors():
    spec = read_template(load("hand_cpu"))  # sets no clean-pod policy: the backend's would apply
    assert dropped_defaults(spec, BackendConfig()) == []
    config = BackendConfig.from_dict({"clean_pod_policy": "All", "gang_scheduling": True})
    assert [w.split("=")[0] for w in dropped_defaults(spec, config)] == [
        "backend clean_pod_policy", "backend gang_scheduling"
    ]  # fmt: skip
    assert dropped_defaults(read_template(load("sdk_seed_gpu")), config) == [dropped_defaults(spec, config)[1]]
    build(load("hand_cpu"), config)  # still written


@pytest.mark.parametrize("value", ["no-domain", "/x", "Bad_Host/x", "a.io/" + "p" * 60, ""])
def test_managed_by_must_be_what_the_webhook_accepts(value: str):
    with pytest.raises(ConfigError, match="jobset_managed_by"):
        BackendConfig.from_dict({"jobset_managed_by": value})


# ---------------------------------------------------------------------------------------------------------------
# names


@pytest.mark.parametrize("workers", [0, 1, 9, 10, 99999])
def test_names_fit_the_jobset_its_jobs_and_pods(workers: int):
    long = "a" * 41 + "-12345678"  # 50: the longest execution job name
    t = load("hand_cpu")
    t["custom"]["workerReplicas"]["replicas"] = workers
    if workers == 0:
        del t["custom"]["workerReplicas"]
    groups = read_template(t).replicas
    name = jobset_name(long, groups)
    assert DNS1035.match(name) and name.endswith("-12345678")
    assert len(f"{name}-master-0-0-xxxxx") <= 63
    if workers:
        assert len(f"{name}-worker-0-{workers - 1}-xxxxx") <= 63
    assert len(name) == min(50, max_name_length(groups))


def test_long_execution_name_is_shortened_and_stays_valid():
    job = build(load("hand_cpu"), job_name="r" + "x" * 40 + "-n0-0-1a2b3c4d")
    assert job["metadata"]["name"].endswith("-1a2b3c4d") and len(job["metadata"]["name"]) == 46
    assert webhook_errors(job) == []


# ---------------------------------------------------------------------------------------------------------------
# the validator catches what the cluster would reject


def test_validator_rejects_what_the_cluster_rejects():
    job = build(load("sdk_seed_gpu"))
    bad = copy.deepcopy(job)
    bad["metadata"]["name"] = "x" * 50
    bad["spec"]["failurePolicy"]["rules"].append(dict(bad["spec"]["failurePolicy"]["rules"][0]))
    bad["spec"]["failurePolicy"]["rules"][1]["onJobFailureReasons"] = ["Evicted"]
    bad["spec"]["successPolicy"]["targetReplicatedJobs"] = ["launcher"]
    errors = " ".join(webhook_errors(bad))
    for fragment in ("pod name", "not unique", "'Evicted'", "'launcher'"):
        assert fragment in errors
    typed = copy.deepcopy(job)
    typed["spec"]["failurePolicy"]["maxRestarts"] = "three"
    assert typed_model_errors(typed)
    typed["spec"]["failurePolicy"]["maxRestarts"] = 1
    typed["spec"]["failurePolicy"]["unknownField"] = 1
    assert typed_model_errors(typed) == ["typed model: the job does not come back unchanged (an unknown field?)"]
    jobs = copy.deepcopy(job)
    jobs["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    assert any("restartPolicy Never" in e for e in child_job_errors(jobs))
    schema_bad = copy.deepcopy(job)
    schema_bad["spec"]["failurePolicy"]["rules"][0]["action"] = "Retry"
    with pytest.raises(AssertionError, match="Retry"):
        assert_valid_jobset(schema_bad)
