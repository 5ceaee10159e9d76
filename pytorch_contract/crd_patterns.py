"""A CRD's `pattern` keyword as the API server reads it: Go's `regexp` (RE2 syntax), run on the value unanchored
(`MatchString`).

Python's `re` reads most RE2 patterns the same way, but not all:

- `$` outside `(?m)` is the end of the text in RE2; in Python it also matches before a final newline, so
  `^[0-9]+$` would take ``"1\\n"``. It becomes `\\Z` here, and RE2's `\\z` does too.
- `\\d`, `\\w`, `\\b` and POSIX classes (`[[:alpha:]]`) are ASCII in RE2; `\\s` is ``[\\t\\n\\f\\r ]`` (no `\\v`).
- `(?<name>...)` is a named group (Python spells it `(?P<name>...)`); `\\Q...\\E` quotes literal text.

Unicode classes (`\\pL`, `\\p{Greek}`) have no `re` equivalent: `compile_pattern` refuses them with a ValueError, so a
caller can say it did not check the pattern rather than check it wrongly.
"""

from __future__ import annotations

import functools
import re

__all__ = ["compile_pattern", "pattern_matches"]

_POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
"""RE2's POSIX bracket classes, as ASCII ranges."""

_SPACE = "\\t\\n\\f\\r "
"""RE2's `\\s`."""


def _translate(pattern: str) -> str:
    """The Python spelling of an RE2 pattern (see the module's docstring)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    multiline = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError(f"pattern {pattern!r} ends with a lone backslash")
            e = pattern[i + 1]
            if e in "pP":
                raise ValueError(f"pattern {pattern!r} uses a Unicode class (\\{e}), which Python's re cannot read")
            if e == "Q":
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2 :] if end < 0 else pattern[i + 2 : end]
                out.append(re.escape(literal))
                i = n if end < 0 else end + 2
                continue
            if e == "z" and not in_class:
                out.append("\\Z")
            elif e == "s":
                out.append(_SPACE if in_class else f"[{_SPACE}]")
            elif e == "S":
                if in_class:
                    raise ValueError(f"pattern {pattern!r} uses \\S inside a class, which is not translated")
                out.append(f"[^{_SPACE}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2 : end] if end > 0 else ""
                negated = name.startswith("^")
                ranges = _POSIX.get(name.lstrip("^"))
                if ranges is None or negated:
                    raise ValueError(f"pattern {pattern!r} uses a POSIX class that is not translated: [:{name}:]")
                out.append(ranges)
                i = end + 2
                continue
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":  # a leading ']' is a literal
                out.append("\\]")
                i += 1
            continue
        if c == "(" and pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
            continue
        if c == "(" and pattern.startswith("(?", i):
            flags = re.match(r"\(\?([imsU-]*)[:)]", pattern[i:])
            if flags is not None and "m" in flags[1].split("-")[0]:
                multiline = True
        if c == "$" and not multiline:
            out.append("\\Z")
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile an RE2 pattern so that Python's `re` matches what Go's `regexp` matches.

    Args:
        pattern: the CRD's `pattern` (RE2 syntax).

    Returns:
        The compiled pattern (ASCII classes); search it, as the API server does.

    Raises:
        ValueError: the pattern uses RE2 syntax `re` cannot express (Unicode classes), or is not a valid pattern.
    """
    try:
        return re.compile(_translate(pattern), re.ASCII)
    except re.error as e:
        raise ValueError(f"pattern {pattern!r} is not a pattern Python's re reads: {e}") from None


def pattern_matches(pattern: str, value: str) -> bool:
    """Whether the API server's pattern check passes `value` (Go's `regexp.MatchString`: a match anywhere, so the
    pattern's own `^` and `$` anchor it).

    Args:
        pattern: the CRD's `pattern` (RE2 syntax).
        value: the string value of the field.

    Returns:
        True when the pattern matches.

    Raises:
        ValueError: see `compile_pattern`.
    """
    return compile_pattern(pattern).search(value) is not None
