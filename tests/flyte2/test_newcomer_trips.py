"""What a newcomer to the Flyte 2 front-end tripped on, each done the way they did it.

- an ``async def`` task runs (every rank runs the coroutine), locally with ``flyte.run`` and when called directly;
- a task called directly (no ``flyte.run``) runs its ranks, as a flytekit task's direct call does;
- the flytekit front-end's config in ``flyte.TaskEnvironment`` (and the Flyte 2 config in flytekit's ``@task``)
  fails naming the right package, in either import order;
- the Flyte 2 MNIST example runs without flyte's red "Failed to extract schema" error;
- one line instead of a raw traceback: ``import flyte2_pytorch`` without flyte, ``python -m flyte2_backend``
  without its extra, ``RestartPolicy.FAILURE``, ``Connector(worker=...)``;
- ``pyflyte-migrate run`` on a flytekit file of this project, without ``migrate.register()``.

Runs that start ranks or patch flytekit run in a fresh interpreter under a process-count guard.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import cloudpickle
import flyte
import pytest

import flyte2_pytorch as f2
from pytorch_core._control import dumps
from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
MAX_PROCS = 12
BOUND_S = 150.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_case(case: str, tmp_path: Path) -> dict:
    result = run_guarded(
        [sys.executable, "-m", "tests.flyte2.newcomer_tasks", case],
        max_procs=MAX_PROCS,
        timeout_s=BOUND_S,
        cwd=str(tmp_path),
        env=_env(),
    )
    assert result.killed_for == "", result.output[-4000:]
    assert result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], result.leftover
    return json.loads(result.output.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------------------
# async def tasks, and direct calls


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_an_async_task_runs_with_flyte_run(tmp_path: Path) -> None:
    assert run_case("run-async", tmp_path)["output"] == [2, 10 + 11]


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
@pytest.mark.parametrize("case", ["direct-sync", "direct-async"])
def test_a_direct_call_runs_the_ranks(case: str, tmp_path: Path) -> None:
    assert run_case(case, tmp_path)["output"] == [2, 10 + 11]


def test_a_direct_call_of_an_async_task_returns_a_coroutine() -> None:
    """As flyte's own direct call of an ``async def`` task does: the caller awaits it."""
    env = flyte.TaskEnvironment(name="direct-async-shape", plugin_config=f2.PyTorch())

    @env.task
    async def train(x: int) -> int:
        return x

    pending = train.forward(x=1)
    assert hasattr(pending, "__await__")
    pending.close()  # never awaited here: the ranks are the slow test's


# ---------------------------------------------------------------------------------------------------------------
# The other front-end's config


def test_flytekits_config_in_a_task_environment_names_flyte2_pytorch() -> None:
    from flytekitplugins_pytorch import Elastic, PyTorch

    for config in (PyTorch(), Elastic()):
        env = flyte.TaskEnvironment(name=f"mixed-{type(config).__name__.lower()}", plugin_config=config)
        with pytest.raises(f2.ConfigError) as raised:

            @env.task
            def train(x: int) -> int:
                return x

        message = str(raised.value)
        assert f"flyte2_pytorch.{type(config).__name__}(...)" in message and "No task plugin" not in message


def test_flytekits_config_built_before_flyte_is_imported_names_flyte2_pytorch(tmp_path: Path) -> None:
    out = run_case("flytekit-config-first", tmp_path)
    assert out["error"] == "ConfigError" and "flyte2_pytorch.PyTorch(...)" in out["message"]


def test_flyte2s_config_in_flytekits_task_names_the_flytekit_front_end() -> None:
    """Without it flytekit would make a plain one-process task of it, silently."""
    import flytekit

    with pytest.raises(f2.ConfigError, match=r"flytekitplugins_pytorch\.PyTorch\(\.\.\.\)"):

        @flytekit.task(task_config=f2.PyTorch())
        def train(x: int) -> int:
            return x


# ---------------------------------------------------------------------------------------------------------------
# The Flyte 2 MNIST example: no red error on a successful run


def test_a_result_class_of_main_keeps_its_dataclass_fields() -> None:
    """cloudpickle carries a class of ``__main__`` by value and, loading it where the class exists, resets its
    fields' ``dataclasses.MISSING`` to a copy: flyte's schema extraction then fails ("Failed to extract schema for
    object MnistRun"). The launcher's pickling keeps the singleton."""
    module = types.ModuleType("newcomer_main")
    sys.modules[module.__name__] = module
    exec(
        "import dataclasses\n@dataclasses.dataclass\nclass Run:\n    accuracies: list\n    world_size: int = 1\n",
        module.__dict__,
    )
    cloudpickle.register_pickle_by_value(module)
    try:
        cls = module.Run
        cloudpickle.loads(dumps(cls(accuracies=[1.0])))
        assert all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))
        assert dataclasses.fields(cls)[0].default is dataclasses.MISSING
        cloudpickle.loads(cloudpickle.dumps(cls(accuracies=[1.0])))  # plain cloudpickle: the damage the fix avoids
        assert dataclasses.fields(cls)[0].default is not dataclasses.MISSING
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        sys.modules.pop(module.__name__, None)


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_the_flyte2_mnist_example_runs_without_a_schema_error(tmp_path: Path) -> None:
    """As the example's docstring says to run it, with a small train limit (600: 4 optimizer steps)."""
    if not os.environ.get("MNIST_DATA_DIR"):
        pytest.fail("set MNIST_DATA_DIR to a directory with the four MNIST files", pytrace=False)
    env = _env()
    env["MNIST_CACHE_DIR"] = str(tmp_path / "cache")
    result = run_guarded(
        [sys.executable, "-m", "examples.mnist.workflow_flyte2", "--train-limit", "600", "--test-limit", "200"],
        max_procs=MAX_PROCS,
        timeout_s=BOUND_S,
        cwd=str(ROOT),
        env=env,
    )
    assert result.returncode == 0, result.output[-4000:]
    assert "Failed to extract schema" not in result.output and " ERROR " not in result.output, result.output[-4000:]
    run = json.loads(result.output.strip().splitlines()[-1])
    assert run["world_size"] == 3 and len(run["accuracies"]) == 1


# ---------------------------------------------------------------------------------------------------------------
# One line, not a raw traceback


def _without_flyte(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter where ``flyte`` cannot be imported (as where the flyte2 extra is not installed)."""
    prelude = "import sys\nfor m in ('flyte', 'flyteidl2'):\n    sys.modules[m] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120
    )


def test_importing_flyte2_pytorch_without_flyte_says_what_to_install() -> None:
    proc = _without_flyte("import flyte2_pytorch")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: flyte2_pytorch needs the Flyte 2 SDK ('flyte')"), proc.stderr
    assert "pip install -c constraints.txt '.[flyte2]'" in last
    assert "During handling" not in proc.stderr  # no chained raw error


def test_serving_flyte2_backend_without_its_extra_is_one_line() -> None:
    proc = _without_flyte(
        "import runpy\nsys.argv = ['flyte2_backend']\nrunpy.run_module('flyte2_backend', run_name='__main__')"
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m flyte2_backend: needs 'flyte'"), proc.stderr
    assert "'.[flyte2-backend]'" in lines[0]


@pytest.mark.parametrize(
    ("name", "hint"),
    [("FAILURE", "did you mean RestartPolicy.ON_FAILURE?"), ("Exit_Code", "RestartPolicy.EXIT_CODE")],
)
def test_a_misspelled_policy_names_the_members(name: str, hint: str) -> None:
    with pytest.raises(AttributeError) as raised:
        getattr(f2.RestartPolicy, name)
    assert str(raised.value).startswith(f"RestartPolicy.{name} is not a member; ") and hint in str(raised.value)
    assert "NEVER, ON_FAILURE, ALWAYS, EXIT_CODE" in str(raised.value)
    assert f2.RestartPolicy.EXIT_CODE.value == "ExitCode" and not hasattr(f2.CleanPodPolicy, "NONE_")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"worker": f2.Worker(replicas=2)}, "Connector.worker is not an option; it wraps a config: "),
        ({"nproc_per_node": 2}, "Connector(flyte2_pytorch.PyTorch(nproc_per_node=...))"),
        ({"confg": f2.PyTorch()}, "did you mean 'config'?"),
        ({}, "Connector takes the task's config"),
    ],
)
def test_a_connector_given_a_configs_option_says_how_to_wrap(kwargs: dict, message: str) -> None:
    with pytest.raises(f2.UnknownOptionError) as raised:
        f2.Connector(**kwargs)
    assert message in str(raised.value) and isinstance(raised.value, TypeError)
    assert f2.Connector(f2.PyTorch()).config == f2.Connector(config=f2.PyTorch()).config


# ---------------------------------------------------------------------------------------------------------------
# pyflyte-migrate run, without migrate.register()

MIGRATED = """
from flytekitplugins_pytorch import pytorch_task


@pytorch_task(workers_count=1)
def add_world(x: int) -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    dist.destroy_process_group()
    return x + world
"""


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
@pytest.mark.skipif(importlib.util.find_spec("flyte_migrate") is None, reason="flyte-migrate not installed")
def test_pyflyte_migrate_runs_a_flytekit_file_of_this_project(tmp_path: Path) -> None:
    (tmp_path / "train_flytekit.py").write_text(textwrap.dedent(MIGRATED))
    cli = Path(sys.executable).with_name("pyflyte-migrate")
    result = run_guarded(
        [str(cli), "run", "train_flytekit.py", "add_world", "--x", "1"],
        max_procs=MAX_PROCS,
        timeout_s=BOUND_S,
        cwd=str(tmp_path),
        env=_env(),
    )
    assert result.returncode == 0, result.output[-4000:]
    assert "not supported" not in result.output and "o0=3" in result.output, result.output[-4000:]
