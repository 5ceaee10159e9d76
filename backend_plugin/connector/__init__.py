"""The connector: create, get and delete the Kubeflow job a `pytorch` task becomes, for flytekit and Flyte 2.

Importing this package registers flytekit's connectors for task type "pytorch" versions 0 and 1 with flytekit's
`ConnectorRegistry`, both over the process's one `JobService` (`service.shared_service`); it loads neither the
kubernetes client nor any kube config (the API client is built on first use by a replaceable factory,
`set_api_client_factory`). Serve it with `pyflyte serve connector --modules backend_plugin.connector`; Flyte 2's
connector (`flyte2_backend.connector`) wraps the same service.

The modules: `service` (the SDK-neutral service: create, get, delete, the pools, the session built once),
`create` (the one create path), `answers` (a job read becomes an answer), `session` (what is built once per API
client: the client, the watch caches, the pools, what is held), `metadata` (the resource metadata and the answer, in
no SDK's types), `shapes` (an API answer's shape, checked where it comes in), `log_pods` (the pods the log links name,
listed once per job status), `progress` (live progress held), `cluster_crds` (what the installed CRDs declare),
`blobs` (blob storage), `flytekit_connectors` (flytekit's wrappers).
"""

from backend_plugin.connector.create import spec_differences
from backend_plugin.connector.flytekit_connectors import JobConnector, ServedJobConnector, register
from backend_plugin.connector.metadata import Answer, JobMetadata
from backend_plugin.connector.service import PROGRESS_READ_WAIT_S, JobService, shared_service
from backend_plugin.kube.api import default_api_client, set_api_client_factory, with_pool_size, without_client_retries

__all__ = [
    "Answer",
    "JobConnector",
    "JobMetadata",
    "JobService",
    "PROGRESS_READ_WAIT_S",
    "ServedJobConnector",
    "default_api_client",
    "register",
    "set_api_client_factory",
    "shared_service",
    "spec_differences",
    "with_pool_size",
    "without_client_retries",
]

register()
