"""What the SDK (`flytekitplugins_pytorch`) and the backend (`backend_plugin`) must agree on, importable without either.

- `pytorch_contract.template_keys`: the task type, the `pytorch.*` config key names of the task template and the
  value sets they allow (restart and clean-pod policies, rendezvous backends, `nproc_per_node` words), the primary
  container's name. The SDK writes these keys, the backend reads them; both import them from here.
- `pytorch_contract.k8s_names`: Kubernetes name grammars (label keys and values, DNS-1123 names, resource names).
- `pytorch_contract.quantity`: the exact Kubernetes quantity parser.
- `pytorch_contract.suggest`: the "did you mean ...?" hint for a misspelled keyword or config key.
- `pytorch_contract.progress`: the live-progress record global rank 0's launcher writes beside the task's outputs,
  its staleness rule and the one-line message a reader (the connector) shows for it.

This package imports nothing beyond the standard library. In particular not flytekit: flytekit loads our connector
through its `flytekit.plugins` entry point while it is itself being imported, so a backend module that reached
flytekit through a shared helper would meet its own half-initialized modules (docs/architecture.md).
"""
