"""TrainJob log links: one per template and node, named from the JobSet's real pods (their names end in a random
suffix, so links exist once the pods are listed)."""

from __future__ import annotations

import copy
import datetime

from backend_plugin.config import BackendConfig
from backend_plugin.targets.trainjob.links import node_log_links
from tests.fakeapi.objects import node_pod

NOW = datetime.datetime(2025, 1, 1, 1, 0, tzinfo=datetime.timezone.utc)
JOB = {"metadata": {"name": "tj", "namespace": "ns", "creationTimestamp": "2025-01-01T00:00:00Z"},
       "spec": {"trainer": {"numNodes": 3}}}  # fmt: skip
CONFIG = BackendConfig.from_dict(
    {"log_links": [{"name": "Logs", "template": "{{ .podName }}/{{ .replicaName }}/{{ .containerName }}"}]}
)


def test_one_link_per_node_in_index_order_with_the_real_pod_name():
    pods = [node_pod(JOB, 2), node_pod(JOB, 0), node_pod(JOB, 1)]
    links = node_log_links(JOB, pods, CONFIG, NOW)
    assert [(link.name, link.uri) for link in links] == [
        (f"Logs node-{i}", f"tj-node-0-{i}-ab1c{i}/node-{i}/node") for i in range(3)
    ]


def test_a_restarted_node_links_its_newest_pod():
    old, new = node_pod(JOB, 0), copy.deepcopy(node_pod(JOB, 0))
    new["metadata"]["name"] = "tj-node-0-0-zz9z9"
    new["metadata"]["creationTimestamp"] = "2025-01-01T00:30:00Z"
    (link,) = node_log_links(JOB, [new, old], CONFIG, NOW)
    assert link.uri == "tj-node-0-0-zz9z9/node-0/node"


def test_no_pods_or_no_templates_no_links():
    assert node_log_links(JOB, None, CONFIG, NOW) == [] and node_log_links(JOB, [], CONFIG, NOW) == []
    assert node_log_links(JOB, [node_pod(JOB, 0)], BackendConfig(), NOW) == []


def test_a_pod_without_a_completion_index_gets_no_link():
    pod = node_pod(JOB, 0)
    del pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
    assert node_log_links(JOB, [pod], CONFIG, NOW) == []


def test_a_finished_nodes_link_ends_when_its_node_container_ended():
    """A TrainJob's training container is `node` (not the PyTorchJob's `pytorch`): its end is the link's finish, not
    the job's completion or now."""
    config = BackendConfig.from_dict(
        {"log_links": [{"name": "Logs", "template": "{{ .podUnixStartTime }}-{{ .podUnixFinishTime }}"}]}
    )
    done = node_pod(JOB, 0, phase="Succeeded", terminated={"exitCode": 0, "finishedAt": "2025-01-01T00:11:05Z"})
    (link,) = node_log_links(JOB, [done], config, NOW)
    start = int(datetime.datetime(2025, 1, 1, 0, 1, 5, tzinfo=datetime.timezone.utc).timestamp())
    assert link.uri == f"{start}-{start + 600}"
