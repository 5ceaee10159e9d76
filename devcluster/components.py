"""What devcluster builds: each component's Go module, version and binaries, pinned.

Every component is built from the Go module proxy by a wrapper module of its own (`modules/<name>/go.mod` and its
`go.sum`): their `k8s.io/*` versions differ, and one module holding them all would lift every component to the
newest by minimal version selection. A wrapper's go.mod names the module at the pinned version and its main packages
as `tool` lines; `go mod tidy` wrote its go.sum, so a build downloads exactly what was verified once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

MODULES = Path(__file__).resolve().parent / "modules"

KUBERNETES_VERSION = "v1.37.2"

FLYTE_VERSION = "v1.16.8"
FLYTE_COMMIT = "51877f899c9f"
"""The Flyte 1 release propeller is built from, and its tag's commit (what upstream's release build stamps as Build)."""


def _k8s_stamp(version: str) -> tuple[str, ...]:
    """The `-X` flags that stamp a Kubernetes binary's version, as its release build does (`hack/lib/version.sh`):
    without them `/version` says v0.0.0-master."""
    major, minor = version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return (
        f"-X {pkg}.gitVersion={version}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
    )


@dataclass(frozen=True)
class Component:
    """One thing `devcluster build` makes.

    Attributes:
        name: the wrapper module's folder under `modules/`, and the cache key's first part.
        module: the upstream Go module.
        version: its pinned version (the wrapper's go.mod requires exactly this).
        binaries: binary name -> Go package path of its `main`.
        ldflags: extra linker flags (version stamps).
        why: one line on the version chosen.
    """

    name: str
    module: str
    version: str
    binaries: tuple[tuple[str, str], ...]
    ldflags: tuple[str, ...] = ()
    why: str = ""

    @property
    def module_dir(self) -> Path:
        return MODULES / self.name

    def key(self, go_version: str) -> str:
        """The cache key: the version, and a digest of everything that decides the bytes built (the wrapper's
        go.mod and go.sum, any Go source of its own, the linker flags, the Go toolchain)."""
        digest = hashlib.sha256()
        for part in ("go.mod", "go.sum"):
            digest.update((self.module_dir / part).read_bytes())
        # a wrapper with code of its own (flytepropeller's main and flyte-create-execution): each file by its path
        for path in sorted(p for p in self.module_dir.rglob("*.go") if p.is_file()):
            digest.update(path.relative_to(self.module_dir).as_posix().encode())
            digest.update(path.read_bytes())
        digest.update(" ".join(self.ldflags).encode())
        digest.update(go_version.encode())
        return f"{self.name}-{self.version}-{digest.hexdigest()[:12]}"


COMPONENTS: tuple[Component, ...] = (
    Component(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version="v3.7.3",
        binaries=(("etcd", "go.etcd.io/etcd/server/v3"),),
        why="the etcd release Kubernetes 1.37 is tested with (3.7); Debian's 3.4.23 is below its supported floor",
    ),
    Component(
        name="kubernetes",
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        binaries=tuple(
            (b, f"k8s.io/kubernetes/cmd/{b}")
            for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        ),
        ldflags=_k8s_stamp(KUBERNETES_VERSION),
        why="the newest Kubernetes release served; kubectl for `kubectl drain` and contributors",
    ),
    Component(
        name="training-operator",
        module="github.com/kubeflow/training-operator",
        version="v1.9.4",
        binaries=(("training-operator", "github.com/kubeflow/training-operator/cmd/training-operator.v1"),),
        why="the newest v1.9 release served (v1.9.5 and v1.9.6 are refused by the proxy)",
    ),
    Component(
        name="jobset",
        module="sigs.k8s.io/jobset",
        version="v0.12.0",
        binaries=(("jobset", "sigs.k8s.io/jobset"),),
        why="the JobSet release our JobSet kind is written against",
    ),
    Component(
        name="trainer",
        module="github.com/kubeflow/trainer/v2",
        version="v2.3.0",
        binaries=(("trainer-controller-manager", "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"),),
        why="the newest v2.3 release served (v2.3.1 and later are refused by the proxy)",
    ),
    Component(
        name="kueue",
        module="sigs.k8s.io/kueue",
        version="v0.19.2",
        binaries=(("kueue", "sigs.k8s.io/kueue/cmd/kueue"),),
        why="the newest Kueue the proxy serves (v0.19.3 and later are refused)",
    ),
    Component(
        # our own wrapper: propeller's controller command with the plugins we run (its main.go says why not
        # upstream's main), and flyte-create-execution, the stand-in for flyteadmin's CreateExecution
        name="flytepropeller",
        module="github.com/flyteorg/flyte/flytepropeller",
        version=FLYTE_VERSION,
        binaries=(
            ("flytepropeller", "devcluster/flytepropeller"),
            ("flyte-create-execution", "devcluster/flytepropeller/createexecution"),
        ),
        ldflags=(
            f"-X github.com/flyteorg/flyte/flytestdlib/version.Version={FLYTE_VERSION}",
            f"-X github.com/flyteorg/flyte/flytestdlib/version.Build={FLYTE_COMMIT}",
        ),
        why="the newest Flyte 1 release, the one flytekit 1.16 pairs with; flyteadmin and datacatalog are served by "
        "the proxy at no version that builds with it, so propeller runs without them",
    ),
)

BY_NAME = {c.name: c for c in COMPONENTS}

CONTROLLERS = ("training-operator", "jobset", "trainer", "kueue")
"""The controllers `up` can start (all by default), by their component's name."""
