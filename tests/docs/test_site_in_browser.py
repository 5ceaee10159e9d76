"""The docs site read as a reader reads it: every page opened in headless Chromium at 1280 px, 1400 px and a 390 px
phone (``site_in_browser.py`` builds the site and measures each page). Skipped where Chromium is not installed (CI
installs Debian's ``chromium`` for it).

- No name in a table cell breaks mid-word (``PYTORCHJOB_AP`` / ``I_CONNECT_TIM``, ``runPolicy.backoffL`` / ``imit``:
  250 of them at 1280 px before ``extra.css`` kept inline code whole in every cell).
- No Python, YAML or JSON block wraps (a continuation at column 0 reads as wrong indentation); every block says its
  language, which is how the stylesheet tells them apart.
- No wrapped block runs under its copy button.
- Every link to a page of the site leads to a file that exists.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.docs import site_in_browser as browser

pytestmark = pytest.mark.slow

CHROMIUM = browser.chromium()
PAGES = sorted(p.relative_to(browser.ROOT / "docs").as_posix() for p in (browser.ROOT / "docs").rglob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium); the site is checked where it is")
    return browser.build_site(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def reports(site: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], dict[str, Any]]:
    """Every page at every width, measured once for the tests below."""
    assert CHROMIUM is not None
    scratch = tmp_path_factory.mktemp("chromium")
    chromium = CHROMIUM
    keys = [(page, width) for page in PAGES for width in browser.WIDTHS]
    # Three browsers at a time: a browser spends much of its start waiting, and each has its own profile and page copy.
    with ThreadPoolExecutor(max_workers=3) as pool:
        measured = pool.map(lambda key: browser.measure(site, key[0], key[1], chromium, scratch), keys)
        return dict(zip(keys, measured, strict=True))


def _found(reports: dict[tuple[str, int], dict[str, Any]], key: str) -> list[str]:
    return [f"{page} at {width}px: {item}" for (page, width), report in sorted(reports.items()) for item in report[key]]


@pytest.mark.timeout(1800)
def test_no_name_in_a_table_cell_breaks_mid_word(reports: dict[tuple[str, int], dict[str, Any]]) -> None:
    assert sum(report["codeCells"] for report in reports.values()) > 1000  # the tables were measured
    splits = _found(reports, "splits")
    assert splits == [], f"{len(splits)} names split mid-word:\n" + "\n".join(splits[:40])


@pytest.mark.timeout(1800)
def test_indentation_bearing_code_scrolls_and_never_wraps(reports: dict[tuple[str, int], dict[str, Any]]) -> None:
    unlabelled = [f"{page} at {width}px" for (page, width), r in sorted(reports.items()) if r["unlabelled"]]
    assert unlabelled == [], "code blocks without their language's class (pygments_lang_class in mkdocs.yml)"
    wrapped = _found(reports, "wrapped")
    assert wrapped == [], "\n".join(wrapped[:40])


@pytest.mark.timeout(1800)
def test_no_wrapped_line_runs_under_the_copy_button(reports: dict[tuple[str, int], dict[str, Any]]) -> None:
    covered = _found(reports, "covered")
    assert covered == [], "\n".join(covered[:40])


@pytest.mark.timeout(1800)
def test_every_link_within_the_site_leads_to_a_file(reports: dict[tuple[str, int], dict[str, Any]], site: Path) -> None:
    missing = []
    for (page, width), report in sorted(reports.items()):
        if width != browser.WIDTHS[0]:
            continue
        for link in report["links"]:
            path = Path(link.removeprefix("file://"))
            if path.is_relative_to(site) and not (path.is_file() or (path / "index.html").is_file()):
                missing.append(f"{page}: {link}")
    assert missing == []
