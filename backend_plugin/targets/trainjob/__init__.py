"""The TrainJob kind (Kubeflow Trainer v2, `trainer.kubeflow.org/v1alpha1`).

`declaration` holds what the neutral rooms read (API coordinates, CRD, pod template paths, limits, its config
section); `target` its `JobTarget` (writer, status, log links). Importing the package loads the declaration only:
the backend config reads it while it is built.
"""

from backend_plugin.targets.trainjob.declaration import DECLARATION

__all__ = ["DECLARATION"]
