"""The inputs hook: the backend connector writes Flyte 1's ``LiteralMap``; the Flyte 2 connector's `Flyte2Jobs`
writes ``flyteidl2.task.Inputs``, what Flyte 2's pod entrypoint parses, and refuses to be built on a connector that
would write the other form. Over gRPC: tests/flyte2/test_connector_flyte2.py.

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
from flytekit.models.literals import LiteralMap
from flyteidl2.task import common_pb2
from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobConnector, ServedJobConnector
from flyte2_backend.connector import Flyte2JobConnector, Flyte2Jobs

out = sys.argv[1]
JobConnector(config=BackendConfig()).write_inputs(None, out + "/flyte1-none.pb")
message = common_pb2.Inputs()
message.literals.add(name="steps").value.scalar.primitive.integer = 7
open(out + "/expected.pb", "wb").write(message.SerializeToString())
jobs = Flyte2Jobs(config=BackendConfig())
jobs.write_inputs(message, out + "/flyte2.pb")
jobs.write_inputs(None, out + "/flyte2-none.pb")
errors = {}
try:
    jobs.write_inputs(LiteralMap(literals={}), out + "/flyte2-literal-map.pb")
except TypeError as e:
    errors["literal_map"] = str(e)
try:
    Flyte2JobConnector(ServedJobConnector(config=BackendConfig()))
except TypeError as e:
    errors["served"] = str(e)
errors["default"] = type(Flyte2JobConnector().jobs).__name__
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


def test_flyte2_refuses_flyte1_inputs_and_a_flyte1_writer(written: tuple[Path, dict]) -> None:
    out, errors = written
    assert "must be a flyteidl2.task.Inputs message, not LiteralMap" in errors["literal_map"]
    assert not (out / "flyte2-literal-map.pb").exists()
    assert "use flyte2_backend.connector.Flyte2Jobs" in errors["served"]
    assert errors["default"] == "Flyte2Jobs"
