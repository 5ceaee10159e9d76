"""Fenced code blocks of the Markdown pages, with the HTML-comment markers that say how to test them.

A block's markers are the HTML comments directly above its opening fence (only blank lines in between):

- ``<!-- no-test -->``: not run (only for snippets that need a cluster);
- ``<!-- inprocess -->``: run with ``FLYTE_PYTORCH_INPROCESS=1`` (only where the page itself says to); every other
  block runs the way the docs tell users to run a file: ``python file.py``, real ranks;
- ``<!-- pyflyte-run: WF -->``: the page also says to run it with ``pyflyte run file.py WF``: the test does both;
- ``<!-- output -->`` on a ``text`` block: the exact standard output of the Python block just above it;
- ``<!-- snippet:NAME -->``: run by a dedicated test elsewhere (``tests/test_readme.py``);
- ``<!-- extra: NAME -->``: the page says the block needs that extra beyond the README's set-up; the block runs with
  the modules only other extras install made unimportable, and is checked to fail without the extra's too.

A comment ``# prints OUTPUT with N real ranks`` (``python file.py``) or ``# prints OUTPUT under
FLYTE_PYTORCH_INPROCESS=1`` is a claim about a line the snippet prints, which the tests check; a comment on a
``print(...)`` line must be such a claim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<fence>```+)(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
# One comment: the text between ``<!--`` and ``-->`` holds no other ``<!--`` (else a match could span several).
_COMMENT = re.compile(r"<!--\s*((?:(?!<!--).)*?)\s*-->\s*\Z", re.S)


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown page.

    Args:
        path: the page, relative to the repository root.
        line: 1-based line of the opening fence.
        lang: the info string's language (``python``, ``yaml``, ``text``, ...), lower-case.
        body: the text between the fences.
        markers: the HTML comments directly above the fence, e.g. ``("no-test",)``.
    """

    path: str
    line: int
    lang: str
    body: str
    markers: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        """A readable test id: ``docs/quickstart.md:42``.

        Returns:
            The page path and the fence's line number.
        """
        return f"{self.path}:{self.line}"


def _markers_before(text: str) -> tuple[str, ...]:
    """The HTML comments that end `text`, nearest last, separated only by whitespace."""
    found: list[str] = []
    rest = text.rstrip()
    while True:
        m = _COMMENT.search(rest)
        if m is None:
            break
        found.insert(0, m.group(1).strip())
        rest = rest[: m.start()].rstrip()
    return tuple(found)


def blocks(path: Path) -> list[Block]:
    """All fenced blocks of one Markdown page, in order.

    Args:
        path: a Markdown file.

    Returns:
        The page's fenced blocks with their markers.
    """
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT).as_posix()
    out = []
    for m in _FENCE.finditer(text):
        out.append(
            Block(
                path=rel,
                line=text.count("\n", 0, m.start()) + 1,
                lang=m.group("lang").lower(),
                body=m.group("body"),
                markers=_markers_before(text[: m.start()]),
            )
        )
    return out


def pages() -> list[Path]:
    """The Markdown files whose snippets are tested: README.md and every page under docs/.

    Returns:
        Paths, sorted.
    """
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def all_blocks() -> list[Block]:
    """Every fenced block of every tested page.

    Returns:
        Blocks in page order.
    """
    return [b for p in pages() for b in blocks(p)]


def python_with_output() -> list[tuple[Block, Block | None]]:
    """Runnable Python blocks, each with the ``<!-- output -->`` text block that follows it, if any.

    Returns:
        (python block, expected-output block or None) pairs; blocks marked ``no-test`` or ``snippet:*`` left out.
    """
    pairs: list[tuple[Block, Block | None]] = []
    for page in pages():
        page_blocks = blocks(page)
        for i, b in enumerate(page_blocks):
            if b.lang not in ("python", "py"):
                continue
            if "no-test" in b.markers or any(m.startswith("snippet:") for m in b.markers):
                continue
            nxt = page_blocks[i + 1] if i + 1 < len(page_blocks) else None
            expected = nxt if nxt is not None and "output" in nxt.markers else None
            pairs.append((b, expected))
    return pairs


_PRINT_COMMENT = re.compile(r"^\s*print\(.*\)\s*#\s*(?P<comment>.*?)\s*$")
_CLAIM_LINE = re.compile(r"^\s*#\s*(?P<claim>prints .*?)\s*$")
_CLAIM = re.compile(
    r"prints (?P<output>.+?) (?:with (?P<ranks>\d+) real ranks?|under (?P<inprocess>FLYTE_PYTORCH_INPROCESS=1))\Z"
)


@dataclass(frozen=True)
class PrintClaim:
    """What a snippet says one of its ``print(...)`` lines prints.

    Args:
        line: the comment.
        output: the printed line; None when the comment is not in the claim's shape.
        ranks: the number of real ranks the claim is about; None for a claim about ``FLYTE_PYTORCH_INPROCESS=1``.
    """

    line: str
    output: Optional[str]
    ranks: Optional[int]

    @property
    def inprocess(self) -> bool:
        """Whether the claim is about a run under ``FLYTE_PYTORCH_INPROCESS=1``.

        Returns:
            True for ``# prints ... under FLYTE_PYTORCH_INPROCESS=1``.
        """
        return self.output is not None and self.ranks is None


def print_claims(body: str) -> list[PrintClaim]:
    """The output claims of a snippet: comment lines ``# prints OUTPUT with N real ranks`` or ``# prints OUTPUT under
    FLYTE_PYTORCH_INPROCESS=1``, and any comment on a ``print(...)`` line (which must be such a claim too).

    Args:
        body: the snippet's source.

    Returns:
        One claim per such comment; `output` is None when a comment on a ``print(...)`` line is not a claim.
    """
    out = []
    for line in body.splitlines():
        m = _CLAIM_LINE.match(line) or _PRINT_COMMENT.match(line)
        if m is None:
            continue
        text = m.groupdict().get("claim") or m.groupdict().get("comment") or ""
        claim = _CLAIM.match(text)
        if claim is None:
            out.append(PrintClaim(text, None, None))
        else:
            ranks = claim["ranks"]
            out.append(PrintClaim(text, claim["output"], int(ranks) if ranks else None))
    return out
