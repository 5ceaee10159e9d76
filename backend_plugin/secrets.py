"""flytepropeller's encoding of secret requests as pod annotations (its secrets webhook decodes them).

A pod that asks for secrets carries the label `inject-flyte-secrets: "true"` and one annotation `flyte.secrets/s<i>`
per requested secret, whose value is the secret's text-format proto base32-encoded with propeller's alphabet. Any
target whose pods run Flyte tasks (PyTorchJob, TrainJob) uses the same encoding.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from flyteidl.core import security_pb2

from backend_plugin.errors import TemplateError

__all__ = ["SECRETS_LABEL", "SECRET_ANNOTATION_PREFIX", "encode_secret", "secret_annotations"]

SECRETS_LABEL = "inject-flyte-secrets"
"""Pod label (value `"true"`) that flytepropeller's secrets webhook selects the pods it mutates by."""

SECRET_ANNOTATION_PREFIX = "flyte.secrets/s"
"""Pod annotation `flyte.secrets/s<i>` carries the i-th requested secret, encoded as the webhook decodes it."""

# flytepropeller's base32 alphabet (lower case, digits 1-6 instead of 2-7; no padding), so encoded secrets are
# valid annotation values the webhook can decode. Translated from the standard RFC 4648 alphabet.
_FLYTE_BASE32 = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "abcdefghijklmnopqrstuvwxyz123456")
_ANNOTATIONS_LIMIT = 256 * 1024  # the API server's limit on the total size of one object's annotations


def _go_quoted(text: str) -> str:
    """A string as Go's protobuf text marshaller quotes it (byte-wise, octal escapes for non-printable bytes)."""
    out = ['"']
    escapes = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x5C: "\\\\"}
    for byte in text.encode("utf-8"):
        if byte in escapes:
            out.append(escapes[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)


def _secret_text(secret: security_pb2.Secret) -> str:
    """The text-format proto of one secret, exactly as flytepropeller writes it (`proto.MarshalTextString`).

    One `name: value` line per set field in field-number order, enums by name, strings quoted the Go way.
    """
    lines = []
    for fd, value in secret.ListFields():
        if fd.type == fd.TYPE_ENUM:
            rendered = fd.enum_type.values_by_number[value].name
        elif fd.type == fd.TYPE_STRING:
            rendered = _go_quoted(value)
        else:  # pragma: no cover - Secret has only string and enum fields today
            rendered = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"{fd.name}: {rendered}\n")
    return "".join(lines)


def encode_secret(secret: security_pb2.Secret) -> str:
    """Encode one secret request as the value of a `flyte.secrets/s<i>` pod annotation.

    flytepropeller's secrets webhook decodes these annotations to know which secrets to inject into a pod. The
    value is the secret's text-format proto, base32-encoded with flytepropeller's alphabet (`a-z`, `1-6`) and no
    padding: lower case, so it is also a valid label-like string.

    Args:
        secret: a `flyteidl.core.Secret`.

    Returns:
        The annotation value, e.g. `m4zg54lqhiqce...` for `group: "my_group"`.
    """
    encoded = base64.b32encode(_secret_text(secret).encode("utf-8")).decode("ascii")
    return encoded.rstrip("=").translate(_FLYTE_BASE32)


def secret_annotations(secrets: Sequence[security_pb2.Secret]) -> dict[str, str]:
    """The `flyte.secrets/s<i>` annotations for a task's secret requests.

    Args:
        secrets: the requests, in template order (`TaskSpec.secrets`).

    Returns:
        Annotation name -> encoded value; empty when there are none.

    Raises:
        TemplateError: the encoded annotations exceed the API server's 256 KiB limit.
    """
    out = {f"{SECRET_ANNOTATION_PREFIX}{i}": encode_secret(secret) for i, secret in enumerate(secrets)}
    size = sum(len(k) + len(v) for k, v in out.items())
    if size > _ANNOTATIONS_LIMIT:
        raise TemplateError(f"securityContext.secrets='{len(out)} secrets, {size} bytes encoded': must fit in 256 KiB")
    return out
