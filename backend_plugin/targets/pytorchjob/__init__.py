"""The PyTorchJob kind's target (Kubeflow training operator v1, `kubeflow.org/v1`): how a task becomes
one, and how one is read back.

`writer` (replica specs, run, scheduling and elastic policy), `status` (the operator's condition table), `links`
(links named from the spec), `versions` (an older CRD: the native sidecar's advice), `target` (its `JobTarget`).
What the kind declares (API coordinates, CRD, config section) is `backend_plugin.kinds.pytorchjob`.
"""
