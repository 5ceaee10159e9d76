"""``python -m flyte2_backend [--port 8000] [--prometheus-port 9090] [--workers 10]``: serve the Flyte 2 connector."""

from flyte2_backend.connector import main

main()
