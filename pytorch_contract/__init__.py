"""What the SDK (`flytekitplugins_pytorch`) and the backend (`backend_plugin`) must agree on, importable without either.

- `pytorch_contract.template_keys`: the task type, the `pytorch.*` config key names of the task template and the
  value sets they allow (restart and clean-pod policies, rendezvous backends, `nproc_per_node` words), the primary
  container's name. The SDK writes these keys, the backend reads them; both import them from here.
- `pytorch_contract.k8s_names`: Kubernetes name grammars (label keys and values, DNS-1123 names, resource names,
  environment variable names, container names, image references).
- `pytorch_contract.k8s_metadata`, `pytorch_contract.pod_rules`: the metadata and pod-spec rules the API server
  applies to the pods a job creates (refusals, and warnings for what only some versions refuse).
- `pytorch_contract.quantity`: the exact Kubernetes quantity parser.
- `pytorch_contract.crd_patterns`: a CRD's `pattern` read as the API server reads it (RE2).
- `pytorch_contract.job_limits`: what the API server stores (environment entries, object size).
- `pytorch_contract.install`: the install hint of every "needs an extra" message.
- `pytorch_contract.suggest`: the "did you mean ...?" hint for a misspelled keyword or config key.
- `pytorch_contract.progress`: the live-progress record global rank 0's launcher writes beside the task's outputs,
  its staleness rule and the one-line message a reader (the connector) shows for it.
- `pytorch_contract.preemption`: how a pod that stopped for a SIGTERM says so: the exit code, the record beside the
  outputs, the termination-grace variable, and the words for a pod's `DisruptionTarget` condition.

Each rule names the upstream function it follows (apimachinery's `IsQualifiedName`, `IsRelaxedEnvVarName`,
`ParseQuantity`; core validation's `ValidateTolerations`; distribution/reference's `ParseNormalizedNamed`), and
tests/contract tries it on the upstream verdicts.

This package imports nothing beyond the standard library. In particular not flytekit: flytekit loads our connector
through its `flytekit.plugins` entry point while it is itself being imported, so a backend module that reached
flytekit through a shared helper would meet its own half-initialized modules (docs/architecture.md).
"""
