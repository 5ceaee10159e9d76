"""Is the job stored under our name the one we sent? For adopting our own job after a lost create response or a
409 (the create went through, its answer was lost), never raising Conflict on it.

Two ways, the first preferred:

1. **The spec digest.** `stamp(job)` adds the annotation `SPEC_DIGEST_ANNOTATION`, a sha256 of the job as sent
   (its `spec`, and its metadata's name, labels and annotations; not the annotation itself). The API server keeps
   annotations as they are, so `is_our_job` compares the stored annotation with the digest of the job we would send
   now: defaulting, pruning and mutating webhooks (a queue manager that sets `suspend`, the operator that adds a
   port) change the stored spec, never the annotation.
2. **Without the annotation** (a job created before it existed): the job as sent, pruned by its CRD's schema as the
   server prunes it, must be contained in the stored one: every field we sent is there with the same value; the
   stored one may have more (defaults, status, server metadata). Lists must have the same length, compared item by
   item.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["SPEC_DIGEST_ANNOTATION", "spec_digest", "stamp", "is_our_job", "contained"]

SPEC_DIGEST_ANNOTATION = "pytorch.flyte.org/spec-sha256"
"""The annotation that holds `spec_digest` of the job as we sent it."""


def spec_digest(job: Mapping[str, Any]) -> str:
    """A stable sha256 of what we decide in a job: its spec, kind, name, labels and annotations (this one left out).

    Args:
        job: the job as written.

    Returns:
        64 hex digits; the same for equal content whatever the key order.
    """
    meta = job.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != SPEC_DIGEST_ANNOTATION}
    doc = {
        "apiVersion": job.get("apiVersion"),
        "kind": job.get("kind"),
        "name": meta.get("name"),
        "labels": meta.get("labels") or {},
        "annotations": annotations,
        "spec": job.get("spec"),
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def stamp(job: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `job` whose metadata carries its digest (what the connector sends).

    Args:
        job: the job as written.

    Returns:
        The job with `metadata.annotations[SPEC_DIGEST_ANNOTATION]` set.
    """
    out = dict(job)
    meta = dict(out.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), SPEC_DIGEST_ANNOTATION: spec_digest(job)}
    out["metadata"] = meta
    return out


def contained(sent: Any, stored: Any) -> bool:
    """Whether every field of `sent` is in `stored` with the same value (maps may gain keys; lists keep their
    length and are compared item by item).

    Args:
        sent: what we sent (already pruned as the server prunes).
        stored: what the server returned.

    Returns:
        True when `stored` can be `sent` after defaulting.
    """
    if isinstance(sent, Mapping):
        return isinstance(stored, Mapping) and all(k in stored and contained(v, stored[k]) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(stored, list) and len(sent) == len(stored) and all(map(contained, sent, stored))
    if isinstance(sent, bool) or isinstance(stored, bool):
        return sent is stored
    return bool(sent == stored)


def is_our_job(stored: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
    """Whether the job stored under our name is the one we sent (or would send now), allowing for the API server's
    defaulting and pruning and for webhooks that mutate the spec.

    Args:
        stored: the object the API server returned (GET, or the create's answer).
        sent: the job as written (stamped or not).

    Returns:
        True to adopt it; False when it is another job under the same name (a Conflict).
    """
    if stored.get("apiVersion") != sent.get("apiVersion") or stored.get("kind") != sent.get("kind"):
        return False
    stored_meta = stored.get("metadata") or {}
    digest = (stored_meta.get("annotations") or {}).get(SPEC_DIGEST_ANNOTATION)
    if digest is not None:
        return bool(digest == spec_digest(sent))
    from backend_plugin.admission import crds, structural

    try:
        schema = crds.schema_for(str(sent.get("apiVersion")), str(sent.get("kind")))
    except KeyError:
        return False
    pruned = structural.prune(sent, schema)
    sent_meta = dict(pruned.get("metadata") or {})
    own = {k: v for k, v in (sent_meta.get("annotations") or {}).items() if k != SPEC_DIGEST_ANNOTATION}
    sent_meta["annotations"] = own or None  # a stamped job against one stored without a stamp: compare the rest
    mine = {k: sent_meta.get(k) for k in ("name", "labels", "annotations") if sent_meta.get(k) is not None}
    return contained(mine, stored_meta) and contained(pruned.get("spec") or {}, stored.get("spec") or {})
