"""Both images build from their contexts: Dockerfile.gpu and Dockerfile.connector.

No Docker engine runs here, so the build is reproduced as closely as the machine allows: the build context is exactly
the Dockerfile's COPY sources with `.dockerignore` applied, the package is installed from that context the way the
Dockerfile's RUN line does (a fresh venv instead of the base image; torch, which the GPU base image brings, from the
local wheel), the sources are removed as the RUN line removes them, and the image's own import check runs.

The fast tests check what can be read without installing: every package setup.py ships is copied, nothing copied is
excluded by `.dockerignore`, and the connector image agrees with `backend_plugin/deploy/connector.yaml`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import warnings
from pathlib import Path

import pytest
import yaml

from tests.sdk.guarded_run import Guarded, run_guarded

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = ["Dockerfile.gpu", "Dockerfile.connector"]
#: The packages setup.py installs (its find_packages include list), each of which an image must copy.
PACKAGES = ["flytekitplugins_pytorch", "backend_plugin", "pytorch_contract", "pytorch_core"]
CONNECTOR_PACKAGES = ["flyte2_pytorch", "flyte2_backend"]
"""Copied into the connector image only: it serves Flyte 2 too (the GPU image is a flytekit task image)."""


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
    extra = CONNECTOR_PACKAGES if dockerfile == "Dockerfile.connector" else []
    for needed in [*PACKAGES, *extra, "setup.py", "pyproject.toml", "README.md", "constraints.txt"]:
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
    m = re.search(r'pip install --no-cache-dir -c constraints.txt "\.\[([\w,-]+)\]"', run)
    assert m, f"{dockerfile}: unexpected install line {run!r}"
    extra = m.group(1)
    checks = re.findall(r'python -c "([^"]+)"', run)
    assert checks, f"{dockerfile}: no import check in {run!r}"

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
    for check in checks:  # each in a process of its own, as the RUN line runs them
        result = subprocess.run(
            [str(python), "-c", check], cwd=context, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"{check}\n{result.stderr[-3000:]}"


# --- fast registration: where flytekit unpacks the code, the image's user can write -----------------------------


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a Dockerfile says about its final user and the directories that user owns.

    Attributes:
        uid: the final ``USER``'s uid.
        workdir: the final ``WORKDIR``.
        home: the user's home (``useradd --home-dir``, else ``/home/<name>`` with ``--create-home``).
        owned: (path, recursive) for every ``chown`` to the user in a RUN and every ``COPY --chown`` to it.
        env: the ``ENV`` settings.
    """

    uid: int
    workdir: str
    home: str
    owned: tuple[tuple[str, bool], ...]
    env: dict[str, str]

    def writable(self, path: str) -> bool:
        """Whether the user owns ``path`` (a directory the image has): it, or a directory chowned recursively above."""
        path = posixpath.normpath(path)
        for owned, recursive in self.owned:
            if path == owned or (recursive and path.startswith(owned.rstrip("/") + "/")):
                return True
        return False


def image_layout(dockerfile: str) -> Layout:
    """Read :class:`Layout` from a Dockerfile's USER, WORKDIR, ENV, COPY --chown and RUN's useradd and chown."""
    names: dict[str, int] = {}
    homes: dict[str, str] = {}
    owned: list[tuple[str, bool]] = []
    env: dict[str, str] = {}
    uid, workdir = 0, "/"
    for instruction, args in _instructions(dockerfile):
        if instruction == "RUN":
            lexer = shlex.shlex(args, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            commands: list[list[str]] = [[]]
            for token in lexer:
                commands.append([]) if token in ("&&", ";", "||", "|") else commands[-1].append(token)
            for words in commands:
                if words[:1] == ["useradd"]:
                    name = words[-1]
                    names[name] = int(words[words.index("--uid") + 1])
                    if "--home-dir" in words:
                        homes[name] = words[words.index("--home-dir") + 1]
                    elif "--create-home" in words or "-m" in words:
                        homes[name] = f"/home/{name}"
                elif words[:1] == ["chown"]:
                    recursive = "-R" in words
                    operands = [w for w in words[1:] if not w.startswith("-")]
                    owner, paths = operands[0].split(":")[0], operands[1:]
                    owned += [(posixpath.normpath(p), recursive) for p in paths if owner in names or owner.isdigit()]
        elif instruction == "COPY" and "--chown=" in args:
            words = shlex.split(args)
            owner = next(w for w in words if w.startswith("--chown=")).split("=", 1)[1].split(":")[0]
            if owner in names or owner.isdigit():
                owned.append((posixpath.normpath(words[-1]), True))
        elif instruction == "USER":
            user = args.split(":")[0]
            uid = int(user) if user.isdigit() else names[user]
        elif instruction == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args))
        elif instruction == "ENV":
            env.update(dict(w.split("=", 1) for w in shlex.split(args)))
    user_names = [n for n, u in names.items() if u == uid]
    # ownership by name or by number, of the final user only
    mine = tuple(o for o in owned if uid != 0)
    home = homes.get(user_names[0], "/root") if user_names else "/root"
    return Layout(uid=uid, workdir=workdir, home=home, owned=mine, env=env)


def fast_registration_destinations() -> dict[str, str]:
    """Where flytekit unpacks fast-registered code in the GPU image, by command, from flytekit's own defaults:
    ``pyflyte register``'s ``--destination-dir`` (``/root``) and ``pyflyte run --remote``'s (``.``, the workdir)."""
    with warnings.catch_warnings():  # flytekit's CLI reads click.__version__, which click deprecates
        warnings.simplefilter("ignore", DeprecationWarning)
        from flytekit.clis.sdk_in_container.register import register
        from flytekit.clis.sdk_in_container.run import RunLevelParams

    (register_default,) = [p.default for p in register.params if p.name == "destination_dir"]
    run_default = RunLevelParams.__dataclass_fields__["destination_dir"].default
    workdir = image_layout("Dockerfile.gpu").workdir
    return {
        "pyflyte register": posixpath.normpath(posixpath.join(workdir, str(register_default))),
        "pyflyte run --remote": posixpath.normpath(posixpath.join(workdir, str(run_default))),
    }


def test_the_layout_reader_sees_ownership() -> None:
    """The reader says no as well as yes: the connector image's user owns nothing the GPU image's owns."""
    gpu, connector = image_layout("Dockerfile.gpu"), image_layout("Dockerfile.connector")
    assert gpu.uid == 1000 and gpu.owned
    assert not gpu.writable("/usr/lib") and not gpu.writable("/")
    assert not connector.writable("/root")


def test_fast_registration_unpacks_where_the_gpu_image_user_can_write() -> None:
    """Every documented register and run command uses flytekit's default destination: the image fits it."""
    layout = image_layout("Dockerfile.gpu")
    for command, destination in fast_registration_destinations().items():
        assert layout.writable(destination), (
            f"`{command}` unpacks the code into {destination} (flytekit's default), which USER {layout.uid} of "
            "Dockerfile.gpu cannot write"
        )
    assert layout.env.get("HOME") == layout.home and layout.writable(layout.home)
    assert layout.env["MNIST_CACHE_DIR"].startswith(layout.home + "/") and layout.writable(
        layout.env["MNIST_CACHE_DIR"]
    )
    assert layout.writable(posixpath.join(layout.workdir, "examples/mnist/workflow.py"))
    docs = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
    passed = re.findall(r"--destination-dir[ =](\S+)", docs)
    assert all(layout.writable(d) for d in passed), passed


_UNPACK = (
    "import sys\n"
    "from flytekit.tools.fast_registration import download_distribution\n"
    "download_distribution(sys.argv[1], sys.argv[2])\n"
)


def _unpack_as_image_user(layout: Layout, base: Path, destination: str, *, apply_layout: bool) -> Guarded:
    """Unpack a fast-registration archive with flytekit's own function, as the image's uid, into `destination` of a
    directory tree laid out as the image: the base image's /root (root's, mode 0700), then the Dockerfile's chowns."""
    fs = base / "fs"
    (fs / "root").mkdir(parents=True)
    os.chmod(fs / "root", 0o700)
    if apply_layout:
        for path, recursive in layout.owned:
            target = fs / path.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            for item in [target, *(target.rglob("*") if recursive else [])]:
                os.chown(item, layout.uid, layout.uid)
    package = base / "fastabc123.tar.gz"
    with tarfile.open(package, "w:gz") as archive:
        archive.add(ROOT / "examples" / "mnist" / "workflow.py", arcname="examples/mnist/workflow.py")
    os.chmod(package, 0o644)
    site = sysconfig.get_paths()["purelib"]
    cmd = ["setpriv", f"--reuid={layout.uid}", f"--regid={layout.uid}", "--clear-groups"]
    cmd += [
        "env",
        f"HOME={base}",
        f"PYTHONPATH={site}{os.pathsep}{ROOT}",
        "/usr/bin/python3",
        "-c",
        _UNPACK,
        str(package),
    ]
    cmd.append(str(fs / destination.lstrip("/")))
    return run_guarded(cmd, max_procs=8, timeout_s=120, cwd=str(base), env={"PATH": os.environ["PATH"]})


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["pyflyte register", "pyflyte run --remote"])
def test_flytekit_unpacks_as_the_gpu_image_user(command: str) -> None:
    """flytekit's unpacking, run for real as uid 1000 into the GPU image's destination, succeeds with the image's
    layout; in the base image's layout (a root-owned /root) the same unpack fails, so the check can fail."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to lay the directories out with the image's owners and run as its uid")
    if not (shutil.which("setpriv") and Path("/usr/bin/python3").is_file()):
        pytest.skip("needs setpriv and /usr/bin/python3 (a Python uid 1000 can run)")
    site = Path(sysconfig.get_paths()["purelib"])
    closed = [str(p) for p in (site, *site.parents, ROOT, *ROOT.parents) if not os.stat(p).st_mode & 0o001]
    if closed:  # CI's work directory is opened for this (.ci/run)
        pytest.skip(f"uid 1000 cannot reach the venv or the checkout: {sorted(set(closed))} are closed to others")
    layout = image_layout("Dockerfile.gpu")
    destination = fast_registration_destinations()[command]
    base = Path(tempfile.mkdtemp(prefix="image-fs-"))
    try:
        os.chmod(base, 0o755)
        (base / "image").mkdir()
        (base / "base").mkdir()
        for d in (base / "image", base / "base"):
            os.chmod(d, 0o755)
        ok = _unpack_as_image_user(layout, base / "image", destination, apply_layout=True)
        assert ok.returncode == 0, ok.output[-3000:]
        unpacked = base / "image" / "fs" / destination.lstrip("/") / "examples" / "mnist" / "workflow.py"
        assert unpacked.read_bytes() == (ROOT / "examples" / "mnist" / "workflow.py").read_bytes()
        denied = _unpack_as_image_user(layout, base / "base", destination, apply_layout=False)
        assert denied.returncode != 0 and "Permission denied" in denied.output, denied.output[-3000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)
