"""Task types of the Flyte 2 front-end (the connector and the front-end both read them).

``pytorch`` (`pytorch_contract.template_keys.TASK_TYPE`) is what Flyte 2's native kfoperators plugin owns: a task of
that type becomes a PyTorchJob without our connector. `CONNECTOR_TASK_TYPE` is a type the native plugin does not
claim, so a Flyte 2 backend routes it to our connector (its connector-service config lists the type): the job kind the
connector's backend config targets (a TrainJob, or a PyTorchJob with everything the native plugin drops: queue,
priority, gang scheduling, shared memory, accelerators, role pod templates).
"""

from pytorch_contract.template_keys import CONNECTOR_TASK_TYPE, CONNECTOR_TASK_TYPE_VERSION

__all__ = ["CONNECTOR_TASK_TYPE", "CONNECTOR_TASK_TYPE_VERSION"]
