"""The TrainJob kind's target (Kubeflow Trainer v2, `trainer.kubeflow.org/v1alpha1`): how a task becomes
one, and how one is read back.

`writer` (what a TrainJob cannot express, nodes, `runtimePatches`), `status` (its condition table, then
`jobsStatus`), `links` (links of the JobSet's pods), `versions` (an older Trainer's CRD), `target` (its `JobTarget`).
What the kind declares (API coordinates, CRD, config section) is `backend_plugin.kinds.trainjob`.
"""
