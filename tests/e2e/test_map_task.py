"""`map_task` over a pytorch task on the (fake) cluster: one PyTorchJob per item (issue 15 item 9).

Flyte runs a map task as an ArrayNode; each item is its own task execution of the mapped `pytorch` task, so the
connector is called once per item, with the item's index in the execution's environment
(`BATCH_JOB_ARRAY_INDEX_VAR_NAME=FLYTE_K8S_ARRAY_INDEX`, `FLYTE_K8S_ARRAY_INDEX=<i>`, set by flytepropeller's array
node). Here the test plays propeller: it submits the packaged ArrayNode task once per index, as propeller would.
"""

from __future__ import annotations

import pytest

from tests.e2e import harness
from tests.e2e.test_e2e import Cluster, _logs, cluster, kind  # noqa: F401 - the fixtures are used by name

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def map_template(tmp_path_factory: pytest.TempPathFactory):
    """The mapped task's template, as `pyflyte package` writes it (`pyflyte-map-execute`, type `pytorch`)."""
    templates = harness.package_tasks(["tests.e2e.workflows_map"], tmp_path_factory.mktemp("package"))
    (name,) = [n for n in templates if n.startswith("map_seed_allreduce")]
    return templates[name]


@pytest.mark.parametrize("kind", ["pytorchjob"], indirect=True)
def test_each_mapped_item_is_one_pytorchjob_reading_its_own_item(cluster: Cluster, map_template) -> None:  # noqa: F811
    xs = [10, 20, 30]
    assert map_template.type == "pytorch" and map_template.container.args[0] == "pyflyte-map-execute"
    for index, x in enumerate(xs):
        env = {"BATCH_JOB_ARRAY_INDEX_VAR_NAME": "FLYTE_K8S_ARRAY_INDEX", "FLYTE_K8S_ARRAY_INDEX": str(index)}
        seen, prefix, run = cluster.run(map_template, {"x": xs}, {"x": list[int]}, f"map{index}", env)
        assert harness.phase_names(seen)[-1] == "SUCCEEDED", _logs(run) + "\n" + seen[-1].message
        assert [r.label for r in run.replicas] == ["master-0", "worker-0", "worker-1"]
        # rank 0 of item `index` saw its own x: [rank, world, sum of (x + rank) over ranks 0..2]
        assert harness.read_outputs(prefix, {"o0": list[int]}) == {"o0": [0, 3, 3 * x + 3]}
    assert len(cluster.controller.runs) == len(xs)  # three jobs, one per item
