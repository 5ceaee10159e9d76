"""Backend side of flytekitplugins-pytorch: template reader, job writers, config, `pytorchjob render`, connector.

Importing this package, or any module of it but those of `connector/`, loads neither flytekit nor the Kubernetes
client nor any kube config; `connector` imports flytekit's connector base and builds its API client lazily. See
docs/architecture.md for the modules and the data flow.
"""
