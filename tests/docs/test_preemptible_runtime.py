"""docs/trainer-v2.md's ``snippet:preemptible-runtime`` is what the page says: a ClusterTrainingRuntime the vendored
CRD accepts, whose JobSet template JobSet's webhook and the child Jobs' validation accept, which is the default
`torch-distributed` runtime with the JobSet kind's own preemption rules added (the container named `node`), and
whose patterns match the messages Kubernetes writes for those rules and no other failure's."""

from __future__ import annotations

import copy
import functools
import re

import jsonschema
import yaml

from backend_plugin.config import BackendConfig
from backend_plugin.targets.jobset.writer import failure_policy, pod_failure_policy
from backend_plugin.template import read_template
from tests.docs.markdown_blocks import ROOT, blocks
from tests.helpers.jobs import load
from tests.targets.jobset.schema import assert_valid_jobset

PAGE = ROOT / "docs" / "trainer-v2.md"
CRDS = ROOT / "backend_plugin" / "crds"


def _runtime() -> dict:
    (block,) = [b for b in blocks(PAGE) if "snippet:preemptible-runtime" in b.markers]
    return yaml.safe_load(block.body)


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((CRDS / "trainer.kubeflow.org_clustertrainingruntimes.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])


def test_the_vendored_crd_accepts_it_and_jobset_would_run_it():
    runtime = _runtime()
    assert (runtime["apiVersion"], runtime["kind"]) == ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")
    assert [e.message for e in _validator().iter_errors(runtime)] == []
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "t-node"},
              "spec": copy.deepcopy(runtime["spec"]["template"]["spec"])}  # fmt: skip
    for rjob in jobset["spec"]["replicatedJobs"]:  # what the Trainer fills in from the TrainJob
        rjob["template"]["spec"]["template"]["spec"]["containers"][0]["command"] = ["torchrun", "train.py"]
    assert_valid_jobset(jobset)  # its CRD and webhook, the typed models, and the child Jobs (restartPolicy Never)


def test_it_is_the_default_runtime_with_the_jobset_kinds_rules():
    runtime = _runtime()
    default = yaml.safe_load((CRDS / "torch_distributed.yaml").read_text())
    template = runtime["spec"]["template"]["spec"]
    rules = template.pop("failurePolicy")
    job = template["replicatedJobs"][0]["template"]["spec"]
    pod_rules = job.pop("podFailurePolicy")["rules"]
    assert job.pop("backoffLimit") == 0 and job["template"]["spec"].pop("restartPolicy") == "Never"
    runtime["metadata"]["name"] = default["metadata"]["name"]
    assert runtime == default
    # the JobSet kind's rules for a task with the default restart policy, with the TrainJob's container name
    spec = read_template(load("sdk_seed_gpu"))
    ours = failure_policy(spec, BackendConfig())
    assert rules == {"maxRestarts": 0, "rules": [ours["rules"][0]]} and ours["maxRestarts"] == 0
    kind_rules = pod_failure_policy(spec.replicas[-1])["rules"][:2]
    kind_rules[1]["onExitCodes"]["containerName"] = "node"
    assert pod_rules == kind_rules


def test_the_patterns_match_kubernetes_messages_for_these_rules_only():
    (rule,) = _runtime()["spec"]["template"]["spec"]["failurePolicy"]["rules"]

    def restarts_free(message: str) -> bool:
        return any(re.search(p, message) for p in rule["onJobFailureMessagePatterns"])

    pod = "ns/j-node-0-1-abcde"
    assert restarts_free(f"Pod {pod} has condition DisruptionTarget matching FailJob rule at index 0")
    assert restarts_free(f"Container node for pod {pod} failed with exit code 200 matching FailJob rule at index 1")
    for code in (1, 2, 20, 137, 143):
        assert not restarts_free(
            f"Container node for pod {pod} failed with exit code {code} matching FailJob rule at index 1"
        )
    assert not restarts_free("Job has reached the specified backoff limit")
