"""flytekit's side of live progress: the ``Progress`` Deck, published mid-run, and the record beside the outputs.

The launcher's progress thread (``pytorch_core._progress_follow``) calls these in the task process, in the task's
``contextvars`` context, so ``FlyteContextManager.current_context()`` is the task's own.

- :func:`publish_progress`: when the task renders Decks (``enable_deck=True``), a ``Progress`` Deck joins the task's
  Decks once and ``Deck.publish()`` writes them all mid-run: in a pod, ``deck.html`` in the task's output metadata
  prefix (what the Flyte UI opens); in a local run, flytekit writes a new ``deck.html`` in a fresh folder of its
  local sandbox at each publish (it names the file in its log at INFO). At the end of the task, flytekit writes the
  Decks itself, with the final page.
- :func:`write_output_file`: a small file in the output metadata prefix (the pod's output prefix) through the
  context's file access (fsspec).

flytekit is imported inside the functions.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["publish_progress", "write_output_file", "DECK_NAME"]

DECK_NAME = "Progress"
"""The Deck's name (its tab in the Flyte UI)."""

_deck_class: Any = None


def _progress_deck_class() -> Any:
    """``ProgressDeck``: a flytekit ``Deck`` whose page is replaced at each update (made at first use)."""
    global _deck_class
    if _deck_class is None:
        from flytekit.deck.deck import Deck

        class ProgressDeck(Deck):
            """The live progress page of a ``pytorch`` task."""

            def set_page(self, html: str) -> None:
                self._html = html

        _deck_class = ProgressDeck
    return _deck_class


def publish_progress(task: Any, html: str, final: bool) -> bool:
    """Put ``html`` in the task's ``Progress`` Deck and, mid-run, publish the Decks.

    Args:
        task: the task (unused: the context says whether Decks are on).
        html: the page.
        final: the run ended: update the Deck only (flytekit writes the Decks when the task ends).

    Returns:
        bool: ``False`` when the task renders no Decks (nothing done).
    """
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.deck.deck import Deck, TimeLineDeck

    params = FlyteContextManager.current_context().user_space_params
    if params is None or not params.enable_deck:
        return False
    deck_class = _progress_deck_class()
    deck = next((d for d in params.decks if isinstance(d, deck_class)), None)
    if deck is None:
        deck = deck_class(DECK_NAME, html)  # a new Deck adds itself to the task's Decks
    deck.set_page(html)
    if not final:
        # flytekit opens a Deck on its first tab: the Progress page, not the Timeline made at the task's start.
        timeline = [d for d in params.decks if isinstance(d, TimeLineDeck)]
        params.decks[:] = [d for d in params.decks if not isinstance(d, TimeLineDeck)] + timeline
        Deck.publish()
    return True


def write_output_file(name: str, data: bytes) -> Optional[str]:
    """Write ``data`` as ``name`` in the task's output metadata prefix.

    Args:
        name: the file name.
        data: its content.

    Returns:
        Optional[str]: the path written, or ``None`` when the context has no output prefix.
    """
    from flytekit.core.context_manager import FlyteContextManager

    ctx = FlyteContextManager.current_context()
    params = ctx.user_space_params
    prefix = getattr(params, "output_metadata_prefix", None) if params is not None else None
    if not prefix:
        return None
    path = f"{str(prefix).rstrip('/')}/{name}"
    fs = ctx.file_access.get_filesystem_for_path(path)
    fs.pipe_file(path, data)
    return path
