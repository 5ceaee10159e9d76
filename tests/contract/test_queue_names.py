"""A queue name Kueue refuses is refused by every check the user meets, and a name Kueue and Volcano take by none:
at decoration (flytekit's ``@pytorch_task(queue=...)``, Flyte 2's ``RunPolicy(queue=...)``), and by the backend's
template reader, so ``pytorchjob render --check`` of a template written elsewhere refuses it too (the rule and its
upstream source: ``pytorch_contract.k8s_names.QUEUE_NAME``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend_plugin.cli import main
from pytorch_core.config import ConfigError
from tests.helpers.jobs import load

PATHS = ["--inputs", "s3://b/run-1/inputs.pb", "--output-prefix", "s3://b/run-1"]
REFUSED = ["Team_A", "team_a", "Research", "a..b", "q" * 64]
TAKEN = ["team-a", "team-a.gpu", "research", "q" * 63]


@pytest.mark.parametrize("queue", REFUSED + TAKEN)
def test_the_flytekit_decorator_refuses_at_import_what_kueue_refuses(queue: str) -> None:
    from flytekitplugins_pytorch import pytorch_task

    def train() -> None: ...

    if queue in TAKEN:
        pytorch_task(workers_count=1, queue=queue)(train)
        return
    with pytest.raises(ConfigError) as refused:
        pytorch_task(workers_count=1, queue=queue)(train)
    text = str(refused.value)
    assert text.startswith(f"pytorch_task.queue={queue!r} is not a queue name Kueue admits")
    assert "DNS-1123 subdomain of at most 63 characters" in text and "ValidateQueueName" in text


@pytest.mark.parametrize("queue", REFUSED + TAKEN)
def test_flyte2s_run_policy_refuses_what_kueue_refuses(queue: str) -> None:
    pytest.importorskip("flyte", reason="the Flyte 2 SDK is an extra (flyte2); the newest and readme CI jobs have it")
    from flyte2_pytorch import RunPolicy

    if queue in TAKEN:
        assert RunPolicy(queue=queue).queue == queue
        return
    with pytest.raises(ConfigError, match=r"RunPolicy.queue=.* is not a queue name Kueue admits"):
        RunPolicy(queue=queue)


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob", "jobset"])
@pytest.mark.parametrize("queue", REFUSED + TAKEN)
def test_render_check_refuses_a_template_whose_queue_kueue_refuses(
    queue: str, target: str, tmp_path: Path, capsys
) -> None:
    template = load("sdk_pod_template")
    template["config"]["pytorch.queue"] = queue
    path = tmp_path / "task.json"
    path.write_text(json.dumps(template))
    code = main(["render", "--template", str(path), "--target", target, "--check", *PATHS])
    out = capsys.readouterr()
    if queue in TAKEN:
        assert code == 0, out.err
        assert "admitted intact" in out.out
        return
    assert code != 0
    assert "admitted intact" not in out.out
    said = out.out + out.err
    assert f"config['pytorch.queue']={queue!r}: is not a queue name Kueue admits" in said, said
