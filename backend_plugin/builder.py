"""`build_pytorchjob(template, metadata, config)`: a task template straight to a PyTorchJob dict.

The composition of the one reader and the PyTorchJob writer, `to_pytorchjob(read_template(template), ...)`, kept
as the name the connector, `pytorchjob render`, the tests and the benchmarks call. The pieces live in:

- `backend_plugin.template`: `read_template` -> `TaskSpec` (every read and check of the template);
- `backend_plugin.execution`: `ExecutionMetadata`, `job_name`, `execution_metadata`;
- `backend_plugin.pods` and `backend_plugin.pytorchjob`: the writer;
- `backend_plugin.secrets`: flytepropeller's secret annotations.

Importing this module loads neither flytekit nor the kubernetes client.
"""

from __future__ import annotations

from typing import Any, Optional

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.execution import MAX_JOB_NAME_LENGTH, ExecutionMetadata, job_name
from backend_plugin.pytorchjob import to_pytorchjob
from backend_plugin.secrets import SECRET_ANNOTATION_PREFIX, SECRETS_LABEL, encode_secret
from backend_plugin.template import read_template, template_to_dict
from pytorch_contract.template_keys import PRIMARY_CONTAINER

__all__ = [
    "ExecutionMetadata",
    "TemplateError",
    "build_pytorchjob",
    "job_name",
    "template_to_dict",
    "read_template",
    "to_pytorchjob",
    "PRIMARY_CONTAINER",
    "MAX_JOB_NAME_LENGTH",
    "SECRETS_LABEL",
    "SECRET_ANNOTATION_PREFIX",
    "encode_secret",
]


def build_pytorchjob(template: Any, meta: ExecutionMetadata, config: Optional[BackendConfig] = None) -> dict[str, Any]:
    """Build the PyTorchJob for one execution of a `pytorch` task.

    Args:
        template: the task template (anything `template_to_dict` accepts).
        meta: execution metadata (name, namespace, paths, labels, env, image override).
        config: backend config; defaults when None.

    Returns:
        A kubeflow.org/v1 PyTorchJob as a plain JSON-able dict with a stable key order.

    Raises:
        TemplateError: the template is invalid; the message names the field path, the value and what is allowed.
    """
    return to_pytorchjob(read_template(template), meta, config)
