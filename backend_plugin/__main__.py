"""`python -m backend_plugin render ...`: the same as the `pytorchjob` console script."""

import sys

from backend_plugin.cli import main

sys.exit(main())
