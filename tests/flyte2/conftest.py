"""The Flyte 2 tests need the ``flyte`` SDK (the ``flyte2`` extra); without it they are not collected.

Checked without importing it: the test session must not load flyte's modules before the tests that need them.
"""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("flyte") is not None else ["*.py"]
