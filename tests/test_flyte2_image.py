"""The GPU image serves Flyte 2 tasks too: ``Dockerfile.gpu`` copies the Flyte 2 front-end, installs the ``flyte2``
extra (flyte's runtime and its ``a0`` entrypoint, which Flyte 2 starts a task's pods with), and checks both at build.

The build itself is reproduced by tests/test_images.py's slow test, which runs every ``python -c`` check of the RUN
line in a venv installed from the reproduced context; the checks here say that the Flyte 2 ones are among them.
"""

from __future__ import annotations

import re

from tests.test_images import copy_sources, install_run


def test_the_gpu_image_copies_the_flyte2_front_end() -> None:
    assert "flyte2_pytorch" in copy_sources("Dockerfile.gpu")


def test_the_gpu_image_installs_the_flyte2_extra_and_checks_it() -> None:
    run = install_run("Dockerfile.gpu")
    extras = re.search(r'pip install --no-cache-dir -c constraints.txt "\.\[([\w,-]+)\]"', run)
    assert extras is not None and {"examples", "flyte2"} <= set(extras.group(1).split(","))
    checks = re.findall(r'python -c "([^"]+)"', run)
    assert any("import torch, flytekitplugins_pytorch" in c for c in checks)  # the flytekit task image, as before
    assert any("flyte2_pytorch" in c and "'a0'" in c for c in checks)


def test_the_flyte2_docs_name_the_image() -> None:
    from tests.test_images import ROOT

    page = (ROOT / "docs" / "flyte2.md").read_text(encoding="utf-8")
    assert "Dockerfile.gpu" in page
