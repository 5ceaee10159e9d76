"""Log links for master + workers rendered from each common template style."""

from __future__ import annotations

import datetime

import pytest

from backend_plugin.config import BackendConfig, ConfigError
from backend_plugin.targets.pytorchjob.links import log_links
from tests.fakeapi.objects import replica_pod

JOB = {
    "metadata": {"name": "train-1", "namespace": "ml-dev", "creationTimestamp": "2025-01-01T00:00:00Z"},
    "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}, "Master": {"replicas": 1}}},
    "status": {"startTime": "2025-01-01T00:00:05Z"},
}
NOW = datetime.datetime(2025, 1, 1, 1, 0, tzinfo=datetime.timezone.utc)
START = "2025-01-01T00:00:30Z"  # 1735689630

STYLES = [
    ("k8s-dashboard",
     "https://dash/#/log/{{ .namespace }}/{{ .podName }}/pod?container={{ .containerName }}",
     "https://dash/#/log/ml-dev/train-1-worker-1/pod?container=pytorch"),
    ("cloudwatch",
     "https://console.aws.amazon.com/cloudwatch/home?region=us-east-1#logEventViewer:group=/flyte;"
     "stream=var.log.containers.{{ .podName }}_{{ .namespace }}_{{ .containerName }}",
     "https://console.aws.amazon.com/cloudwatch/home?region=us-east-1#logEventViewer:group=/flyte;"
     "stream=var.log.containers.train-1-worker-1_ml-dev_pytorch"),
    ("stackdriver",
     "https://console.cloud.google.com/logs/viewer?project=p&advancedFilter=resource.labels.pod_name%3D{{ .podName }}"
     "%20timestamp%3E%22{{ .podRFC3339StartTime }}%22",
     "https://console.cloud.google.com/logs/viewer?project=p&advancedFilter=resource.labels.pod_name%3Dtrain-1-worker-1"
     "%20timestamp%3E%222025-01-01T00:00:30Z%22"),
    ("grafana-loki",
     'https://grafana/explore?left={"expr":"{pod=\\"{{.podName}}\\"}","from":"{{ .podUnixStartTime }}000",'
     '"to":"{{ .podUnixFinishTime }}000"}',
     'https://grafana/explore?left={"expr":"{pod=\\"train-1-worker-1\\"}","from":"1735689630000",'
     '"to":"1735693200000"}'),
]  # fmt: skip


@pytest.mark.parametrize(("template", "worker_1"), [s[1:] for s in STYLES], ids=[s[0] for s in STYLES])
def test_links_for_master_and_two_workers(template, worker_1):
    config = BackendConfig.from_dict(dict(log_links=({"name": "Logs", "template": template},)))
    pods = [replica_pod(JOB, "Worker", 1, start_time=START)]
    links = log_links(JOB, pods, config, NOW)
    assert [link.name for link in links] == ["Logs master-0", "Logs worker-0", "Logs worker-1"]
    assert links[2].uri == worker_1
    assert "train-1-master-0" in links[0].uri and "train-1-worker-0" in links[1].uri


def test_replicas_without_pods_fall_back_to_job_start_time():
    config = BackendConfig.from_dict(
        dict(log_links=({"name": "L", "template": "{{ .podRFC3339StartTime }}/{{ .replicaName }}"},))
    )
    links = log_links(JOB, None, config, NOW)
    assert [link.uri for link in links] == [f"2025-01-01T00:00:05Z/{r}" for r in ("master-0", "worker-0", "worker-1")]


def test_no_templates_no_links():
    assert log_links(JOB, None, BackendConfig(), NOW) == []


@pytest.mark.parametrize(
    ("entry", "error"),
    [({"name": "x", "template": "{{ .podname }}"}, "unknown variables ['podname']"), ({"name": "x"}, "non-empty")],
    ids=["typo-in-variable", "missing-template"],
)
def test_bad_templates_are_rejected(entry, error):
    with pytest.raises(ConfigError, match=error.replace("[", r"\[").replace("]", r"\]")):
        log_links(JOB, None, BackendConfig.from_dict(dict(log_links=(entry,))), NOW)


# --- dynamic links: `link_type` in the task config selects them, `{{ .taskConfig.<key> }}` is filled (flyte PR 6284)

VSCODE = {"name": "VS Code", "template": "https://ide.example.com:{{ .taskConfig.port }}/{{ .podName }}",
          "link_type": "vscode"}  # fmt: skip
STATIC = {"name": "Logs", "template": "https://logs/{{ .podName }}"}


def uris(entries, task_config) -> list[tuple[str, str]]:
    links = log_links(JOB, None, BackendConfig.from_dict(dict(log_links=tuple(entries))), NOW, task_config)
    return [(link.name, link.uri) for link in links]


def test_dynamic_link_is_rendered_for_a_task_that_asks_for_it():
    got = uris([STATIC, VSCODE], {"link_type": "vscode", "port": "8080"})
    assert got[:3] == [("Logs master-0", "https://logs/train-1-master-0"), ("Logs worker-0", "https://logs/train-1-worker-0"),
                       ("Logs worker-1", "https://logs/train-1-worker-1")]  # fmt: skip
    assert got[3:] == [(f"VS Code {r}", f"https://ide.example.com:8080/train-1-{r}")
                       for r in ("master-0", "worker-0", "worker-1")]  # fmt: skip


@pytest.mark.parametrize(
    ("task_config", "shown"),
    [
        (None, False),
        ({}, False),
        ({"port": "8080"}, False),  # no link_type: only static links, as in Flyte
        ({"link_type": "jupyter", "port": "8080"}, False),
        ({"link_type": "jupyter, vscode", "port": "8080"}, True),  # a comma-separated list, blanks ignored
        ({"link_type": "vscode"}, False),  # asked for, but the port it needs is not set: left out, not half-filled
    ],
    ids=["no-config", "empty-config", "no-link-type", "other-type", "list-of-types", "missing-key"],
)
def test_dynamic_link_selection(task_config, shown):
    names = {name.split(" ")[0] for name, _ in uris([STATIC, VSCODE], task_config)}
    assert names == ({"Logs", "VS"} if shown else {"Logs"})


def test_task_config_fills_every_occurrence_any_case_and_static_templates_too():
    entry = {"name": "L", "template": "https://x:{{.taskConfig.port}}/{{ .TASKCONFIG.route }}/{{ .taskconfig$port }}"}
    assert uris([entry], {"port": "1", "route": "r"})[0][1] == "https://x:1/r/1"


def test_config_values_are_inserted_verbatim():
    entry = {"name": "L", "template": "https://x/{{ .taskConfig.route }}"}
    assert uris([entry], {"route": "{{ .podName }}"})[0][1] == "https://x/{{ .podName }}"


@pytest.mark.parametrize(
    ("entry", "error"),
    [({**VSCODE, "link_type": "a,b"}, "link_type='a,b' must be one link type"),
     ({**VSCODE, "link_type": 3}, "link_type=3"),
     ({**STATIC, "display_name": "x"}, "unknown keys ['display_name']")],
    ids=["comma-in-type", "type-not-str", "unknown-key"],
)  # fmt: skip
def test_bad_dynamic_entries_are_rejected_when_the_config_is_built(entry, error):
    with pytest.raises(ConfigError) as info:
        BackendConfig.from_dict(dict(log_links=(entry,)))
    assert error in str(info.value)
