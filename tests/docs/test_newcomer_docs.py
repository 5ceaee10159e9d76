"""What a newcomer reads first stays true: install lines, install hints, the front page, the layout, the counts.

- Every command in the docs that installs this project carries ``-c constraints.txt`` (without the pins pip can
  backtrack for many minutes), and no message in the code tells to ``pip install "flytekitplugins-pytorch[...]"``,
  a package on no index.
- README.md and docs/index.md name Flyte 2; README.md's layout table lists every package the wheel ships;
  docs/cluster.md counts them right.
- docs/benchmarks.md documents every script in ``benchmarks/`` and says which extra beyond the README's environment
  a script needs; docs/flyte2.md says what an ``async def`` task and a direct call do.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHIPPED = re.findall(
    r'^\s+"(\w+)",$', (ROOT / "setup.py").read_text().split("find_packages(", 1)[1].split(")", 1)[0], re.M
)


def _commands(text: str) -> list[str]:
    """Shell commands of a page: the lines of ``bash`` blocks, and inline code that starts with a command."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            commands += [part.strip() for part in line.split("&&")]
    commands += re.findall(r"`((?:python -m )?(?:uv )?pip install[^`]*)`", text.replace("\n", " "))
    return commands


def _installs_this_project(command: str) -> bool:
    return bool(re.search(r"pip install .*(\.\[|\.whl|flytekitplugins-pytorch\[| -e \.|'\.'| \.$)", command))


def test_the_scanner_sees_install_commands() -> None:
    text = "```bash\npip install torch==2.13.0 && pip install -e '.[test]'\n```\nthen `pip install \"dist/x.whl[a]\"`"
    found = [c for c in _commands(text) if _installs_this_project(c)]
    assert found == ["pip install -e '.[test]'", 'pip install "dist/x.whl[a]"']


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_install_of_this_project_carries_the_constraints(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = [c for c in _commands(text) if _installs_this_project(c) and "-c constraints.txt" not in c]
    assert missing == [], f"{page.name}: {missing}"


def test_the_image_specs_install_with_the_constraints() -> None:
    for path in (ROOT / "examples" / "mnist" / "workflow.py", ROOT / "docs" / "cluster.md"):
        text = path.read_text(encoding="utf-8")
        installs = re.findall(r"commands=\[f?\"uv pip install ([^\"]+)\"\]", text)
        assert installs and all("-c /root/constraints.txt" in i for i in installs), (path.name, installs)
        assert re.search(r"copy=\[\w+, \"constraints.txt\"\]", text), path.name


PACKAGE_HINT = re.compile(r"pip install [\"']?flytekitplugins-pytorch\[")
SDK_CODE = [
    "pytorch_core",
    "pytorch_contract",
    "flytekitplugins_pytorch",
    "flyte2_pytorch",
    "flyte2_backend",
    "examples",
]


@pytest.mark.parametrize("package", SDK_CODE)
def test_install_hints_in_code_name_the_checkout_not_a_package_on_no_index(package: str) -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PACKAGE_HINT.search(line)
    ]
    assert offending == []


def test_the_backends_install_hints_name_the_checkout() -> None:
    test_install_hints_in_code_name_the_checkout_not_a_package_on_no_index("backend_plugin")


def test_the_install_hint_names_the_checkout_the_wheel_and_the_constraints() -> None:
    from pytorch_contract.install import install_hint

    hint = install_hint("flyte2")
    assert "pip install -c constraints.txt '.[flyte2]'" in hint and ".whl[flyte2]" in hint
    assert not PACKAGE_HINT.search(hint)


# ---------------------------------------------------------------------------------------------------------------
# The front page, the layout, the counts


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_front_pages_name_flyte2(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    assert "Flyte 2" in text and "flyte2_pytorch" in text and "flyte2.md" in text


def test_the_readme_layout_lists_every_package_the_wheel_ships() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w./-]+?)/?` \|", layout, re.M)
    assert len(SHIPPED) == 6
    assert [p for p in SHIPPED if p not in rows] == []


NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def test_the_cluster_page_counts_the_packages() -> None:
    text = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    counts = re.findall(r"\b(two|three|four|five|six|seven) packages\b", text)
    assert counts and set(counts) == {NUMBERS[len(SHIPPED)]}, counts


# ---------------------------------------------------------------------------------------------------------------
# Benchmarks and the Flyte 2 page


def test_every_benchmark_script_is_documented() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert [s for s in scripts if f"benchmarks/{s}" not in page] == []


@pytest.mark.parametrize(("script", "extra"), [("backend_build.py", "backend"), ("flyte2_launch.py", "flyte2")])
def test_a_benchmark_that_needs_an_extra_says_so(script: str, extra: str) -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    paragraphs = [p for p in page.split("\n\n") if script in p or f"`{extra}` extra" in p]
    assert any(f"'.[examples,{extra}]'" in p for p in paragraphs), script


def test_the_flyte2_page_says_what_async_tasks_and_direct_calls_do() -> None:
    page = (ROOT / "docs" / "flyte2.md").read_text(encoding="utf-8")
    assert "`async def` task" in page and "direct call" in page
