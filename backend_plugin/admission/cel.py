"""A CRD's `x-kubernetes-validations` rules, evaluated as written with `cel-python` (module `celpy`).

Each rule applies to every value at its schema node (for a node under `items` or `additionalProperties`: every list
item or map value). Transition rules (those that read `oldSelf`) run only on update, so a create skips them, as the
API server does. A rule at the root sees `self.metadata` with only `name` and `generateName`, as on the server.

A rule that cannot be compiled or evaluated here is reported as unchecked (a note), never as a refusal: the model
must not refuse what the server accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from backend_plugin.admission.structural import REJECTED, Finding, Path

__all__ = ["Rule", "rules_of", "check", "prepare", "UNCHECKED"]

UNCHECKED = "unchecked"
"""A rule this model could not evaluate: said, never refused."""

_Step = Optional[str]  # a property name; None for "every item / every value"


@dataclass(frozen=True)
class Rule:
    """One `x-kubernetes-validations` entry and where it applies.

    Attributes:
        steps: schema path: property names, None for `items` / `additionalProperties`.
        rule: the CEL expression.
        message: the CRD's message for a failure ("" when it gives none).
    """

    steps: tuple[_Step, ...]
    rule: str
    message: str

    @property
    def transition(self) -> bool:
        """Whether the rule compares with the stored object (update only)."""
        return "oldSelf" in self.rule


def rules_of(schema: Mapping[str, Any]) -> tuple[Rule, ...]:
    """Every rule of a schema, with its location, in document order.

    Args:
        schema: an `openAPIV3Schema`.

    Returns:
        The rules.
    """
    return tuple(_collect(schema, ()))


def _collect(node: Mapping[str, Any], steps: tuple[_Step, ...]) -> Iterator[Rule]:
    for entry in node.get("x-kubernetes-validations") or ():
        yield Rule(steps, str(entry["rule"]), str(entry.get("message") or ""))
    for name, child in (node.get("properties") or {}).items():
        yield from _collect(child, (*steps, name))
    for key in ("items", "additionalProperties"):
        child = node.get(key)
        if isinstance(child, Mapping):
            yield from _collect(child, (*steps, None))


@functools.cache
def _program(rule: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule))


def prepare(rules: tuple[Rule, ...]) -> None:
    """Compile every create-time rule now (compiled rules are kept); a rule that does not compile is left for `check`
    to report.

    Args:
        rules: a CRD's rules (`rules_of`).
    """
    for rule in rules:
        if not rule.transition:
            try:
                _program(rule.rule)
            except ModuleNotFoundError:
                raise
            except Exception:  # noqa: BLE001, S112 - `check` reports it as unchecked, with its reason
                continue


def _targets(value: Any, steps: tuple[_Step, ...], path: Path) -> Iterator[tuple[Path, Any]]:
    if not steps:
        yield path, value
        return
    step, rest = steps[0], steps[1:]
    if step is None:
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _targets(item, rest, (*path, i))
        elif isinstance(value, Mapping):
            for key, item in value.items():
                yield from _targets(item, rest, (*path, str(key)))
    elif isinstance(value, Mapping) and value.get(step) is not None:
        yield from _targets(value[step], rest, (*path, step))


def check(obj: Mapping[str, Any], rules: tuple[Rule, ...]) -> list[Finding]:
    """Evaluate every non-transition rule on `obj` (a create).

    Args:
        obj: the whole object.
        rules: its CRD's rules (`rules_of`).

    Returns:
        A `REJECTED` finding per failing value, an `UNCHECKED` one per rule that could not be evaluated.
    """
    import celpy

    out = []
    for rule in rules:
        if rule.transition:
            continue
        for path, value in _targets(obj, rule.steps, ()):
            if not path and isinstance(value, Mapping):
                meta = value.get("metadata") or {}
                value = {**value, "metadata": {k: meta[k] for k in ("name", "generateName") if k in meta}}
            try:
                result = _program(rule.rule).evaluate({"self": celpy.json_to_cel(value)})
            except Exception as e:  # celpy raises CELParseError, CELEvalError and plain errors: none refuse
                out.append(Finding(UNCHECKED, path, f"rule {rule.rule!r} could not be evaluated here ({e})"))
                continue
            if isinstance(result, Exception) or not isinstance(result, (bool, celpy.celtypes.BoolType)):
                out.append(Finding(UNCHECKED, path, f"rule {rule.rule!r} gave {result!r}, not a boolean"))
            elif not bool(result):
                out.append(Finding(REJECTED, path, rule.message or f"fails the CRD rule {rule.rule!r}"))
    return out
