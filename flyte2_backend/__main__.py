"""``python -m flyte2_backend [--port 8000] [--prometheus-port 9090] [--workers 10]``: serve the Flyte 2 connector.

Without the ``flyte2-backend`` extra, one line names it and the install command (exit status 1), not a traceback.
"""

import sys

_OWN = ("flyte2_backend", "flyte2_pytorch", "backend_plugin", "pytorch_contract", "pytorch_core")

try:
    from flyte2_backend.connector import main
except ModuleNotFoundError as missing:
    module = (missing.name or "").partition(".")[0]
    if not module or module in _OWN:
        raise
    from pytorch_contract.install import install_hint

    sys.exit(f"python -m flyte2_backend: needs {module!r} (the flyte2-backend extra): {install_hint('flyte2-backend')}")

main()
