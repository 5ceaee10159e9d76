"""The release artifacts: the wheel and sdist `python -m build` makes, installed the way a user installs them.

The wheel is built from a copy of the tracked files (so the checkout gets no build/ or egg-info), or taken from
``$FLYTEKITPLUGINS_PYTORCH_WHEEL`` (e.g. the one `python -m build` wrote to dist/). It is installed, not editable, into
a fresh venv, and everything runs from a directory outside the repository with no ``PYTHONPATH``:

1. the base wheel (no extras) plus torch: the README example prints ``3 6.0``; `pytorchjob render` renders it; a
   template with a pod template (which needs the kubernetes client) gets the one-line answer naming the extra;
2. then the ``[backend]`` extra: the same render succeeds, and `pyflyte serve connector` answers the gRPC health
   service and lists the ``pytorch`` task type.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from pytorch_contract.install import install_hint
from tests.docs.markdown_blocks import print_claims
from tests.sdk.guarded_run import group_members, run_guarded
from tests.test_images import torch_requirement

ROOT = Path(__file__).resolve().parents[1]
WHEEL_ENV = "FLYTEKITPLUGINS_PYTORCH_WHEEL"
README_EXAMPLE = re.search(
    r"<!-- snippet:example -->\s*```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HEALTH = """
import sys, time
import grpc
from flyteidl.admin import agent_pb2
from flyteidl.service import agent_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

port, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while True:
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
            metadata = agent_pb2_grpc.AgentMetadataServiceStub(channel)
            agents = metadata.ListAgents(agent_pb2.ListAgentsRequest(), timeout=5)
        break
    except grpc.RpcError as e:
        if time.monotonic() > deadline:
            sys.exit(f"no answer on 127.0.0.1:{port}: {e.code()}")
        time.sleep(0.5)
print(health_pb2.HealthCheckResponse.ServingStatus.Name(status.status))
print(sorted(c.name for a in agents.agents for c in a.supported_task_categories))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _uv() -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(uv).exists():
        pytest.fail("uv is needed to build and install the wheel (pip install uv)", pytrace=False)
    return uv


def _tracked_copy(target: Path) -> Path:
    """The files git tracks (a fresh clone's content), copied to `target`."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel to test: ``$FLYTEKITPLUGINS_PYTORCH_WHEEL``, else built (with the sdist) from the tracked files."""
    given = os.environ.get(WHEEL_ENV)
    if given:
        return Path(given).resolve()
    source = _tracked_copy(tmp_path_factory.mktemp("source"))
    dist = tmp_path_factory.mktemp("dist")
    out = subprocess.run(
        [_uv(), "build", "--sdist", "--wheel", "--out-dir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (built,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    twine = Path(sys.executable).with_name("twine")
    if twine.exists():  # the release extra; CI's readme job installs it
        check = subprocess.run([str(twine), "check", *map(str, (built, sdist))], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    return built


def test_wheel_holds_the_packages_the_manifests_and_py_typed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("flytekitplugins_pytorch", "backend_plugin", "pytorch_contract", "pytorch_core"):
        assert f"{package}/__init__.py" in names and f"{package}/py.typed" in names, package
    for manifest in ("connector.yaml", "rbac.yaml", "propeller-config.yaml", "README.md"):
        assert f"backend_plugin/deploy/{manifest}" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "examples/", "devcluster/"))]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "pytorchjob = backend_plugin.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_installed_wheel_runs_the_example_render_and_the_connector(wheel: Path, tmp_path: Path) -> None:
    uv, venv, work = _uv(), tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH") and "FLYTE" not in k}
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env, timeout=120)
    # uv's own cache is kept (HOME moves, the cache does not): a cache under HOME would download and unpack torch's
    # 3 GB of CUDA packages again for this one test
    cache = subprocess.run([uv, "cache", "dir"], env=env, capture_output=True, text=True, check=True, timeout=60)
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", HOME=str(tmp_path))
    env.setdefault("UV_CACHE_DIR", cache.stdout.strip())
    constraints = ["-c", str(ROOT / "constraints.txt")]

    def install(*requirements: str) -> None:
        out = subprocess.run(
            [uv, "pip", "install", "-q", *constraints, *requirements], env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]

    def run(*cmd: str, timeout_s: float = 120) -> tuple[int | None, str]:
        done = run_guarded(list(cmd), max_procs=12, timeout_s=timeout_s, cwd=str(work), env=env)
        assert not done.killed_for and not done.leftover, (done.killed_for, done.leftover, done.output[-3000:])
        return done.returncode, done.output

    # 1. the base wheel, no extras (torch as the README installs it)
    install(*torch_requirement(), str(wheel))
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import backend_plugin; print(backend_plugin.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert where.stdout.startswith(str(venv)), where  # the installed copy, not the checkout
    assert README_EXAMPLE, "README.md has no example snippet"
    (work / "example.py").write_text(README_EXAMPLE.group(1))
    (claim,) = print_claims(README_EXAMPLE.group(1))  # the snippet's own "# prints ..." comment
    code, output = run("python", "example.py", timeout_s=240)
    assert code == 0 and output.strip().splitlines()[-1] == claim.output, output[-3000:]

    code, output = run("pytorchjob", "render", "example.py", "all_reduce", "--image", "registry.example.com/t:1")
    assert code == 0, output[-3000:]
    job = yaml.safe_load(output[output.index("apiVersion:") :])
    assert job["kind"] == "PyTorchJob" and job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    # every kind's CRD ships in the wheel: the admission model of the last kind reads its own
    code, output = run("pytorchjob", "render", "example.py", "all_reduce", "--image", "registry.example.com/t:1",
                       "--target", "jobset", "--check")  # fmt: skip
    assert code == 0 and "JobSet all-reduce-" in output and "admitted intact" in output, output[-3000:]

    pod_template = str(ROOT / "tests" / "data" / "templates" / "official_pod_template.json")
    code, output = run("pytorchjob", "render", "--template", pod_template)
    assert (code, output) == (3, f"pytorchjob render: needs 'kubernetes': {install_hint('backend')}\n")

    # 2. the backend extra: the same render works, and the connector serves
    install(f"flytekitplugins-pytorch[backend] @ {wheel.as_uri()}")
    code, output = run("pytorchjob", "render", "--template", pod_template)
    assert code == 0 and "kind: PyTorchJob" in output, output[-3000:]

    port, metrics = _free_port(), _free_port()
    log = (work / "connector.log").open("wb")
    server = subprocess.Popen(
        ["pyflyte", "serve", "connector", "--port", str(port), "--prometheus_port", str(metrics),
         "--modules", "backend_plugin.connector", "--timeout", "180"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        check = subprocess.run(
            [str(venv / "bin" / "python"), "-c", HEALTH, str(port), "90"],
            cwd=work, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert server.poll() is None, (work / "connector.log").read_text()[-3000:]
        assert check.returncode == 0, check.stderr[-2000:] + (work / "connector.log").read_text()[-3000:]
        status, categories = check.stdout.strip().splitlines()
        assert status == "SERVING"
        assert "pytorch" in categories, categories
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        log.close()
    assert not group_members(server.pid)
