"""The JobSet kind's target (`jobset.x-k8s.io/v1alpha2`): how a task becomes one, and how one is
read back.

`writer` (one Indexed Job per role, the success and failure policies), `status` (its condition table, then
`replicatedJobsStatus`), `links` (links of the current run's pods), `target` (its `JobTarget`).
What the kind declares (API coordinates, CRD, config section) is `backend_plugin.kinds.jobset`.
"""
