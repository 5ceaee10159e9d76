"""A task's Deck opens on the task's own first Deck, not on flytekit's Timeline."""

from __future__ import annotations

from flytekit.deck.deck import Deck, TimeLineDeck

from flytekitplugins_pytorch.task import _timeline_last


def test_the_timeline_goes_behind_the_tasks_own_decks_in_their_order() -> None:
    timeline, training, source, extra = TimeLineDeck("Timeline"), Deck("Training"), Deck("Source Code"), Deck("x")
    decks = [timeline, training, source, extra]
    _timeline_last(decks)
    assert [d.name for d in decks] == ["Training", "Source Code", "x", "Timeline"]


def test_a_timeline_alone_stays() -> None:
    decks = [TimeLineDeck("Timeline")]
    _timeline_last(decks)
    assert [d.name for d in decks] == ["Timeline"]
