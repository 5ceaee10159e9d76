"""Backend side of flytekitplugins-pytorch: PyTorchJob builder, config, `pytorchjob render` and the connector.

Importing this package loads no Kubernetes client and no kube config; the connector module does that lazily.
"""
