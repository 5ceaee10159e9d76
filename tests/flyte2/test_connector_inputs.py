"""The inputs writers: flytekit's connectors write Flyte 1's ``LiteralMap``; the Flyte 2 connector writes
``flyteidl2.task.Inputs`` (`flyte2_backend.connector.write_inputs`), what Flyte 2's pod entrypoint parses, and refuses
the other form; both wrap the process's one job service. Over gRPC: tests/flyte2/test_connector_flyte2.py.

In a process of its own: ``flyte2_backend`` loads flyte's connector server, whose Prometheus metric names flytekit's
(imported by other tests of the session) registers too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from flyteidl.core import literals_pb2
from flyteidl2.task import common_pb2

from tests.flyte2.served import repo_env

DRIVER = """
import json, sys
from flytekit.extend.backend.base_connector import ConnectorRegistry
from flytekit.models.literals import LiteralMap
from flyteidl2.task import common_pb2
from backend_plugin.connector import blobs, shared_service
from flyte2_backend.connector import Flyte2JobConnector, write_inputs

out = sys.argv[1]
blobs.write_inputs(None, out + "/flyte1-none.pb")
message = common_pb2.Inputs()
message.literals.add(name="steps").value.scalar.primitive.integer = 7
open(out + "/expected.pb", "wb").write(message.SerializeToString())
write_inputs(message, out + "/flyte2.pb")
write_inputs(None, out + "/flyte2-none.pb")
errors = {}
try:
    write_inputs(LiteralMap(literals={}), out + "/flyte2-literal-map.pb")
except TypeError as e:
    errors["literal_map"] = str(e)
services = {Flyte2JobConnector().service, *(ConnectorRegistry.get_connector("pytorch", v).service for v in (0, 1))}
errors["shared"] = services == {shared_service()}
print(json.dumps(errors))
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("inputs")
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(out)], capture_output=True, text=True, timeout=120, env=repo_env(), cwd=out
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout.strip().splitlines()[-1])


def test_flyte1_writes_an_empty_literal_map_for_none(written: tuple[Path, dict]) -> None:
    out, _ = written
    assert literals_pb2.LiteralMap.FromString((out / "flyte1-none.pb").read_bytes()) == literals_pb2.LiteralMap()


def test_flyte2_writes_the_inputs_message_as_given(written: tuple[Path, dict]) -> None:
    out, _ = written
    assert (out / "flyte2.pb").read_bytes() == (out / "expected.pb").read_bytes()
    assert [n.name for n in common_pb2.Inputs.FromString((out / "flyte2.pb").read_bytes()).literals] == ["steps"]


def test_flyte2_writes_an_empty_message_for_none(written: tuple[Path, dict]) -> None:
    out, _ = written
    assert common_pb2.Inputs.FromString((out / "flyte2-none.pb").read_bytes()) == common_pb2.Inputs()


def test_flyte2_refuses_flyte1_inputs(written: tuple[Path, dict]) -> None:
    out, errors = written
    assert "must be a flyteidl2.task.Inputs message, not LiteralMap" in errors["literal_map"]
    assert not (out / "flyte2-literal-map.pb").exists()


def test_flyte2_and_flytekits_connectors_share_the_processs_one_service(written: tuple[Path, dict]) -> None:
    _, errors = written
    assert errors["shared"] is True
