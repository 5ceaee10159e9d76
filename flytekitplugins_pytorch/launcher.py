"""``pytorch_core.launcher`` under its former name.

This module object is that one, so patching either patches both.
"""

import sys

import pytorch_core.launcher

sys.modules[__name__] = pytorch_core.launcher
