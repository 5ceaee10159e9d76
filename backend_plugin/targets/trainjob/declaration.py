"""The trainjob kind's declaration, where `tests/e2e/harness.py` imports `PLURAL` from: it lives in
`backend_plugin.kinds.trainjob`. Import from there; this module goes once nothing imports it."""

from backend_plugin.kinds.trainjob import DECLARATION, PLURAL

__all__ = ["DECLARATION", "PLURAL"]
