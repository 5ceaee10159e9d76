"""Backend side of flytekitplugins-pytorch: PyTorchJob builder, config, `pytorchjob render` and the connector.

Importing this package loads no Kubernetes client and no kube config; the connector module does that lazily.
"""

# Import flytekit before any module of this package runs: flytekit loads its `flytekit.plugins` entry points on
# import, and one of them is `backend_plugin.connector`, which imports the builder and the config. Without this line,
# importing e.g. `backend_plugin.builder` first would reach flytekit (through the SDK's quantity parser) while
# `backend_plugin.config` is half-initialized, and the connector's imports would fail on the cycle.
import flytekit  # noqa: E402,F401
