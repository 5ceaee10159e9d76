"""The backend's connector served for Flyte 2 (`flyte2_backend.connector`); ``python -m flyte2_backend`` serves it.

A package of its own beside ``backend_plugin``: it needs the ``flyte`` SDK (the ``flyte2-backend`` extra), which
``backend_plugin`` does not, so every ``backend_plugin`` module stays importable where flyte cannot be installed.
"""
