"""Imported by multiprocessing's fork server only: preload the task's module without letting its errors end the server.

See :func:`pytorch_core._nested.preload_modules`. Importing this module anywhere else imports the modules
named by ``FLYTE_PYTORCH_PRELOAD`` (normally unset outside the fork server: nothing happens).
"""

from __future__ import annotations

from pytorch_core._nested import preload_modules

preload_modules()
