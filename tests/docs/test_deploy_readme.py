"""The deploy README states the connector's permissions exactly as `rbac.yaml` grants them: every resource with its
API group and every verb, nothing more and nothing less (a platform team reviews the README, then applies the yaml)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "backend_plugin" / "deploy"
#: One resource in the README's `rbac.yaml` row: `` `pods`: list `` or `` `jobsets` (jobset.x-k8s.io): create, get ``
#: (an API group is a DNS subdomain: letters, digits, dots and hyphens).
_STATED = re.compile(r"`(\w+)`(?: \(([\w.-]+)\))?: ((?:[a-z]+)(?:, [a-z]+)*)")


def granted() -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> verbs, from the ClusterRole in rbac.yaml."""
    (role,) = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d["kind"] == "ClusterRole"]
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def stated(readme: str) -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> verbs, from the README's table row for rbac.yaml (no group: the core group)."""
    (row,) = [line for line in readme.splitlines() if line.startswith("| `rbac.yaml` |")]
    return {(group or "", resource): set(verbs.split(", ")) for resource, group, verbs in _STATED.findall(row)}


def test_the_readme_states_every_granted_verb_and_no_other() -> None:
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    assert stated(readme) == granted()


def test_the_comparison_sees_a_missing_verb() -> None:
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    understated = readme.replace("create, get, delete, list, watch;", "create, get, delete;", 1)
    assert understated != readme and stated(understated) != granted()
