"""docs/migration.md maps every name of kfpytorch 1.16's config classes to ours, and each replacement it gives runs.

``KFPYTORCH_116`` lists the fields and members of ``flytekitplugins-kfpytorch`` 1.16's ``PyTorch``, ``Elastic``,
``Master``, ``Worker``, ``RunPolicy``, ``RestartPolicy`` and ``CleanPodPolicy`` (its ``task.py``). Every one of them
has a row; every "write here" cell is a Python expression that builds with this package; and where a row says the
name is the same, the kfpytorch spelling itself builds here too.
"""

from __future__ import annotations

import re

import pytest
from flytekit import Resources

import flytekitplugins_pytorch
from tests.docs.markdown_blocks import ROOT

KFPYTORCH_116 = {
    "PyTorch": ("master", "worker", "run_policy", "num_workers", "increase_shared_mem"),
    "Elastic": (
        "nnodes", "nproc_per_node", "start_method", "monitor_interval", "max_restarts", "rdzv_configs",
        "increase_shared_mem", "run_policy",
    ),
    "Master": ("image", "requests", "limits", "restart_policy"),
    "Worker": ("image", "requests", "limits", "replicas", "restart_policy"),
    "RunPolicy": ("clean_pod_policy", "ttl_seconds_after_finished", "active_deadline_seconds", "backoff_limit"),
    "RestartPolicy": ("ALWAYS", "FAILURE", "NEVER"),
    "CleanPodPolicy": ("NONE", "ALL", "RUNNING"),
}  # fmt: skip

NAMES = {"Resources": Resources, **{n: getattr(flytekitplugins_pytorch, n) for n in flytekitplugins_pytorch.__all__}}


def rows() -> list[tuple[str, str, str]]:
    """(kfpytorch, write here, note) of the table after ``<!-- kfpytorch-names -->``, code spans unwrapped."""
    page = (ROOT / "docs" / "migration.md").read_text(encoding="utf-8")
    table = page[page.index("<!-- kfpytorch-names -->") :].split("\n\n", 1)[0]
    out = []
    for line in table.splitlines()[3:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert len(cells) == 3, line
        old, new = (c.strip("`") for c in cells[:2])
        out.append((old, new, cells[2]))
    return out


ROWS = rows()


def test_every_kfpytorch_name_has_a_row() -> None:
    missing = []
    for cls, names in KFPYTORCH_116.items():
        for name in names:
            spelled = rf"^{cls}\.{name}$" if cls.endswith("Policy") and name.isupper() else rf"^{cls}\((?:.*, )?{name}="
            if not any(re.search(spelled, old) for old, _, _ in ROWS):
                missing.append(f"{cls}.{name}")
    assert missing == []


@pytest.mark.parametrize(("old", "new", "note"), ROWS, ids=[r[0] for r in ROWS])
def test_the_replacement_builds_here(old: str, new: str, note: str) -> None:
    eval(new, dict(NAMES))  # noqa: S307 - the page's own code cells
    if note.startswith("same") and "..." not in old:
        eval(old, dict(NAMES))  # noqa: S307 - "same": the old spelling works unchanged


def test_a_wrong_replacement_fails() -> None:
    with pytest.raises(Exception, match="num_workers"):
        eval("PyTorch(num_workers=2)", dict(NAMES))  # noqa: S307
