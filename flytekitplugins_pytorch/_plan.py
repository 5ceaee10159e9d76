"""``pytorch_core._plan`` under its former name.

This module object is that one, so patching either patches both.
"""

import sys

import pytorch_core._plan

sys.modules[__name__] = pytorch_core._plan
