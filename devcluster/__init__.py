"""A real Kubernetes control plane, its controllers, and a node agent that runs pods as local processes, on one
machine and without containers: the truth the project's cluster tests run against (docs/testing.md).

Not part of the wheel: a development tool of the repository.
"""
