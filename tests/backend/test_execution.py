"""One execution of a task (`backend_plugin.execution`): job names and the connector's layout of paths."""

from __future__ import annotations

import pytest

from backend_plugin.config import BackendConfig
from backend_plugin.execution import ExecutionIdentity, execution_metadata, identity_of, job_name
from pytorch_contract.k8s_names import JOB_NAME_MAX_LENGTH
from tests.kube_schema import DNS1035


@pytest.mark.parametrize(
    "args",
    [
        ("p", "d", "f7a3c2e1b0", "n0", 0),
        ("p", "d", "a" * 200, "n0", 0),
        ("p", "d", "Exec_Name.With.Dots", "dn0.sub_node-Ü", 12),
        ("p", "d", "0starts-with-digit", "n0", 0),
        ("p", "d", "---", "___", 0),
        ("p", "d", "x" * 60, "n" * 60, 99999),
    ],
    ids=["plain", "very-long", "odd-characters", "leading-digit", "only-separators", "long-everything"],
)
def test_job_name_is_a_valid_short_label(args):
    name = job_name(*args)
    assert DNS1035.match(name), name
    assert len(name) <= JOB_NAME_MAX_LENGTH
    assert len(f"{name}-worker-99999") <= 63
    assert job_name(*args) == name


def test_job_name_distinguishes_everything():
    base = ("p", "d", "e" * 80, "n0", 0)
    names = {
        job_name(*base),
        job_name("q", "d", "e" * 80, "n0", 0),
        job_name("p", "e", "e" * 80, "n0", 0),
        job_name("p", "d", "e" * 80 + "x", "n0", 0),
        job_name("p", "d", "e" * 80, "n1", 0),
        job_name("p", "d", "e" * 80, "n0", 1),
    }
    assert len(names) == 6
    assert job_name("p", "d", "abc", "n0", 0, prefix="pt-").startswith("pt-abc-n0-0-")


def test_execution_metadata_is_the_connectors_layout() -> None:
    identity = ExecutionIdentity("p", "d", "ex1", "n0", 2)
    meta = execution_metadata(
        identity, "s3://b/meta/ex1/n0/data/2/", BackendConfig.from_dict(dict(job_name_prefix="pt-"))
    )
    assert meta.job_name == job_name("p", "d", "ex1", "n0", 2, prefix="pt-")
    assert meta.input_path == "s3://b/meta/ex1/n0/data/2/inputs.pb"
    assert meta.output_prefix == "s3://b/meta/ex1/n0/data/2"
    assert meta.prev_checkpoint_prefix == "s3://b/meta/ex1/n0/data/1/checkpoint_output"
    assert (meta.namespace, meta.interruptible) == ("default", None)


def test_identity_of_a_local_run_hashes_the_prefix() -> None:
    a = identity_of(None, {"project": "p", "name": "wf.train"}, "/tmp/a")
    b = identity_of(None, {"project": "p", "name": "wf.train"}, "/tmp/b")
    assert (a.project, a.domain, a.node_id, a.retry_attempt) == ("p", "local", "train", 0)
    assert a.execution_name.startswith("local-") and a.execution_name != b.execution_name


def test_the_executions_variables_are_in_one_order_whatever_the_maps_order_on_the_wire() -> None:
    """A protobuf map has no order on the wire (propeller's Go writer varies it, so does Python's between processes):
    a CreateTask that propeller retries must build the job it built the first time, or adopting it fails."""
    from types import SimpleNamespace

    identity = ExecutionIdentity("p", "d", "ex1", "n0", 0)
    config = BackendConfig.from_dict({})

    def meta(env: dict[str, str]):
        task = SimpleNamespace(environment_variables=env, namespace="ns", labels={}, annotations={},
                               k8s_service_account="default", interruptible=None)  # fmt: skip
        return execution_metadata(identity, "s3://b/x", config, task)

    one = meta({"B": "2", "A": "1", "C": "3"})
    other = meta({"C": "3", "A": "1", "B": "2"})
    assert list(one.environment.items()) == list(other.environment.items()) == [("A", "1"), ("B", "2"), ("C", "3")]
