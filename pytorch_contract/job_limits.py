"""Size and count limits a job must fit, so that the SDK can refuse at decoration what the API server would refuse at
create, and the backend's admission model says the same thing in the same words.

- Object size: etcd stores an object of at most `STORED_MAX_BYTES` (its default `--max-request-bytes`, 1.5 MiB);
  the API server refuses a request body over `REQUEST_MAX_BYTES` (3 MiB) before it decodes it.
- A PyTorchJob writes the pod template once per role (Master and Worker), so everything in it (environment values,
  pod template annotations) counts twice; a TrainJob writes it once.
- A TrainJob's `spec.trainer.env` has `maxItems: 128`; the writer adds up to `WRITER_ENV_ENTRIES` of its own (error
  reporting and the execution's identity), so a task has `128 - WRITER_ENV_ENTRIES` for itself. A PyTorchJob's
  container `env` has no such limit.

`KindLimits` is one job kind's record of them. The SDK checks a task at decoration against the kinds it knows by name
(`LIMITS`, keyed by the backend config's `target` values); the backend's kinds each hold their own record (their
package under `backend_plugin/targets/`), taken from here where the SDK checks the same kind, so one number serves
both sides. Each `*_problem` function takes `where`, the caller's own name for the setting, and returns a message that
names it, the figures and what to do, or None.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

__all__ = [
    "KindLimits",
    "LIMITS",
    "STORED_MAX_BYTES",
    "REQUEST_MAX_BYTES",
    "WRITER_ENV_NAMES",
    "WRITER_ENV_ENTRIES",
    "ENV_MAX_ITEMS",
    "POD_TEMPLATE_COPIES",
    "env_count_problem",
    "env_items_problem",
    "job_size_problem",
    "LARGE_VALUE_ADVICE",
]

STORED_MAX_BYTES = 1536 * 1024
"""etcd's default `--max-request-bytes` (1.5 MiB): the largest object the API server can store."""

REQUEST_MAX_BYTES = 3 * 1024 * 1024
"""The API server's limit on a create request's body (3 MiB)."""

WRITER_ENV_NAMES = (
    "FLYTE_FAIL_ON_ERROR",
    "_F_DES",
    "_F_WN",
    "FLYTE_INTERNAL_EXECUTION_PROJECT",
    "FLYTE_INTERNAL_EXECUTION_DOMAIN",
    "FLYTE_INTERNAL_EXECUTION_ID",
    "FLYTE_INTERNAL_TASK_PROJECT",
    "FLYTE_INTERNAL_TASK_DOMAIN",
    "FLYTE_INTERNAL_TASK_NAME",
    "FLYTE_INTERNAL_TASK_VERSION",
    "FLYTE_ATTEMPT_NUMBER",
)
"""The environment entries the backend's writer adds to the training container in an execution: one to fail on
error, two for the distributed error report, eight for the execution's identity (a render, which belongs to no
execution, gets only some of them)."""

WRITER_ENV_ENTRIES = len(WRITER_ENV_NAMES)
"""The most environment entries the writer adds (11)."""


class KindLimits(NamedTuple):
    """The limits of one job kind.

    Attributes:
        env_max_items: `maxItems` of the training container's `env` in the kind's CRD (None: no limit).
        pod_template_copies: how many times the job holds the task's pod template and environment.
    """

    env_max_items: Optional[int]
    pod_template_copies: int


LIMITS: dict[str, KindLimits] = {
    # once per role (Master and Worker; one when there are no workers); the container env has no maxItems
    "pytorchjob": KindLimits(env_max_items=None, pod_template_copies=2),
    # `spec.trainer` and one runtime patch; `spec.trainer.env` has maxItems 128
    "trainjob": KindLimits(env_max_items=128, pod_template_copies=1),
}
"""The kinds the SDK checks at decoration, keyed by the backend config's `target` values."""

ENV_MAX_ITEMS: dict[str, Optional[int]] = {target: limits.env_max_items for target, limits in LIMITS.items()}
"""`maxItems` of the training container's `env` per kind in `LIMITS` (None: no limit)."""

POD_TEMPLATE_COPIES: dict[str, int] = {target: limits.pod_template_copies for target, limits in LIMITS.items()}
"""How many times the job holds the task's pod template and environment, per kind in `LIMITS`."""

LARGE_VALUE_ADVICE = (
    "keep large data out of the job: mount a ConfigMap or Secret (pod_template volumes), or pass the path of a file "
    "in object storage and read it in the task"
)


def env_count_problem(entries: int, target: str, where: str) -> Optional[str]:
    """Whether `entries` environment entries of the task's own, plus the writer's, fit the target's `maxItems`.

    Args:
        entries: the task's own entries (its `environment`, and its pod template's primary container `env`).
        target: the job kind, a `BackendConfig.target` value in `LIMITS` (`pytorchjob`, `trainjob`).
        where: the caller's name for the setting, e.g. `environment`.

    Returns:
        A message naming the counts and what to do, or None when they fit (or the kind has no limit).
    """
    return env_items_problem(entries, ENV_MAX_ITEMS.get(target), target, where)


def env_items_problem(entries: int, limit: Optional[int], target: str, where: str) -> Optional[str]:
    """`env_count_problem` for a kind that holds its own limit (`KindLimits.env_max_items`).

    Args:
        entries: the task's own entries.
        limit: the kind's `maxItems` of the training container's `env`; None for no limit.
        target: the kind's `BackendConfig.target` value, for the message.
        where: the caller's name for the setting.

    Returns:
        A message naming the counts and what to do, or None when they fit (or there is no limit).
    """
    if limit is None or entries + WRITER_ENV_ENTRIES <= limit:
        return None
    return (
        f"{where}: {entries} environment entries, plus the {WRITER_ENV_ENTRIES} the backend adds in an execution, "
        f"exceed the {limit} a {target} admits (spec.trainer.env maxItems); keep at most "
        f"{limit - WRITER_ENV_ENTRIES}: group settings into one JSON value, mount a ConfigMap or Secret "
        "(envFrom in the pod template does not count), or use target 'pytorchjob', whose env has no such limit"
    )


def job_size_problem(payload_bytes: int, target: str, where: str, *, copies: Optional[int] = None) -> Optional[str]:
    """Whether a payload the job holds per pod template (environment values, pod template annotations) keeps the
    job under the stored-object limit.

    Args:
        payload_bytes: the payload's bytes as the job holds it once (its JSON text).
        target: the job kind, a `BackendConfig.target` value.
        where: the caller's name for the setting, e.g. `environment['CONFIG_JSON']`.
        copies: how many times the job holds it; `POD_TEMPLATE_COPIES[target]` when None.

    Returns:
        A message naming the sizes and what to do, or None when the payload alone fits.
    """
    n = copies if copies is not None else POD_TEMPLATE_COPIES.get(target, 1)
    total = payload_bytes * n
    if total <= STORED_MAX_BYTES:
        return None
    per = f" (written once per role: {n} copies of {payload_bytes:,} bytes)" if n > 1 else ""
    return (
        f"{where}: makes the {target} at least {total:,} bytes{per}, over the {STORED_MAX_BYTES:,} bytes (1.5 MiB) "
        f"the API server stores; {LARGE_VALUE_ADVICE}"
    )
