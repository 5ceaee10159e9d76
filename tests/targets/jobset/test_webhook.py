"""The JobSet kind's own admission rules (`backend_plugin/targets/jobset/webhook.py`, run by the admission model as the
kind's declared checks): each rule refuses what JobSet's webhook or the child Jobs' validation refuse, and nothing the
cluster accepts. The false positives are tested on JobSet's own examples (`upstream/`, every one of which its webhook
and CRD accept) and on every JobSet our writer produces."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from backend_plugin.admission import NOTE, REJECTED, UNSTARTABLE, admit
from backend_plugin.kinds.jobset_webhook import webhook_checks
from tests.helpers.jobs import META, load, write_job
from tests.targets.conftest import facts_of

UPSTREAM = Path(__file__).resolve().parent / "upstream"


def _examples() -> list[Any]:
    out = []
    for path in sorted(UPSTREAM.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") == "JobSet":
                out.append(pytest.param(doc, id=f"{path.stem}-{i}" if i else path.stem))
    return out


def defaulted(job: dict) -> dict:
    """The JobSet as JobSet's mutating webhook leaves it before the CRD's schema and the validating webhook see it
    (`jobset_webhook.go`'s `Default`): success policy All, Indexed child Jobs with `OnFailure` pods, DNS hostnames on
    with not-ready addresses published, failure-policy rules named `failurePolicyRule<index>`."""
    out = copy.deepcopy(job)
    spec = out.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        job_spec = rjob["template"]["spec"]
        job_spec.setdefault("completionMode", "Indexed")
        job_spec["template"]["spec"].setdefault("restartPolicy", "OnFailure")
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        rule.setdefault("name", f"failurePolicyRule{i}")
    return out


EXAMPLES = _examples()


def test_every_upstream_example_was_found():
    assert len(EXAMPLES) >= 20


@pytest.mark.parametrize("example", EXAMPLES)
def test_no_upstream_example_is_refused(example: dict):
    """JobSet accepts its own examples; so must the rules, and the whole admission model once the mutating webhook
    has named the rules and filled the defaults it fills before validation."""
    assert [c for c in webhook_checks(example) if c.verdict != NOTE] == []
    assert [p.message for p in admit(defaulted(example)) if p.refuses] == []


def test_alpha_features_are_said_not_refused():
    (restart_job,) = [e.values[0] for e in EXAMPLES if e.id == "failure-policy__restartjob-action"]
    (in_place,) = [e.values[0] for e in EXAMPLES if e.id == "in-place-restart__jobset-main-container-mode"]
    for job, gate in ((restart_job, "RestartJob"), (in_place, "InPlaceRestart")):
        found = [p for p in admit(defaulted(job)) if p.verdict == NOTE and "feature gate" in p.message]
        assert found and gate in found[0].message and not [p for p in admit(defaulted(job)) if p.refuses]


@pytest.mark.parametrize("template", ["sdk_seed_gpu", "hand_per_role", "sdk_role_pod_templates", "sdk_master_only"])
def test_no_job_the_writer_writes_is_refused(template: str):
    from backend_plugin.targets.registry import BY_CONFIG

    job = write_job(BY_CONFIG["jobset"], load(template), copy.deepcopy(META))
    facts_of(BY_CONFIG["jobset"]).validate(job)
    assert webhook_checks(job) == []


def _jobset() -> dict:
    from backend_plugin.targets.registry import BY_CONFIG

    return write_job(BY_CONFIG["jobset"], load("hand_cpu"), copy.deepcopy(META))


def _edit(change: Callable[[dict], None]) -> dict:
    job = _jobset()
    change(job)
    return job


def _worker(job: dict) -> dict:
    return job["spec"]["replicatedJobs"][1]["template"]["spec"]


def _rules(job: dict) -> list[dict]:
    return job["spec"]["failurePolicy"]["rules"]


HITS = [
    pytest.param(
        lambda j: j["metadata"].update(name="x" * 47),
        REJECTED,
        "job name",
        "pods the Jobs create",
        id="pod-names-too-long",
    ),  # fmt: skip
    pytest.param(
        lambda j: j["metadata"].update(name="x" * 55),
        REJECTED,
        "job name",
        "Jobs the JobSet controller names",
        id="job-names-too-long",
    ),  # fmt: skip
    pytest.param(
        lambda j: j["spec"]["network"].update(subdomain="a.b"),
        REJECTED,
        "spec.network.subdomain",
        "not a DNS-1035 label",
        id="subdomain-with-a-dot",
    ),  # fmt: skip
    pytest.param(
        lambda j: j["spec"].update(managedBy="nodomain"),
        REJECTED,
        "jobset_managed_by",
        "domain-prefixed path",
        id="managed-by",
    ),  # fmt: skip
    pytest.param(
        lambda j: j["spec"]["replicatedJobs"][0].update(groupName="Group_1"),
        REJECTED,
        "groupName",
        "DNS-1035",
        id="group-name",
    ),  # fmt: skip
    pytest.param(
        lambda j: j["spec"]["successPolicy"].update(targetReplicatedJobs=["launcher"]),
        REJECTED,
        "successPolicy",
        "'launcher' is not a replicated job",
        id="success-target",
    ),  # fmt: skip
    pytest.param(
        lambda j: _rules(j)[0].update(name="9lives"), REJECTED, "rules[0].name", "'9lives'", id="rule-name"
    ),  # fmt: skip
    pytest.param(
        lambda j: _rules(j)[1].update(name="Preempted"), REJECTED, "rules[1].name", "unique", id="rule-name-twice"
    ),  # fmt: skip
    pytest.param(
        lambda j: _rules(j)[1].update(onJobFailureReasons=["Evicted"]),
        REJECTED,
        "onJobFailureReasons",
        "'Evicted' is not a Job failure reason",
        id="failure-reason",
    ),  # fmt: skip
    pytest.param(
        lambda j: _rules(j)[2].update(targetReplicatedJobs=["launcher"]),
        REJECTED,
        "rules[2]",
        "'launcher' is not a replicated job",
        id="rule-target",
    ),  # fmt: skip
    pytest.param(
        lambda j: j["spec"]["replicatedJobs"][0].update(dependsOn=[{"name": "worker", "status": "Ready"}]),
        REJECTED,
        "dependsOn",
        "first replicated job",
        id="depends-on-first",
    ),  # fmt: skip
    pytest.param(
        lambda j: _worker(j)["template"]["spec"].update(restartPolicy="OnFailure"),
        UNSTARTABLE,
        "restartPolicy",
        "needs restartPolicy Never",
        id="pod-failure-policy-restart",
    ),  # fmt: skip
    pytest.param(
        lambda j: _worker(j)["podFailurePolicy"]["rules"].append(
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 1]}}
        ),
        UNSTARTABLE,
        "podFailurePolicy",
        "may not hold 0",
        id="exit-code-zero",
    ),  # fmt: skip
    pytest.param(
        lambda j: _worker(j)["podFailurePolicy"]["rules"].append(
            {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2, 1]}}
        ),
        UNSTARTABLE,
        "podFailurePolicy",
        "ascending order",
        id="exit-codes-unordered",
    ),  # fmt: skip
    pytest.param(
        lambda j: (_worker(j).pop("completions"), None),
        UNSTARTABLE,
        "completions",
        "with parallelism needs completions",
        id="indexed-without-completions",
    ),  # fmt: skip
]


@pytest.mark.parametrize("change, verdict, setting, fragment", HITS)
def test_each_rule_refuses_what_the_cluster_refuses(change, verdict: str, setting: str, fragment: str):
    job = _edit(change)
    found = [p for p in admit(job) if p.verdict == verdict and fragment in p.message]
    assert found, [p.message for p in admit(job)]
    assert setting in found[0].setting or setting in found[0].path, (found[0].setting, found[0].path)


def test_a_too_long_name_is_named_as_the_setting_to_change():
    job = _edit(lambda j: j["metadata"].update(name="x" * 47))
    problems = [p for p in admit(job) if p.refuses]
    assert [p.message.partition(": ")[0] for p in problems] == ["job name (render --name, or the backend config's "
                                                                  "job_name_prefix)"] * 2  # fmt: skip
    assert f"'{'x' * 47}-master-0-0-abcde' (with its 5-character suffix)" in problems[0].message
    assert f"'{'x' * 47}-worker-0-1-abcde' (with its 5-character suffix)" in problems[1].message


def test_a_pod_templates_role_is_named():
    job = _edit(lambda j: _worker(j)["template"]["metadata"]["labels"].update({"bad key!": "x"}))
    (problem,) = [p for p in admit(job) if p.refuses]
    assert problem.setting == "Worker.pod_template labels", problem
