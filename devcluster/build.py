"""`python -m devcluster build`: build every component, or reuse it from the binary cache.

A component is built with its wrapper module (`modules/<name>`), `GOTOOLCHAIN=local` (a loose toolchain line would
fetch a newer Go) and `-mod=readonly` (the committed go.sum is the only truth), into a temporary folder that is
renamed into the cache when every binary is there: an interrupted build leaves no half-filled entry.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from devcluster.components import BY_NAME, COMPONENTS, Component
from devcluster.paths import cache_root


class BuildError(RuntimeError):
    """A component did not build."""


def go_version() -> str:
    """`go env GOVERSION`, e.g. go1.26.8; part of every cache key."""
    try:
        out = subprocess.run(
            ["go", "env", "GOVERSION"], env=go_env(), capture_output=True, text=True, check=True, timeout=60
        )
    except FileNotFoundError as e:
        raise BuildError("devcluster builds its binaries with Go, and `go` is not on PATH: install Go 1.26") from e
    return out.stdout.strip()


def go_env() -> dict[str, str]:
    """The environment of every `go` command: the local toolchain only, and no VCS stamping (module zips have none)."""
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=readonly -buildvcs=false").strip()
    return env


@dataclass(frozen=True)
class Built:
    component: Component
    folder: Path
    seconds: float
    cached: bool

    def binary(self, name: str) -> Path:
        return self.folder / name


def cached(component: Component, gover: str | None = None) -> Path | None:
    """The cache folder of `component` when every binary of it is there, else None."""
    folder = cache_root() / component.key(gover or go_version())
    if all((folder / name).is_file() for name, _ in component.binaries):
        return folder
    return None


def build_one(component: Component, gover: str, log: Path) -> Built:
    start = time.monotonic()
    hit = cached(component, gover)
    if hit is not None:
        return Built(component, hit, time.monotonic() - start, cached=True)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / component.key(gover)
    work = root / f".{final.name}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    ldflags = " ".join(("-s", "-w", *component.ldflags))
    cmd = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", f"{work}/", *(p for _, p in component.binaries)]
    with log.open("ab") as out:
        out.write(f"\n$ (cd {component.module_dir}) {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, cwd=component.module_dir, env=go_env(), stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise BuildError(f"building {component.name} {component.version} failed (exit {proc.returncode}); see {log}")
    # `go build -o dir/ pkg` names each binary after its package's last element; give each the name we call it by.
    for name, pkg in component.binaries:
        produced = work / _default_binary_name(pkg)
        if produced.name != name and produced.exists():
            produced.rename(work / name)
        if not (work / name).is_file():
            shutil.rmtree(work, ignore_errors=True)
            raise BuildError(f"building {component.name}: {name} was not produced from {pkg}")
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    return Built(component, final, time.monotonic() - start, cached=False)


def _default_binary_name(pkg: str) -> str:
    """The name `go build -o dir/` gives a main package's binary: its path's last element, or the one before a major
    version suffix (go.etcd.io/etcd/server/v3 -> server)."""
    parts = pkg.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]):
        return parts[-2]
    return parts[-1]


def build(names: list[str] | None = None, out=sys.stdout) -> dict[str, Built]:
    """Build (or reuse) the named components, all by default; print one line each and return where they are."""
    chosen = [BY_NAME[n] for n in names] if names else list(COMPONENTS)
    gover = go_version()
    log = cache_root() / "build.log"
    cache_root().mkdir(parents=True, exist_ok=True)
    print(f"devcluster build: {gover}, cache {cache_root()}, log {log}", file=out, flush=True)
    results: dict[str, Built] = {}
    total = time.monotonic()
    for component in chosen:
        tty = out.isatty()
        if tty:
            print(f"  {component.name:<18} {component.version:<9} ...", end="", file=out, flush=True)
        built = build_one(component, gover, log)
        how = "cached" if built.cached else "built"
        line = f"  {component.name:<18} {component.version:<9} {how:<6} {built.seconds:7.1f} s"
        print(("\r" if tty else "") + line, file=out, flush=True)
        results[component.name] = built
    print(f"devcluster build: {len(results)} components in {time.monotonic() - total:.1f} s", file=out, flush=True)
    return results


def binaries(names: list[str] | None = None) -> dict[str, Path]:
    """Every binary name -> path, from the cache; raises when a component is not built (run `build` first)."""
    gover = go_version()
    found: dict[str, Path] = {}
    for component in [BY_NAME[n] for n in names] if names else COMPONENTS:
        folder = cached(component, gover)
        if folder is None:
            raise BuildError(
                f"{component.name} {component.version} is not built for {gover}: run `python -m devcluster build`"
            )
        for name, _ in component.binaries:
            found[name] = folder / name
    return found
