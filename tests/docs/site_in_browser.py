"""The docs site as a reader's browser lays it out: build it with ``mkdocs build --strict``, open each page in
headless Chromium at a given window width, and measure, with a script run in the page once it has loaded (the
theme's own script included, which adds the copy buttons):

- ``splits``: inline code in a table cell broken across lines inside a word (between two of ``[A-Za-z0-9_]``):
  ``PYTORCHJOB_AP`` / ``I_CONNECT_TIM``, ``runPolicy.backoffL`` / ``imit``; a break after ``-``, ``.``, ``/`` or a
  space is where a reader expects one, and is not counted;
- ``wrapped``: code blocks in a language where indentation means something (Python, YAML, JSON, TOML) whose lines
  wrap, so a continuation starts at column 0 and reads as wrong indentation;
- ``covered``: code blocks that wrap and whose text runs under the copy button (text a reader can never scroll to;
  a block that scrolls shows what is under the button when scrolled);
- ``links``: the page's links to files of the site (the test checks that each exists);
- ``blocks``, ``unlabelled``: code blocks, and those without their language's class (``language-python``): the
  rules above tell a block's language by it.

Used by ``tests/docs/test_site_in_browser.py``; also runnable by hand, printing what it finds:

    python -m tests.docs.site_in_browser 1280 [PAGE.md ...]

Chromium is started with ``--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
--disable-background-networking --disable-component-update --disable-sync`` and a fresh ``--user-data-dir``, one
process per page under a timeout; it is looked for as ``chromium``, ``chromium-browser`` and ``google-chrome``
(``$CHROMIUM`` names another).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
#: The widths a reader has: a laptop, a wider screen, a phone.
WIDTHS = (1280, 1400, 390)
#: Languages whose indentation means something: their blocks scroll, they never wrap.
INDENTED = ("python", "py", "yaml", "yml", "json", "toml")

PROBE = r"""
(() => {
  const word = /[A-Za-z0-9_]/;
  const report = {splits: [], wrapped: [], covered: [], links: [], codeCells: 0, unlabelled: 0, blocks: 0};
  const lineTops = (node) => {
    const range = document.createRange();
    range.selectNodeContents(node);
    return [...new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)))];
  };
  document.querySelectorAll('.md-typeset table td code, .md-typeset table th code').forEach(code => {
    report.codeCells += 1;
    const chars = [];
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++) chars.push([node, i]);
    }
    let previous = null;
    const range = document.createRange();
    chars.forEach(([node, i], k) => {
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = range.getBoundingClientRect();
      if (rect.width === 0 && rect.height === 0) return;
      const ch = node.data[i];
      if (previous && rect.top > previous.top + rect.height / 2 && word.test(previous.ch) && word.test(ch)) {
        const text = code.textContent;
        report.splits.push({text: text, at: k});
      }
      previous = {top: rect.top, ch: ch};
    });
  });
  document.querySelectorAll('.md-typeset div.highlight').forEach(block => {
    const lang = ([...block.classList].find(c => c.startsWith('language-')) || '').slice(9);
    const code = block.querySelector('pre > code');
    if (!code) return;
    report.blocks += 1;
    if (!lang) report.unlabelled += 1;
    const lines = code.textContent.replace(/\n$/, '').split('\n').length;
    const tops = lineTops(code);
    const wraps = tops.length > lines;
    if (wraps && %(indented)s.includes(lang)) {
      report.wrapped.push({lang: lang, first: code.textContent.split('\n')[0].slice(0, 80)});
    }
    const button = block.querySelector('.md-code__button, .md-clipboard');
    const wrapping = getComputedStyle(code).whiteSpace.startsWith('pre-wrap');
    if (button && wrapping) {
      // A character (not a space) of a wrapping block under the button: text a reader can never scroll to.
      const b = button.getBoundingClientRect();
      const range = document.createRange();
      const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
      let under = false;
      for (let node = walker.nextNode(); node && !under; node = walker.nextNode()) {
        range.selectNodeContents(node);
        const near = [...range.getClientRects()].some(r => r.top < b.bottom && b.top < r.bottom);
        if (!near) continue;
        for (let i = 0; i < node.length && !under; i++) {
          if (/\s/.test(node.data[i])) continue;
          range.setStart(node, i);
          range.setEnd(node, i + 1);
          const r = range.getBoundingClientRect();
          under = r.width > 0 && r.left < b.right && b.left < r.right && r.top < b.bottom && b.top < r.bottom;
        }
      }
      if (under && b.width > 0) report.covered.push({lang: lang, first: code.textContent.split('\n')[0].slice(0, 80)});
    }
  });
  document.querySelectorAll('a[href]').forEach(a => {
    const href = a.getAttribute('href');
    if (/^[a-z]+:/i.test(href) || href.startsWith('#')) return;
    report.links.push(new URL(href, location.href).href.split('#')[0]);
  });
  const out = document.createElement('pre');
  out.id = 'site-in-browser-report';
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
})();
"""


def chromium() -> Optional[str]:
    """The Chromium binary, or ``None`` where there is none."""
    named = os.environ.get("CHROMIUM")
    if named:
        return named if shutil.which(named) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build_site(where: Path) -> Path:
    """``mkdocs build --strict`` into ``where``.

    Returns:
        Path: the site's folder.
    """
    site = where / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return site


def page_html(site: Path, page: str) -> Path:
    """The built file of a docs page (``faults.md`` -> ``faults/index.html``, ``index.md`` -> ``index.html``)."""
    stem = page.removesuffix(".md")
    return site / "index.html" if stem == "index" else site / stem / "index.html"


def measure(site: Path, page: str, width: int, browser: str, scratch: Path, timeout_s: float = 90.0) -> dict[str, Any]:
    """Open ``page`` of ``site`` at ``width`` pixels and return what the probe found (see the module docstring).

    Args:
        site: the built site.
        page: the docs page (``faults.md``).
        width: the window's width in CSS pixels.
        browser: the Chromium binary.
        scratch: a folder for the probed copy of the page and the browser's profile.
        timeout_s: how long the browser may take.

    Returns:
        dict[str, Any]: ``splits``, ``wrapped``, ``covered``, ``links`` (resolved, without fragments), ``codeCells``.
    """
    source = page_html(site, page)
    probe = PROBE.replace("%(indented)s", json.dumps(list(INDENTED)))
    text = source.read_text(encoding="utf-8")
    probed = source.with_name(f"probed-{width}.html")  # one per width: pages are measured side by side
    script = f"<script>window.addEventListener('load', () => setTimeout(() => {{{probe}}}, 0));</script>"
    probed.write_text(text.replace("</body>", f"{script}</body>"), encoding="utf-8")
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=scratch))
    try:
        out = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--window-size={width},900",
                "--hide-scrollbars",
                "--allow-file-access-from-files",
                "--virtual-time-budget=8000",
                "--dump-dom",
                probed.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
        probed.unlink(missing_ok=True)
    found = re.search(r'<pre id="site-in-browser-report">(.*?)</pre>', out.stdout, re.S)
    if found is None:
        raise RuntimeError(f"{page} at {width}px: no report from the browser:\n{out.stderr[-2000:]}")
    report = json.loads(html.unescape(found[1]))
    report["links"] = sorted(
        {link.replace(probed.name, "index.html") for link in report["links"] if link.startswith("file://")}
    )
    return report


def main(argv: list[str]) -> int:
    browser = chromium()
    if browser is None:
        print("no chromium on PATH")
        return 1
    width = int(argv[0]) if argv else 1280
    pages = argv[1:] or sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    with tempfile.TemporaryDirectory() as scratch:
        site = build_site(Path(scratch))
        for page in pages:
            report = measure(site, page, width, browser, Path(scratch))
            print(
                f"{page}: {len(report['splits'])} split names, {len(report['wrapped'])} wrapped indented blocks, "
                f"{len(report['covered'])} covered by the copy button, {report['codeCells']} code cells, "
                f"{report['unlabelled']} of {report['blocks']} blocks without a language"
            )
            for split in report["splits"][:10]:
                print(f"    split: {split['text']!r} at {split['at']}")
            for block in report["wrapped"][:5] + report["covered"][:5]:
                print(f"    block: {block}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
