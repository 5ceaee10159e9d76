"""Whichever backend module is imported first, every module gets the SDK's exact quantity parser.

flytekit imports `backend_plugin.connector` from its entry points while it is being imported; this used to meet a
half-initialized `backend_plugin.config` when the builder was imported first, and a silent fallback parser hid it.
"""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "first", ["backend_plugin.builder", "backend_plugin.config", "backend_plugin.cli", "backend_plugin.connector"]
)
def test_backend_modules_import_first_without_a_cycle(first: str) -> None:
    code = (
        f"import {first}\n"
        "import backend_plugin.builder as b, backend_plugin.config as c, backend_plugin.connector\n"
        "print(b.parse_quantity.__module__, c.is_quantity.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["flytekitplugins_pytorch.quantity", "flytekitplugins_pytorch.quantity"]
