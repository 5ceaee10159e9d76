"""The backend behaves the same on every protobuf major we allow (5, 6, 7; see setup.py).

protobuf 7 removed `FieldDescriptor.label` and iterates `Struct`/map fields in hash order (a different order in every
process), so a template read from a proto must not carry protobuf's iteration order into the job we render.
CI runs this file under the locked protobuf and under the newest release (`.ci/run`'s newest-releases job).
"""

from __future__ import annotations

import warnings

import yaml
from flyteidl.core import tasks_pb2
from google.protobuf import json_format

from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.template import check_task_template, template_to_dict
from tests.helpers.jobs import build_pytorchjob

# Keys deliberately out of alphabetical order at every level that comes from a Struct or a map.
POD_SPEC = {
    "volumes": [{"name": "shm", "emptyDir": {"sizeLimit": "1Gi", "medium": "Memory"}}],
    "containers": [
        {
            "name": "pytorch",
            "image": "example.com/train:1",
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
            "env": [{"value": "1", "name": "Z_LAST"}, {"name": "A_FIRST", "value": "2"}],
        }
    ],
    "nodeSelector": {"zone": "b", "pool": "gpu", "arch": "amd64"},
}
TEMPLATE = {
    "id": {"resourceType": "TASK", "name": "wf.train", "project": "p", "domain": "d", "version": "v"},
    "type": "pytorch",
    "metadata": {"runtime": {"type": "FLYTE_SDK", "version": "1.16.0", "flavor": "python"}},
    "custom": {"workerReplicas": {"replicas": 2}, "masterReplicas": {"replicas": 1}},
    "k8sPod": {
        "metadata": {"labels": {"team": "ml", "app": "mnist", "cost": "x"}},
        "podSpec": POD_SPEC,
    },
    "config": {"primary_container_name": "pytorch"},
}


def _is_sorted(value: object, path: str = "") -> list[str]:
    """Paths of the objects whose keys are not in sorted order."""
    out = []
    if isinstance(value, dict):
        if list(value) != sorted(value):
            out.append(path or "<root>")
        for k, v in value.items():
            out += _is_sorted(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _is_sorted(v, f"{path}[{i}]")
    return out


def test_a_template_read_from_a_proto_has_sorted_keys() -> None:
    proto = json_format.ParseDict(TEMPLATE, tasks_pb2.TaskTemplate())
    for form in (proto, proto.SerializeToString()):
        as_dict = template_to_dict(form)
        assert _is_sorted(as_dict) == []
        assert as_dict["k8sPod"]["podSpec"]["containers"][0]["env"][0]["name"] == "Z_LAST", "list order is data"


def test_a_job_rendered_from_a_proto_is_the_text_of_one_rendered_from_sorted_json() -> None:
    """What `pytorchjob render` prints for a .pb equals what it prints for the same template as sorted JSON."""
    meta = ExecutionMetadata(job_name="train-e1")

    def render(template: object) -> str:
        return yaml.safe_dump(build_pytorchjob(template, meta, BackendConfig()), sort_keys=False)

    proto = json_format.ParseDict(TEMPLATE, tasks_pb2.TaskTemplate())
    from_proto = render(proto.SerializeToString())
    assert from_proto == render(_sorted(json_format.MessageToDict(proto)))  # a dict keeps its own key order
    assert from_proto == render(proto)


def _sorted(value: object) -> object:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def test_the_descriptor_walk_warns_nothing() -> None:
    """The shape check walks field descriptors: no deprecated descriptor API (protobuf 6 deprecates, 7 removes)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_task_template(TEMPLATE)
        template_to_dict(json_format.ParseDict(TEMPLATE, tasks_pb2.TaskTemplate()))
    assert [str(w.message) for w in caught] == []
