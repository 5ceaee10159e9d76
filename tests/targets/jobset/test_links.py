"""JobSet log links: one per template and pod of the current run, with the pods' real names."""

from __future__ import annotations

import datetime

from backend_plugin.config import BackendConfig
from backend_plugin.targets.jobset.links import pod_log_links
from tests.targets.jobset.facts import pod

NOW = datetime.datetime(2025, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)
CONFIG = BackendConfig.from_dict(
    {"log_links": [{"name": "Logs", "template": "https://logs/{{ .podName }}/{{ .replicaName }}/{{ .containerName }}"}]}
)
JOB = {"metadata": {"name": "j", "namespace": "ns"}, "spec": {}, "status": {"restarts": 1}}


def test_one_link_per_pod_master_first_with_the_real_pod_name():
    pods = [pod(JOB, 1, attempt=1), pod(JOB, 0, role="master", attempt=1), pod(JOB, 0, attempt=1)]
    links = pod_log_links(JOB, pods, CONFIG, NOW, {})
    assert [link.name for link in links] == ["Logs master-0", "Logs worker-0", "Logs worker-1"]
    assert links[0].uri == f"https://logs/{pods[1]['metadata']['name']}/master-0/pytorch"


def test_the_previous_runs_pods_get_no_link_and_a_replaced_pod_its_newest():
    old = pod(JOB, 0, attempt=0)
    first, second = pod(JOB, 0, attempt=1), pod(JOB, 0, attempt=1)
    second["metadata"]["name"] += "-2"
    second["metadata"]["creationTimestamp"] = "2025-01-01T00:05:00Z"
    (link,) = pod_log_links(JOB, [old, second, first], CONFIG, NOW, {})
    assert link.uri.startswith(f"https://logs/{second['metadata']['name']}/")


def test_no_pods_or_no_templates_no_links():
    assert pod_log_links(JOB, None, CONFIG, NOW, {}) == [] and pod_log_links(JOB, [], CONFIG, NOW, {}) == []
    assert pod_log_links(JOB, [pod(JOB, 0, attempt=1)], BackendConfig(), NOW, {}) == []


def test_a_pod_without_a_role_or_index_gets_no_link():
    stray = pod(JOB, 0, attempt=1)
    del stray["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
    del stray["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
    assert pod_log_links(JOB, [stray], CONFIG, NOW, {}) == []
