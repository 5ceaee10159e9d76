"""A container's environment, as the kubelet makes it (`pkg/kubelet/kubelet_pods.go`, `makeEnvironmentVariables`):
the image's variables, then the service links of the pod's namespace (when `enableServiceLinks`), then `envFrom`,
then `env` in order with `$(VAR)` references expanded against what came before; `fieldRef` and `resourceFieldRef`
from the pod; ConfigMap and Secret keys read with the node's rights.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from pytorch_contract.quantity import parse_quantity


class EnvError(Exception):
    """A variable cannot be made; the kubelet reports CreateContainerConfigError with this message."""


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(value: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` -> its value when defined (left as written otherwise); `$$` -> `$` (k8s.io/kubernetes
    `third_party/forked/golang/expansion`)."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, value)


def field_value(pod: dict, path: str) -> str:
    """A `fieldRef` (`pkg/fieldpath.ExtractFieldPathAsString` plus the kubelet's status fields)."""
    meta = pod["metadata"]
    spec = pod["spec"]
    status = pod.get("status") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIPs": ",".join(a["ip"] for a in status.get("hostIPs") or []),
        "status.podIPs": ",".join(a["ip"] for a in status.get("podIPs") or []),
    }
    if path in simple:
        return str(simple[path])
    if path == "metadata.labels":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("labels") or {}).items()))
    if path == "metadata.annotations":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("annotations") or {}).items()))
    raise EnvError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(container: dict, resource: str, divisor: str | None, node_allocatable: Mapping[str, str]) -> str:
    """A `resourceFieldRef` (`pkg/api/v1/resource.ExtractContainerResourceValue`): the container's limit (or, for a
    limit it lacks, the node's allocatable) or request, divided by `divisor` and rounded up."""
    resources = container.get("resources") or {}
    kind, _, name = resource.partition(".")
    if kind == "limits":
        raw = (resources.get("limits") or {}).get(name) or node_allocatable.get(name, "0")
    elif kind == "requests":
        raw = (resources.get("requests") or {}).get(name, "0")
    else:
        raise EnvError(f"unsupported resourceFieldRef resource {resource!r}")
    value = Decimal(str(parse_quantity(raw)))
    div = Decimal(str(parse_quantity(divisor or "1")))
    if div == 0:
        raise EnvError(f"resourceFieldRef {resource!r}: divisor {divisor!r} is zero")
    return str(math.ceil(value / div))


def make_env(
    pod: dict,
    container: dict,
    *,
    image_env: Mapping[str, str],
    service_env: Mapping[str, str],
    read: Callable[[str, str, str], dict[str, Any] | None],
    node_allocatable: Mapping[str, str],
) -> dict[str, str]:
    """The container's environment.

    Args:
        pod: the pod (its status holds the podIP already).
        container: the container.
        image_env: what the image sets.
        service_env: the service link variables of the pod's namespace.
        read: read(kind, namespace, name) -> the ConfigMap or Secret as a dict (None when absent).
        node_allocatable: the node's allocatable resources (a limit's default).
    """
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = dict(image_env)
    if pod["spec"].get("enableServiceLinks", True):
        env.update(service_env)
    else:
        env.update({k: v for k, v in service_env.items() if k.startswith("KUBERNETES_")})

    def data_of(kind: str, name: str, optional: bool) -> dict[str, str] | None:
        obj = read(kind, ns, name)
        if obj is None:
            if optional:
                return None
            raise EnvError(f'{kind.lower()} "{name}" not found')
        if kind == "Secret":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})

    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = data_of(kind, ref["name"], bool(ref.get("optional")))
            for k, v in (data or {}).items():
                env[prefix + k] = v
    for entry in container.get("env") or []:
        name = entry["name"]
        if "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), env)
            continue
        src = entry["valueFrom"]
        if "fieldRef" in src:
            env[name] = field_value(pod, src["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in src:
            ref = src["resourceFieldRef"]
            target = container
            if ref.get("containerName"):
                every = (pod["spec"].get("containers") or []) + (pod["spec"].get("initContainers") or [])
                target = next((c for c in every if c["name"] == ref["containerName"]), container)
            env[name] = resource_value(target, ref["resource"], ref.get("divisor"), node_allocatable)
        elif "configMapKeyRef" in src or "secretKeyRef" in src:
            kind = "ConfigMap" if "configMapKeyRef" in src else "Secret"
            ref = src["configMapKeyRef" if kind == "ConfigMap" else "secretKeyRef"]
            data = data_of(kind, ref["name"], bool(ref.get("optional")))
            if data is None:
                continue
            if ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise EnvError(f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}")
            env[name] = data[ref["key"]]
        else:
            raise EnvError(f"env {name}: unsupported valueFrom {sorted(src)}")
    return env
