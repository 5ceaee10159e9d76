#!/usr/bin/env python3
"""The install test: the README's two commands, verbatim, in a fresh clone, as a newcomer runs them.

1. ``git clone`` the repository's HEAD into ``WORKDIR/repo``, with nothing beside it;
2. the README's run command (``<!-- command:run -->``), verbatim, in that clone: a fresh ``.venv``, the install, and
   the distributed MNIST workflow, which must print its evaluation report, at 99% test accuracy or more, write
   nothing beside the clone, and leave no process running. The data comes only from ``MNIST_DATA_DIR`` in the
   environment (CI's own copy; required): the cache is an empty folder of the work directory, which must end up
   holding the four files, and the download mirrors are an unanswered loopback port, so a download cannot stand in
   for it;
3. ``pytorchjob render`` of the README's example in the run command's environment: a PyTorchJob with one Master and
   the example's two Workers;
4. the README's test command (``<!-- command:test -->``), verbatim, in the same clone and ``.venv`` (one after the
   other, as the README implies).

Each ``pip install`` of the commands is timed (bash's xtrace with timestamps); the README promises an install in a
minute or two with the pip that ships with Python, and a slower one is reported as a warning. Only the standard
library is used: this runs before any virtual environment exists.

Usage: ``MNIST_DATA_DIR=<folder> python3 .ci/readme_install.py WORKDIR`` (WORKDIR must not exist; it is left in place
for further checks). ``python3 .ci/readme_install.py --block PAGE MARKER`` prints the lines of a page's fenced block
after ``<!-- MARKER -->`` (the cluster job's commands, from docs/testing.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.sdk.guarded_run import group_members  # noqa: E402 - standard library only, as this script is

INSTALL_BUDGET_S = 120.0
#: The test accuracy the MNIST workflow passes with its defaults (docs/quickstart.md: 99% in one epoch).
MIN_ACCURACY = 99.0
#: bash prints each command it runs, prefixed with this (expanded): '+' repeated by nesting depth, then the time.
PS4 = "+@@ ${EPOCHREALTIME} "


def readme_block(text: str, marker: str) -> str:
    """The fenced block after ``<!-- marker -->`` in the README."""
    m = re.search(rf"<!-- {re.escape(marker)} -->\s*```(?:bash|sh|python)?\n(.*?)```", text, re.S)
    if not m:
        sys.exit(f"README.md has no fenced block after <!-- {marker} -->")
    return m.group(1).strip()


def clean_env() -> dict[str, str]:
    """The caller's environment without any active virtual environment (CI may call us from one)."""
    env = dict(os.environ)
    venv = env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    parts = env.get("PATH", "").split(os.pathsep)
    if venv:
        parts = [p for p in parts if not p.startswith(venv)]
    env["PATH"] = os.pathsep.join(parts)
    return env


MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def mnist_env(env: dict[str, str], work: Path) -> dict[str, str]:
    """`env` where the MNIST data can come only from ``$MNIST_DATA_DIR``: an empty cache, no reachable mirror."""
    data = env.get("MNIST_DATA_DIR", "")
    if not data:
        sys.exit("MNIST_DATA_DIR is not set: give the folder with the four MNIST files (raw or .gz)")
    missing = [n for n in MNIST_FILES if not (Path(data) / n).is_file() and not (Path(data) / f"{n}.gz").is_file()]
    if missing:
        sys.exit(f"MNIST_DATA_DIR={data} lacks {', '.join(missing)} (raw or .gz)")
    return {
        **env,
        "MNIST_DATA_DIR": str(Path(data).resolve()),
        "MNIST_CACHE_DIR": str(work / "mnist-cache"),
        "MNIST_MIRRORS": "http://127.0.0.1:9/",  # the discard port: nothing answers, so nothing is downloaded
    }


def run_traced(cmd: str, cwd: Path, env: dict[str, str], log: Path) -> tuple[int, str, list[tuple[str, float]]]:
    """Run `cmd` verbatim with bash; return its exit code, its stdout and (top-level command, seconds) pairs."""
    started = time.monotonic()
    with log.open("w") as trace:
        # bash ignores a PS4 from the environment when run as root, so the trace is switched on in the script;
        # the command itself follows verbatim.
        proc = subprocess.Popen(
            ["bash", "-c", f"PS4='{PS4}'\nset -x\n{cmd}"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=trace,
            text=True,
            start_new_session=True,  # what it starts stays in its process group, where `left_running` looks
        )
        stdout, _ = proc.communicate()
    ended = time.time()
    left = left_running(proc.pid)
    if left:
        sys.exit(f"processes left running after `{cmd}`: {left}")
    print(stdout[-4000:], end="", flush=True)
    steps: list[tuple[str, float]] = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"^(\++)@@ (\d+\.\d+) (.*)$", line)
        if m and len(m.group(1)) == 1:
            steps.append((m.group(3), float(m.group(2))))
    timed = [(c, (steps[i + 1][1] if i + 1 < len(steps) else ended) - t) for i, (c, t) in enumerate(steps)]
    print(f"[{time.monotonic() - started:.0f} s in all]", flush=True)
    return proc.returncode, stdout, timed


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "(gone)"


def left_running(group: int) -> list[str]:
    """The processes still in process group `group` (a command run in a session of its own), a few seconds after it
    ended: what it started must end with it."""
    deadline = time.monotonic() + 5.0
    while True:
        left = group_members(group)
        if not left or time.monotonic() > deadline:
            return [f"{pid} {_name(pid)}" for pid in left]
        time.sleep(0.2)


def report_installs(name: str, timed: list[tuple[str, float]]) -> list[str]:
    """Print the time of each pip install; return warnings for those over the README's promise."""
    warnings = []
    for command, seconds in timed:
        if command.startswith("pip install"):
            print(f"install time ({name}): {seconds:6.1f} s  {command}", flush=True)
            if seconds > INSTALL_BUDGET_S:
                warnings.append(f"{name}: `{command}` took {seconds:.0f} s (> {INSTALL_BUDGET_S:.0f} s)")
    return warnings


def check_render(repo: Path, env: dict[str, str], example: str) -> None:
    """`pytorchjob render` of the README example in the run command's .venv: one Master and two Workers."""
    script = repo.parent / "readme_example.py"
    script.write_text(example, encoding="utf-8")
    venv_bin = repo / ".venv" / "bin"
    render = subprocess.run(
        [str(venv_bin / "pytorchjob"), "render", str(script), "all_reduce"],
        cwd=repo.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if render.returncode != 0:
        sys.exit(f"pytorchjob render failed ({render.returncode}):\n{render.stderr[-3000:]}")
    check = (
        "import sys, yaml\n"
        "job = yaml.safe_load(sys.stdin)\n"
        "specs = job['spec']['pytorchReplicaSpecs']\n"
        "assert job['kind'] == 'PyTorchJob', job['kind']\n"
        "assert specs['Master']['replicas'] == 1 and specs['Worker']['replicas'] == 2, specs\n"
        "print('rendered', job['apiVersion'], job['kind'], 'Master x1, Worker x2')\n"
    )
    out = subprocess.run(
        [str(venv_bin / "python"), "-c", check], input=render.stdout, capture_output=True, text=True, env=env
    )
    if out.returncode != 0:
        sys.exit(f"the rendered job is not the README example's:\n{out.stderr[-3000:]}\n{render.stdout[:3000]}")
    print(out.stdout, end="", flush=True)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--block":
        # `--block PAGE MARKER`: the lines of a page's fenced block after <!-- MARKER --> (docs/testing.md's
        # devcluster commands, which the cluster job runs as the page gives them)
        print(readme_block((ROOT / sys.argv[2]).read_text(encoding="utf-8"), sys.argv[3]))
        return 0
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    work = Path(sys.argv[1]).resolve()
    if work.exists():
        sys.exit(f"{work} exists; give a new directory")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    run_cmd, test_cmd = readme_block(readme, "command:run"), readme_block(readme, "command:test")
    example = readme_block(readme, "snippet:example")

    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    if dirty.strip():
        print("note: uncommitted changes are not in the clone (it is of HEAD)", flush=True)
    work.mkdir(parents=True)
    repo = work / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True)
    env = mnist_env(clean_env(), work)
    warnings: list[str] = []

    print(f"=== README run command, in {repo}\n{run_cmd}", flush=True)
    rc, out, timed = run_traced(run_cmd, repo, env, work / "run-command.trace")
    warnings += report_installs("run command", timed)
    if rc != 0:
        print((work / "run-command.trace").read_text(errors="replace")[-4000:], file=sys.stderr)
        sys.exit(f"the README's run command failed with exit code {rc}")
    accuracies = [float(a) for a in re.findall(r"test accuracy (\d+\.\d+)% on \d+ images", out)]
    if not accuracies:
        sys.exit("the README's run command printed no evaluation report")
    if accuracies[-1] < MIN_ACCURACY:
        sys.exit(f"the README's run command reached only {accuracies[-1]}% test accuracy (< {MIN_ACCURACY}%)")
    beside = sorted(p.name for p in work.iterdir())
    if beside != sorted(["repo", "mnist-cache", "run-command.trace"]):
        sys.exit(f"the README's run command wrote beside the clone: {beside}")
    cached = sorted(p.name for p in (work / "mnist-cache").iterdir() if not p.name.startswith("."))
    if cached != sorted(MNIST_FILES):  # the data came through MNIST_DATA_DIR, verified: no mirror answers
        sys.exit(f"the MNIST cache holds {cached}, not the four files from MNIST_DATA_DIR")
    print(f"test accuracy {accuracies[-1]}% (>= {MIN_ACCURACY}%); MNIST only from MNIST_DATA_DIR", flush=True)

    print("=== pytorchjob render of the README example, in the run command's environment", flush=True)
    check_render(repo, env, example)

    print(f"=== README test command, in the same clone\n{test_cmd}", flush=True)
    rc, _, timed = run_traced(test_cmd, repo, env, work / "test-command.trace")
    warnings += report_installs("test command", timed)
    for w in warnings:
        print(f"WARNING: install slower than the README promises: {w}", flush=True)
    if rc != 0:
        print(f"the README's test command failed with exit code {rc}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
