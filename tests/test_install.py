"""The install stays true to setup.py: constraints.txt pins a version of every requirement that satisfies its bound.

The README installs with ``-c constraints.txt``. A bound raised in setup.py without regenerating the file (the command
is in its header) would make the README's install fail to resolve; this test says so first, in the fast tier.
The install itself (the README's commands in a fresh clone) is checked by ``.ci/readme_install.py`` in CI.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from unittest import mock

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _setup_kwargs(monkeypatch: pytest.MonkeyPatch) -> dict:
    captured: dict = {}
    monkeypatch.chdir(ROOT)  # setup.py reads README.md relative to the working directory
    with mock.patch("setuptools.setup", lambda **kw: captured.update(kw)):
        runpy.run_path(str(ROOT / "setup.py"))
    return captured


def _pins() -> dict[str, Version]:
    """Name -> pinned version for this interpreter (a name may have one pin per Python version, by marker)."""
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        name, _, version = spec.partition("==")
        assert version, f"constraints.txt: {line!r} is not a pin (name==version)"
        pins[canonicalize_name(name.strip())] = Version(version.strip())
    return pins


def _requirements(kwargs: dict) -> list[tuple[str, Requirement]]:
    out = [("install_requires", Requirement(r)) for r in kwargs["install_requires"]]
    for extra, reqs in kwargs["extras_require"].items():
        out += [(f"extras_require[{extra!r}]", Requirement(r)) for r in reqs]
    return out


def test_constraints_pin_every_requirement_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    pins = _pins()
    problems = []
    for where, req in _requirements(_setup_kwargs(monkeypatch)):
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{where}: {req} has no pin in constraints.txt")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{where}: {req} excludes the pinned {req.name}=={pin}")
    assert problems == [], "regenerate constraints.txt (command in its header):\n" + "\n".join(problems)
