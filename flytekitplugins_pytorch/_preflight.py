"""``pytorch_core._preflight`` under its former name.

This module object is that one, so patching either patches both.
"""

import sys

import pytorch_core._preflight

sys.modules[__name__] = pytorch_core._preflight
