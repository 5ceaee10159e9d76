"""The PyTorchJob kind (Kubeflow training operator v1, `kubeflow.org/v1`).

`declaration` holds what the neutral rooms read (API coordinates, CRD, pod template paths, limits, its config
section); `target` its `JobTarget` (writer, status table, log links). Importing the package loads the declaration
only: the backend config reads it while it is built.
"""

from backend_plugin.targets.pytorchjob.declaration import DECLARATION

__all__ = ["DECLARATION"]
