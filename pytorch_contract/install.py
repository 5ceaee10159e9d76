"""The install hint every message of this project gives for a missing extra, so that SDK and backend say the same.

The package is not published on an index: installing it by its name finds nothing (or, one day, someone else's
package of that name), and an install without the project's constraints lets pip backtrack for many minutes. The
hint names the checkout and the wheel, with `constraints.txt` (README.md, docs/cluster.md).
"""

from __future__ import annotations

__all__ = ["install_hint"]


def install_hint(extra: str) -> str:
    """The command that installs one extra of this project, for an error message.

    Args:
        extra: the extra's name (``"backend"``, ``"flyte2"``, ``"torch"``).

    Returns:
        ``pip install -c constraints.txt '.[<extra>]'`` in a checkout, and the same for the built wheel.
    """
    return (
        f"pip install -c constraints.txt '.[{extra}]' in a checkout of flytekitplugins-pytorch (it is not on a "
        f"package index; a wheel from `python -m build` installs the same way: "
        f"pip install -c constraints.txt 'dist/<wheel>.whl[{extra}]')"
    )
