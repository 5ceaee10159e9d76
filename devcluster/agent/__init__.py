"""The node agent (see `main`)."""
