"""Imported by multiprocessing's fork server only: preload the task's module without letting its errors end the server,
and keep a SIGTERM to the whole process group from ending the server (:func:`pytorch_core._forkserver.protect_server`).

See :func:`pytorch_core._nested.preload_modules`. Importing this module anywhere else imports the modules
named by ``FLYTE_PYTORCH_PRELOAD`` (normally unset outside the fork server: nothing happens).
"""

from __future__ import annotations

from pytorch_core._forkserver import _in_fork_server, protect_server
from pytorch_core._nested import preload_modules

if _in_fork_server():
    # A fresh fork server imports this last, just before its loop: from here on it survives a SIGTERM to the whole
    # process group, and its ranks start with SIGTERM at its default (``_forkserver.protect_server``).
    protect_server()
preload_modules()
