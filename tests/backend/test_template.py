"""The one reader (`read_template` -> `TaskSpec`), the writer composed on it, execution metadata, retries."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from flyteidl.core import tasks_pb2
from google.protobuf import json_format

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionIdentity, ExecutionMetadata, execution_metadata, identity_of, job_name
from backend_plugin.retry import Backoff, Deadline, retry
from backend_plugin.spec import TaskSpec
from backend_plugin.targets.pytorchjob.writer import to_pytorchjob
from backend_plugin.template import read_template, template_to_dict
from pytorch_contract import template_keys as keys
from tests.helpers.jobs import build_pytorchjob

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
META = ExecutionMetadata(namespace="ns", job_name="j-1")


def load(name: str) -> dict:
    return json.loads((TEMPLATES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(p.stem for p in TEMPLATES.glob("*.json")))
def test_every_template_reads_into_a_spec_the_writer_turns_into_the_builders_job(name: str) -> None:
    template = load(name)
    spec = read_template(template)
    assert isinstance(spec, TaskSpec)
    assert [g.role for g in spec.replicas] in (["Master"], ["Master", "Worker"], ["Worker"])
    assert to_pytorchjob(spec, META, BackendConfig()) == build_pytorchjob(template, META)


def test_spec_is_read_only_and_shared_per_content() -> None:
    template = load("hand_pod_template")
    spec = read_template(template)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.nproc_per_node = "2"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.pod.spec["containers"][0]["image"] = "x"  # type: ignore[index]
    assert read_template(json.loads(json.dumps(template))) is spec
    # a writer's copy is its own: building twice gives equal jobs that share no objects
    first, second = build_pytorchjob(template, META), build_pytorchjob(template, META)
    assert first == second
    pod = first["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod is not second["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def test_changed_content_is_read_again() -> None:
    template = load("hand_cpu")
    before = read_template(template)
    template["config"][keys.NPROC_PER_NODE] = "3"
    assert read_template(template).nproc_per_node == "3" != before.nproc_per_node


def test_errors_are_not_cached() -> None:
    template = load("hand_cpu")
    template["config"][keys.QUEUE] = "bad queue"
    for _ in range(2):
        with pytest.raises(TemplateError, match=r"config\['pytorch.queue'\]='bad queue'"):
            read_template(template)


def test_run_policy_zeros_are_kept_in_the_spec_and_in_the_job() -> None:
    template = load("sdk_seed_gpu")
    template["custom"]["runPolicy"] = {"backoffLimit": 0, "ttlSecondsAfterFinished": 0}
    spec = read_template(template)
    assert (spec.run_policy.backoff_limit, spec.run_policy.ttl_seconds_after_finished) == (0, 0)
    assert spec.run_policy.active_deadline_seconds is None
    run_policy = to_pytorchjob(spec, META, BackendConfig.from_dict(dict(backoff_limit=4)))["spec"]["runPolicy"]
    assert (run_policy["backoffLimit"], run_policy["ttlSecondsAfterFinished"]) == (0, 0)


def test_elastic_spec_carries_nproc_without_a_private_key() -> None:
    spec = read_template(load("hand_elastic"))
    assert spec.elastic is not None and [g.role for g in spec.replicas] == ["Worker"]
    job = to_pytorchjob(spec, META)
    assert set(job["spec"]["elasticPolicy"]) == {"minReplicas", "maxReplicas", "rdzvBackend", "maxRestarts"}


def test_a_protobuf_template_gives_the_same_job_in_every_process() -> None:
    template = load("official_pod_template")
    message = json_format.ParseDict(template, tasks_pb2.TaskTemplate())
    as_dict = template_to_dict(message)
    # protobuf maps and Structs iterate in a per-process order; the reader sorts their keys
    pod = as_dict["k8sPod"]["podSpec"]
    assert list(pod) == sorted(pod)
    assert build_pytorchjob(message, META) == build_pytorchjob(message.SerializeToString(), META)


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


class Flaky(Exception):
    pass


def test_retry_backs_off_with_jitter_until_success() -> None:
    sleeps: list[float] = []
    calls = iter([Flaky(), Flaky(), "ok"])

    def call() -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    backoff = Backoff(0.25, 4.0, sleep=sleeps.append, jitter=lambda lo, hi: hi)
    deadline = Deadline(30.0, clock=lambda: 0.0)
    assert retry(call, lambda e: isinstance(e, Flaky), backoff, deadline, lambda e, n, t: RuntimeError()) == "ok"
    assert sleeps == [0.25, 0.5]


def test_retry_gives_up_within_the_budget_and_chains_the_cause() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def call() -> None:
        raise Flaky("503")

    backoff = Backoff(1.0, 4.0, sleep=sleep, jitter=lambda lo, hi: hi)
    deadline = Deadline(5.0, clock=lambda: now[0])
    with pytest.raises(RuntimeError, match="gave up after 3 attempts") as info:
        retry(call, lambda e: True, backoff, deadline, lambda e, n, t: RuntimeError(f"gave up after {n} attempts"))
    assert isinstance(info.value.__cause__, Flaky) and now[0] == 3.0  # slept 1 + 2; a 4 s sleep would pass 5 s


def test_one_deadline_is_shared_by_every_loop_of_an_operation() -> None:
    """A second loop in the same operation has only what the first one left (here: no retry at all), and a loop
    starts no retry that would not leave `min_attempt_s` after its sleep."""
    now = [0.0]
    attempts: list[float] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def call() -> None:
        attempts.append(now[0])
        now[0] += 1.0  # each attempt takes a second
        raise Flaky("503")

    backoff = Backoff(0.5, 0.5, sleep=sleep, jitter=lambda lo, hi: hi)
    deadline = Deadline(6.0, clock=lambda: now[0])
    for _ in range(2):
        with pytest.raises(RuntimeError):
            retry(call, lambda e: True, backoff, deadline, lambda e, n, t: RuntimeError(), min_attempt_s=1.0)
    assert attempts == [0.0, 1.5, 3.0, 4.5, 5.5] and now[0] == 6.5 and deadline.remaining() == 0.0


def test_retry_raises_other_errors_at_once() -> None:
    def call() -> None:
        raise KeyError("x")

    backoff = Backoff(1.0, 4.0, sleep=lambda s: pytest.fail("slept"))
    with pytest.raises(KeyError):
        retry(
            call,
            lambda e: isinstance(e, Flaky),
            backoff,
            Deadline(5.0, clock=lambda: 0.0),
            lambda e, n, t: RuntimeError(),
        )


def test_the_template_format_page_lists_exactly_the_contracts_config_keys() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "template-format.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `pytorch.")}
    assert rows == set(keys.CONFIG_KEYS)
