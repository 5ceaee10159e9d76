"""What a cluster's installed CRD of a job kind declares: `InstalledCrd`, the schema the admission model and a kind's
`JobTarget.fit` judge a job by instead of the vendored one.

A cluster may run an older release of a kind's controller than the one whose CRD ships in the package
(`backend_plugin/crds/`). Its CRD then lacks fields the backend writes, and under `fieldValidation=Strict` the API
server refuses the create (400 `strict decoding error: unknown field "<path>"`). Known two ways:

- read: the `CustomResourceDefinition` itself (`GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/
  <plural>.<group>`, where RBAC allows it; or a file given to `pytorchjob render --crd`): exact, with its
  `resourceVersion` and `generation`, so that a changed CRD is noticed;
- learned: the fields a strict 400 named (`unknown_fields`), taken out of the vendored schema: what is known not to
  be declared; nothing is known of what the older CRD declares instead.

The kind's declaration names the releases of its CRD by fields each first declares (`Declaration.history`), so a
message names the release a cluster runs (`Trainer v2.1`, `older than training operator v1.8`). Which of its fields
the kind can write otherwise, or drop without changing what the job means, is the kind's own knowledge
(`JobTarget.fit`, which returns a `Fitted`); what stays undeclared is refused by the admission model, naming the field
and what to do. Pure: nothing here talks to the API.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path as FilePath
from typing import Any, Optional, Union

import yaml

from backend_plugin.admission.crds import schema_for
from backend_plugin.admission.structural import PRUNED, Path, check
from backend_plugin.kinds import DECLARED, Declaration
from backend_plugin.kinds.declaration import ANY

__all__ = [
    "InstalledCrd",
    "Fitted",
    "from_crd",
    "read_crd_file",
    "learned",
    "unknown_fields",
    "parse_path",
    "undeclared",
    "schema_declares",
    "strict_refusal",
    "STRICT_DECODING",
]

STRICT_DECODING = "strict decoding error"
"""What the API server's 400 message says when `fieldValidation=Strict` refused undeclared fields."""

_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class InstalledCrd:
    """What a cluster's CRD of one kind declares (or what is known of it).

    Attributes:
        declaration: the kind it serves.
        schema: the `openAPIV3Schema` of the version the backend writes (`Declaration.version`); None when the CRD
            does not serve that version.
        served: the versions the CRD serves.
        source: where this came from, for logs (`read from the cluster`, `--crd crd.yaml`, `learned from ...`).
        exact: True when the CRD itself was read; False when only the fields a strict 400 named are known
            (`undeclared`), the rest being the vendored schema's.
        resource_version: the CRD's `metadata.resourceVersion` ("" when not read): a changed CRD has another one.
        generation: its `metadata.generation` (0 when not read).
        undeclared: the fields strict 400s named, in the API server's notation (`spec.runtimePatches`).
    """

    declaration: Declaration
    schema: Optional[Mapping[str, Any]]
    served: tuple[str, ...]
    source: str
    exact: bool = True
    resource_version: str = ""
    generation: int = 0
    undeclared: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """The kind it serves."""
        return self.declaration.kind

    @property
    def serves_version(self) -> bool:
        """Whether it serves the version the backend writes."""
        return self.schema is not None

    def declares(self, path: Sequence[Union[str, int]]) -> bool:
        """Whether the CRD declares the field at `path` (a job path, or a pattern with `ANY`).

        Args:
            path: keys and list indexes into a job.

        Returns:
            True when the schema has the field (or keeps unknown fields there); False when it does not, or when the
            CRD does not serve the version.
        """
        return self.schema is not None and _schema_at(self.schema, path) is not None

    def release(self) -> str:
        """The release of the kind's controller this CRD is from, judged by the fields it declares
        (`Declaration.history`).

        Returns:
            E.g. `Trainer v2.1`, `Trainer v2.2 or later`, `older than Trainer v2.2`, or "" when it cannot be told (a
            kind without a history, or a CRD known only from a 400 that named none of the history's fields).
        """
        history = self.declaration.history
        releases = history.releases
        if not releases:
            return ""
        if self.exact:
            for i, known in enumerate(releases):
                if all(self.declares(p) for p in known.declares):
                    return known.name + (" or later" if i == 0 else "")
            return history.before or f"older than {releases[-1].name}"
        vendored = schema_for(self.declaration.api_version, self.kind)
        for known in reversed(releases):  # the oldest release whose fields a 400 named: the CRD is older than it
            if any(_schema_at(vendored, p) is not None and not self.declares(p) for p in known.declares):
                return f"older than {known.name}"
        return ""

    def describe(self) -> str:
        """The CRD in messages: `the cluster's TrainJob CRD (Trainer v2.1)`.

        Returns:
            The text.
        """
        release = self.release()
        return f"the cluster's {self.kind} CRD" + (f" ({release})" if release else "")

    def without(self, paths: Iterable[str]) -> tuple[InstalledCrd, list[str]]:
        """This CRD with the fields at `paths` known to be undeclared (what a strict 400 named).

        Args:
            paths: fields in the API server's notation (`spec.a[0].b`).

        Returns:
            (the CRD without them, the paths that lead nowhere in its schema and were not taken out).
        """
        if self.schema is None:
            return self, list(paths)
        schema = copy.deepcopy(dict(self.schema))
        unmapped = []
        named = []
        for text in paths:
            named.append(text)
            if not _remove(schema, parse_path(text)):
                unmapped.append(text)
        undeclared = tuple(dict.fromkeys((*self.undeclared, *named)))
        return replace(self, schema=schema, undeclared=undeclared), unmapped

    def same_as(self, other: Optional[InstalledCrd]) -> bool:
        """Whether `other` knows the same of the same CRD (same resourceVersion, same fields learned).

        Args:
            other: another reading, or None (the vendored CRD assumed).

        Returns:
            True when a job built for one is built the same for the other.
        """
        return (
            other is not None
            and (self.exact, self.resource_version, self.undeclared, self.served)
            == (other.exact, other.resource_version, other.undeclared, other.served)
            and (self.exact or self.schema == other.schema)
        )


@dataclass(frozen=True)
class Fitted:
    """A job as a kind fitted it to an installed CRD (`JobTarget.fit`).

    Attributes:
        job: the job the installed CRD accepts with the same meaning as written, or the job as written where the
            kind cannot fit it (the admission model then refuses what stays undeclared).
        notes: what was written otherwise or dropped, and why the meaning is kept: logged by the connector and printed
            by `render`.
        dropped: the part of `notes` that dropped something, said in the task's message too.
        advice: for a field that stays undeclared (formatted path, `spec.runtimePatches`), what to do: the kind's own
            words in the admission model's refusal.
    """

    job: dict[str, Any]
    notes: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    advice: Mapping[str, str] = field(default_factory=dict)


def parse_path(text: str) -> Path:
    """A field path as the API server writes it (`spec.a.b[0].c`) as a job path.

    Args:
        text: the path.

    Returns:
        `("spec", "a", "b", 0, "c")`.
    """
    return tuple(int(m[2]) if m[2] is not None else m[1] for m in _SEGMENT.finditer(text))


def unknown_fields(message: str) -> list[str]:
    """The fields a strict 400 names (`... strict decoding error: unknown field "spec.x", unknown field "spec.y"`).

    Args:
        message: the API server's message.

    Returns:
        The paths, in order; empty when the message is not a strict decoding error.
    """
    if STRICT_DECODING not in message:
        return []
    return list(dict.fromkeys(_UNKNOWN_FIELD.findall(message)))


def undeclared(job: Mapping[str, Any], crd: InstalledCrd, under: Path = ()) -> list[Path]:
    """The fields of `job` the installed CRD does not declare (what the API server refuses under Strict).

    Args:
        job: a job of the CRD's kind.
        crd: the installed CRD (serving the job's version).
        under: only the fields at or below this path.

    Returns:
        Their paths, in document order.
    """
    if crd.schema is None:
        return []
    return [f.path for f in check(job, crd.schema) if f.verdict == PRUNED and f.path[: len(under)] == under]


def schema_declares(schema: Mapping[str, Any], path: Sequence[Union[str, int]]) -> bool:
    """Whether `schema` (a CRD version's `openAPIV3Schema`) declares the field at `path`.

    Args:
        schema: the schema.
        path: keys and list indexes into a job (`ANY` for any).

    Returns:
        True when declared (or kept as an unknown field).
    """
    return _schema_at(schema, path) is not None


def from_crd(obj: Mapping[str, Any], source: str) -> InstalledCrd:
    """An `InstalledCrd` from a `CustomResourceDefinition` object (as the API server answers it, or a YAML file).

    Args:
        obj: the CRD.
        source: where it came from, for messages.

    Returns:
        What it declares for the registered kind it serves.

    Raises:
        ValueError: it is not a CRD of a registered kind (the message names what it is).
    """
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    names = spec.get("names") if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(names, Mapping) or obj.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{source} is not a CustomResourceDefinition (kind {obj.get('kind')!r})")
    group, plural = spec.get("group"), names.get("plural")
    matches = [d for d in DECLARED if (d.group, d.plural) == (group, plural)]
    if not matches:
        known = ", ".join(d.crd_name for d in DECLARED)
        raise ValueError(f"{source} defines {plural}.{group}, not the CRD of a job kind the backend writes ({known})")
    (declaration,) = matches
    schema = None
    served = []
    for version in spec.get("versions") or ():
        if not isinstance(version, Mapping) or not version.get("served", True):
            continue
        served.append(str(version.get("name")))
        if version.get("name") == declaration.version:
            schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
    meta = obj.get("metadata") or {}
    generation = meta.get("generation")
    return InstalledCrd(
        declaration,
        schema if isinstance(schema, Mapping) else None,
        tuple(served),
        source,
        exact=True,
        resource_version=str(meta.get("resourceVersion") or ""),
        generation=generation if isinstance(generation, int) else 0,
    )


def read_crd_file(path: str) -> InstalledCrd:
    """The CRD in a YAML or JSON file (`kubectl get crd <plural>.<group> -o yaml`, or an upstream manifest).

    Args:
        path: the file; the first document that is a CustomResourceDefinition is read.

    Returns:
        What it declares.

    Raises:
        OSError: the file cannot be read.
        ValueError: it holds no CRD of a registered kind.
    """
    text = FilePath(path).read_text(encoding="utf-8")
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        documents = [d for d in yaml.load_all(text, Loader=loader) if isinstance(d, Mapping)]  # noqa: S506 (safe)
    except yaml.YAMLError as e:
        raise ValueError(f"--crd {path}: not YAML ({e})") from None
    for document in documents:
        if document.get("kind") == "CustomResourceDefinition":
            return from_crd(document, f"--crd {path}")
    raise ValueError(f"--crd {path}: no CustomResourceDefinition in the file")


def learned(declaration: Declaration, paths: Iterable[str], base: Optional[InstalledCrd] = None
            ) -> tuple[InstalledCrd, list[str]]:  # fmt: skip
    """What a strict 400 taught: `base` (by default the vendored CRD) without the fields it named.

    Args:
        declaration: the kind.
        paths: the fields the 400 named.
        base: what was known before (a read CRD, or fields learned earlier); the vendored CRD when None.

    Returns:
        (the CRD as now known, the paths that lead nowhere in its schema).
    """
    if base is None:
        schema = schema_for(declaration.api_version, declaration.kind)
        base = InstalledCrd(declaration, schema, (declaration.version,), "learned from the API server's answers",
                            exact=False)  # fmt: skip
    return base.without(paths)


def _schema_at(schema: Mapping[str, Any], path: Sequence[Union[str, int]]) -> Optional[Mapping[str, Any]]:
    """The schema of the field at `path` (`ANY` or an index: every item or map value), or None when undeclared."""
    node: Any = schema
    root = True
    for step in path:
        if not isinstance(node, Mapping):
            return None
        if node.get("x-kubernetes-preserve-unknown-fields") or node.get("additionalProperties") is True:
            return node
        if isinstance(step, int) or step == ANY:
            items = node.get("items")
            extra = node.get("additionalProperties")
            node = items if isinstance(items, Mapping) else extra if isinstance(extra, Mapping) else None
        elif root and step in ("apiVersion", "kind", "metadata"):
            return node  # the API server's own: always there
        else:
            props = node.get("properties") or {}
            extra = node.get("additionalProperties")
            node = props[step] if step in props else extra if isinstance(extra, Mapping) else None
        root = False
    return node if isinstance(node, Mapping) else None


def _remove(schema: dict[str, Any], path: Path) -> bool:
    """Take the field at `path` out of `schema` (in place). True when it is out (taken out now, or not declared
    already); False when the path leads nowhere in the schema (its parent is not declared)."""
    if not path or isinstance(path[-1], int):
        return False
    parent = _schema_at(schema, path[:-1]) if path[:-1] else schema
    if not isinstance(parent, dict):
        return False
    props = parent.get("properties")
    if isinstance(props, dict) and path[-1] in props:
        del props[path[-1]]
        return True
    extra = parent.get("additionalProperties")
    return not (parent.get("x-kubernetes-preserve-unknown-fields") or extra is True or isinstance(extra, Mapping))


def strict_refusal(crd: Optional[InstalledCrd], declaration: Declaration, fields: Sequence[str]) -> str:
    """The message of a create the API server refused for undeclared fields, in our words (never the raw 400).

    Args:
        crd: what is known of the installed CRD (None: nothing beyond the 400).
        declaration: the job's kind.
        fields: the fields the 400 named.

    Returns:
        `the cluster's <Kind> CRD (...) does not declare <fields> ...: upgrade ...`.
    """
    described = crd.describe() if crd is not None else f"the cluster's {declaration.kind} CRD"
    named = ", ".join(f"`{f}`" for f in fields)
    return (
        f"{described} does not declare {named}, which the {declaration.kind} needs (the API server refused the "
        f"create under fieldValidation=Strict rather than drop them): upgrade {declaration.controller} to a release "
        f"whose CRD declares them (the backend is built against {declaration.crd.release}), or remove the settings "
        "that write them from the task"
    )
