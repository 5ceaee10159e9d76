"""pytorch_core: what the flytekit and Flyte 2 front-ends of a distributed PyTorch task share.

The config classes and every check of their values (`config`), the local launcher and the rank side of a pod
(`launcher`, with its modules: plan, processes, control files, fork server, preflight, hang detection, failure
analysis, console, nested-launch guard, rank entrypoint), the user-facing calls inside a rank (`progress`:
`report_progress`; `checkpoint`: `save_checkpoint`, `load_checkpoint`; `preemption`: `preemption_requested`,
`on_preemption`), and the one seam to a Flyte SDK (`frontend`). Importing
it imports neither flytekit, nor flyte, nor flyteidl, nor torch (torch is imported by the code that runs ranks).
"""
