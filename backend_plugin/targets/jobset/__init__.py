"""The JobSet kind (`jobset.x-k8s.io/v1alpha2`, the JobSet controller of kubernetes-sigs).

`declaration` holds what the neutral rooms read (API coordinates, CRD, pod template paths, its own admission rules in
`webhook`, its config section); `target` its `JobTarget` (writer, status, log links). Importing the package loads the
declaration only: the backend config reads it while it is built.
"""

from backend_plugin.targets.jobset.declaration import DECLARATION

__all__ = ["DECLARATION"]
