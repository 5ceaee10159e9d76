"""Both images build from their contexts: Dockerfile.gpu and Dockerfile.connector.

No Docker engine runs here, so the build is reproduced as closely as the machine allows: the build context is exactly
the Dockerfile's COPY sources with `.dockerignore` applied, the package is installed from that context the way the
Dockerfile's RUN line does (a fresh venv instead of the base image; torch, which the GPU base image brings, from the
local wheel), the sources are removed as the RUN line removes them, and the image's own import check runs.

The fast tests check what can be read without installing: every package setup.py ships is copied, nothing copied is
excluded by `.dockerignore`, and the connector image agrees with `backend_plugin/deploy/connector.yaml`.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = ["Dockerfile.gpu", "Dockerfile.connector"]
#: The packages setup.py installs (its find_packages include list), each of which an image must copy.
PACKAGES = ["flytekitplugins_pytorch", "backend_plugin", "pytorch_contract"]


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, with continuation lines joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in (ROOT / dockerfile).read_text().splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in lines]


def copy_sources(dockerfile: str) -> list[str]:
    """The sources of every COPY (flags such as ``--chown`` dropped; the last word is the destination)."""
    sources: list[str] = []
    for instruction, args in _instructions(dockerfile):
        if instruction == "COPY":
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            sources += words[:-1]
    return sources


def install_run(dockerfile: str) -> str:
    """The RUN line that installs the package (the one with ``pip install``)."""
    (run,) = [args for instruction, args in _instructions(dockerfile) if instruction == "RUN" and "pip install" in args]
    return run


def dockerignore() -> list[str]:
    """The patterns of `.dockerignore` (exclusions only: the file has no ``!`` lines)."""
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [p for p in patterns if p and not p.startswith("#")]
    assert not [p for p in patterns if p.startswith("!")], "re-inclusions are not handled here"
    return patterns


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether Docker leaves `relative` (a path from the context root) out, or a directory above it."""
    parts = Path(relative).parts
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        for pattern in patterns:
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            if pattern.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pattern[3:]):
                return True
    return False


def build_context(dockerfile: str, target: Path) -> list[str]:
    """Copy exactly what `docker build -f DOCKERFILE .` would send for the COPY sources; return the files copied."""
    patterns = dockerignore()
    copied: list[str] = []
    for source in copy_sources(dockerfile):
        assert not ignored(source, patterns), f"{dockerfile} copies {source}, which .dockerignore excludes"
        path = ROOT / source
        assert path.exists(), f"{dockerfile} copies {source}, which does not exist"
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if ignored(relative, patterns):
                continue
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target / relative)
            copied.append(relative)
    return copied


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_every_package_setup_py_ships_is_copied(dockerfile: str) -> None:
    sources = copy_sources(dockerfile)
    for needed in [*PACKAGES, "setup.py", "pyproject.toml", "README.md", "constraints.txt"]:
        assert needed in sources, f"{dockerfile} does not COPY {needed}"
    assert not [s for s in sources if ignored(s, dockerignore())]


def test_dockerignore_matching() -> None:
    """The matcher the context tests rely on can say no as well as yes."""
    patterns = dockerignore()
    assert ignored("tests/test_images.py", patterns)
    assert ignored("backend_plugin/__pycache__/cli.cpython-311.pyc", patterns)
    assert ignored("flytekitplugins_pytorch.egg-info/PKG-INFO", patterns)
    assert not ignored("backend_plugin/cli.py", patterns)
    assert not ignored("backend_plugin/deploy/connector.yaml", patterns)


def _manifest_container() -> dict:
    docs = list(yaml.safe_load_all((ROOT / "backend_plugin" / "deploy" / "connector.yaml").read_text()))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    return deployment["spec"]["template"]


def test_connector_image_runs_as_the_manifest_says() -> None:
    """Same uid/gid, the same command and arguments, and the image name the docs build and push."""
    pod = _manifest_container()
    (container,) = pod["spec"]["containers"]
    instructions = dict(_instructions("Dockerfile.connector"))
    assert instructions["USER"] == f"{pod['spec']['securityContext']['runAsUser']}:65532"
    assert pod["spec"]["securityContext"]["runAsGroup"] == 65532
    assert json.loads(instructions["ENTRYPOINT"]) + json.loads(instructions["CMD"]) == (
        container["command"] + container["args"]
    )
    version = re.search(r'version="([^"]+)"', (ROOT / "setup.py").read_text()).group(1)  # type: ignore[union-attr]
    assert container["image"] == f"ghcr.io/example/flytekitplugins-pytorch-connector:{version}"
    cluster = (ROOT / "docs" / "cluster.md").read_text()
    build = "docker build -f Dockerfile.connector -t $REGISTRY/flytekitplugins-pytorch-connector:$VERSION ."
    assert build in cluster and "REGISTRY=ghcr.io/example" in cluster and f"VERSION={version}" in cluster


def _uv() -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(uv).exists():
        pytest.fail("uv is needed to build the image contexts (pip install uv)", pytrace=False)
    return uv


def torch_requirement() -> list[str]:
    """torch 2.13.0, the CPU build from /opt/wheels where the machine has one (an unpinned torch pulls CUDA)."""
    if glob.glob("/opt/wheels/torch-2.13.0+cpu-*.whl"):
        return ["--find-links", "/opt/wheels", "torch==2.13.0+cpu"]
    return ["torch==2.13.0"]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_image_context_builds_and_passes_its_own_import_check(dockerfile: str, tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    copied = build_context(dockerfile, context)
    assert not [f for f in copied if f.startswith(("tests/", "benchmarks/"))]
    run = install_run(dockerfile)
    m = re.search(r'pip install --no-cache-dir -c constraints.txt "\.\[(\w+)\]"', run)
    assert m, f"{dockerfile}: unexpected install line {run!r}"
    extra = m.group(1)
    check = re.search(r'python -c "([^"]+)"', run)
    assert check, f"{dockerfile}: no import check in {run!r}"

    venv = tmp_path / "venv"
    uv = _uv()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env, timeout=120)
    env["VIRTUAL_ENV"] = str(venv)
    if dockerfile == "Dockerfile.gpu":  # the CUDA base image brings torch 2.13.0; here the CPU build stands in
        torch = [uv, "pip", "install", "-q", *torch_requirement()]
        subprocess.run(torch, check=True, env=env, timeout=300, cwd=context)
    # the RUN line's install, from the context, non-editable (uv instead of pip: same requirements, same pins)
    out = subprocess.run(
        [uv, "pip", "install", "-q", "-c", "constraints.txt", f".[{extra}]"],
        env=env,
        cwd=context,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for entry in context.iterdir():  # the RUN line's `rm -rf <workdir>/*`
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    python = venv / "bin" / "python"
    result = subprocess.run(
        [str(python), "-c", check.group(1)], cwd=context, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
